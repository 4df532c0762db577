"""The report as one self-contained HTML file: verdict first, heatmaps to hover, plots inline.

Everything is in the file (styles, a few lines of script, the PNG plots as data URIs), so it
opens from a mail attachment or an MLflow artifact with no network. On top of the Markdown
report's tables (:func:`speedbench.report.text.render`, converted as they are) it adds:

- the verdict line: the reference check (when a reference is given) and the lossless check,
  with the host the numbers came from;
- acceptance length per category as heatmaps, one per view, with a switch between SPEED-Bench's
  view and the stream view; each cell's 95 % interval and question count show on hover;
- the oracle's AL by k per category as a heatmap per drafter, intervals on hover;
- interactive figures (:mod:`speedbench.report.interactive`): AL by category, the oracle's AL
  by draft length and the speedup model's curves, to hover and zoom;
- the sweep's plots (Pareto, conditional AR, speedup, oracle) inline.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Sequence
from pathlib import Path

import markdown

from speedbench.figures import Figure
from speedbench.oracle.in_sweep import read_oracle, read_speedup_model
from speedbench.oracle.predict import OracleLevel
from speedbench.report.interactive import al_heatmap, figures_html, oracle_curves, speedup_curves
from speedbench.report.text import host_line, load_sweeps, lossless_verdict, render, report_plots
from speedbench.results import CategoryAL
from speedbench.sweep_summary import SweepSummary

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
h1 { margin-bottom: .2em; } h2 { border-bottom: 1px solid #ddd; margin-top: 1.6em; }
.verdict { padding: .8em 1em; border-radius: 6px; background: #f3f6fa; margin: .6em 0; }
.verdict b.exact, .verdict b.reproduced { color: #176317; }
.verdict b.not_reproduced, .verdict b.not_comparable { color: #a11; }
table { border-collapse: collapse; margin: .6em 0; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 7px; text-align: right; }
th:first-child, td:first-child { text-align: left; }
td.heat { min-width: 3.2em; color: #fff; font-weight: 600; text-align: center; }
.switch button { margin-right: .4em; padding: .3em .8em; border: 1px solid #889; background: #fff;
  border-radius: 4px; cursor: pointer; }
.switch button.on { background: #335; color: #fff; }
img { max-width: 100%; border: 1px solid #eee; margin: .4em 0; }
.plots { display: grid; grid-template-columns: 1fr 1fr; gap: 1em; }
"""

SCRIPT = """
function show(group, name) {
  document.querySelectorAll('[data-group="' + group + '"]').forEach(function (el) {
    el.style.display = el.dataset.name === name ? '' : 'none';
  });
  document.querySelectorAll('[data-switch="' + group + '"]').forEach(function (b) {
    b.classList.toggle('on', b.dataset.name === name);
  });
}
"""


def _color(value: float | None, low: float, high: float) -> str:
    """A viridis-like ramp from dark blue (low) to yellow-green (high)."""
    if value is None:
        return "#bbb"
    t = 0.0 if high <= low else min(max((value - low) / (high - low), 0.0), 1.0)
    stops = [(68, 1, 84), (59, 82, 139), (33, 145, 140), (94, 201, 98), (253, 231, 37)]
    i = min(int(t * (len(stops) - 1)), len(stops) - 2)
    f = t * (len(stops) - 1) - i
    rgb = [round(a + (b - a) * f) for a, b in zip(stops[i], stops[i + 1], strict=True)]
    return "#{:02x}{:02x}{:02x}".format(*rgb)


def heatmap(
    title: str, columns: Sequence[str], rows: dict[str, list[tuple[float | None, str]]]
) -> str:
    """An HTML table whose cells are coloured by value; each cell is (value, hover text)."""
    values = [v for cells in rows.values() for v, _ in cells if v is not None]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for name, cells in rows.items():
        tds = "".join(
            f'<td class="heat" style="background:{_color(v, low, high)}" '
            f'title="{html.escape(hover)}">{"-" if v is None else f"{v:.2f}"}</td>'
            for v, hover in cells
        )
        body.append(f"<tr><td>{html.escape(name)}</td>{tds}</tr>")
    return (
        f"<table><caption>{html.escape(title)}</caption><tr><th>category</th>{head}</tr>"
        + "".join(body)
        + "</table>"
    )


def _interval(ci: object, n: int | None) -> str:
    low, high = getattr(ci, "low", None), getattr(ci, "high", None)
    count = f"n = {n}" if n else ""
    if low is None or high is None or not n or n < 2:
        return count or "one question: no interval"
    return f"95% CI [{low:.2f}, {high:.2f}], {count}"


def measured_heatmaps(summary: SweepSummary) -> str:
    """AL per category of every SD level: SPEED-Bench's view and the stream's, switchable."""
    rows = [r for r in summary.levels if r.is_speculative and r.category_al]
    if not rows:
        return ""
    columns = [f"{r.config} {r.load}" for r in rows]
    cats = sorted({c for r in rows for c in r.category_al})
    empty = CategoryAL()

    def cells(view: str, c: str) -> list[tuple[Figure, str]]:
        out = []
        for r in rows:
            f = r.views[view].by_category.get(c, empty) if view in r.views else empty
            if view == "speed_bench":
                out.append((f.al_request_mean, _interval(f.al_request_mean_ci, f.count)))
            else:
                out.append((f.al_token_weighted, "token-weighted"))
        return out

    speed_bench = {c: cells("speed_bench", c) for c in cats}
    speed_bench["all (Average_AL)"] = [(r.average_al, "") for r in rows]
    stream = {c: cells("stream", c) for c in cats}
    stream["all (token-weighted)"] = [(r.figure("stream", "al_token_weighted"), "") for r in rows]
    tables = {
        "speed_bench": heatmap("speed_bench view: Category_AL", columns, speed_bench),
        "stream": heatmap("stream view: tokens per target step", columns, stream),
    }
    return _switchable("measured", tables)


