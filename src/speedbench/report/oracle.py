"""The greedy acceptance oracle in the report: AL by k per category, best k, measured vs predicted.

Reads the oracle levels of a sweep folder (:func:`speedbench.oracle.in_sweep.read_oracle`) and
writes Markdown tables (its plots: :mod:`speedbench.report.plots`). Every AL names its view:
Category_AL and Average_AL are SPEED-Bench's (``speed_bench``); the break-even model uses the
stream view's tokens per target step.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from speedbench.oracle.predict import OracleLevel, average_al
from speedbench.oracle.recommend import SpeedupModel

ORACLE_NOTE = (
    "Predicted, not measured: the baseline's greedy answers replayed under each drafter "
    "(draft_model: one teacher-forced pass of the draft with transformers in the engine's "
    "dtype; ngram: vLLM's prompt lookup, n-grams 1-4), exact for a lossless engine "
    "(docs/oracle.md). What each k buys at each batch size is the speedup model's section."
)


def _fmt(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def al_by_k_table(level: OracleLevel) -> list[str]:
    """Category_AL (speed_bench view, 95 % interval) per category, one column per k."""
    ks = [f.k for f in level.by_k]
    cats = sorted({c for f in level.by_k for c in f.per_category})
    counts = {c: level.by_k[0].per_category[c].get("speed_bench") for c in cats}
    head = "| category (n) | " + " | ".join(f"k={k}" for k in ks) + " |"
    lines = [head, "|---|" + "---|" * len(ks)]
    for c in cats:
        n = view_0.count if (view_0 := counts[c]) is not None else 0
        cells = []
        for f in level.by_k:
            view = f.per_category.get(c, {}).get("speed_bench")
            if view is None:
                cells.append("-")
                continue
            ci = view.al_request_mean_ci
            interval = f" [{_fmt(ci.low)}, {_fmt(ci.high)}]" if ci and n > 1 else ""
            cells.append(f"{_fmt(view.al_request_mean)}{interval}")
        lines.append(f"| {c} ({n}) | " + " | ".join(cells) + " |")
    overall = [f.views.get("speed_bench") for f in level.by_k]
    stream = [f.views.get("stream") for f in level.by_k]
    average = [f"**{_fmt(v.al_request_mean if v else None)}**" for v in overall]
    lines.append("| **all** (Average_AL) | " + " | ".join(average) + " |")
    pooled = [_fmt(v.al_token_weighted if v else None) for v in stream]
    lines.append("| stream AL (token-weighted) | " + " | ".join(pooled) + " |")
    drafted = [_fmt(f.drafted_fraction, ".0%") for f in level.by_k]
    lines.append("| drafted steps | " + " | ".join(drafted) + " |")
    return lines


def check_table(levels: Sequence[OracleLevel]) -> list[str]:
    """Every measured SD level against the oracle's prediction for its k."""
    rows = []
    for level in levels:
        for f in level.by_k:
            for c in f.checks:
                first = c.mismatches[0] if c.mismatches else None
                where = "-"
                if first:
                    where = (
                        f"{first.prompt_id} turn {first.turn} step {first.step}: "
                        f"{first.predicted} predicted, {first.measured} measured"
                    )
                rows.append(
                    f"| {level.split} bs{level.batch_size} | {c.config} | bs{c.batch_size} | "
                    f"{c.compared} | {c.identical} | "
                    f"{c.output_differs} | {c.steps_differ} | {_fmt(c.predicted_al, '.3f')} | "
                    f"{_fmt(c.measured_al, '.3f')} | {where} |"
                )
    if not rows:
        return []
    # One row per (oracle baseline, measured level): a split with baselines at two batch sizes
    # checks each measured level against both.
    head = (
        "| oracle baseline | measured level | load | requests | identical steps | answer differs"
        " | steps differ | Average_AL predicted | measured | first differing step |"
    )
    return [head, "|---|---|---|---|---|---|---|---|---|---|", *rows]


CHECK_NOTE = (
    "identical steps: every chunk of the request as predicted. answer differs: the SD level's "
    "answer is not the baseline's (the engine was not lossless on it: expected below float32), "
    "so the prediction, made on the baseline's answer, cannot hold there; the difference in "
    "Average_AL is then the engine's own loss. steps differ: same answer, other steps (a "
    "merged stream chunk, or a drafter the oracle does not model exactly)."
)


