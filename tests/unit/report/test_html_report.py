"""The HTML report's heatmap cells: colour by value, the interval on hover."""

from __future__ import annotations

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
