"""Bad requests are refused before training, with messages that name the value and the valid choices."""

from __future__ import annotations

import os
import sqlite3

import pytest

from posenc.encodings import available
from posenc.lab.presets import PRESETS, check_eval_lengths
from posenc.lab.records import SCHEMA_VERSION, Records
from posenc.lab.sweep import plan
from posenc.lab.tasks import TASKS
from tests.lab.helpers import lab


def test_unknown_task_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown task 'sorting'") as error:
        plan("smoke", tasks="sorting")
    assert all(task in str(error.value) for task in TASKS)


def test_unknown_preset_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown preset 'tpu'") as error:
        plan("tpu")
    assert all(name in str(error.value) for name in PRESETS)


def test_unknown_encoding_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown encoding 'xpos'") as error:
        plan("smoke", encodings="rope,xpos")
    assert all(name in str(error.value) for name in available())


def test_evaluation_length_shorter_than_training_is_refused():
    with pytest.raises(ValueError, match="evaluation length 8 is shorter than the training length L=16"):
        check_eval_lengths(16, (8, 16, 32))
    with pytest.raises(ValueError, match="shorter than the training length"):
        plan("smoke", tasks="lm", eval_lengths=(8, 32))


def test_cli_reports_bad_input_with_exit_code_2(tmp_path, capsys):
    db = tmp_path / "r.sqlite"
    assert lab("run", "--preset", "nope-preset", "--db", str(db)) == 2
    assert "valid presets: smoke, cpu, gpu" in capsys.readouterr().err
    assert lab("run", "--preset", "smoke", "--task", "lm", "--eval-lengths", "4,16", "--db", str(db)) == 2
    assert "shorter than the training length" in capsys.readouterr().err
    assert not db.exists()  # nothing was created for a refused request


def test_unwritable_database_is_detected_before_training(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    db = blocker / "records.sqlite"  # its parent is a file: cannot be created
    with pytest.raises(ValueError, match="not writable"):
        Records(db)
    assert lab("run", "--preset", "smoke", "--task", "copy", "--encodings", "rope", "--db", str(db)) == 2
    captured = capsys.readouterr()
    assert "not writable" in captured.err and "run(s) trained" not in captured.out


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to read-only files")
def test_read_only_database_is_detected_before_training(tmp_path):
    db = tmp_path / "r.sqlite"
    Records(db).close()
    db.chmod(0o444)
    with pytest.raises(ValueError, match="not writable"):
        Records(db)


def test_incompatible_schema_version_is_refused_and_left_unchanged(tmp_path):
    db = tmp_path / "old.sqlite"
    with sqlite3.connect(db) as connection:
        connection.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        connection.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION + 1),))
    before = db.read_bytes()
    with pytest.raises(ValueError, match=f"schema version {SCHEMA_VERSION + 1}.*left unchanged"):
        Records(db)
    assert db.read_bytes() == before


def test_foreign_sqlite_and_non_database_files_are_refused(tmp_path):
    foreign = tmp_path / "foreign.sqlite"
    with sqlite3.connect(foreign) as connection:
        connection.execute("CREATE TABLE things (x)")
    with pytest.raises(ValueError, match="not a posenc lab database"):
        Records(foreign)
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"this is not sqlite at all" * 100)
    with pytest.raises(ValueError, match="left unchanged"):
        Records(garbage)
    assert garbage.read_bytes() == b"this is not sqlite at all" * 100
