"""A run killed with SIGKILL resumes from its last checkpoint and records the same result, once.

The claim tested is the strong one: the resumed run's training losses and evaluation metrics are
bit-identical to those of a run never interrupted (same command, one thread each).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from posenc.lab.records import Records
from tests.lab.helpers import lab_command, lab_subprocess

STEPS = 400  # killed about 0.3 s after its first checkpoint (step 50): near step 100 here
ARGS = ("run", "--preset", "smoke", "--task", "lm", "--encodings", "rope", "--seeds", "0")
OPTIONS = ("--steps", str(STEPS), "--checkpoint-every", "50", "--threads", "1", "--no-progress")


def _args(directory) -> tuple[str, ...]:
    return (*ARGS, *OPTIONS, "--db", str(directory / "r.sqlite"), "--workdir", str(directory / "work"))


def _rows(directory) -> list[dict]:
    with Records(directory / "r.sqlite", readonly=True) as records:
        return records.rows(status="done")


def test_sigkilled_run_resumes_and_matches_an_uninterrupted_run(tmp_path):
    reference, killed = tmp_path / "reference", tmp_path / "killed"
    assert lab_subprocess(*_args(reference)).returncode == 0

    process = subprocess.Popen(lab_command(*_args(killed)), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not list((killed / "work").glob("*.pt")):
        assert process.poll() is None, process.stderr.read().decode()
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.01)
    time.sleep(0.3)  # let training pass a few more checkpoints
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    process.stderr.close()
    assert process.returncode == -signal.SIGKILL
    assert _rows(killed) == [], "the run finished before it could be killed; raise STEPS"
    checkpoints = list((killed / "work").glob("*.pt"))
    assert len(checkpoints) == 1

    finished = lab_subprocess(*_args(killed))
    assert finished.returncode == 0, finished.stderr
    [resumed], [uninterrupted] = _rows(killed), _rows(reference)
    [step] = resumed["timings"]["resumed_from"]
    assert 0 < step < STEPS and step % 50 == 0
    assert resumed["config_hash"] == uninterrupted["config_hash"]
    assert resumed["metrics"]["train_loss"] == uninterrupted["metrics"]["train_loss"]
    assert resumed["metrics"]["eval"] == uninterrupted["metrics"]["eval"]
    assert not list((killed / "work").glob("*.pt"))  # removed once the record is committed

    again = lab_subprocess(*_args(killed))
    assert "0 run(s) trained, 1 already recorded" in again.stdout
    assert len(_rows(killed)) == 1
