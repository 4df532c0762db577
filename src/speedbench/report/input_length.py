"""Acceptance and speedup against input length: SPEED-Bench's throughput buckets side by side.

A throughput split is named after its bucket (``throughput_8k``, and ``throughput_8k_random``
for its random-token control). Where a sweep measured at least two buckets, the report gets one
table per SD config (a row per bucket: Average_AL of real text and of random tokens, speedup
over the same bucket's baseline, with its paired interval where the level had rounds) and one
plot of both against the bucket's input length. A bucket whose prompts and answers run beyond
the draft's trained context (the sweep's provenance, :mod:`speedbench.run.context`) is flagged:
a drafter's acceptance there is past its training length (SPEED-Bench's YaRN finding). The
plot is :func:`speedbench.report.plots.plot_by_input_length`.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from speedbench.sweep_summary import SummaryRow, SweepSummary

BUCKET = re.compile(r"^throughput_(?P<size>\d+)k(?P<random>_random)?$")


def bucket_of(split: str) -> tuple[str, bool] | None:
    """``("8k", False)`` for ``throughput_8k``, ``("8k", True)`` for its random control."""
    m = BUCKET.match(split)
    return None if m is None else (f"{m['size']}k", m["random"] is not None)


def nominal_tokens(bucket: str) -> int:
    """A bucket's nominal input length: ``8k`` is 8,192 tokens (SPEED-Bench's naming)."""
    return int(bucket.removesuffix("k")) * 1024


def by_bucket(summary: SweepSummary) -> dict[str, dict[str, dict[bool, SummaryRow]]]:
    """Config -> bucket -> random? -> its closed-loop level, at the sweep's smallest batch size.

    One batch size keeps a curve about input length only; the tables of the throughput
    section have every load point.
    """
    rows = [r for r in summary.levels if not r.open_loop and bucket_of(r.split)]
    if not rows:
        return {}
    bs = min(r.batch_size for r in rows)
    out: dict[str, dict[str, dict[bool, SummaryRow]]] = defaultdict(lambda: defaultdict(dict))
    for r in rows:
        if r.batch_size == bs:
            bucket, random = bucket_of(r.split) or ("", False)
            out[r.config][bucket][random] = r
    return out


def buckets_by_length(per_bucket: dict[str, dict[bool, SummaryRow]]) -> list[str]:
    """A config's buckets, shortest first."""
    return sorted(per_bucket, key=nominal_tokens)


def _speedup(row: SummaryRow | None) -> str:
    if row is None or row.speedup is None:
        return "-"
    ci = row.speedup_interval
    if ci is None or ci.low is None or ci.high is None:
        return f"{row.speedup:.2f}"
    return f"{ci.mean:.2f} [{ci.low:.2f}, {ci.high:.2f}]"


def _al(row: SummaryRow | None) -> str:
    return "-" if row is None or row.average_al is None else f"{row.average_al:.2f}"


def input_length_table(summary: SweepSummary) -> list[str]:
    """One markdown table per SD config, a row per bucket; empty under two real-text buckets."""
    levels = by_bucket(summary)
    real_buckets = {b for per in levels.values() for b, sides in per.items() if False in sides}
    if len(real_buckets) < 2:
        return []
    context = summary.provenance.context
    beyond = set() if context is None else {bucket_of(s) for s in context.beyond_draft}
    lines: list[str] = []
    for config, per_bucket in sorted(levels.items()):
        if config == "none":
            continue
        bs = next(iter(next(iter(per_bucket.values())).values())).batch_size
        lines += [
            f"**{config}** (bs {bs}):",
            "",
            "| bucket | input tokens | Average_AL | Average_AL, random tokens | speedup | "
            "speedup, random tokens | past the draft's trained context |",
            "|---|---|---|---|---|---|---|",
        ]
        for bucket in buckets_by_length(per_bucket):
            real, rnd = per_bucket[bucket].get(False), per_bucket[bucket].get(True)
            past = "yes" if (bucket, False) in beyond or (bucket, True) in beyond else "no"
            lines.append(
                f"| {bucket} | {nominal_tokens(bucket):,} | {_al(real)} | {_al(rnd)} | "
                f"{_speedup(real)} | {_speedup(rnd)} | {past} |"
            )
        lines.append("")
    return lines[:-1]


INPUT_LENGTH_NOTE = (
    "Average_AL: SPEED-Bench's (the speed_bench view, mean over questions). Speedup: output "
    "throughput with SD over the same bucket's no-SD level at the same batch size; with rounds, "
    "the paired geometric mean and its 95 % interval. Input tokens: the bucket's nominal "
    "length (every prompt lands within the build's tolerance of it)."
)
