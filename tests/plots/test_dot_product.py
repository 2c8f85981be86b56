"""The flat-line figure draws exactly the numbers the analysis measured."""

from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from posenc.analysis import closed_form_dot, dot_by_distance
from posenc.functional import sinusoidal_table
from posenc.plots import flat_lines


def lines_by_gid(figure: Figure) -> dict:
    return {line.get_gid(): line for line in figure.axes[0].get_lines()}


def test_one_line_per_distance_holding_the_dot_by_distance_values():
    dots = dot_by_distance(sinusoidal_table(15, 8), [1, 3, 5, 7, 9, 11, 13])
    figure = flat_lines(dots)
    assert isinstance(figure, Figure)
    lines = lines_by_gid(figure)
    assert sorted(lines) == sorted(f"distance-{d}" for d in dots)
    for distance, values in dots.items():
        x, y = lines[f"distance-{distance}"].get_data()
        assert list(x) == list(range(15 - distance))
        np.testing.assert_array_equal(y, values.numpy())


def test_the_closed_form_is_drawn_dashed_at_its_value():
    dots = dot_by_distance(sinusoidal_table(20, 16), [2, 7])
    expected = {d: float(closed_form_dot(d, 16)) for d in dots}
    lines = lines_by_gid(flat_lines(dots, expected))
    for distance, value in expected.items():
        dashed = lines[f"expected-{distance}"]
        assert dashed.get_linestyle() == "--"
        assert set(dashed.get_ydata()) == {value}
        assert dashed.get_color() == lines[f"distance-{distance}"].get_color()
