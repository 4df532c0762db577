"""Are float32 greedy outputs the same under another CPU kernel family? Measured on one host.

A reference is exact only where the arithmetic is the same. Whether float32 outputs survive a
change of CPU family decides whether a reference from one family can be matched exactly on
another. With no second family at hand, this runs the same sweep twice on one host: once with
the kernels the CPU picks, once with oneDNN capped at a lower instruction set
(``ONEDNN_MAX_CPU_ISA``; vLLM-CPU's float32 GEMMs are oneDNN matmuls, so the cap changes the
blocking and so the order in which every dot product is summed, as another family's kernels
would). It then compares the two runs request by request: the output tokens (first divergent
position of each mismatch) and SPEED-Bench's per-question AL.

    .venv/bin/python benchmarks/kernel_isa.py --cap AVX --out /tmp/kernel-isa
    .venv/bin/python benchmarks/kernel_isa.py --compare /tmp/kernel-isa/native /tmp/kernel-isa/AVX

The sweep is ``speedbench sweep`` with the flags below (defaults: the 0.5B, float32, 8 MT-Bench
first turns, no SD and ngram k=3 at batch sizes 1 and 4, answers to EOS or 64 tokens). The
engine log of each run names the matmul kernels oneDNN created (``ONEDNN_VERBOSE=profile_create``):
on a 2-core AVX2 EPYC ``brg_matmul:avx2`` natively, ``gemm:jit:f32`` (no FMA) under ``AVX``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

from speedbench.metrics.lossless import first_divergence
from speedbench.metrics.views import speed_bench_view
from speedbench.records import read_parquet

ROOT = Path(__file__).resolve().parents[1]
SWEEP_ARGS = [
    "--model", "qwen2.5-coder-0.5b-instruct", "--dtype", "float32", "--splits", "mtbench",
    "--limit", "8", "--methods", "none", "ngram", "--draft-lengths", "3",
    "--batch-sizes", "1", "4", "--output-len", "64", "--stop-at-eos",
]  # fmt: skip
MATMUL_IN_LOG = re.compile(r"onednn_verbose,[^\n]*?,cpu,matmul,([^,]+),")


def run(out: Path, cap: str | None, extra: list[str]) -> None:
    """One sweep into ``out``, with oneDNN capped at ``cap`` (None: the CPU's own kernels)."""
    env = {**os.environ, "ONEDNN_VERBOSE": "profile_create"}
    env.pop("ONEDNN_MAX_CPU_ISA", None)
    if cap:
        env["ONEDNN_MAX_CPU_ISA"] = cap
    cmd = [str(ROOT / ".venv/bin/speedbench"), "sweep", *SWEEP_ARGS, *extra, "--out-dir", str(out)]
    print(f"{'cap ' + cap if cap else 'native'}: {' '.join(cmd[1:])}", flush=True)
    subprocess.run(cmd, env=env, check=True)


def matmul_kernels(sweep_dir: Path) -> Counter:
    """How often oneDNN created each matmul implementation, over the sweep's engine logs."""
    found: Counter = Counter()
    for log in sweep_dir.rglob("engine.log"):
        found.update(MATMUL_IN_LOG.findall(log.read_text(errors="replace")))
    return found


def levels(sweep_dir: Path) -> dict[str, Path]:
    """``config/split/bsN`` -> the level's folder."""
    return {
        str(p.parent.relative_to(sweep_dir)): p.parent
        for p in sorted(sweep_dir.rglob("records.parquet"))
    }


def compare(a: Path, b: Path) -> int:
    """Print the request-by-request comparison; returns the number of differing answers."""
    a, b = (p / "sweep" if (p / "sweep").is_dir() else p for p in (a, b))
    for name, where in (("first", a), ("second", b)):
        kernels = dict(matmul_kernels(where)) or "not logged"
        print(f"{name}: {where}; oneDNN matmuls created: {kernels}")
    print()
    print("| level | answers | identical | first divergences | mean AL (speed_bench) a / b |")
    print("|---|---|---|---|---|")
    differing = 0
    for key, left in levels(a).items():
        right = levels(b).get(key)
        if right is None:
            print(f"| {key} | missing in the second run | | | |")
            continue
        ra = {(r.prompt_id, r.turn): r for r in read_parquet(left / "records.parquet") if r.ok}
        rb = {(r.prompt_id, r.turn): r for r in read_parquet(right / "records.parquet") if r.ok}
        common = sorted(set(ra) & set(rb))
        firsts = [first_divergence(ra[q].output_token_ids, rb[q].output_token_ids) for q in common]
        moved = sorted(w for w in firsts if w is not None)
        differing += len(moved)
        k = next(iter(ra.values())).k if ra else 0
        als = [speed_bench_view(list(r.values()), k).al_request_mean for r in (ra, rb)]
        al = " / ".join(f"{v:.4f}" for v in als) if k else "-"
        print(f"| {key} | {len(common)} | {len(common) - len(moved)} | {moved or '-'} | {al} |")
    return differing


def main(argv: list[str] | None = None) -> int:
    """Run both sweeps (or compare two finished ones) and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cap", default="AVX", help="oneDNN ISA ceiling (SSE41, AVX, AVX2, ...)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/kernel-isa"))
    parser.add_argument("--compare", nargs=2, type=Path, metavar=("A", "B"))
    args, extra = parser.parse_known_args(argv)
    if args.compare:
        return 1 if compare(*args.compare) else 0
    run(args.out / "native", None, extra)
    run(args.out / args.cap, args.cap, extra)
    return 1 if compare(args.out / "native", args.out / args.cap) else 0


if __name__ == "__main__":
    sys.exit(main())
