"""The guide's snippets run and print what the guide shows, the numbers it quotes are what `posenc verify
--all` measures, and the figures the docs show are those `posenc plot all` writes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).parents[1] / "docs" / "guide.md"
#: (code, the ```text block right after it or None)
SNIPPETS = re.findall(r"```python\n(.*?)```\n(?:\n```text\n(.*?)```)?", GUIDE.read_text(), re.DOTALL)


def test_the_guide_has_snippets():
    assert len(SNIPPETS) >= 8


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_guide_snippet_runs_and_prints_what_the_guide_shows(index, capsys):
    code, shown = SNIPPETS[index]
    # a snippet checks itself (assert) or shows its output; one that does neither proves nothing
    assert "assert " in code or shown, f"snippet {index} neither asserts nor shows its output"
    exec(compile(code, f"{GUIDE.name}[snippet {index}]", "exec"), {})
    printed = capsys.readouterr().out
    if shown:
        assert printed == shown
    else:
        assert printed == "", "a snippet that prints must show its output in a ```text block"


def test_every_figure_in_the_guide_exists():
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", GUIDE.read_text())
    assert figures
    missing = [path for path in figures if not (GUIDE.parent / path).is_file()]
    assert missing == []


def test_guide_has_a_section_for_every_registered_encoding():
    from posenc import available

    text = GUIDE.read_text()
    for name in available():
        assert re.search(rf"^## .*\(`{name}`\)$", text, re.MULTILINE), name


# --- the numbers the guide quotes are what `posenc verify --all` measures -----------------------

#: (encoding, property, the guide's text just before the number, the number as quoted): every number
#: the guide's "Verified" paragraphs and tables take from `posenc verify --all`.
QUOTED = [
    ("sinusoidal", "bounded", r"max \|PE\| = ", "1"),
    ("sinusoidal", "unique", "smallest distance between two codes ", "1.47"),
    ("sinusoidal", "translation_invariant", "spread over starts ", "3.3e-16"),
    ("sinusoidal", "closed_form", "| equals Σ_k cos(d·ω_k) | ", "3.3e-16"),
    ("sinusoidal", "linear_map", "fixed rotations | residual ", "1.2e-15"),
    ("sinusoidal", "relative", "unchanged by a shift | change ", "0.61"),
    ("sinusoidal", "decay", "far/near ", "0.50"),
    ("sinusoidal", "precision", "codes at positions up to 2^21 | ", "0.5"),
    ("learned", "unique", "| unique codes | ", "0.073"),
    ("learned", "translation_invariant", "depends only on distance | spread ", "1.03"),
    ("learned", "relative", "unchanged by a shift | ", "0.020"),
    ("learned", "decay", "far/near ", "2.0"),
    ("learned", "parameters", "| parameters | ", "16,384"),
    ("rope", "bounded", "| norms kept (a rotation) | ", "1.8e-15"),
    ("rope", "unique", "| unique rotations | ", "1.47"),
    ("rope", "linear_map", "R(k)·R(m) | residual ", "4.8e-16"),
    ("rope", "relative", "unchanged by a shift | ", "6.9e-16"),
    ("rope", "decay", "far/near ", "0.50"),
    ("rope", "precision", "cos/sin at positions up to 2^21 | ", "0.5"),
    ("alibi", "bounded", "over within T: ", "4.0"),
    ("alibi", "unique", "| unique per distance | ", "0.58"),
    ("alibi", "relative", "unchanged by a shift | ", "0"),
    ("alibi", "decay", "far/near ", "0.16"),
    ("alibi", "precision", "distances up to 2^21 | ", "0"),
    ("t5", "bounded", "| bounded | ", "1.0"),
    ("t5", "unique", "| unique per distance | ", "0"),
    ("t5", "relative", "unchanged by a shift | ", "0"),
    ("t5", "decay", "far/near ", "1.01"),
    ("t5", "parameters", "| parameters | ", "256"),
    ("swin", "unique", "unique per offset (", "0.020"),
    ("swin", "relative", "together inside the window (", "0"),
    ("swin", "parameters", "*explicit*); ", "1,352"),
    ("sinusoidal_2d", "unique", "every two codes differ (", "1.66"),
    ("sinusoidal_2d", "translation_invariant", "a function of the offset only (", "3.3e-16"),
    ("sinusoidal_2d", "relative", "move when the grid moves (", "0.53"),
    ("rope_axial", "bounded", "norms kept (", "1.8e-15"),
    ("rope_axial", "linear_map", "along the diagonal (", "6.6e-16"),
    ("rope_axial", "relative", "along either axis or both (", "6.2e-16"),
    ("rope_axial", "precision", "cos/sin within ", "0.5"),
    ("mrope", "linear_map", "composition ", "4.8e-16"),
    ("mrope", "precision", "all three axes, ", "0.5"),
    ("rope_mixed", "bounded", "norms kept (", "1.8e-15"),
    ("rope_mixed", "linear_map", "composition (", "3.6e-16"),
    ("rope_mixed", "relative", "*explicit* relative position (", "9.3e-16"),
    ("rope_mixed", "parameters", "learned parameters (", "512"),
    ("swin_v2", "relative", "move together (", "0"),
    ("swin_v2", "parameters", "3·H + H·h parameters (", "5,632"),
    ("shaw", "relative", "unchanged by a shift (", "0"),
    ("shaw", "parameters", "*explicit*); ", "264"),
    ("transformer_xl", "relative", "by a shift (", "0"),
    ("transformer_xl", "parameters", "*explicit*); ", "4,224"),
    ("deberta", "relative", "unchanged by a shift (", "0"),
    ("deberta", "parameters", "*explicit*); ", "12,416"),
    ("cope", "relative", "unchanged by a shift | ", "0"),
    ("cope", "parameters", "| parameters | ", "520"),
    ("forgetting", "relative", "unchanged by a shift | ", "0"),
    ("forgetting", "parameters", "| parameters | ", "132"),
    ("stick_breaking", "relative", "unchanged by a shift | ", "0"),
    ("stick_breaking", "parameters", "| parameters | ", "0"),
    ("path", "relative", "unchanged by a shift | ", "0"),
    ("path", "parameters", "| parameters | ", "1,156"),
    ("fire", "bounded", "over within T: ", "1.0000001"),
    ("fire", "unique", "| unique per distance | ", "5.8e-4"),
    ("fire", "relative", "unchanged by a shift | ", "0.058"),
    ("fire", "decay", "far/near ", "1.006"),
    ("fire", "parameters", "+ h + 2 | ", "330"),
    ("kerple", "bounded", "over within T: ", "1.28"),
    ("kerple", "unique", "| unique per distance | ", "0.012"),
    ("kerple", "relative", "unchanged by a shift | ", "0"),
    ("kerple", "decay", "far/near ", "0.33"),
    ("kerple", "parameters", "| parameters 2·h | ", "16"),
    ("kerple", "precision", "distances up to 2^21 | ", "0.5"),
    ("sandwich", "bounded", "over within T: ", "1.24"),
    ("sandwich", "unique", "| unique per distance | ", "8.8e-4"),
    ("sandwich", "relative", "unchanged by a shift | ", "0"),
    ("sandwich", "decay", "far/near ", "0.017"),
    ("sandwich", "parameters", "| parameters | ", "0"),
    ("sandwich", "precision", "distances up to 2^21 | ", "0.5"),
    ("golden_gate", "bounded", "norms kept (", "1.8e-15"),
    ("golden_gate", "relative", "moves (", "3.5e-15"),
    ("string", "bounded", "norms kept (", "2.7e-15"),
    ("string", "linear_map", "R(k + m) (", "1.1e-15"),
    ("string", "relative", "*explicit* relative position (", "9.9e-16"),
    ("string", "parameters", "learned parameters (", "528"),
    ("liere", "bounded", "norms kept (", "3.7e-13"),
    ("liere", "relative", "moves the logits (", "0.75"),
    ("liere", "parameters", "learned parameters (", "224"),
    ("comrope", "bounded", "norms kept (", "6.9e-13"),
    ("comrope", "relative", "when the grid moves (", "2.8e-14"),
    ("comrope", "parameters", "learned parameters (", "120"),
    ("mochi", "bounded", "norms kept (", "1.8e-15"),
    ("mochi", "relative", "*explicit* relative position (", "7.8e-16"),
    ("mochi", "parameters", "learned parameters (", "768"),
    ("dinov3", "bounded", "norms kept (", "8.9e-16"),
    ("dinov3", "relative", "grid moves (", "2.6e-16"),
    ("dinov3", "precision", "cos/sin within ", "0.5"),
    ("ltx", "bounded", "norms kept (", "8.9e-16"),
    ("ltx", "relative", "*explicit* relative position (", "3.8e-16"),
    ("cosmos", "bounded", "norms kept (", "1.8e-15"),
    ("cosmos", "relative", "*explicit* relative position (", "3.0e-16"),
    ("cosmos", "precision", "cos/sin within ", "0.5"),
    ("videorope", "bounded", "norms kept (", "8.9e-16"),
    ("videorope", "relative", "*explicit* relative position (", "3.8e-16"),
    ("hope", "bounded", "norms kept (", "8.9e-16"),
    ("hope", "relative", "*explicit* relative position (", "2.8e-16"),
    ("xdrope", "bounded", "norms kept (", "8.9e-16"),
    ("xdrope", "relative", "*explicit* relative position (", "3.3e-16"),
    ("ernie_3d", "bounded", "norms kept (", "8.9e-16"),
    ("ernie_3d", "relative", "*explicit* relative position (", "3.8e-16"),
    ("pope", "bounded", "softplus of the content (", "3.9"),
    ("pope", "relative", "*explicit* relative position (", "6.8e-16"),
    ("pope", "parameters", "learned parameters (", "64"),
    ("fope", "bounded", "norms not kept (", "1.03"),
    ("fope", "relative", "at its initial noise (", "0.43"),
    ("fope", "parameters", "learned parameters (", "256"),
    ("nope", "relative", "unchanged by a shift (", "0"),
]


def _section(name: str) -> str:
    """The guide's section of encoding ``name``, its whitespace runs made single spaces."""
    text = GUIDE.read_text()
    start = re.search(rf"^## .*\(`{name}`\)$", text, re.MULTILINE).end()
    end = text.find("\n## ", start)
    return " ".join(text[start : end if end != -1 else None].split())


