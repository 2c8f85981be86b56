"""`posenc report`: index.html and report.md hold every figure and the verification table; bad folders are named."""

from __future__ import annotations

import json
import re

import pytest

from posenc import available
from posenc.analysis import PROPERTY_NAMES
from posenc.plots import gallery
from posenc.report import build_report


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
