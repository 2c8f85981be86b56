"""`posenc lab`: the lab's own parser and commands behind the top-level command."""

from __future__ import annotations

from pathlib import Path

import pytest


def test_lab_presets_runs_through_the_top_level_command(cli):
    run = cli("lab", "presets")
    assert run.code == 0 and "smoke:" in run.out


def test_lab_without_a_subcommand_is_refused_in_one_line(cli):
    cli("lab").assert_refused("posenc lab: error:", "LAB_COMMAND")


def test_an_interrupt_inside_the_lab_ends_in_one_line_and_status_130(cli, monkeypatch):
    import posenc.lab.cli

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(posenc.lab.cli, "_presets", interrupted)
    cli("lab", "presets").assert_refused("posenc lab presets: interrupted", code=130)


# --- posenc lab report: its database, preset and --out checked before any work --------------------


@pytest.fixture
def recorded_db(tmp_path):
    """A lab database holding one smoke-preset lm run (recorded, not trained)."""
    from posenc.lab.presets import PRESETS, run_config
    from posenc.lab.records import Records
    from tests.lab.helpers import FAKE_CORPUS, record_run

    db = tmp_path / "records.sqlite"
    config = run_config(PRESETS["smoke"], "lm", "rope", 0, corpus_sha256=FAKE_CORPUS["sha256"])
    with Records(db) as records:
        record_run(records, "smoke", config, dict.fromkeys(config.eval_lengths, 2.0))
    return db


@pytest.fixture
def no_report(monkeypatch):
    import posenc.lab.report

    def written(*args, **kwargs):
        raise AssertionError("report written before its options were checked")

    monkeypatch.setattr(posenc.lab.report, "write_report", written)


def test_report_out_that_is_a_file_is_refused_naming_it(cli, recorded_db, tmp_path, no_report):
    blocker = tmp_path / "afile"
    blocker.write_text("")
    cli("lab", "report", "--db", str(recorded_db), "--out", str(blocker)).assert_refused(
        "posenc lab report: error:", "--out", str(blocker), "is a file"
    )
    assert blocker.read_text() == ""


def test_report_out_that_cannot_be_made_is_refused_naming_it(cli, recorded_db, no_report):
    cli("lab", "report", "--db", str(recorded_db), "--out", "/proc/x").assert_refused(
        "posenc lab report: error:", "--out", "/proc/x", "cannot make folder"
    )


def test_report_of_a_missing_database_is_refused_naming_it(cli, tmp_path):
    missing = tmp_path / "nosuch.sqlite"
    cli("lab", "report", "--db", str(missing)).assert_refused(
        "posenc lab report: error:", str(missing), "does not exist"
    )
    assert list(tmp_path.iterdir()) == []


def test_report_of_a_folder_is_refused_naming_it(cli, tmp_path):
    cli("lab", "report", "--db", str(tmp_path)).assert_refused(
        "posenc lab report: error:", str(tmp_path), "is a folder"
    )
    assert list(tmp_path.iterdir()) == []


def test_report_of_an_unknown_preset_lists_the_valid_presets(cli, recorded_db, no_report):
    cli("lab", "report", "--db", str(recorded_db), "--preset", "nosuch").assert_refused(
        "posenc lab report: error:", "unknown preset 'nosuch'", "valid presets: smoke, cpu, gpu"
    )


def test_report_of_a_preset_without_records_is_refused_naming_it(cli, recorded_db, no_report):
    cli("lab", "report", "--db", str(recorded_db), "--preset", "cpu").assert_refused(
        "posenc lab report: error:", "no lab records", "'cpu'", str(recorded_db)
    )
    assert not (recorded_db.parent / "report").exists()


def test_report_names_the_database_and_the_run_whose_config_is_not_json(cli, recorded_db):
    import sqlite3

    with sqlite3.connect(recorded_db) as connection:
        [(run_id,)] = connection.execute("SELECT config_hash FROM runs").fetchall()
        connection.execute("UPDATE runs SET config = '{oops'")
    connection.close()
    cli("lab", "report", "--db", str(recorded_db)).assert_refused(
        "posenc lab report: error:", str(recorded_db), run_id, "config", "not valid JSON"
    )
    assert not (recorded_db.parent / "report").exists()


@pytest.mark.parametrize(
    ("column", "value", "says"),
    [
        ("metrics", "{}", "has metrics without 'eval'"),
        ("metrics", "[]", "has a metrics column that is not a JSON object"),
        ("config", '{"task": "lm"}', "has config without 'encoding'"),
    ],
)
def test_report_of_a_record_that_is_json_but_lacks_what_the_report_reads_is_one_line(
    cli, recorded_db, no_report, column, value, says
):
    # valid JSON, so it decodes; the report's KeyError used to escape as a traceback (exit 1)
    import sqlite3

    with sqlite3.connect(recorded_db) as connection:
        [(run_id,)] = connection.execute("SELECT config_hash FROM runs").fetchall()
        connection.execute(f"UPDATE runs SET {column} = ?", (value,))
    connection.close()
    cli("lab", "report", "--db", str(recorded_db)).assert_refused(
        "posenc lab report: error:", str(recorded_db), run_id, says, "delete that row"
    )
    assert not (recorded_db.parent / "report").exists()


# --- posenc lab run: --workdir checked before the database is touched ------------------------------


@pytest.mark.parametrize("kind", ["a file", "under /proc"])
def test_run_workdir_that_cannot_be_a_folder_is_refused_before_the_database_is_made(cli, tmp_path, kind):
    workdir = tmp_path / "afile" if kind == "a file" else Path("/proc/posenc-workdir")
    if kind == "a file":
        workdir.write_text("")
    db = tmp_path / "r.sqlite"
    argv = ["lab", "run", "--preset", "smoke", "--task", "copy", "--encodings", "rope", "--steps", "3"]
    cli(*argv, "--no-progress", "--db", str(db), "--workdir", str(workdir)).assert_refused(
        "posenc lab run: error:", "--workdir", str(workdir)
    )
    assert not db.exists()


@pytest.mark.parametrize("scale", ["0", "-2", "nan", "cube"])
def test_a_bad_embedding_scale_is_one_line_naming_it(cli, scale, tmp_path):
    db = tmp_path / "r.sqlite"
    run = cli("lab", "run", "--preset", "smoke", "--embedding-scale", scale, "--db", str(db))
    run.assert_refused("--embedding-scale", "must be a positive number or 'sqrt'", f"'{scale}'")
    assert not db.exists()
