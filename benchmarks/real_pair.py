"""The embedded default's real pair: Qwen2.5-Coder-1.5B target, 0.5B draft (k=3), on vLLM-CPU.

Prints AL (stream and counters), conditional AR per position, output tok/s with and without SD
and the speedup, at each batch size, on a handful of real MT-Bench prompts (first turns).

    .venv/bin/python benchmarks/real_pair.py [--prompts 6] [--max-tokens 64] [--batch-size 1 4]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from speedbench.config import SpecConfig
from speedbench.data.prompts import mtbench_prompts
from speedbench.engines.local import free_port
from speedbench.engines.vllm import cpu_vllm_engine
from speedbench.provision.models import provision, resolve_dtype
from speedbench.run.sweep import run_grid
from speedbench.tokenize import PromptTokenizer
from speedbench.workload import LoadSettings

CATEGORIES = ("coding", "math", "writing", "reasoning", "stem", "humanities")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--batch-size", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"])
    ap.add_argument("--out", default="results/bench-real-pair")
    args = ap.parse_args()
    args.dtype = resolve_dtype(args.dtype)

    target = provision("qwen2.5-coder-1.5b-instruct", dtype=args.dtype)
    draft = provision("qwen2.5-coder-0.5b-instruct", dtype=args.dtype)
    # One prompt per category in turn, so a handful still spans domains.
    rows = mtbench_prompts()
    picked = []
    for i in range(args.prompts):
        cat = CATEGORIES[i % len(CATEGORIES)]
        pool = [r for r in rows if r.category == cat and r not in picked]
        picked.append(pool[i // len(CATEGORIES)])
    items = [r.work_item(first_turn_only=True) for r in picked]

    engine = cpu_vllm_engine(str(target), port=free_port(), dtype=args.dtype)
    specs = [
        SpecConfig(),
        SpecConfig(method="draft_model", num_speculative_tokens=args.k, draft_model=str(draft)),
    ]
    summary = run_grid(
        engine,
        specs,
        {"mtbench-first-turns": items},
        args.batch_size,
        args.out,
        settings=LoadSettings(max_tokens=args.max_tokens),
        tokenizer=PromptTokenizer.from_pretrained(str(target)),
    )
    print(f"\nreal pair, {len(items)} prompts x {args.max_tokens} tokens, dtype {args.dtype}")
    head = ("config", "bs", "tok/s", "AL stream", "AL ctr", "speedup")
    print(f"{head[0]:>16}", " ".join(f"{h:>10}" for h in head[1:]), " cond AR (counters)")
    for row in summary.levels:
        cells = [row.config, row.batch_size, row.output_throughput_tok_s]
        cells += [row.figure(view, "al_token_weighted") for view in ("stream", "counters")]
        cells.append(row.speedup)
        text = f"{cells[0]:>16} " + " ".join(
            f"{c:>10.3f}" if isinstance(c, float) else f"{c!s:>10}" for c in cells[1:]
        )
        counters_ar = row.figure("counters", "conditional_ar") or []
        ar = [None if x is None else round(x, 3) for x in counters_ar]
        print(text, "", ar)
    Path(args.out, "bench.json").write_text(summary.model_dump_json(indent=2))


if __name__ == "__main__":
    main()
