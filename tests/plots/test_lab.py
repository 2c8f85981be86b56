"""The lab's figures: a legend that identifies every line, one colour per encoding in every panel."""

from __future__ import annotations

from matplotlib.colors import to_hex

from posenc.plots.lab import accuracy_against_length, bits_per_position
from tests.plots.artists import REPORT_COLUMN_PX, by_gid, cut_texts, labelled

LINE = ([3, 6], [0.5, 0.2], [0.4, 0.1], [0.6, 0.3])
#: The smoke preset's lm encodings: more than matplotlib's 10 default colours.
LM_ENCODINGS = [
    "sinusoidal",
    "learned",
    "rope",
    "t5",
    "alibi",
    "cope",
    "deberta",
    "fire",
    "kerple",
    "nope",
    "sandwich",
    "shaw",
    "transformer_xl",
]


def _look(line) -> tuple[str, str]:
    return to_hex(line.get_color()), line.get_linestyle()


def _legend(figure) -> dict[str, tuple[str, str]]:
    (legend,) = figure.legends
    return {
        text.get_text(): _look(handle)
        for text, handle in zip(legend.get_texts(), legend.legend_handles, strict=True)
    }


def test_an_encoding_has_one_colour_in_every_panel_and_its_legend_entry():
    # copy was run with rope and alibi, reverse with alibi only (two `posenc lab run --task …` calls
    # into one database): each panel used to take colours from its own cycle, alibi blue in reverse
    figure = accuracy_against_length(
        {"copy": (3, {"rope": LINE, "alibi": LINE}), "reverse": (3, {"alibi": LINE})}
    )
    assert labelled(figure)
    drawn, legend = by_gid(figure), _legend(figure)
    assert list(legend) == ["rope", "alibi"]
    assert _look(drawn["copy-alibi"]) == _look(drawn["reverse-alibi"]) == legend["alibi"]
    assert _look(drawn["copy-rope"]) == legend["rope"] != legend["alibi"]


def test_the_legend_lists_encodings_missing_from_the_first_panel():
    figure = accuracy_against_length(
        {"copy": (3, {"alibi": LINE}), "reverse": (3, {"rope": LINE, "alibi": LINE})}
    )
    drawn, legend = by_gid(figure), _legend(figure)
    assert list(legend) == ["alibi", "rope"]
    assert _look(drawn["reverse-rope"]) == legend["rope"] != legend["alibi"]


def test_every_encoding_of_the_bits_per_position_figure_has_a_colour_of_its_own():
    curve = ([0, 1, 2], [7.0, 7.1, 7.2], [6.9, 7.0, 7.1], [7.1, 7.2, 7.3])
    figure = bits_per_position({name: curve for name in LM_ENCODINGS}, train_length=1)
    lines = [by_gid(figure)[f"encoding-{name}"] for name in LM_ENCODINGS]
    assert len({to_hex(line.get_color()) for line in lines}) == len(LM_ENCODINGS)
    assert [_look(line)[1] for line in lines] == ["-"] * 10 + ["--"] * 3  # the lighter shades are dashed
    legend = {
        text.get_text(): _look(handle)
        for text, handle in zip(
            figure.axes[0].get_legend().get_texts(), figure.axes[0].get_legend().legend_handles, strict=True
        )
    }
    assert legend == {name: _look(line) for name, line in zip(LM_ENCODINGS, lines, strict=True)}


def test_three_tasks_are_drawn_two_panels_a_row_to_fit_the_report():
    # three panels in a row made a figure of 1562 px, shown at two thirds of its size or less
    from posenc.report import DPI

    figure = accuracy_against_length({task: (3, {"rope": LINE}) for task in ("copy", "reverse", "sort")})
    assert labelled(figure) and cut_texts(figure) == []
    rows = {round(axes.get_position().y0, 3) for axes in figure.axes if axes.get_visible()}
    assert len(rows) == 2 and figure.get_figwidth() * DPI <= REPORT_COLUMN_PX
