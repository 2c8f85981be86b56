"""The ``posenc lab`` command surface: subcommands, presets listing and progress bars."""

from __future__ import annotations

import argparse
import contextlib
import io

import posenc.lab.sweep  # noqa: F401  (imported at collection, as a long-lived process imports it before any redirection)
from posenc.lab.cli import configure, main
from posenc.lab.progress import SweepProgress
from posenc.lab.records import Records
from tests.lab.helpers import lab


def test_configure_sets_a_handler_and_parses_run_options(tmp_path):
    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(
        [
            "run",
            "--preset",
            "cpu",
            "--task",
            "lm,copy",
            "--encodings",
            "rope",
            "--seeds",
            "0,1",
            "--db",
            "x.sqlite",
        ]
    )
    assert args.handler is main
    assert (args.preset, args.tasks, args.encodings, args.seeds) == ("cpu", "lm,copy", "rope", [0, 1])
    assert parser.parse_args(["report", "--db", "x.sqlite", "--out", str(tmp_path)]).lab_command == "report"


def test_presets_are_listed(capsys):
    assert lab("presets") == 0
    out = capsys.readouterr().out
    assert all(name in out for name in ("smoke:", "cpu:", "gpu:"))


def test_presets_list_per_task_the_encodings_that_task_runs(capsys):
    # a header listed every registered encoding under each preset, though the cpu preset's tasks run five
    from posenc.lab.presets import KAZEMNEJAD_ENCODINGS

    assert lab("presets") == 0
    lines = capsys.readouterr().out.splitlines()

    def line(preset: str, task: str) -> str:
        start = lines.index(next(text for text in lines if text.startswith(f"{preset}: ")))
        return next(text for text in lines[start + 1 :] if text.startswith(f"  {task}"))

    assert line("cpu", "lm").endswith(f"; encodings {', '.join(KAZEMNEJAD_ENCODINGS)}")
    assert line("cpu", "parity").startswith("  parity (run when named with --task): ")
    smoke_lm, smoke_grid = line("smoke", "lm"), line("smoke", "grid")
    assert "rope," in smoke_lm and "alibi" in smoke_lm and "swin_v2" not in smoke_lm
    assert "swin_v2" in smoke_grid and "rope_axial" in smoke_grid and "cope" not in smoke_grid
    assert not any(text.startswith("  seeds") and "encodings" in text for text in lines)


def test_report_without_records_says_so(tmp_path, capsys):
    # an empty database is not a failing claim (exit 1 is verify's): a refusal, exit 2, and no report folder
    db = tmp_path / "empty.sqlite"
    Records(db).close()
    assert lab("report", "--db", str(db)) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == f"posenc lab report: error: no lab records in {db}"
    assert not (tmp_path / "report").exists()


def test_report_of_a_missing_database_is_refused_not_reported_empty(tmp_path, capsys):
    assert lab("report", "--db", str(tmp_path / "none.sqlite")) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line == f"posenc lab report: error: database {str(tmp_path / 'none.sqlite')!r} does not exist"
    assert list(tmp_path.iterdir()) == []


def test_progress_bars_draw_overall_and_per_run():
    out = io.StringIO()
    done = iter(range(100))
    with SweepProgress(total=2, done=lambda: next(done), enabled=True, log=out) as progress:
        progress.start_run("copy rope seed 0", 10)
        for step in range(1, 11):
            progress.advance(step)
        progress.finish_run("copy rope seed 0", "6: 1.00 EM")
    assert "copy rope seed 0: 6: 1.00 EM" in out.getvalue()


def test_run_lines_go_to_the_stdout_of_the_moment_not_of_import_time():
    # a default bound when the module was imported kept writing to that stream after it was replaced
    # (and closed, under a test's capture): "I/O operation on closed file"
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        with SweepProgress(total=1, done=lambda: 1, enabled=False) as progress:
            progress.start_run("copy rope seed 0", 10)
            progress.finish_run("copy rope seed 0", "6: 1.00 EM")
    assert out.getvalue().startswith("[1/1] copy rope seed 0: 6: 1.00 EM")


def test_a_sweep_writes_its_run_lines_to_the_stdout_of_the_moment(tmp_path):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = lab(
            "run", "--preset", "smoke", "--task", "copy", "--encodings", "nope", "--steps", "3",
            "--db", str(tmp_path / "r.sqlite"), "--no-progress",
        )  # fmt: skip
    assert code == 0 and "[1/1] copy nope seed 0:" in out.getvalue()


def test_the_smoke_preset_trains_on_one_thread_unless_told(tmp_path, monkeypatch):
    # on two cores shared with other work, two threads took its 108 tiny runs from 26 s to 350 s
    import os

    import torch

    seen = []

    def swept(*args, **kwargs):
        seen.append(torch.get_num_threads())
        return {"planned": 1, "already_recorded": 0, "run": 0, "claimed_elsewhere": 0}

    monkeypatch.setattr(posenc.lab.sweep, "run_sweep", swept)
    before = torch.get_num_threads()
    run = (
        "run",
        "--task",
        "copy",
        "--encodings",
        "rope",
        "--db",
        str(tmp_path / "r.sqlite"),
        "--no-progress",
    )
    try:
        assert lab(*run, "--preset", "smoke") == 0
        assert lab(*run, "--preset", "smoke", "--threads", "2") == 0
        assert lab(*run, "--preset", "cpu") == 0
    finally:
        torch.set_num_threads(before)
    assert seen == [1, 2, os.cpu_count()]
