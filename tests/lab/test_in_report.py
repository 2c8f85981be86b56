"""`posenc report` with lab records: the measured table and the bits-per-position figure appear on both pages."""

from __future__ import annotations

import posenc.report
from posenc.report import build_report


def test_report_includes_the_lab_table_and_figure(smoke_db, tmp_path, monkeypatch):
    # the encodings' own figures are checked by the report tests; here only the lab's section is built
    monkeypatch.setattr(posenc.report, "_gallery", lambda encodings=None: {})
    summary = build_report(tmp_path, lab_db=smoke_db, progress=False)
    assert summary["lab"] is True
    markdown = (tmp_path / "report.md").read_text()
    html = (tmp_path / "index.html").read_text()
    assert "## Length generalisation, measured" in markdown
    assert "Seed 004's table, measured" in markdown
    assert "](figures/lab-bits-per-position.png)" in markdown
    assert (tmp_path / "figures" / "lab-bits-per-position.png").stat().st_size > 1000
    lab_section = html.split('<section id="lab">', 1)[1].split("</section>", 1)[0]
    assert "<table>" in lab_section and "cannot run" in lab_section
    assert '<img src="figures/lab-bits-per-position.png"' in lab_section
