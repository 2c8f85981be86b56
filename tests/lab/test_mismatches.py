"""Requests that would plan something other than what was asked are refused before training: a warm-up
as long as the training."""

from __future__ import annotations

import pytest

from posenc.lab.presets import Overrides
from posenc.lab.sweep import plan
from tests.lab.helpers import exit_code

RUN = ("run", "--preset", "smoke", "--threads", "1", "--no-progress")


@pytest.fixture
def no_sweep(monkeypatch):
    """``run_sweep`` replaced by one that fails the test: the request must be refused before it."""
    import posenc.lab.sweep

    def trained(*args, **kwargs):
        raise AssertionError("the sweep ran")

    monkeypatch.setattr(posenc.lab.sweep, "run_sweep", trained)


def _refused(capsys, *argv: str, db) -> str:
    """The one line ``posenc lab run ARGV`` prints on refusing (exit 2), having made no database."""
    assert exit_code(*RUN, *argv, "--db", str(db)) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("posenc lab run: error: ")
    assert not db.exists()
    return line


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--steps", "12", "--warmup", "12"), "warmup=12 must be less than steps=12: "),
        (("--steps", "5", "--warmup", "9"), "warmup=9 must be less than steps=5: "),
        (("--warmup", "20"), "warmup=20 must be less than steps=12 (the smoke preset's for task copy): "),
        (("--steps", "2"), "warmup=2 (the smoke preset's for task copy) must be less than steps=2: "),
    ],
)
def test_a_warmup_of_at_least_the_steps_is_refused_naming_both(argv, message, capsys, tmp_path, no_sweep):
    # the learning rate would climb for the whole run; it was trained without a word
    line = _refused(capsys, "--task", "copy", "--encodings", "rope", *argv, db=tmp_path / "r.sqlite")
    assert message in line


def test_the_extension_study_refuses_steps_within_its_warmup():
    with pytest.raises(ValueError, match=r"warmup=100 \(the extension preset's for task lm\) must be less"):
        plan("extension", overrides=Overrides(steps=50))
