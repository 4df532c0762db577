"""The HTML report's heatmap cells: colour by value, the interval on hover."""

from __future__ import annotations

import re

from speedbench.report.html import _color, heatmap


def test_cells_are_coloured_from_low_to_high_and_carry_their_hover_text():
    table = heatmap("AL", ["k=1", "k=2"], {"coding": [(1.5, "n = 3"), (2.5, "95% CI [2, 3]")]})
    assert "<caption>AL</caption>" in table
    assert f'style="background:{_color(1.5, 1.5, 2.5)}" title="n = 3">1.50<' in table
    assert 'title="95% CI [2, 3]">2.50<' in table
    assert _color(1.5, 1.5, 2.5) == "#440154"  # the ramp's low end
    assert _color(2.5, 1.5, 2.5) == "#fde725"  # its high end
    assert _color(None, 0, 1) == "#bbb"  # an undefined figure is grey


def test_text_is_escaped():
    table = heatmap("<b>", ["<k>"], {"a&b": [(None, '"x"')]})
    assert "&lt;b&gt;" in table and "a&amp;b" in table and 'title="&quot;x&quot;">-<' in table


def test_the_interactive_heatmap_holds_each_cell_and_its_hover_text():
    from tests.unit.pipeline.test_stages import MODEL, SUMMARY

    from speedbench.report.interactive import al_heatmap, figures_html, speedup_curves

    fig = al_heatmap(SUMMARY, "AL")
    (trace,) = fig.data
    assert list(trace.y) == ["coding", "qa", "all (Average_AL)"]
    assert list(trace.x) == ["ngram-k2 bs1"]
    assert [row[0] for row in trace.z] == [2.25, 1.4, 1.9]
    assert trace.text[0][0] == "AL 2.250"
    curves = speedup_curves(MODEL)
    line, measured = curves.data
    assert (list(line.x), list(line.y)) == ([0, 2, 3], [1.0, 1.3, 1.25])
    assert (list(measured.x), list(measured.y)) == ([3], [1.2])
    assert measured.text[0] == "predicted without it 1.250x, error +4.2 %"
    page = figures_html([fig, None, curves])
    # Plotly's script once, inline: the page fetches nothing.
    assert page.count("* plotly.js v") == 1 and page.count("Plotly.newPlot(") == 2
    assert not re.search(r"""<script[^>]+src=""", page) and len(page) > 3_000_000


def test_a_sweep_folder_and_a_folder_of_sweeps_get_the_same_sections(tmp_path):
    from tests.unit.pipeline.test_stages import SUMMARY

    from speedbench.report.text import load_sweeps, render

    (tmp_path / "mine").mkdir()
    SUMMARY.write(tmp_path / "mine" / "summary.json")
    one, above = render(tmp_path / "mine"), render(tmp_path)
    assert list(load_sweeps(tmp_path)) == list(load_sweeps(tmp_path / "mine")) == ["mine"]
    for text in (one, above):
        assert "## Acceptance length by category (qualitative)" in text
        assert "## Throughput and speedup (mine)" in text
        assert "| ngram-k2 | qualitative | 1 | 200.0 | 160.0 | - |" in text
        assert (
            "## Latency (mine)" in text and "| none | qualitative | 1 | 200.0 | 200.0 | - |" in text
        )
