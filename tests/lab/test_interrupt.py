"""Ctrl-C during ``lab run``: one line on stderr, exit 130, no traceback, and a re-run resumes."""

from __future__ import annotations

import signal
import subprocess
import time

import pytest

import posenc.lab.sweep
import posenc.lab.train
from posenc.lab.records import Records
from tests.lab.helpers import lab, lab_command

STEPS, EVERY = 12, 5
RUN = ("run", "--preset", "smoke", "--task", "copy", "--encodings", "rope", "--seeds", "0", "--threads", "1")
OPTIONS = ("--steps", str(STEPS), "--checkpoint-every", str(EVERY), "--no-progress")


def _args(directory) -> tuple[str, ...]:
    return (*RUN, *OPTIONS, "--db", str(directory / "r.sqlite"), "--workdir", str(directory / "work"))


def _rows(directory) -> list[dict]:
    with Records(directory / "r.sqlite", readonly=True) as records:
        return records.rows(status="done")


def _interrupt_at(step: int):
    """``train`` that raises KeyboardInterrupt (as Ctrl-C does) once it has taken ``step`` steps."""
    real = posenc.lab.train.train

    def train(config, task, context, checkpoint, on_step=None, **options):
        def advance(taken: int) -> None:
            if taken == step:
                raise KeyboardInterrupt
            if on_step is not None:
                on_step(taken)

        return real(config, task, context, checkpoint, on_step=advance, **options)

    return train


def test_ctrl_c_exits_130_with_one_line_and_a_rerun_resumes(tmp_path, monkeypatch, capsys):
    interrupted, reference = tmp_path / "interrupted", tmp_path / "reference"
    monkeypatch.setattr(posenc.lab.sweep, "train", _interrupt_at(EVERY + 2))
    try:
        code = lab(*_args(interrupted))
    except KeyboardInterrupt:
        pytest.fail("KeyboardInterrupt escaped posenc.lab.cli.main")
    err = capsys.readouterr().err
    assert code == 130
    [line] = err.strip().splitlines()
    assert "interrupted" in line and str(interrupted / "r.sqlite") in line and "resume" in line
    assert _rows(interrupted) == []
    assert [path.suffix for path in (interrupted / "work").iterdir()] == [".pt"]  # the step-5 checkpoint

    monkeypatch.undo()
    assert lab(*_args(interrupted)) == 0
    assert lab(*_args(reference)) == 0
    [resumed], [uninterrupted] = _rows(interrupted), _rows(reference)
    assert resumed["timings"]["resumed_from"] == [EVERY]
    assert resumed["metrics"]["train_loss"] == uninterrupted["metrics"]["train_loss"]
    assert resumed["metrics"]["eval"] == uninterrupted["metrics"]["eval"]


def test_ctrl_c_while_saving_a_checkpoint_keeps_the_previous_one_and_no_temporary(tmp_path, monkeypatch):
    checkpoint = tmp_path / "run.pt"
    posenc.lab.train.save_checkpoint(checkpoint, {"step": 5})

    def interrupted_save(state, path):
        path.write_bytes(b"half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(posenc.lab.train.torch, "save", interrupted_save)
    with pytest.raises(KeyboardInterrupt):
        posenc.lab.train.save_checkpoint(checkpoint, {"step": 10})
    monkeypatch.undo()
    assert [path.name for path in tmp_path.iterdir()] == ["run.pt"]
    assert posenc.lab.train.torch.load(checkpoint, weights_only=True) == {"step": 5}


def test_sigint_to_python_m_posenc_lab_exits_130_without_traceback(tmp_path):
    args = (*RUN, "--steps", "400", "--checkpoint-every", "20", "--no-progress")
    args += ("--db", str(tmp_path / "r.sqlite"), "--workdir", str(tmp_path / "work"))
    process = subprocess.Popen(
        lab_command(*args),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        # as from a terminal: a suite started in the background (`&`) ignores SIGINT, and its children
        # would inherit that
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 120
    while not list((tmp_path / "work").glob("*.pt")):
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=60)
    assert _rows(tmp_path) == [], "the run finished before it could be interrupted; raise --steps"
    assert process.returncode == 130, err
    [line] = err.strip().splitlines()
    assert line.startswith("posenc lab run: interrupted") and str(tmp_path / "r.sqlite") in line

    assert lab(*args) == 0  # in this process: the resume itself is the other test's claim
    [row] = _rows(tmp_path)
    [step] = row["timings"]["resumed_from"]
    assert 0 < step < 400 and step % 20 == 0
