"""`posenc report`: index.html and report.md hold every figure and the verification table; bad folders are named."""

from __future__ import annotations

import json
import re

import pytest

from posenc import available
from posenc.analysis import PROPERTY_NAMES
from posenc.document import Paragraph
from posenc.encodings import ENCODINGS, PositionalEncoding
from posenc.plots import gallery
from posenc.plots.gallery import FigureSpec
from posenc.report import (
    _encoding_summary,
    _figure_block,
    _verdict_class,
    build_report,
    first_sentence,
    png_size,
    properties_table,
    verification_table,
)


def test_every_gallery_figure_is_written_and_linked_from_both_pages(report_dir):
    expected = {f"{spec.name}.png" for name in gallery.names() for spec in gallery.figures(name)}
    written = {path.name for path in (report_dir / "figures").glob("*.png")}
    assert written == expected
    html = (report_dir / "index.html").read_text()
    markdown = (report_dir / "report.md").read_text()
    assert set(re.findall(r'<img src="figures/([^"]+)"', html)) == expected
    assert set(re.findall(r"\]\(figures/([^)]+)\)", markdown)) == expected


def test_verification_table_has_every_encoding_and_property(report_dir):
    verification = json.loads((report_dir / "verification.json").read_text())
    assert sorted(verification) == available()
    for result in verification.values():
        assert list(result) == list(PROPERTY_NAMES)
    markdown = (report_dir / "report.md").read_text()
    table = markdown.split("## Verification", 1)[1].split("##", 1)[0]
    for name in available():
        assert re.search(rf"^\| {name} \|", table, re.MULTILINE), name
    assert "| sinusoidal | additive | holds 1 |" in table


def test_without_lab_records_the_lab_section_is_left_out(report_dir):
    assert "Length generalisation" not in (report_dir / "report.md").read_text()


def test_an_unwritable_report_folder_is_named(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="report folder .*file/report.* is not writable"):
        build_report(blocker / "report", progress=False)


class Unbuildable(PositionalEncoding):
    """An encoding whose constructor raises."""

    def __init__(self) -> None:
        raise ValueError("needs a table file")


def test_an_encoding_that_raises_shows_errors_and_the_others_are_measured(monkeypatch):
    # used to take down the whole table: properties(specimen(name)) raised for every encoding
    monkeypatch.setitem(ENCODINGS, "unbuildable", Unbuildable)
    table = verification_table(["sinusoidal", "unbuildable"])
    rows = {row[0]: row for row in properties_table(table).rows}
    assert set(rows["unbuildable"][2:-1]) == {"error ValueError"}
    assert rows["sinusoidal"][2] == "holds 1"
    assert _verdict_class("error ValueError") == "fails"  # coloured as a failure, never as a pass


def test_a_figure_that_raises_is_named_in_place_of_its_image(tmp_path):
    def explode():
        raise RuntimeError("no view")

    block = _figure_block(FigureSpec("x-broken", "Broken", "Never drawn.", explode), tmp_path)
    assert isinstance(block, Paragraph) and "x-broken could not be drawn: RuntimeError: no view" in block.text


def _page(report_dir) -> str:
    return (report_dir / "index.html").read_text()


def test_the_page_opens_with_contents_linking_every_section_and_encoding(report_dir):
    # the sections used to be a row of links with no space between them, running off the page
    page = _page(report_dir)
    contents = re.search(r'<nav class="toc".*?</nav>', page, re.DOTALL).group(0)
    targets = re.findall(r'<a href="#([^"]+)">', contents)
    assert targets[:2] == ["verification", "encodings"] and targets[-2:] == ["figures-comparison", "reasons"]
    assert targets[2:-2] == [f"figures-{name}" for name in available()]
    for target in targets:
        assert page.count(f'id="{target}"') == 1, target


def test_every_id_on_the_page_is_unique(report_dir):
    # each section and its own heading carried the same id
    ids = re.findall(r'\bid="([^"]+)"', _page(report_dir))
    assert [name for name in set(ids) if ids.count(name) > 1] == []


