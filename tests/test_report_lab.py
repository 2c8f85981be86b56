"""The lab's part of the report reads well: run settings collapsed and written as name=value, counts in
words that agree with them, and ``posenc lab report`` rendered on a terminal rather than printed as
escaped Markdown."""

from __future__ import annotations

import io
import sys

import pytest

from posenc.document import Bullets, Details, to_html
from posenc.lab.presets import PRESETS, run_config
from posenc.lab.records import Records
from posenc.lab.report import comparison_blocks, comparison_markdown, print_markdown
from posenc.lab.run_settings import SUMMARY
from tests.lab.helpers import FAKE_CORPUS, record_algorithmic_run, record_run


@pytest.fixture(scope="module")
def smoke_db(tmp_path_factory):
    """The smoke preset (one layer, two heads): lm runs of t5, alibi and nope, and copy runs of t5 and
    alibi (T5's max_distance differs between the two tasks), recorded without training."""
    path = tmp_path_factory.mktemp("lab") / "records.sqlite"
    smoke = PRESETS["smoke"]
    with Records(path) as records:
        for encoding in ("t5", "alibi", "nope"):
            config = run_config(smoke, "lm", encoding, 0, corpus_sha256=FAKE_CORPUS["sha256"])
            record_run(records, "smoke", config, dict.fromkeys(config.eval_lengths, 2.0))
        for encoding in ("t5", "alibi"):
            config = run_config(smoke, "copy", encoding, 0)
            record_algorithmic_run(records, "smoke", config, dict.fromkeys(config.eval_lengths, 0.5))
    return path


def _settings(db) -> Details:
    [details] = [block for block in comparison_blocks(db) if isinstance(block, Details)]
    return details


def test_run_settings_are_collapsed_under_a_summary(smoke_db):
    details = _settings(smoke_db)
    assert details.summary == SUMMARY
    html = to_html([details])
    assert html.startswith(f"<details><summary>{SUMMARY.replace(chr(39), '&#x27;')}</summary><ul>")
    assert "<details open" not in html


def test_encoding_arguments_are_name_value_pairs_not_dicts(smoke_db):
    # each task's line ended in `alibi` {'n_heads': 4, 'symmetric': False}; `t5` {…}: a wall of dicts
    [bullets] = _settings(smoke_db).blocks
    assert isinstance(bullets, Bullets)
    items = list(bullets.items)
    assert "`alibi`: n_heads=2, symmetric=False" in items
    assert "`nope`: no arguments" in items
    [t5] = [item for item in items if item.startswith("`t5`")]
    assert t5 == (
        "`t5`: bidirectional=False, max_distance=8, n_heads=2, num_buckets=8 on `lm`; "
        "bidirectional=False, max_distance=5, n_heads=2, num_buckets=8 on `copy`"
    )
    assert not any("{" in item or "'" in item for item in items)


def test_a_model_of_one_layer_is_said_in_the_singular(smoke_db):
    [bullets] = _settings(smoke_db).blocks
    [lm] = [item for item in bullets.items if item.startswith("`lm`")]
    assert "d_model=32, 1 layer, 2 heads;" in lm and "1 layers" not in comparison_markdown(smoke_db)


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_lab_report_on_a_terminal_is_rendered_not_printed_as_escaped_markdown(smoke_db, monkeypatch):
    # `posenc lab report` printed "\_", "| --- |" and backticks on a terminal
    markdown = comparison_markdown(smoke_db)
    assert "\\_" in markdown or "`" in markdown  # what a terminal used to show
    monkeypatch.setattr(sys, "stdout", _Terminal())
    print_markdown(markdown)
    shown = sys.stdout.getvalue()
    assert "Length generalisation, measured" in shown and "n_heads=2, symmetric=False" in shown
    assert "`" not in shown and "\\_" not in shown and "|---" not in shown and "## " not in shown


def test_lab_report_into_a_file_or_pipe_is_the_markdown_itself(smoke_db, capsys):
    markdown = comparison_markdown(smoke_db)
    print_markdown(markdown)
    assert capsys.readouterr().out == markdown + "\n"


def test_the_lab_report_command_renders_on_a_terminal(smoke_db, tmp_path, monkeypatch):
    from posenc.cli import main

    monkeypatch.setattr(sys, "stdout", _Terminal())
    assert main(["lab", "report", "--db", str(smoke_db), "--out", str(tmp_path)]) == 0
    shown = sys.stdout.getvalue()
    assert "Length generalisation, measured" in shown
    assert "|---" not in shown and "## " not in shown and "\\_" not in shown
