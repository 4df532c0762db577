"""The report of any sweep: per-category AL and conditional AR, throughput, speedup, latency.

It reads ``summary.json`` files (and the oracle's files beside them) only, so it can be re-run
on any results folder: one sweep's (``speedbench sweep``, the Prefect flow, a pool sweep), or a
folder of sweeps (the main job's measure stages, ``--out-dir`` of several sweeps), a fresh
run, the committed reference, a colleague's copy. Every sweep gets the same sections.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from speedbench.config import ConfigError
from speedbench.hostcheck.cpu import format_kernel_caps
from speedbench.metrics.views import VIEW_SPECS
from speedbench.oracle.in_sweep import read_oracle, read_speedup_model
from speedbench.report.findings import FINDINGS_NOTE, findings_table
from speedbench.report.input_length import INPUT_LENGTH_NOTE, input_length_table
from speedbench.report.oracle import render_oracle, render_speedup
from speedbench.sweep_summary import SummaryRow, SweepSummary

STAGE_DIRS = ("qualitative", "throughput")
VIEWS_NOTE = (
    "Views (docs/acceptance-views.md): "
    + "; ".join(f"{spec.name} = {spec.rule}" for spec in VIEW_SPECS.values())
    + "."
)


def load_sweeps(results: Path) -> dict[str, tuple[Path, SweepSummary]]:
    """Every sweep in ``results``, by name: its folder and its summary.

    ``results`` is one sweep's folder (it holds ``summary.json``) or a folder of them (the main
    job's measure stages first, then the others by name).
    """
    if (results / "summary.json").exists():
        return {results.resolve().name: (results, SweepSummary.read(results / "summary.json"))}
    rank = {name: i for i, name in enumerate(STAGE_DIRS)}
    found = sorted(
        (p.parent for p in results.glob("*/summary.json")),
        key=lambda p: (rank.get(p.name, len(rank)), p.name),
    )
    return {p.name: (p, SweepSummary.read(p / "summary.json")) for p in found}


def load_summaries(results: Path) -> dict[str, SweepSummary]:
    """The summary of every sweep in ``results`` (:func:`load_sweeps`)."""
    return {name: summary for name, (_, summary) in load_sweeps(results).items()}


def _fmt(v: Any, spec: str = ".2f") -> str:
    return "-" if v is None else format(v, spec)


def category_table(summary: SweepSummary) -> list[str]:
    """Markdown table: AL per category for every SD config and batch size, SPEED-Bench's view.

    Each column says how many questions a category has (n); where it has more than one, a
    cell carries its 95 % bootstrap interval over them.

    Cells are SPEED-Bench's Category_AL (mean over questions of each question's AL, every
    streamed step counted, the prefill one included); the last row is its Average_AL.
    """
    rows = [r for r in summary.levels if r.category_al]
    if not rows:
        return []
    cats = sorted({c for r in rows for c in r.category_al})
    heads = [
        f"{r.config} {r.load}" + (f" ({n})" if (n := r.questions_per_category) else "")
        for r in rows
    ]
    lines = [
        "| category (speed_bench view: Category_AL) | " + " | ".join(heads) + " |",
        "|---|" + "---|" * len(heads),
    ]
    for c in cats:
        lines.append(f"| {c} | " + " | ".join(_with_ci(r, c) for r in rows) + " |")
    average = " | ".join(f"**{_fmt(r.average_al)}**" for r in rows)
    lines.append(f"| **all** (Average_AL) | {average} |")
    return lines


def _with_ci(row: SummaryRow, category: str) -> str:
    """A Category_AL cell, with its 95 % bootstrap interval over questions where it has one."""
    figures = row.views["speed_bench"].by_category.get(category)
    if figures is None:
        return "-"
    ci = figures.al_request_mean_ci
    if ci is None or ci.low is None or ci.high is None:
        return _fmt(figures.al_request_mean)
    return f"{_fmt(figures.al_request_mean)} [{_fmt(ci.low)}, {_fmt(ci.high)}]"


# (view, figure, column title): every overall AL the report shows, as each view declares it.
VIEW_COLUMNS = tuple(
    (spec.name, figure, title) for spec in VIEW_SPECS.values() for figure, title in spec.columns
)


def views_table(summary: SweepSummary) -> list[str]:
    """Markdown table: overall AL of every SD level in every acceptance view, side by side.

    An optional view (the ``server`` view, an engine's own running AL) has a column only where a
    level has it; the others always do, "-" saying the engine did not report it.
    """
    rows = [r for r in summary.levels if r.is_speculative]
    if not rows:
        return []
    shown = {
        v for v, spec in VIEW_SPECS.items() if not spec.optional or any(v in r.views for r in rows)
    }
    columns = [c for c in VIEW_COLUMNS if c[0] in shown]
    heads = " | ".join(title for _, _, title in columns)
    lines = [f"| config | split | load | {heads} |", "|---|---|---|" + "---|" * len(columns)]
    for r in rows:
        cells = " | ".join(_fmt(r.figure(view, name)) for view, name, _ in columns)
        lines.append(f"| {r.config} | {r.split} | {r.load} | {cells} |")
    return lines


AR_VIEWS = tuple(name for name, spec in VIEW_SPECS.items() if spec.positions)


def ar_table(summary: SweepSummary) -> list[str]:
    """Markdown table: conditional AR per draft position, SPEED-Bench's view and the counters'."""
    rows = [r for r in summary.levels if any(r.figure(v, "conditional_ar") for v in AR_VIEWS)]
    if not rows:
        return []
    k = max(len(r.figure(v, "conditional_ar") or []) for r in rows for v in AR_VIEWS)
    lines = [
        "| config | load | view | AL | " + " | ".join(f"AR_{j}" for j in range(1, k + 1)) + " |",
        "|---|---|---|---|" + "---|" * k,
    ]
    for r in rows:
        for view in AR_VIEWS:
            if ars := r.figure(view, "conditional_ar"):
                cells = " | ".join(_fmt(a, ".3f") for a in ars)
                al = _fmt(r.figure(view, "al_token_weighted"))
                lines.append(f"| {r.config} | {r.load} | {view} | {al} | {cells} |")
    return lines


def lossless_table(summary: SweepSummary) -> list[str]:
    """Markdown table: greedy SD outputs against the baseline's, and where they diverge."""
    rows = [r for r in summary.levels if r.lossless is not None]
    if not rows:
        return []
    lines = [
        "| config | split | load | compared | identical | first divergences (prompt/turn@token) |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        check = r.lossless
        assert check is not None
        where = ", ".join(
            f"{m.prompt_id}/t{m.turn}@{m.first_divergence}" for m in check.mismatches[:5]
        )
        more = f" (+{len(check.mismatches) - 5})" if len(check.mismatches) > 5 else ""
        lines.append(
            f"| {r.config} | {r.split} | {r.load} | {check.compared} | "
            f"{_fmt(check.match_rate, '.0%')} | {where or '-'}{more} |"
        )
    return lines


def break_even_table(summary: SweepSummary) -> list[str]:
    """Markdown table: expected speedup AL / (1 + k c) beside the measured, per level."""
    if not summary.break_even:
        return []
    lines = [
        "| config | split | bs | AL per target step (stream) | c (draft/target step) | "
        "expected AL/(1+kc) | measured |",
        "|---|---|---|---|---|---|---|",
    ]
    for b in summary.break_even:
        lines.append(
            f"| {b.config} | {b.split} | {b.batch_size} | {_fmt(b.al_per_step)} | "
            f"{_fmt(b.draft_cost_ratio, '.3f')} | {_fmt(b.expected_speedup)} | "
            f"{_fmt(b.measured_speedup)} |"
        )
    return lines


BREAK_EVEN_NOTE = (
    "c is 0 for drafters that run no model (n-gram, suffix), else the draft model's TPOT alone "
    "over the target's alone at the same batch size (draft_cost). The model assumes verifying "
    "k + 1 tokens costs one target step: where the measured speedup falls short of the "
    "expected, verification costs more than a decode step (compute-bound on a CPU) or the "
    "engine's SD bookkeeping does."
)


LOSSLESS_NOTE = (
    "Greedy SD must reproduce the baseline's tokens where the arithmetic is exact: at float32 "
    "a difference is a bug. Below float32 it is expected at any batch size: a bf16 verify step "
    "of k + 1 tokens rounds otherwise than the baseline's one-token decode (measured at batch "
    "size 1 on AVX-512 and AMX hosts), and at batch size > 1 bf16 kernels also round with "
    "their step partners."
)


def lossless_verdict(summary: SweepSummary) -> list[str]:
    """One line when greedy SD was not lossless on this host's dtype (else none)."""
    checks = [r.lossless for r in summary.levels if r.lossless is not None and r.lossless.compared]
    differ = sum(check.compared - check.matched for check in checks)
    if not differ:
        return []
    total = sum(check.compared for check in checks)
    dtype = summary.provenance.dtype
    where = (
        f"in {dtype}, SD is not lossless on this host"
        if dtype != "float32"
        else "at float32 this is a bug to report"
    )
    return [
        f"**{differ} of {total} greedy SD answers differ from the baseline's**: {where}, and "
        "every acceptance figure above is measured on the SD run's own text."
    ]


def throughput_table(summary: SweepSummary) -> list[str]:
    """Markdown table: throughput, per-user speed and speedup by config, split and batch size.

    Closed-loop levels only; open-loop ones have :func:`rate_table`. Where the sweep set latency
    objectives, goodput (requests/s meeting them, and their share) is a column too, so SD and
    no SD compare at equal SLOs.
    """
    rows = [r for r in summary.levels if not r.open_loop]
    slo = any(r.goodput_rps is not None for r in rows)
    head = "| config | split | bs | tok/s | per-user tok/s | speedup | errors |"
    lines = [head + (" goodput req/s (met) |" if slo else ""), "|" + "---|" * (8 if slo else 7)]
    for r in rows:
        line = (
            f"| {r.config} | {r.split} | {r.batch_size} | "
            f"{_fmt(r.output_throughput_tok_s)} | {_fmt(r.per_user_tok_s)} | "
            f"{_fmt(r.speedup, '.2f')} | {_fmt(r.error_rate, '.0%')} |"
        )
        if slo:
            line += f" {_fmt(r.goodput_rps, '.3f')} ({_fmt(r.goodput_fraction, '.0%')}) |"
        lines.append(line)
    return lines


def rate_table(summary: SweepSummary) -> list[str]:
    """Markdown table of the open-loop levels: what each request rate did to latency and goodput.

    ``arrived`` is the rate requests were really due at (a few Poisson draws can run well off
    the rate asked for); ``served`` is requests finished over the level's time.
    ``E2E speedup`` is the baseline's median end-to-end latency over the level's at the same
    rate; goodput is the requests per second that met every latency objective of the sweep.
    """
    rows = sorted(
        (r for r in summary.levels if r.open_loop),
        key=lambda r: (r.split, r.request_rate or 0.0, r.is_speculative, r.config),
    )
    if not rows:
        return []
    lines = [
        "| config | split | rate (req/s) | arrived req/s | served req/s | tok/s | TTFT p50 (s) | "
        "TPOT p50 (s) | E2E p50 (s) | E2E speedup | goodput req/s | met SLOs | errors |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [
            f"{r.request_rate:g}",
            _fmt(r.arrival_rate_rps, ".3f"),
            _fmt(r.request_throughput_rps, ".3f"),
            _fmt(r.output_throughput_tok_s),
            _fmt(r.ttft_p50_s),
            _fmt(r.tpot_p50_s, ".3f"),
            _fmt(r.e2e_p50_s),
            _fmt(r.e2e_speedup),
            _fmt(r.goodput_rps, ".3f"),
            _fmt(r.goodput_fraction, ".0%"),
            _fmt(r.error_rate, ".0%"),
        ]
        lines.append(f"| {r.config} | {r.split} | " + " | ".join(cells) + " |")
    return lines


def sd_stops_paying(summary: SweepSummary) -> list[str]:
    """Per SD config and split: the lowest measured rate at which SD answers slower than no SD.

    "Slower" is the median end-to-end latency (``e2e_speedup`` < 1); where the sweep has
    latency objectives, a lower goodput than the baseline's at the same rate counts too.
    """
    base = {
        (r.split, r.request_rate): r for r in summary.levels if r.open_loop and not r.is_speculative
    }
    lines = []
    for config, split in dict.fromkeys(
        (r.config, r.split) for r in summary.levels if r.open_loop and r.is_speculative
    ):
        rows = sorted(
            (r for r in summary.levels if r.open_loop and (r.config, r.split) == (config, split)),
            key=lambda r: r.request_rate or 0.0,
        )
        compared = [r for r in rows if r.e2e_speedup is not None]
        if not compared:
            continue

        def loses(r: SummaryRow) -> bool:
            other = base.get((r.split, r.request_rate))
            worse_goodput = (
                other is not None
                and r.goodput_rps is not None
                and other.goodput_rps is not None
                and r.goodput_rps < other.goodput_rps
            )
            return (r.e2e_speedup or 0.0) < 1.0 or worse_goodput

        losing = next((r for r in compared if loses(r)), None)
        rates = f"{compared[0].request_rate:g}-{compared[-1].request_rate:g} req/s"
        if losing is None:
            lines.append(f"- {config} on {split}: SD pays at every measured rate ({rates})")
        else:
            lines.append(
                f"- {config} on {split}: SD stops paying at {losing.request_rate:g} req/s "
                f"(E2E speedup {_fmt(losing.e2e_speedup)}, goodput "
                f"{_fmt(losing.goodput_rps, '.3f')} req/s; measured {rates})"
            )
    return lines


SPREAD_FIGURES = (
    ("output_throughput_tok_s", "tok/s", ".2f"),
    ("e2e_p50_s", "E2E p50 (s)", ".2f"),
    ("goodput_rps", "goodput req/s", ".3f"),
    ("al_speed_bench_request_mean", "Average_AL", ".3f"),
)


def spread_table(summary: SweepSummary) -> list[str]:
    """Markdown table: mean and 95 % Student-t interval over repeats, for levels repeated."""
    rows = [r for r in summary.levels if r.repeats > 1]
    if not rows:
        return []
    heads = " | ".join(title for _, title, _ in SPREAD_FIGURES)
    lines = [
        f"| config | split | load | repeats | {heads} |",
        "|---|---|---|---|" + "---|" * len(SPREAD_FIGURES),
    ]
    for r in rows:
        cells = []
        for key, _, spec in SPREAD_FIGURES:
            spread = r.spread.get(key)
            if spread is None or spread.mean is None:
                cells.append("-")
            else:
                low, high = _fmt(spread.low, spec), _fmt(spread.high, spec)
                cells.append(f"{_fmt(spread.mean, spec)} [{low}, {high}]")
        lines.append(f"| {r.config} | {r.split} | {r.load} | {r.repeats} | {' | '.join(cells)} |")
    return lines


def overestimate(summary: SweepSummary) -> list[str]:
    """Random-token SD throughput over real-text SD throughput, per bucket and SD config."""
    by_key = {(r.config, r.split, r.load): r for r in summary.levels}
    lines = []
    for (config, split, bs), row in sorted(by_key.items()):
        if not row.is_speculative or split.endswith("_random"):
            continue
        rnd = by_key.get((config, f"{split}_random", bs))
        if rnd and rnd.output_throughput_tok_s and row.output_throughput_tok_s:
            ratio = rnd.output_throughput_tok_s / row.output_throughput_tok_s
            lines.append(
                f"- {config} on {split} at {bs}: random tokens give {ratio:.2f}x the SD "
                f"throughput of real text (Average_AL {_fmt(rnd.average_al)} vs "
                f"{_fmt(row.average_al)}, speed_bench view)"
            )
    return lines


def fewer_turns_note(summary: SweepSummary) -> list[str]:
    """A line per level that sent questions on fewer turns than the split has (else none)."""
    return [
        f"- {r.config} {r.load}: {r.questions_on_fewer_turns} questions measured on their "
        "first turn only (the split has more); SPEED-Bench pools every turn of a question, so "
        "their AL is not its figure for them."
        for r in summary.levels
        if r.questions_on_fewer_turns and r.is_speculative
    ]


PAIRED_NOTE = (
    "Paired speedup: the geometric mean over rounds of SD throughput in round r over the "
    "baseline's in round r, with a 95 % Student-t interval over rounds (of the log ratio). "
    "`interleaved`: each round ran one pass of every config in one window "
    "(speedbench.run.interleave), so host drift cancels; `sequential`: the rounds were "
    "repeats of levels measured one after the other, and drift between them is in the "
    "ratio. Baseline drift: the range of the baseline's per-round throughput over its mean."
)


def paired_speedup_table(summary: SweepSummary) -> list[str]:
    """Markdown table of the speedups paired by round (empty when no level has rounds)."""
    rows = [r for r in summary.levels if r.speedup_interval is not None]
    if not rows:
        return []
    lines = [
        "| config | split | bs | rounds | paired speedup [95 % CI] | pairing | each round | "
        "baseline drift |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ci = r.speedup_interval
        assert ci is not None
        rounds = ", ".join(f"{x:.2f}" for x in r.speedup_rounds)
        lines.append(
            f"| {r.config} | {r.split} | {r.batch_size} | {ci.count} | "
            f"{_fmt(ci.mean, '.2f')} [{_fmt(ci.low, '.2f')}, {_fmt(ci.high, '.2f')}] | "
            f"{r.speedup_pairing} | {rounds} | {_fmt(r.baseline_drift, '.1%')} |"
        )
    return lines


def latency_table(summary: SweepSummary) -> list[str]:
    """Markdown table: median TTFT, TPOT and end-to-end latency of every closed-loop level."""
    rows = [r for r in summary.levels if not r.open_loop]
    if not rows:
        return []
    lines = ["| config | split | bs | TTFT p50 (ms) | TPOT p50 (ms) | e2e p50 (s) |",
             "|---|---|---|---|---|---|"]  # fmt: skip
    ms = lambda v: None if v is None else v * 1000  # noqa: E731
    for r in rows:
        lines.append(
            f"| {r.config} | {r.split} | {r.batch_size} | {_fmt(ms(r.ttft_p50_s), '.1f')} | "
            f"{_fmt(ms(r.tpot_p50_s), '.1f')} | {_fmt(r.e2e_p50_s, '.2f')} |"
        )
    return lines


def placeholders_note(summary: SweepSummary) -> list[str]:
    """A line per split measured without SPEED-Bench's placeholder rows (else none)."""
    skipped = summary.provenance.placeholders_skipped or {}
    return [
        f"- {split}: {n} SPEED-Bench placeholder rows skipped (--skip-placeholders); "
        "the figures rest on the other questions only."
        for split, n in sorted(skipped.items())
    ]


def context_note(summary: SweepSummary) -> list[str]:
    """The engine's raised context, and a line per split beyond the draft's trained context."""
    context = summary.provenance.context
    if context is None:
        return []
    lines = [
        f"- The engines ran with a {context.max_model_len:,}-token context for the longest "
        f"prompts and answers ({max(context.need_by_split.values()):,} tokens)."
    ]
    return lines + [
        f"- {split}: prompts and answers to {need:,} tokens, beyond the "
        f"{context.draft_trained:,} the draft was trained to: its acceptance there is past its "
        "training length."
        for split, need in sorted(context.beyond_draft.items())
    ]


def sweep_sections(name: str, folder: Path, summary: SweepSummary) -> list[str]:
    """Every section of one sweep's report, in reading order; empty ones left out."""
    out: list[str] = []
    splits = sorted({r.split for r in summary.levels if r.category_al})
    for split in splits:
        table = category_table(summary.model_copy(
            update={"levels": [r for r in summary.levels if r.split == split]}
        ))  # fmt: skip
        out += ["", f"## Acceptance length by category ({split})", "", *table]
    if note := fewer_turns_note(summary):
        out += ["", *note]
    if note := placeholders_note(summary):
        out += ["", *note]
    if note := context_note(summary):
        out += ["", *note]
    if table := views_table(summary):
        out += ["", f"## Acceptance length in every view ({name})", "", *table, "", VIEWS_NOTE]
    if table := ar_table(summary):
        out += ["", f"## Conditional acceptance rate by position ({name})", "", *table]
    if summary.levels:
        out += ["", f"## Throughput and speedup ({name})", "", *throughput_table(summary)]
    if table := paired_speedup_table(summary):
        out += ["", *table, "", PAIRED_NOTE]
    if extra := overestimate(summary):
        out += ["", "Random-token control:", "", *extra]
    if table := input_length_table(summary):
        out += ["", f"## Acceptance and speedup by input length ({name})", "", *table]
        out += ["", INPUT_LENGTH_NOTE]
    if table := latency_table(summary):
        out += ["", f"## Latency ({name})", "", *table]
    if table := break_even_table(summary):
        out += ["", "## Break-even model: why SD wins or loses here", "", *table]
        out += ["", BREAK_EVEN_NOTE]
    if lossless := lossless_table(summary):
        out += ["", f"## Lossless check ({name})", "", *lossless, "", LOSSLESS_NOTE]
        if verdict := lossless_verdict(summary):
            out += ["", *verdict]
    if oracle := render_oracle(read_oracle(folder)):
        out += ["", *oracle]
    if speedup := render_speedup(read_speedup_model(folder)):
        out += ["", *speedup]
    if table := rate_table(summary):
        out += ["", f"## Request rates ({name})", "", *table, "", *sd_stops_paying(summary)]
    if table := spread_table(summary):
        out += ["", f"## Spread over repeats ({name})", "", *table]
    return out


def render(results: Path, mlflow_uri: str | None = None) -> str:
    """The whole report of a results folder (one sweep or several) as Markdown.

    Raises:
        ConfigError: ``results`` holds no sweep (no ``summary.json`` in it or one level below).
    """
    sweeps = load_sweeps(results)
    if not sweeps:
        raise ConfigError(
            f"{results}: no sweep here (no summary.json in it or in a folder below it); give "
            "a sweep's folder (<out-dir>/<name>) or the folder above it"
        )
    summaries = {name: summary for name, (_, summary) in sweeps.items()}
    out = ["# speedbench results", ""]
    cpus = {s.provenance.host_cpu.model for s in summaries.values() if s.provenance.host_cpu}
    if cpus:
        out += [f"Measured on: {'; '.join(sorted(cpus))} ({host_line(summaries)})"]
    for name, (folder, summary) in sweeps.items():
        if len(sweeps) > 1:
            out += ["", f"# {name}"]
        out += sweep_sections(name, folder, summary)
    if findings := findings_table(list(sweeps.values())):
        out += ["", "## SPEED-Bench's findings on this host", "", FINDINGS_NOTE, "", *findings]
    flagged = [
        f"- {name}: {r.config} {r.split} {r.load}: {r.host_warning}"
        for name, summary in summaries.items()
        for r in summary.levels
        if r.host_flagged
    ]
    if flagged:
        out += ["", "## Host contention: levels measured while other processes ran", "", *flagged]
    out += ["", "## Where things are", ""]
    out += [f"- plot: `{p}`" for p in report_plots(sweeps)]
    if mlflow_uri:
        out.append(
            f"- MLflow store: `{mlflow_uri}` (UI: `scripts/ui.sh`, then http://127.0.0.1:5000)"
        )
    return "\n".join(out) + "\n"


def report_plots(sweeps: dict[str, tuple[Path, SweepSummary]]) -> list[Path]:
    """The PNG plots of every sweep, in the report's order."""
    return [p for folder, _ in sweeps.values() for p in sorted((folder / "plots").glob("*.png"))]


# (attribute or (view, figure), column title) of the plain-text summary.
SUMMARY_COLUMNS: tuple[tuple[str | tuple[str, str], str], ...] = (
    ("load", "load"),
    ("output_throughput_tok_s", "tok/s"),
    (("speed_bench", "al_request_mean"), "Average_AL"),
    (("stream", "al_token_weighted"), "AL stream"),
    (("engine", "al_token_weighted"), "AL engine"),
    (("counters", "al_token_weighted"), "AL counters"),
    ("speedup", "speedup"),
    ("error_rate", "errors"),
)


def _column(row: SummaryRow, key: str | tuple[str, str]) -> Any:
    return row.figure(*key) if isinstance(key, tuple) else getattr(row, key)


def format_summary(summary: SweepSummary) -> str:
    """A plain-text table of the measured levels, then AL by category (names never cut)."""
    rows = summary.levels
    config_w = max([len("config"), *(len(_row_name(r, summary)) for r in rows)])
    lines = [f"{'config':>{config_w}} " + " ".join(f"{h:>14}" for _, h in SUMMARY_COLUMNS)]
    for row in rows:
        cells = [_cell(_column(row, key), 14) for key, _ in SUMMARY_COLUMNS]
        lines.append(f"{_row_name(row, summary):>{config_w}} " + " ".join(cells))
    sd_rows = [r for r in rows if r.category_al]
    if sd_rows:
        cats = sorted({c for r in sd_rows for c in r.category_al})
        width = max(7, *(len(c) for c in cats))
        lines += ["", "AL by category (speed_bench view: Category_AL, mean over questions)"]
        lines.append(
            f"{'config':>{config_w}} {'load':>8} " + " ".join(f"{c:>{width}}" for c in cats)
        )
        for r in sd_rows:
            by_cat = " ".join(_cell(r.category_al.get(c), width) for c in cats)
            lines.append(f"{_row_name(r, summary):>{config_w}} {r.load:>8} {by_cat}")
    if note := fewer_turns_note(summary):
        lines += ["", *note]
    if table := rate_table(summary):
        lines += ["", *table, "", *sd_stops_paying(summary)]
    if table := spread_table(summary):
        lines += ["", *table]
    return "\n".join(lines)


def host_line(summaries: dict[str, SweepSummary]) -> str:
    """The CPU features and dtype the numbers rest on, from the sweeps' provenance."""
    parts = set()
    for s in summaries.values():
        if cpu := s.provenance.host_cpu:
            caps = format_kernel_caps(cpu.kernel_caps)
            caps = f" ({caps})" if caps else ""
            parts.add(
                f"{cpu.cores} cores, kernels {cpu.kernel_family}{caps}, "
                f"AVX-512 {'yes' if cpu.avx512 else 'no'}, "
                f"bf16 {'native' if cpu.bf16 else 'emulated'}, "
                f"AMX {'yes' if cpu.amx else 'no'}, dtype {s.provenance.dtype}"
            )
    return "; ".join(sorted(parts))


def _row_name(row: SummaryRow, summary: SweepSummary) -> str:
    return f"{row.config} [{row.split}]" if summary.many_splits else row.config


def _cell(value: Any, width: int) -> str:
    if isinstance(value, float):
        return f"{value:>{width}.3f}"
    return f"{'-' if value is None else value!s:>{width}}"