# SPEED-Bench's figures (arXiv 2604.09557; ../shared/ARCHITECTURE.md): share of output tokens
# inside the top-N vocabulary, overall (multilingual), and AL at depth 3 by tree top-k.
PAPER_COVERAGE = {16384: (0.897, 0.721), 32768: (0.947, 0.769), 65536: (0.983, 0.822)}
PAPER_TREE_DEPTH3 = {2: 2.55, 4: 2.82, 8: 3.04}
VARIANTS_NOTE = (
    "From the same teacher-forced draft pass, exact under greedy decoding "
    "(speedbench.oracle.variants): a pruned draft proposes its argmax over the N most frequent "
    "tokens of the throughput corpora (never the answers measured); a static tree keeps the "
    "draft's top-b children of every node, and holds the answer's path where each token ranked "
    "below its depth's breadth. Average_AL and Category_AL: speed_bench view. loss: pruned AL "
    "over the full vocabulary's at the same k, minus 1. coverage: share of the baseline's "
    "answer tokens kept. AL per verified token: AL over the tokens the target processes per "
    "step (the tree and the step's own token). SPEED-Bench (GPT-OSS 120B EAGLE3 drafters, 32k): "
    "AL -5.5 % on "
    "average, about -10 % on summarization, RAG and multilingual; coverage 16k 89.7 % "
    "(multilingual 72.1 %), 32k 94.7 % (76.9 %). Its trees are SGLang's EAGLE top-k trees "
    "capped by num_draft_tokens, not full trees: compare the trend, and AL per verified token."
)


def _loss(pruned: float | None, full: float | None) -> str:
    return "-" if pruned is None or not full else f"{(pruned / full - 1) * 100:+.1f} %"


def render_variants(level: OracleLevel) -> list[str]:
    """A draft-model level's pruned vocabularies and trees (empty without them)."""
    variants = level.variants
    if variants is None or not (variants.vocabs or variants.trees):
        return []
    out = ["", f"### Pruned draft vocabulary and draft trees: {level.split}", "", VARIANTS_NOTE]
    if variants.vocabs:
        src = variants.vocab_source
        if src is not None:
            out += ["", f"Kept tokens counted over {src.tokens:,} tokens of {src.documents:,} "
                    f"documents ({', '.join(src.corpora)})."]  # fmt: skip
        ks = [f.k for f in level.by_k]
        out += ["", "| vocabulary | coverage | SPEED-Bench's coverage | "
                + " | ".join(f"Average_AL k={k} (loss)" for k in ks) + " |",
                "|---|---|---|" + "---|" * len(ks)]  # fmt: skip
        full = [_fmt(average_al(f)) for f in level.by_k]
        out.append("| full | 100 % | - | " + " | ".join(full) + " |")
        for v in variants.vocabs:
            paper = PAPER_COVERAGE.get(v.size)
            cells = [
                f"{_fmt(average_al(f))} ({_loss(average_al(f), average_al(level.at(f.k)))})"
                for f in v.by_k
            ]
            theirs = _fmt(paper[0], ".1%") if paper else "-"
            row = f"| {v.size:,} | {_fmt(v.coverage, '.1%')} | {theirs} | "
            out.append(row + " | ".join(cells) + " |")
        k = 3 if 3 in ks else ks[-1]
        cats = sorted(level.by_k[0].per_category)
        smallest = variants.vocabs[0]
        at = smallest.by_k[ks.index(k)]

        def loss_of(c: str) -> float:
            pruned, whole = average_al(at, c), average_al(level.at(k), c)
            return pruned / whole - 1 if pruned is not None and whole else 0.0

        out += ["", f"Per category at k={k}, most loss first (at {smallest.size:,} tokens):", "",
                "| category | full AL | "
                + " | ".join(f"{v.size:,}: AL (loss), coverage" for v in variants.vocabs) + " |",
                "|---|---|" + "---|" * len(variants.vocabs)]  # fmt: skip
        for c in sorted(cats, key=loss_of):
            cells = []
            for v in variants.vocabs:
                f = v.by_k[ks.index(k)]
                pruned, whole = average_al(f, c), average_al(level.at(k), c)
                cells.append(f"{_fmt(pruned)} ({_loss(pruned, whole)}), "
                             f"{_fmt(v.coverage_by_category.get(c), '.1%')}")  # fmt: skip
            out.append(f"| {c} | {_fmt(average_al(level.at(k), c))} | " + " | ".join(cells) + " |")
    if variants.trees:
        out += ["", "| tree (breadth per depth) | depth | tokens verified per step | "
                "Average_AL | AL per verified token | SPEED-Bench depth 3 |",
                "|---|---|---|---|---|---|"]  # fmt: skip
        for t in variants.trees:
            al = average_al(t.figures)
            per_token = al / (t.tokens_per_step + 1) if al is not None else None
            same = len(set(t.breadths)) == 1 and len(t.breadths) == 3
            depth3 = PAPER_TREE_DEPTH3.get(t.breadths[0]) if same else None
            out.append(f"| {t.shape} | {len(t.breadths)} | {t.tokens_per_step} | {_fmt(al)} | "
                       f"{_fmt(per_token, '.3f')} | {_fmt(depth3)} |")  # fmt: skip
    return out


