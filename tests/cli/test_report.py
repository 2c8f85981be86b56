"""`posenc report`: its output folder and lab records checked before anything is measured."""

from __future__ import annotations

import sqlite3

import pytest

from tests.cli.test_lab import recorded_db  # noqa: F401  (fixture)


@pytest.fixture
def no_build(monkeypatch):
    import posenc.report

    def built(*args, **kwargs):
        raise AssertionError("report built before its options were checked")

    monkeypatch.setattr(posenc.report, "build_report", built)


def test_report_out_that_is_a_file_is_refused_naming_the_option(cli, tmp_path, no_build):
    blocker = tmp_path / "report"
    blocker.write_text("")
    cli("report", "--out", str(blocker), "--no-progress").assert_refused("--out", str(blocker), "is a file")


def test_report_out_that_cannot_be_made_is_refused(cli, no_build):
    cli("report", "--out", "/proc/posenc-report").assert_refused("--out", "/proc/posenc-report")


def test_report_lab_db_that_is_a_folder_is_refused(cli, tmp_path, no_build):
    cli("report", "--out", str(tmp_path / "r"), "--lab-db", str(tmp_path)).assert_refused(
        "--lab-db", str(tmp_path), "is a folder"
    )


def test_report_lab_db_that_is_not_a_lab_database_is_refused_naming_the_option(cli, tmp_path, no_build):
    afile = tmp_path / "notes.txt"
    afile.write_text("not sqlite at all\n" * 100)
    run = cli("report", "--out", str(tmp_path / "r"), "--lab-db", str(afile))
    run.assert_refused("--lab-db", str(afile), "not an sqlite database")
    assert " --db" not in run.err
    assert afile.read_text() == "not sqlite at all\n" * 100


@pytest.mark.parametrize(
    ("metrics", "says"),
    [("'{oops'", "has a metrics column that is not valid JSON"), ("'{}'", "has metrics without 'eval'")],
)
def test_report_lab_db_with_a_damaged_record_is_refused_before_drawing(
    cli,
    recorded_db,  # noqa: F811
    tmp_path,
    no_build,
    metrics,
    says,
):
    # the database opens, but a report of it would fail after every other figure was drawn
    with sqlite3.connect(recorded_db) as connection:
        [(run_id,)] = connection.execute("SELECT config_hash FROM runs").fetchall()
        connection.execute(f"UPDATE runs SET metrics = {metrics}")
    connection.close()
    cli("report", "--out", str(tmp_path / "r"), "--lab-db", str(recorded_db), "--no-progress").assert_refused(
        "posenc report: error:", str(recorded_db), run_id, says
    )


def test_report_says_where_it_wrote(cli, tmp_path, monkeypatch):
    import posenc.report

    seen = {}

    def build(out, *, lab_db, progress, encodings):
        seen.update(out=out, lab_db=lab_db, progress=progress, encodings=encodings)
        return {"out": str(out), "figures": 3, "lab": False, "fails": {}}

    monkeypatch.setattr(posenc.report, "build_report", build)
    missing = tmp_path / "none.sqlite"
    run = cli("report", "--out", str(tmp_path / "r"), "--lab-db", str(missing), "--no-progress")
    assert run.code == 0
    assert seen == {"out": tmp_path / "r", "lab_db": missing, "progress": False, "encodings": None}
    assert run.out == (
        f"report written to {tmp_path / 'r'}/index.html and report.md (3 figures; no lab records at {missing})\n"
    )


def test_report_on_named_encodings_only(tmp_path):
    from posenc.cli import main

    out = tmp_path / "report"
    assert (
        main(
            [
                "report",
                "--encodings",
                "alibi",
                "--out",
                str(out),
                "--no-progress",
                "--lab-db",
                str(tmp_path / "x"),
            ]
        )
        == 0
    )
    page = (out / "index.html").read_text()
    assert (
        'id="figures-alibi"' in page and 'id="figures-rope"' not in page and "figures-comparison" not in page
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("rope,,alibi", "without empty items"),
        ("rope,rope", "names rope more than once"),
        ("ropee", "unknown encoding 'ropee'"),
    ],
)
def test_report_refuses_bad_encoding_names_in_one_line(value, message, tmp_path, capsys):
    from posenc.cli import main

    assert main(["report", "--encodings", value, "--out", str(tmp_path / "r"), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r" / "index.html").exists()