def test_every_figure_links_to_its_file_and_is_shown_at_its_drawn_size(report_dir):
    # figures drawn at ~990 px were squeezed two a row into ~560 px, and no click opened them
    figures = re.findall(
        r'<figure><a href="([^"]+)"><img src="([^"]+)" alt="[^"]*" width="(\d+)" height="(\d+)"></a>',
        _page(report_dir),
    )
    assert len(figures) == len(list((report_dir / "figures").glob("*.png")))
    for link, source, width, height in figures:
        assert link == source and png_size(report_dir / source) == (int(width), int(height))
    assert "max-width: 48%" not in _page(report_dir)


def test_every_table_scrolls_sideways_inside_its_own_box(report_dir):
    page = _page(report_dir)
    assert page.count("<table>") >= 2
    assert page.count('<div class="table-scroll" role="region" tabindex="0"><table>') == page.count("<table>")
    assert re.search(r"\.table-scroll \{[^}]*overflow-x: auto", page)


def test_an_encodings_description_is_its_whole_first_sentence():
    # Kerple's stopped at the end of the docstring's first line, "… or"
    assert _encoding_summary("kerple").startswith(
        "Kerple's bias (Chi et al., 2022, https://arxiv.org/abs/2205.09921): −r1·log(1 + r2·|i − j|) or "
        "−r1·|i − j|^r2 per head, r1 and r2 learned. Kind: bias;"
    )
    for name in available():
        assert re.search(r"[.!?)] Kind: ", _encoding_summary(name)), name


@pytest.mark.parametrize(
    ("docstring", "sentence"),
    [
        ("One line. Second sentence.", "One line."),
        (
            "A bias (Chi et al., 2022,\n    https://x.org/a.b): f(i − j) per\n    head.\n\nMore.",
            "A bias (Chi et al., 2022, https://x.org/a.b): f(i − j) per head.",
        ),
        ("Codes, e.g. sin and cos. Next.", "Codes, e.g. sin and cos."),
        ("No full stop at all", "No full stop at all"),
        ("Version 2.5 of it.\nThen more.", "Version 2.5 of it."),
        ("", ""),
    ],
)
def test_first_sentence_is_never_cut_inside_a_sentence(docstring, sentence):
    assert first_sentence(docstring) == sentence


def test_rest_literals_in_a_description_are_shown_as_code_not_backticks(report_dir):
    # the learned encoding's ``[max_len, d_model]`` showed its backticks
    assert "A trainable table `[max_len, d_model]` indexed" in _encoding_summary("learned")
    assert first_sentence("Uses :class:`~posenc.X` and ``y``.") == "Uses `posenc.X` and `y`."
    assert "<p>A trainable table <code>[max_len, d_model]</code> indexed" in _page(report_dir)


def test_parameter_counts_are_integers_with_thousands_separators_everywhere(report_dir):
    # the reasons showed 1.638e+04 beside the table's 16384
    markdown = (report_dir / "report.md").read_text()
    assert "| learned | additive |" in markdown and "| holds 16,384 |" in markdown
    assert "| learned | parameters | 16,384 | count = formula | holds | L·d: 16,384 counted" in markdown
    assert "1.638e+04" not in markdown and "16384" not in markdown


def test_no_figure_is_wider_than_the_pages_column(report_dir):
    # the rotating vector was 1540 px wide and the lab's panels 1562: shown at two thirds or less
    assert {
        p.name: png_size(p)[0] for p in (report_dir / "figures").glob("*.png") if png_size(p)[0] > 1330
    } == {}


def test_png_size_refuses_a_file_that_is_not_a_png(tmp_path):
    other = tmp_path / "figure.png"
    other.write_bytes(b"GIF89a" + bytes(30))
    with pytest.raises(ValueError, match=r"figure\.png' is not a PNG file \(it starts with b'GIF89a"):
        png_size(other)
