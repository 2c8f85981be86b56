"""Records: one row per run, written whole in one transaction, never twice."""

from __future__ import annotations

import json
import sqlite3

import pytest

from posenc.lab.presets import PRESETS, Overrides, run_config
from posenc.lab.records import Records
from posenc.lab.report import comparison_markdown


def _write(records: Records, config_hash: str, value: float) -> bool:
    config = {"task": "copy", "encoding": "rope", "seed": 0}
    return records.write(
        config_hash=config_hash,
        preset="smoke",
        config=config,
        status="done",
        metrics={"value": value},
        timings={"seconds_per_step": 0.1},
        versions={"torch": "x"},
        corpus=None,
    )


def test_a_run_is_recorded_once(tmp_path):
    with Records(tmp_path / "r.sqlite") as records:
        assert _write(records, "a" * 64, 1.0)
        assert not _write(records, "a" * 64, 2.0)
        assert records.finished("a" * 64) and not records.finished("b" * 64)
        rows = records.rows()
    assert len(rows) == 1 and rows[0]["metrics"] == {"value": 1.0}


def test_unknown_status_is_refused(tmp_path):
    with Records(tmp_path / "r.sqlite") as records, pytest.raises(ValueError, match="status must be one of"):
        records.write(
            config_hash="c",
            preset="p",
            config={"task": "t", "encoding": "e", "seed": 0},
            status="half-done",
            metrics={},
            timings={},
            versions={},
            corpus=None,
        )


def test_config_hash_is_canonical_and_changes_with_the_config():
    smoke = PRESETS["smoke"]
    first = run_config(smoke, "copy", "rope", 0)
    assert first.config_hash == run_config(smoke, "copy", "rope", 0).config_hash
    assert first.config_hash != run_config(smoke, "copy", "rope", 1).config_hash
    assert (
        first.config_hash != run_config(smoke, "copy", "rope", 0, overrides=Overrides(steps=13)).config_hash
    )


def test_no_records_gives_no_table(tmp_path):
    assert comparison_markdown(tmp_path / "missing.sqlite") is None
    Records(tmp_path / "empty.sqlite").close()
    assert comparison_markdown(tmp_path / "empty.sqlite") is None


def test_a_column_that_is_not_valid_json_is_refused_naming_the_database_the_run_and_the_column(tmp_path):
    db = tmp_path / "r.sqlite"
    with Records(db) as records:
        _write(records, "a" * 64, 1.0)
    with sqlite3.connect(db) as connection:
        connection.execute("UPDATE runs SET metrics = 'not json'")
    connection.close()
    with Records(db, readonly=True) as records, pytest.raises(ValueError) as error:
        records.rows()
    message = str(error.value)
    assert str(db) in message and "a" * 64 in message and "metrics" in message and "not valid JSON" in message


@pytest.mark.parametrize(
    ("column", "key", "value", "says"),
    [
        ("metrics", None, {}, "has metrics without 'eval'"),
        ("metrics", "positional_parameters", "3", "metrics whose 'positional_parameters' is not an integer"),
        ("metrics", "relative_position", {}, "relative_position has no verdict"),
        ("metrics", "eval", {"x": {"status": "ok"}}, "eval length 'x' is not an integer"),
        ("metrics", "eval", {"16": {"bpb": 1.0}}, "eval entry at length 16 has no status"),
        ("metrics", "eval", {"16": {"status": "ok", "bpb": 1.0}}, "eval entry at length 16 lacks 'curve'"),
        ("config", "train_length", None, "config whose 'train_length' is not an integer, got None"),
        ("timings", None, {}, "has timings without 'seconds_per_step'"),
        ("versions", None, [], "has a versions column that is not a JSON object"),
    ],
)
def test_report_rows_refuse_a_finished_run_lacking_what_the_report_reads(tmp_path, column, key, value, says):
    # valid JSON (rows() decodes it), but the report would stop half-way with a KeyError
    from tests.lab.helpers import FAKE_CORPUS, record_run

    db = tmp_path / "r.sqlite"
    config = run_config(PRESETS["smoke"], "lm", "rope", 0, corpus_sha256=FAKE_CORPUS["sha256"])
    with Records(db) as records:
        record_run(records, "smoke", config, dict.fromkeys(config.eval_lengths, 2.0))
        [row] = records.report_rows()  # whole, it is read
    damaged = value if key is None else {**row[column], key: value}
    with sqlite3.connect(db) as connection:
        connection.execute(f"UPDATE runs SET {column} = ?", (json.dumps(damaged),))
    connection.close()
    with Records(db, readonly=True) as records:
        assert len(records.rows()) == 1
        with pytest.raises(ValueError) as error:
            records.report_rows()
    message = str(error.value)
    assert str(db) in message and config.config_hash in message and "(lm, rope, seed 0)" in message
    assert says in message, message


def test_report_rows_read_a_run_that_is_not_applicable_with_its_empty_metrics(tmp_path):
    with Records(tmp_path / "r.sqlite") as records:
        records.write(
            config_hash="b" * 64,
            preset="smoke",
            config={"task": "lm", "encoding": "mrope", "seed": -1},
            status="not applicable",
            metrics={},
            timings={},
            versions={},
            corpus=None,
            reason="needs coordinates",
        )
        assert [row["metrics"] for row in records.report_rows()] == [{}]


def test_opening_a_folder_or_a_missing_file_read_only_says_which(tmp_path):
    with pytest.raises(ValueError, match="is a folder, not a lab database"):
        Records(tmp_path, readonly=True)
    with pytest.raises(ValueError, match="does not exist"):
        Records(tmp_path / "missing.sqlite", readonly=True)
    assert list(tmp_path.iterdir()) == []
