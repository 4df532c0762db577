"""How much the generation protocol moves acceptance: SPEED-Bench's against a fixed length.

The main job's qualitative prompts (``per_category`` per category, the order ``dvc repro`` uses)
are measured twice on the same engine, for every SD configuration:

- ``fixed``: speedbench's default, as serving benchmarks run: ``ignore_eos``, exactly
  ``--output-len`` tokens, first turns only;
- ``speed_bench``: SPEED-Bench's protocol under the same cap: every turn with the model's own
  earlier replies, each ending at EOS or ``--output-len`` tokens.

The engine's prefix cache is emptied before each level. Both are reported in SPEED-Bench's own
acceptance view (``Category_AL``, ``Average_AL``: means over questions, all turns of a question
pooled), so the difference is the protocol's alone. The qualitative split must be built
(``dvc repro build_qualitative``).

    .venv/bin/python benchmarks/protocol_effect.py [--methods draft_model ngram] [--k 3]
        [--per-category 1] [--output-len 64] [--batch-size 4]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path
from typing import Any

from speedbench.config import SpecConfig
from speedbench.engines.launchers import engine_session
from speedbench.engines.local import free_port
from speedbench.engines.vllm import cpu_vllm_engine
from speedbench.hostcheck.cpu import cpu_info
from speedbench.provision.models import provision, resolve_dtype
from speedbench.run.level import measure_level
from speedbench.run.plan import load_split, select_prompts
from speedbench.tokenize import PromptTokenizer
from speedbench.workload import LoadSettings

PROTOCOLS = {"fixed": (True, True), "speed_bench": (False, False)}  # ignore_eos, first turn only


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="qwen2.5-coder-1.5b-instruct")
    ap.add_argument("--draft", default="qwen2.5-coder-0.5b-instruct")
    ap.add_argument("--methods", nargs="+", default=["draft_model", "ngram"])
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--per-category", type=int, default=1)
    ap.add_argument("--output-len", type=int, default=64)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--dtype", default="auto")
    ap.add_argument("--out", default="results/bench-protocol")
    args = ap.parse_args()
    print(f"host: {cpu_info().describe()}")
    dtype = resolve_dtype(args.dtype)
    target = str(provision(args.target, dtype=dtype))
    draft = str(provision(args.draft, dtype=dtype))
    tok = PromptTokenizer.from_pretrained(target)
    rows = select_prompts(load_split("qualitative"), None, args.per_category, None)
    settings = LoadSettings(batch_size=args.batch_size, max_tokens=args.output_len, split="q")
    table: dict[str, dict[str, Any]] = {}
    for method in args.methods:
        spec = SpecConfig(
            method=method,
            num_speculative_tokens=args.k,
            draft_model=draft if method == "draft_model" else None,
        )
        engine = cpu_vllm_engine(target, port=free_port(), dtype=dtype)
        where = Path(args.out) / spec.label
        with engine_session(engine, spec, where / "engine.log") as running:
            for name, (ignore_eos, first_only) in PROTOCOLS.items():
                items = [r.work_item(first_turn_only=first_only) for r in rows]
                level = measure_level(
                    running,
                    items,
                    dataclasses.replace(settings, ignore_eos=ignore_eos),
                    tok,
                    where / name,
                )
                overall = level.metrics.overall
                view = overall.views["speed_bench"]
                table[f"{spec.label}/{name}"] = {
                    "Average_AL": view.al_request_mean,
                    "requests": overall.load.num_requests,
                    "output_tokens": overall.load.output_tokens,
                    "Category_AL": {
                        cat: fig.views["speed_bench"].al_request_mean
                        for cat, fig in sorted(level.metrics.per_category.items())
                        if "speed_bench" in fig.views
                    },
                }
                print(json.dumps({f"{spec.label}/{name}": table[f"{spec.label}/{name}"]}))
    Path(args.out).mkdir(parents=True, exist_ok=True)
    Path(args.out, "protocol_effect.json").write_text(json.dumps(table, indent=2))
    cats = sorted({c for entry in table.values() for c in entry["Category_AL"]})
    print("\n| config / protocol | requests | tokens | Average_AL | " + " | ".join(cats) + " |")
    print("|---|---|---|---|" + "---|" * len(cats))
    for key, entry in table.items():
        per_cat = entry["Category_AL"]
        cells = " | ".join(f"{per_cat.get(c, float('nan')):.2f}" for c in cats)
        print(
            f"| {key} | {entry['requests']} | {entry['output_tokens']} | "
            f"{entry['Average_AL']:.3f} | {cells} |"
        )


if __name__ == "__main__":
    main()