def _as_quoted(value: float, quoted: str) -> float:
    """``value`` rounded as ``quoted`` is written: an integer exactly, else to its decimals or digits."""
    text = quoted.replace(",", "")
    mantissa, _, _ = text.partition("e")
    if "." not in mantissa:
        return value
    decimals = len(mantissa.split(".")[1])
    return float(f"{value:.{decimals}e}" if "e" in text else f"{value:.{decimals}f}")


def test_every_encoding_s_quoted_numbers_are_listed():
    from posenc import available

    assert {name for name, *_ in QUOTED} == set(available())


@pytest.mark.parametrize(("name", "claim", "before", "quoted"), QUOTED)
def test_guide_quotes_the_number_posenc_verify_measures(report_dir, name, claim, before, quoted):
    # report_dir: `posenc report` run once for the suite; its verification.json is `verify --all --json`
    import json

    assert before + quoted in _section(name), f"the {name} section no longer says {before + quoted!r}"
    measured = json.loads((report_dir / "verification.json").read_text())[name][claim]["value"]
    assert _as_quoted(measured, quoted) == float(quoted.replace(",", "")), (name, claim, measured)


# --- the figures the docs show are what `posenc plot all` writes --------------------------------

DOCS = [GUIDE.parent.parent / "README.md", *sorted(GUIDE.parent.glob("*.md"))]
FIGURES = GUIDE.parent / "figures"


