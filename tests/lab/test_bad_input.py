"""Bad requests are refused before training, with messages that name the value and the valid choices."""

from __future__ import annotations

import os
import sqlite3

import pytest

from posenc.encodings import available
from posenc.lab.presets import MAX_SEED, PRESETS, Overrides, check_eval_lengths
from posenc.lab.records import SCHEMA_VERSION, Records
from posenc.lab.sweep import plan
from posenc.lab.tasks import TASKS
from tests.lab.helpers import exit_code, lab


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


@pytest.mark.parametrize("value", ["", ",", []])
def test_an_empty_encoding_or_task_list_is_refused_naming_it(value):
    # read as "the default" it trained every encoding; read as "none" it planned nothing and succeeded
    with pytest.raises(ValueError, match=r"--encodings must name at least one encoding, got"):
        plan("smoke", tasks="copy", encodings=value)
    with pytest.raises(ValueError, match=r"--task must name at least one task, got"):
        plan("smoke", tasks=value, encodings="rope")
    with pytest.raises(ValueError, match=r"--encodings must name at least one encoding, got"):
        plan("extension", encodings=value)


def test_evaluation_length_shorter_than_training_is_refused():
    with pytest.raises(ValueError, match="evaluation length 8 is shorter than the training length L=16"):
        check_eval_lengths(16, (8, 16, 32))
    with pytest.raises(ValueError, match="shorter than the training length"):
        plan("smoke", tasks="lm", overrides=Overrides(eval_lengths=(8, 32)))


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


RUN = ("run", "--preset", "smoke", "--task", "copy", "--encodings", "rope", "--threads", "1", "--no-progress")


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [
        ("--steps", "0", "got 0"),
        ("--steps", "-3", "got -3"),
        ("--train-length", "0", "got 0"),
        ("--train-length", "-3", "got -3"),
        ("--checkpoint-every", "0", "got 0"),
        ("--checkpoint-every", "-3", "got -3"),
        ("--sliding-stride", "0", "got 0"),
        ("--lr", "0", "got '0'"),
        ("--lr", "nan", "got 'nan'"),
        ("--lr", "fast", "got 'fast'"),
        ("--warmup", "-1", "got -1"),
        ("--threads", "0", "got 0"),
        ("--eval-lengths", "0,16", "got 0"),
        ("--seeds", "-1", "got -1"),
        ("--seeds", str(MAX_SEED + 1), f"got {MAX_SEED + 1}"),
        ("--seeds", "0,1,0", "seed 0 is given twice"),
    ],
)
def test_refuses_numbers_out_of_range_and_records_nothing(option, value, named, tmp_path, capsys):
    db = tmp_path / "r.sqlite"
    assert exit_code(*RUN, "--db", str(db), option, value) == 2
    err = capsys.readouterr().err
    assert f"argument {option}: " in err and named in err, err
    assert not db.exists()


@pytest.mark.parametrize(("option", "value"), [("--encodings", ""), ("--encodings", " , "), ("--task", "")])
def test_refuses_an_empty_name_list_and_records_nothing(option, value, tmp_path, capsys, monkeypatch):
    import posenc.lab.sweep

    def trained(*args, **kwargs):
        raise AssertionError("the sweep ran")

    monkeypatch.setattr(posenc.lab.sweep, "run_sweep", trained)
    db = tmp_path / "r.sqlite"
    assert exit_code(*RUN, "--db", str(db), option, value) == 2
    err = capsys.readouterr().err
    assert f"argument {option}" in err and f"expected at least one name, got {value!r}" in err, err
    assert not db.exists()


def test_refused_numbers_leave_an_existing_database_unchanged(tmp_path, capsys):
    db = tmp_path / "r.sqlite"
    Records(db).close()
    before = db.read_bytes()
    for option in ("--steps", "--train-length", "--checkpoint-every"):
        assert exit_code(*RUN, "--db", str(db), option, "0") == 2
    assert "--checkpoint-every: must be at least 1, got 0" in capsys.readouterr().err
    assert db.read_bytes() == before
    with Records(db, readonly=True) as records:
        assert records.rows() == []


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"steps": 0}, "steps must be at least 1, got 0"),
        ({"train_length": -3}, "train_length must be at least 1, got -3"),
        ({"checkpoint_every": 0}, "checkpoint_every must be at least 1, got 0"),
        ({"lr": -1e-3}, "lr must be positive and finite, got -0.001"),
        ({"lr": float("inf")}, "lr must be positive and finite, got inf"),
        ({"warmup": -5}, "warmup must be at least 0, got -5"),
        ({"seeds": [-1]}, f"seed must be between 0 and {MAX_SEED}, got -1"),
        ({"seeds": [2, 2]}, "seed 2 is given twice"),
    ],
)
def test_plan_refuses_numbers_out_of_range(overrides, message):
    seeds = overrides.pop("seeds", None)
    with pytest.raises(ValueError, match=message):
        plan("smoke", tasks="copy", encodings="rope", seeds=seeds, overrides=Overrides(**overrides))


def test_lengths_the_corpus_cannot_supply_are_refused_before_training():
    with pytest.raises(ValueError, match=r"eval_lengths=\[16, 10000000\] need 10000000 validation bytes"):
        plan("smoke", tasks="lm", encodings="rope", overrides=Overrides(eval_lengths=(16, 10**7)))
    with pytest.raises(ValueError, match="train_length=1000000000 does not fit the corpus"):
        plan(
            "smoke",
            tasks="lm",
            encodings="rope",
            overrides=Overrides(train_length=10**9, eval_lengths=(10**9,)),
        )


def _meta_without_runs(path) -> None:
    connection = sqlite3.connect(path)
    with connection:
        connection.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        connection.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
    connection.close()


def test_database_with_meta_but_no_runs_table_is_refused_and_left_unchanged(tmp_path, capsys):
    db = tmp_path / "r.sqlite"
    _meta_without_runs(db)
    before = db.read_bytes()
    for readonly in (False, True):
        with pytest.raises(ValueError, match="has no runs table.*left unchanged"):
            Records(db, readonly=readonly)
    assert exit_code(*RUN, "--steps", "3", "--db", str(db)) == 2
    assert exit_code("report", "--db", str(db), "--out", str(tmp_path / "report")) == 2
    run_err, report_err = capsys.readouterr().err.strip().splitlines()
    assert run_err.startswith("posenc lab run: error:") and report_err.startswith("posenc lab report: error:")
    assert all(str(db) in err and "has no runs table" in err for err in (run_err, report_err))
    assert db.read_bytes() == before
    assert not (tmp_path / "report").exists() and not (tmp_path / "checkpoints").exists()


def test_runs_table_with_other_columns_is_refused_and_left_unchanged(tmp_path):
    db = tmp_path / "r.sqlite"
    _meta_without_runs(db)
    connection = sqlite3.connect(db)
    with connection:
        connection.execute("CREATE TABLE runs (config_hash TEXT PRIMARY KEY, metrics TEXT)")
    connection.close()
    before = db.read_bytes()
    with pytest.raises(
        ValueError, match="runs table with columns config_hash, metrics, not config_hash, preset"
    ):
        Records(db)
    assert exit_code(*RUN, "--steps", "3", "--db", str(db)) == 2
    assert db.read_bytes() == before
