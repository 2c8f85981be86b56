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
from posenc.report import _figure_block, _verdict_class, build_report, properties_table, verification_table


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