def render_oracle(levels: Sequence[OracleLevel]) -> list[str]:
    """The report's oracle section (empty without oracle levels)."""
    if not levels:
        return []
    out = ["## Acceptance for every draft length: the greedy oracle", "", ORACLE_NOTE]
    for level in levels:
        cost = f"{level.seconds:.0f} s for {level.tokens:,} tokens"
        title = (
            f"### {level.drafter}: {level.split} bs{level.batch_size} baseline, "
            f"{level.questions} questions ({cost})"
        )
        out += ["", title, "", *al_by_k_table(level), *render_variants(level)]
    if table := check_table(levels):
        out += ["", "### Measured against predicted", "", *table, "", CHECK_NOTE]
    return out


SPEEDUP_NOTE = (
    "Predicted speedup = a closed loop of the level's own requests replayed with the oracle's "
    "steps, every engine iteration priced by step costs fitted on this host (a fixed cost, "
    "one per running sequence, one per processed token and one per the square of the "
    "iteration's tokens, which long prefills show, and one per token of KV cache a decode or "
    "verify step reads; each repeat's first prefill timed from its send): the target's from "
    "the no-SD levels "
    "(a verify step processes 1 + drafted tokens per request), a draft model's k passes per "
    "step (each pass's sequences and tokens priced by the draft alone) and prompt lookup's "
    "n-gram search from their SD levels, with one cost shared by every drafter, per the "
    "square of the requests an SD iteration verifies; prompts prefilled in chunks where the "
    "engine caps an iteration's tokens; SD off and SD through the same costs. Each measured "
    "level's prediction is made without its timings: the drafters' passes are fitted on the "
    "other SD levels (leave one out). error = predicted / measured - 1. "
    "Break-even model: the earlier AL / (1 + f k c), which charges nothing for verifying k + 1 "
    "tokens per stream. k = 0 is SD off; a k is recommended only where it gains 1 % or more."
)


RECOMMEND_NOTE = (
    "Measured speedup of SD off is 1 by definition. paired e2e ratio: the grid level's summed "
    "end-to-end time over the recommended level's, on the questions both measured, with a "
    "bootstrap interval over questions; beat: above 1; matched: holds 1; lost: below 1; "
    "same: the grid's k is the recommendation."
)
RECOMMEND_RULE = (
    "The recommended k respects the noise: a k the grid measured runs where its paired "
    "interval lies above 1, or where no interval lies below 1 and its predicted gain exceeds "
    "the model's leave-one-out error for the drafter ({noise}); another k replaces it only "
    "where predicted faster by more than that error; and k never grows with the batch size, "
    "so this table and the schedule agree."
)


def _noise_text(model: SpeedupModel) -> str:
    if not model.noise:  # a model made before the noise rule
        return f"{(model.min_change - 1) * 100:.0f} % for every drafter"
    return ", ".join(f"{d} {v * 100:.1f} %" for d, v in model.noise.items())


