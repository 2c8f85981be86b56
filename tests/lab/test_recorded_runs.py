"""The recorded gpu run in docs/lab/ is what docs/LAB.md shows: every table line and note the report
prints from those records appears in the document, so a change to the report or to the records that
alters them shows here."""

from __future__ import annotations

from pathlib import Path

from posenc.lab.presets import PRESETS, run_config
from posenc.lab.records import Records
from posenc.lab.report import comparison_markdown

DOCS = Path(__file__).parents[2] / "docs"
RECORDS = DOCS / "lab" / "gpu-records.sqlite"


def _table_and_note_lines(markdown: str) -> list[str]:
    return [
        line
        for line in markdown.splitlines()
        if line.startswith(("| ", "Learned at L", "Tasks most", "Not recorded"))
    ]


def test_the_gpu_tables_in_the_document_are_those_of_its_records():
    shown = (DOCS / "LAB.md").read_text()
    lines = _table_and_note_lines(comparison_markdown(RECORDS, preset="gpu"))
    assert len(lines) > 20
    assert [line for line in lines if line not in shown] == []


def test_the_recorded_gpu_runs_are_runs_of_the_gpu_preset_as_committed():
    with Records(RECORDS, readonly=True) as records:
        rows = records.rows(status="done")
    assert len(rows) == 69
    for row in rows:
        config = run_config(PRESETS["gpu"], row["task"], row["encoding"], row["seed"])
        assert row["config_hash"] == config.config_hash, (row["task"], row["encoding"], row["seed"])
