"""The same prompts, greedy, through several engines in one run: vLLM-CPU and llama.cpp by default.

Reads a preset (presets/llamacpp.yaml): its ``measure_qualitative`` section is the sweep, its
``cross_engine`` section the engines and the overrides that keep the run short. Each engine runs
the sweep in turn (never two at once: they would share the cores) and the comparison is written
as markdown and a plot:

    .venv/bin/python benchmarks/cross_engine.py presets/llamacpp.yaml \
        [--out results/cross-engine] [--doc docs/results/cross_engine.md]

Needs the qualitative split (``dvc repro build_qualitative`` or ``make run``'s first stages), the
engine environment (``make engine-env``) and the llama.cpp build (``make llama-server``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from speedbench.config import load_params
from speedbench.hostcheck.cpu import cpu_info
from speedbench.pipeline.stages import stage_sweep
from speedbench.provision.models import resolve_dtype, resolve_model
from speedbench.records import read_parquet
from speedbench.report.cross_engine import plot_category_al, render
from speedbench.run.plan import sweep_items
from speedbench.run.sweep import run_sweep
from speedbench.sweep_summary import SweepSummary
from speedbench.tokenize import PromptTokenizer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("preset", type=Path)
    ap.add_argument("--out", default="results/cross-engine")
    ap.add_argument("--doc", default="docs/results/cross_engine.md")
    ap.add_argument(
        "--report-only",
        action="store_true",
        help="rebuild the markdown and plot from the summaries already under --out",
    )
    args = ap.parse_args()

    params = load_params(args.preset)
    overrides = dict(params.get("cross_engine") or {})
    engines = overrides.pop("engines", ["vllm", "llamacpp"])
    base = stage_sweep(params, "measure_qualitative", args.out)
    base = base.with_fields(**overrides, engine="vllm")
    dtype = resolve_dtype(base.engine.dtype)
    target = resolve_model(base.model, dtype=dtype)
    draft = resolve_model(base.draft_model, dtype=dtype) if base.draft_model else None
    tokenizer = PromptTokenizer.from_pretrained(target)
    items = sweep_items(base)

    summaries, baselines = {}, {}
    for engine in engines:
        config = base.with_fields(engine=engine, name=engine)
        if args.report_only:
            summaries[engine] = SweepSummary.read(Path(args.out) / engine / "summary.json")
        else:
            print(f"== {engine}: {len(items[config.prompts.split_names[0]])} prompts")
            summaries[engine] = run_sweep(config, target, draft, items, tokenizer)
        split = config.prompts.split_names[0]
        bs = min(config.load.batch_sizes)
        records = Path(args.out) / engine / "none" / split / f"bs{bs}" / "records.parquet"
        if records.exists():
            baselines[engine] = read_parquet(records)

    cpu = cpu_info()
    others = [
        r.host_others_fraction
        for summary in summaries.values()
        for r in summary.levels
        if r.host_others_fraction is not None
    ]
    busiest = f"{max(others):.1%}" if others else "not measured"
    notes = [
        f"Host: {cpu.describe()}. The engines ran one after the other; other processes used at "
        f"most {busiest} of the cores during any level (each level's contention probe).",
        f"Prompts: `{split}`, {len(items[split])} of them; greedy, at most "
        f"{base.protocol.output_len} tokens, stop at EOS: {base.protocol.stop_at_eos}; target "
        f"{base.model} (vLLM: {dtype} dequantised from the GGUF; llama.cpp: the GGUF as "
        f"packaged), draft {base.draft_model}, k = {base.draft_lengths}.",
        "Views: docs/acceptance-views.md. Speedup is each engine's own SD over its own baseline.",
    ]
    text = render(summaries, baselines, "vLLM-CPU and llama.cpp on the same prompts", notes)
    doc = Path(args.doc)
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text(text)
    plot = plot_category_al(summaries, doc.with_suffix(".png"))
    print(text)
    print(f"written: {doc}" + (f", {plot}" if plot else ""))


if __name__ == "__main__":
    main()