def _k_name(k: int) -> str:
    return "off" if k == 0 else str(k)


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.2f}"


def _times(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{v * 100:+.1f} %"


def _ranges(ranges: Sequence[Sequence[int]]) -> str:
    parts = []
    for first, last, k in ranges:
        span = f"bs {first}" if first == last else f"bs {first}-{last}"
        parts.append(f"{span}: {'off' if k == 0 else f'k={k}'}")
    return "; ".join(parts)


def render_speedup(model: SpeedupModel | None) -> list[str]:
    """The report's speedup-model section (empty without a model)."""
    if model is None:
        return []
    out = ["## Which k at which batch size: the speedup model", "", SPEEDUP_NOTE, ""]
    out += [
        "| model | fixed ms | per sequence ms | per token ms | per token² ns "
        "| per cached token µs | per verifying request² µs | iterations (outliers) | R² "
        "| fitted on |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for _, name, fit in model.fits():
        out.append(
            f"| {name} | {_ms(fit.fixed_s)} | {_ms(fit.per_sequence_s)} | "
            f"{_ms(fit.per_token_s)} | {_fmt(fit.per_token_sq_s * 1e9, '.1f')} | "
            f"{_fmt(fit.per_context_s * 1e6, '.2f')} | "
            f"{_fmt(fit.per_verifying_sq_s * 1e6, '.0f')} | "
            f"{fit.iterations} ({fit.outliers}) | {_fmt(fit.r2, '.3f')} | "
            f"{', '.join(fit.sources)} |"
        )
    if model.checks:
        out += ["", "### Measured SD levels against the prediction made without them", ""]
        out += [
            "| drafter | split | k | batch size | measured | predicted | error "
            "| break-even model | its error |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for c in model.checks:
            out.append(
                f"| {c.drafter} | {c.split} | {c.k} | {c.batch_size} | "
                f"{_times(c.measured_speedup)} | {_times(c.predicted_speedup)} | "
                f"{_pct(c.error)} | {_times(c.old_model_speedup)} | {_pct(c.old_model_error)} |"
            )
    if model.curves:
        ks = sorted({k for c in model.curves for k in c.speedup})
        out += [
            "",
            "### Predicted speedup by k (k=0: SD off; the best in bold)",
            "",
            RECOMMEND_RULE.format(noise=_noise_text(model)),
            "",
        ]
        out += [
            "| drafter | batch size | questions | "
            + " | ".join(f"k={k}" for k in ks)
            + " | best k | recommended k |",
            "|---|---|---|" + "---|" * (len(ks) + 2),
        ]
        for curve in model.curves:
            cells = []
            for k in ks:
                text = _fmt(curve.speedup.get(k))
                cells.append(f"**{text}**" if k == curve.best_k else text)
            out.append(f"| {curve.drafter} | {curve.batch_size} | {curve.questions} | "
                       + " | ".join(cells) + f" | {_k_name(curve.best_k)} | "
                       f"{_k_name(curve.recommended_k)} |")  # fmt: skip
    if model.recommendations:
        out += ["", "### The recommended k, measured beside the grid's", "", RECOMMEND_NOTE, ""]
        out += [
            "| drafter | batch size | recommended | predicted | measured | grid k | predicted "
            "| measured | paired e2e ratio [95 %] | verdict |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in model.recommendations:
            ci = r.paired_ratio
            ratio = "-" if ci is None else f"{_fmt(ci.value)} [{_fmt(ci.low)}, {_fmt(ci.high)}]"
            best = "off" if r.recommended_k == 0 else f"k={r.recommended_k}"
            out.append(
                f"| {r.drafter} | {r.batch_size} | {best} | {_fmt(r.predicted_recommended)}x | "
                f"{_fmt(r.measured_recommended)}x | k={r.grid_k} | {_fmt(r.predicted_grid)}x | "
                f"{_fmt(r.measured_grid)}x | {ratio} | {r.verdict} |"
            )
    if model.schedules:
        out += ["", "### Draft length by batch size (schedule files beside the oracle)", ""]
        for s in model.schedules:
            out.append(f"- {s.drafter} ({s.split}): {_ranges(s.ranges)}")
    return out
