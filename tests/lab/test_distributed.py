"""Scale-out under torchrun with gloo on CPU: DDP matches one process, and a sweep spreads its runs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from posenc.lab.records import Records
from tests.lab.helpers import lab_subprocess

#: Randomized positions (128: smoke's longest evaluation) make DDP's equality also cover the positions
#: each rank takes: every rank draws the global batch's and keeps its own rows.
COMMON = ("--preset", "smoke", "--seeds", "0", "--threads", "1", "--no-progress", "--random-positions", "128")


def _torchrun(*argv: str) -> subprocess.CompletedProcess:
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "posenc.lab",
        *argv,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def _rows(db) -> dict[tuple[str, str], dict]:
    with Records(db, readonly=True) as records:
        return {(r["task"], r["encoding"]): r for r in records.rows(status="done")}


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    directory = tmp_path_factory.mktemp("single")
    db = directory / "r.sqlite"
    result = lab_subprocess(
        "run", *COMMON, "--task", "lm,copy", "--encodings", "rope,alibi", "--steps", "20", "--db", str(db)
    )
    assert result.returncode == 0, result.stderr
    return _rows(db)


def test_ddp_over_two_processes_matches_one_process(single, tmp_path):
    db = tmp_path / "r.sqlite"
    result = _torchrun(
        "run",
        *COMMON,
        "--parallel",
        "ddp",
        "--task",
        "lm,copy",
        "--encodings",
        "rope,alibi",
        "--steps",
        "20",
        "--db",
        str(db),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ddp = _rows(db)
    assert ddp.keys() == single.keys()
    for key, row in ddp.items():
        assert row["versions"]["world_size"] == 2 and row["versions"]["mode"] == "ddp"
        losses, reference = row["metrics"]["train_loss"], single[key]["metrics"]["train_loss"]
        assert [step for step, _ in losses] == [step for step, _ in reference]
        assert [loss for _, loss in losses] == pytest.approx([loss for _, loss in reference], rel=1e-4), key


def test_a_sweep_spreads_its_runs_over_ranks(single, tmp_path):
    db = tmp_path / "r.sqlite"
    result = _torchrun(
        "run",
        *COMMON,
        "--parallel",
        "spread",
        "--task",
        "lm,copy",
        "--encodings",
        "rope,alibi",
        "--steps",
        "20",
        "--db",
        str(db),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    spread = _rows(db)
    assert spread.keys() == single.keys()
    for key, row in spread.items():
        assert row["versions"]["world_size"] == 2 and row["versions"]["mode"] == "spread"
        assert row["metrics"]["train_loss"] == single[key]["metrics"]["train_loss"], key
    with Records(db, readonly=True) as records:
        assert len(records.rows(status="done")) == 4  # each run once, from whichever rank took it