def oracle_heatmaps(levels: Sequence[OracleLevel]) -> str:
    """The oracle's Category_AL by k, one heatmap per drafter, switchable."""
    tables = {}
    for level in levels:
        ks = [f"k={f.k}" for f in level.by_k]
        cats = sorted(level.by_k[0].per_category) if level.by_k else []
        rows = {}
        for c in cats:
            cells = []
            for f in level.by_k:
                view = f.per_category[c]["speed_bench"]
                cells.append((view.al_request_mean, _interval(view.al_request_mean_ci, view.count)))
            rows[c] = cells
        rows["all (Average_AL)"] = [
            (f.views["speed_bench"].al_request_mean, "") for f in level.by_k
        ]
        title = (
            f"{level.drafter}: predicted Category_AL by k ({level.split} bs{level.batch_size} "
            f"baseline, {level.questions} questions)"
        )
        tables[f"{level.drafter} bs{level.batch_size}"] = heatmap(title, ks, rows)
    return _switchable("oracle", tables) if tables else ""


def _switchable(group: str, tables: dict[str, str]) -> str:
    names = list(tables)
    buttons = "".join(
        f'<button data-switch="{group}" data-name="{html.escape(n)}" '
        f"onclick=\"show('{group}', '{html.escape(n)}')\" class=\"{'on' if i == 0 else ''}\">"
        f"{html.escape(n)}</button>"
        for i, n in enumerate(names)
    )
    hidden = ' style="display:none"'
    divs = "".join(
        f'<div data-group="{group}" data-name="{html.escape(n)}"{"" if i == 0 else hidden}>'
        f"{t}</div>"
        for i, (n, t) in enumerate(tables.items())
    )
    return f'<div class="switch">{buttons}</div>{divs}'


def _image(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'


def render_html(
    results: Path, reference_verdict: str | None = None, text: str | None = None
) -> str:
    """The whole report of a results folder as one HTML page.

    ``reference_verdict`` is verify-reference's line (``verdict: exact against ...``), when the
    caller has checked the results against a reference; ``text`` is the folder's Markdown
    report where the caller has rendered it already.
    """
    sweeps = load_sweeps(results)
    summaries = {name: summary for name, (_, summary) in sweeps.items()}
    many = len(sweeps) > 1
    verdict_lines = []
    if reference_verdict:
        kind = reference_verdict.split(":", 1)[-1].split(" against")[0].strip().replace(" ", "_")
        verdict_lines.append(f'<b class="{html.escape(kind)}">{html.escape(reference_verdict)}</b>')
    for name, summary in summaries.items():
        if lossless := lossless_verdict(summary):
            line = markdown.markdown(lossless[0]).removeprefix("<p>").removesuffix("</p>")
            verdict_lines.append(f"{html.escape(name)}: {line}" if many else line)
    host = host_line(summaries)
    cpus = sorted(
        {s.provenance.host_cpu.model if s.provenance.host_cpu else "CPU not recorded"
         for s in summaries.values()}
    )  # fmt: skip
    verdict_lines.append(html.escape(f"Measured on: {'; '.join(cpus)} ({host})"))
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>speedbench report</title>",
        f"<style>{STYLE}</style><script>{SCRIPT}</script></head><body>",
        "<h1>speedbench report</h1>",
        '<div class="verdict">' + "<br>".join(verdict_lines) + "</div>",
    ]
    figures = []
    for name, (folder, summary) in sweeps.items():
        which = f" ({name})" if many else ""
        figures += [
            al_heatmap(summary, f"Category_AL, SPEED-Bench's view{which} (hover: interval)"),
            oracle_curves(read_oracle(folder)),
            speedup_curves(read_speedup_model(folder)),
        ]
    if interactive := figures_html(figures):
        parts += ["<h2>Interactive figures (hover, zoom, click the legend)</h2>", interactive]
    for name, (folder, summary) in sweeps.items():
        which = f" ({html.escape(name)})" if many else ""
        if heatmaps := measured_heatmaps(summary):
            parts += [f"<h2>Acceptance length by category{which} (hover: interval)</h2>"]
            parts.append(heatmaps)
        if oracle := read_oracle(folder):
            parts += [f"<h2>Every draft length: the greedy oracle{which} (hover: interval)</h2>"]
            parts.append(oracle_heatmaps(oracle))
    if plots := report_plots(sweeps):
        parts += ["<h2>Plots</h2>", '<div class="plots">', *map(_image, plots), "</div>"]
    text = render(results) if text is None else text
    tables = markdown.markdown(text.split("\n", 1)[1], extensions=["tables"])
    parts += ["<h2>All tables</h2>", tables, "</body></html>"]
    return "\n".join(parts)


REPORT_FILES = ("report.md", "report.html")


def write_sweep_report(folder: Path) -> list[Path]:
    """``report.md`` and ``report.html`` of the sweep(s) in ``folder``, written into it.

    The measurements are on disk before this runs; a report that cannot be made is said in
    one line and costs nothing else.
    """
    try:
        text = render(folder)
        page = render_html(folder, text=text)
    except (OSError, ValueError) as exc:
        print(f"report not written: {exc}")
        return []
    paths = [folder / name for name in REPORT_FILES]
    paths[0].write_text(text)
    paths[1].write_text(page)
    return paths
