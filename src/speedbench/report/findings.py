"""SPEED-Bench's findings on this host: one row per finding, the paper's figure beside ours.

SPEED-Bench's value is its findings as much as its number (arXiv 2604.09557; the figures are in
../shared/ARCHITECTURE.md). For every finding the results folder can speak to, the row gives the
paper's figure, this host's from the sweeps in the folder (the oracle's levels where they rest
on more questions than the measured ones), and a verdict: ``holds``, ``does not hold``, or
``not measured here`` with what would measure it. Every AL is SPEED-Bench's own view
(``speed_bench``: Average_AL, Category_AL).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

from speedbench.oracle.in_sweep import read_oracle
from speedbench.oracle.predict import OracleLevel, average_al
from speedbench.sweep_summary import SummaryRow, SweepSummary, ViewSummary

FINDINGS_K = 3  # the paper's draft length
HEAD = ["| finding | SPEED-Bench | this host | verdict |", "|---|---|---|---|"]
FINDINGS_NOTE = (
    "One row per finding of SPEED-Bench (arXiv 2604.09557) this folder can speak to: the "
    "paper's figure (its models, a B200), this host's (speed_bench view; the oracle's baseline "
    "where it has more questions than the measured levels), and whether it holds here. Other "
    "models and another engine: a finding holds when its direction does, not its size."
)


def _draft_level(levels: Sequence[OracleLevel]) -> OracleLevel | None:
    drafts = [lv for lv in levels if lv.drafter == "draft_model" and lv.at(FINDINGS_K)]
    return max(drafts, key=lambda lv: lv.questions, default=None)


def domain_row(levels: Sequence[OracleLevel]) -> str | None:
    """Acceptance depends on the domain: roleplay lowest or second lowest, coding high."""
    level = _draft_level(levels)
    if level is None:
        return None
    figures = level.at(FINDINGS_K)
    if figures is None:
        return None
    cats = {c: al for c in figures.per_category if (al := average_al(figures, c)) is not None}
    if len(cats) < 3:
        return None
    ranked = sorted(cats, key=lambda c: cats[c])
    low, high = ranked[0], ranked[-1]
    ours = (
        f"{low} {cats[low]:.2f} to {high} {cats[high]:.2f} "
        f"({cats[high] / cats[low]:.2f}x; {level.questions} questions, oracle k={FINDINGS_K})"
    )
    # Domain dependence holds where the lowest and the highest category's 95 % intervals
    # (bootstrap over their questions) do not overlap.
    lo, hi = (figures.per_category[c]["speed_bench"].al_request_mean_ci for c in (low, high))
    apart = bool(lo and hi and lo.high is not None and hi.low is not None and lo.high < hi.low)
    verdict = "holds" if apart else "not shown: the extremes' intervals overlap"
    if "roleplay" in cats:
        place = ranked.index("roleplay") + 1
        verdict += f"; roleplay ranks {place} of {len(cats)} from the lowest (the paper: 1 or 2)"
    paper = "Category_AL 2.14 (roleplay, lowest) to 2.72 (coding), Llama 3.3 70B + 1B draft"
    return f"| acceptance depends on the domain | {paper} | {ours} | {verdict} |"


def pruning_row(levels: Sequence[OracleLevel]) -> str | None:
    """Vocabulary pruning costs AL, most on multilingual, RAG and summarization."""
    level = _draft_level(levels)
    if level is None or level.variants is None or not level.variants.vocabs:
        return None
    vocab = min(level.variants.vocabs, key=lambda v: abs(v.size - 32768))
    pruned = next((f for f in vocab.by_k if f.k == FINDINGS_K), None)
    full = level.at(FINDINGS_K)
    if pruned is None or full is None:
        return None
    loss = lambda c=None: (average_al(pruned, c) or 0) / (average_al(full, c) or 1) - 1  # noqa: E731
    cats = sorted(pruned.per_category, key=loss)
    worst = ", ".join(f"{c} {loss(c) * 100:+.1f} %" for c in cats[:3])
    multi = "multilingual" in cats
    ours = (
        f"{vocab.size:,} tokens: Average_AL {loss() * 100:+.1f} %; most lost: {worst}; "
        f"coverage {_fmt(vocab.coverage, '.1%')}"
        + (
            f" (multilingual {_fmt(vocab.coverage_by_category['multilingual'], '.1%')})"
            if multi
            else ""
        )
    )
    if not multi:
        verdict = "not measured here: no multilingual category"
    else:
        ok = loss("multilingual") < loss() and loss() < 0
        verdict = ("holds" if ok else "does not hold") + (
            f": multilingual {loss('multilingual') * 100:+.1f} % against {loss() * 100:+.1f} %"
        )
    paper = (
        "32k: AL -5.5 %, about -10 % on summarization, RAG, multilingual; coverage 94.7 % "
        "(multilingual 76.9 %)"
    )
    return f"| vocabulary pruning hurts multilingual most | {paper} | {ours} | {verdict} |"


def measured_pruning_row(
    summaries: Sequence[SweepSummary], levels: Sequence[OracleLevel]
) -> str | None:
    """A pruned EAGLE-3 head against the full one, both measured (same split, batch size, k)."""
    pairs = []
    for summary in summaries:
        heads = [r for r in summary.levels if r.method == "eagle3" and "speed_bench" in r.views]
        for full, pruned in itertools.permutations(heads, 2):
            if (full.split, full.batch_size, full.k) != (pruned.split, pruned.batch_size,
                                                         pruned.k):  # fmt: skip
                continue
            if "pruned" in pruned.config and "pruned" not in full.config:
                pairs.append((full, pruned))
    if not pairs:
        return None
    full, pruned = pairs[0]
    f_view, p_view = full.views["speed_bench"], pruned.views["speed_bench"]

    def al(view: ViewSummary, cat: str | None = None) -> float | None:
        if cat is None:
            return view.al_request_mean
        figures = view.by_category.get(cat)
        return figures.al_request_mean if figures is not None else None

    def loss(cat: str | None = None) -> float | None:
        a, b = al(p_view, cat), al(f_view, cat)
        return a / b - 1 if a is not None and b else None

    losses = {c: x for c in f_view.by_category if (x := loss(c)) is not None}
    cats = sorted(losses, key=losses.__getitem__)
    worst = ", ".join(f"{c} {losses[c] * 100:+.1f} %" for c in cats[:3])
    overall = loss()
    ours = (
        f"measured, {pruned.config} against {full.config} at bs {full.batch_size}: Average_AL "
        f"{_fmt(overall * 100 if overall is not None else None, '+.1f')} %; most lost: {worst}"
    )
    estimate = pruning_row(levels)
    if estimate:
        ours += "; the oracle's estimate on the draft model in the row above"
    multi = loss("multilingual")
    if multi is None or overall is None:
        verdict = "not measured here: no multilingual category"
    else:
        verdict = ("holds" if multi < overall and overall < 0 else "does not hold") + (
            f": multilingual {multi * 100:+.1f} % against {overall * 100:+.1f} %"
        )
    paper = "32k: AL -5.5 %, about -10 % on summarization, RAG, multilingual (EAGLE3, GPT-OSS)"
    return f"| a pruned EAGLE-3 head loses most on multilingual | {paper} | {ours} | {verdict} |"


def tree_row(levels: Sequence[OracleLevel]) -> str | None:
    """A wider tree accepts more at the same depth."""
    level = _draft_level(levels)
    if level is None or level.variants is None:
        return None
    same = [t for t in level.variants.trees if len(set(t.breadths)) == 1 and len(t.breadths) == 3]
    if len(same) < 2:
        return None
    same.sort(key=lambda t: t.breadths[0])
    als = [average_al(t.figures) for t in same]
    ours = " / ".join(
        f"{_fmt(al)} (top-{t.breadths[0]}, {t.tokens_per_step} tokens)"
        for t, al in zip(same, als, strict=True)
    )
    rising = all(a is not None and b is not None and b > a for a, b in itertools.pairwise(als))
    verdict = "holds" if rising else "does not hold"
    paper = "AL at depth 3: 2.55 / 2.82 / 3.04 at top-k 2 / 4 / 8 (Qwen3-235B + EAGLE3, SGLang)"
    return f"| tree breadth raises AL | {paper} | {ours} (full static trees) | {verdict} |"


def _fmt(v: float | None, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def random_tokens_row(summaries: Sequence[SweepSummary]) -> str | None:
    """Random tokens overestimate SD throughput."""
    ratios = []
    for summary in summaries:
        by_key = {(r.config, r.split, r.load): r for r in summary.levels}
        for (config, split, load), row in by_key.items():
            rnd = by_key.get((config, f"{split}_random", load))
            if (
                row.is_speculative
                and rnd
                and rnd.output_throughput_tok_s
                and row.output_throughput_tok_s
            ):
                ratios.append(
                    (config, split, load, rnd.output_throughput_tok_s / row.output_throughput_tok_s)
                )
    if not ratios:
        return None
    ours = "; ".join(f"{c} {s} {ld}: {r:.2f}x" for c, s, ld, r in ratios)
    verdict = "holds" if all(r > 1 for *_, r in ratios) else "does not hold"
    return (
        f"| random tokens overestimate throughput | +23 % on average (GPT-OSS 120B + EAGLE3, "
        f"8k, bs 1-128) | SD throughput on random over real text: {ours} | {verdict} |"
    )


def entropy_row(summaries: Sequence[SweepSummary]) -> str | None:
    """AL by input-entropy tier of the throughput split."""
    rows: list[SummaryRow] = [
        r
        for s in summaries
        for r in s.levels
        if r.is_speculative
        and r.split.startswith("throughput_")
        and not r.split.endswith("_random")
    ]
    if not rows:
        return None
    parts = []
    for r in rows:
        view = r.views.get("speed_bench")
        by_cat = view.by_category if view is not None else {}
        tiers = {t: by_cat[t].al_request_mean for t in ("low", "mixed", "high") if t in by_cat}
        if tiers:
            parts.append(
                f"{r.config} {r.split}: " + ", ".join(f"{t} {_fmt(v)}" for t, v in tiers.items())
            )
    if not parts:
        return None
    return (
        "| AL depends on the input's entropy | per model in the paper (no figure in the brief) | "
        + "; ".join(parts)
        + " (2 prompts a tier) | not judged: no paper figure to compare |"
    )


NOT_HERE = [
    "| temperature 1 lowers AL | 2.44 at T = 0, 1.98 at T = 1 (Llama 3.3 70B + 1B draft) | - | "
    "not measured by this job, which is greedy: `speedbench oracle-sampled` predicts it from "
    "a no-SD level sampled at T > 0 (benchmarks/sampled_t1*.yaml; "
    "docs/findings/sampled-acceptance.md) |",
]


def input_length_row(summaries: Sequence[SweepSummary]) -> str:
    """AL by input length needs more than one throughput bucket."""
    buckets = sorted(
        {
            r.split
            for s in summaries
            for r in s.levels
            if r.split.startswith("throughput_") and not r.split.endswith("_random")
        }
    )
    paper = "EAGLE3 AL 2.93 / 2.59 / 1.19 at 1k / 2k / 8k; the 1B draft 3.12 / 3.16 / 3.21"
    if len(buckets) < 2:
        return (
            f"| AL against input length | {paper} | {', '.join(buckets) or 'no bucket'} | "
            "not measured here: one bucket (presets/long-context.yaml measures 1k to 32k) |"
        )
    ours = f"buckets {', '.join(buckets)}"
    return f"| AL against input length | {paper} | {ours} | see the sections by input length |"


def findings_table(folders: Sequence[tuple[Path, SweepSummary]]) -> list[str]:
    """The findings table of the sweeps in a results folder (empty where none speaks)."""
    levels = [lv for folder, _ in folders for lv in read_oracle(folder)]
    summaries = [s for _, s in folders]
    rows = [
        domain_row(levels),
        pruning_row(levels),
        measured_pruning_row(summaries, levels),
        tree_row(levels),
        random_tokens_row(summaries),
        entropy_row(summaries),
    ]
    found = [r for r in rows if r]
    if not found:
        return []
    return [*HEAD, *found, input_length_row(summaries), *NOT_HERE]