def _gallery_files() -> set[str]:
    from posenc.plots import gallery

    return {f"{spec.name}.png" for name in gallery.names() for spec in gallery.figures(name)}


def test_every_figure_the_docs_show_is_one_posenc_plot_writes():
    shown = {name for doc in DOCS for name in re.findall(r"figures/([\w.-]+\.png)", doc.read_text())}
    assert shown and shown <= _gallery_files()


def test_docs_figures_holds_exactly_what_posenc_plot_all_writes():
    assert {path.name for path in FIGURES.iterdir()} == _gallery_files()


@pytest.fixture(scope="module")
def comparison():
    """The changes the comparison figure is drawn from, and that figure, built once."""
    from posenc.plots import gallery

    drawn = {}
    draw = gallery.logit_shift

    def recording(changes, **kwargs):
        drawn.update(changes)
        return draw(changes, **kwargs)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gallery, "logit_shift", recording)
        [spec] = [s for s in gallery.figures("comparison") if s.name == "comparison-logit-shift"]
        figure = spec.build()
    return drawn, figure


def test_the_comparison_figure_is_drawn_from_every_registered_encoding(comparison):
    from posenc import available

    drawn, _ = comparison
    assert list(drawn) == available()


def test_the_docs_comparison_figure_has_a_row_for_every_registered_encoding(comparison):
    # its height grows with the rows (one per encoding and shift): the shape tells a figure drawn
    # before encodings were added from one drawn now, where the pixels would be too brittle to compare
    _, figure = comparison
    header = (FIGURES / "comparison-logit-shift.png").read_bytes()[16:24]
    width, height = int.from_bytes(header[:4], "big"), int.from_bytes(header[4:], "big")
    inches_wide, inches_high = figure.get_size_inches()
    assert abs(height - width * inches_high / inches_wide) <= 1, (width, height, figure.get_size_inches())


def test_the_architecture_walk_throughs_are_the_plugins_the_tests_install():
    from tests.test_plugins import EXAMPLES

    text = (Path(__file__).parents[1] / "docs" / "architecture.md").read_text()
    walked = set(re.findall(r"`docs/plugins/(\w+)`", text))
    assert walked == {path.name for path in EXAMPLES} == {"distance_decay", "increment"}
