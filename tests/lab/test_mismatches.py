"""Requests that would plan something other than what was asked are refused before training, or said:
an encoding that does not apply to a task, a name given twice, a warm-up as long as the training."""

from __future__ import annotations

import pytest

from posenc.lab.presets import Overrides, skip_reason
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


def test_an_encoding_that_does_not_apply_to_the_task_is_refused_naming_both_and_why(
    capsys, tmp_path, no_sweep
):
    # it planned no run, trained nothing, said nothing and exited 0
    line = _refused(capsys, "--tasks", "lm", "--encodings", "swin", db=tmp_path / "r.sqlite")
    assert "encoding 'swin' does not apply to task lm: " in line
    assert skip_reason("swin", "lm") in line  # the reason the encoding declares for the lab


def test_one_named_encoding_that_does_not_apply_refuses_the_whole_request(capsys, tmp_path, no_sweep):
    line = _refused(capsys, "--tasks", "copy", "--encodings", "rope,rope_axial", db=tmp_path / "r.sqlite")
    assert "encoding 'rope_axial' does not apply to task copy: " in line and "'rope'" not in line


def test_an_encoding_that_applies_to_none_of_several_tasks_is_refused_naming_them(tmp_path):
    with pytest.raises(ValueError, match="encoding 'swin' does not apply to tasks lm, copy: "):
        plan("smoke", tasks="lm,copy", encodings="swin")


def test_a_named_encoding_that_applies_to_some_of_several_tasks_says_where_it_is_skipped(
    capsys, tmp_path, monkeypatch
):
    import posenc.lab.sweep

    swept = []
    monkeypatch.setattr(posenc.lab.sweep, "run_sweep", lambda sweep, **kw: swept.append(sweep) or _counts())
    argv = ("--tasks", "lm,grid", "--encodings", "rope,rope_axial", "--db", str(tmp_path / "r.sqlite"))
    assert exit_code(*RUN, *argv) == 0
    [sweep] = swept
    assert {(run.task, run.encoding) for run in sweep.runs} == {
        ("lm", "rope"),
        ("grid", "rope"),
        ("grid", "rope_axial"),
    }
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(
        "posenc lab run: skipping encoding 'rope_axial' on task lm, where it does not apply: "
    )
    assert skip_reason("rope_axial", "lm") in line


def _counts() -> dict:
    return {"planned": 3, "already_recorded": 0, "run": 0, "claimed_elsewhere": 0}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--task", "copy", "--encodings", "rope,rope"), "--encodings names encoding 'rope' twice"),
        (("--task", "copy", "--encodings", "rope, alibi,rope"), "--encodings names encoding 'rope' twice"),
        (("--tasks", "copy,reverse,copy", "--encodings", "rope"), "--task names task 'copy' twice"),
    ],
)
def test_a_name_given_twice_is_refused_naming_it(argv, message, capsys, tmp_path, no_sweep):
    # "--encodings rope,rope" planned 2 runs and trained 1
    assert message in _refused(capsys, *argv, db=tmp_path / "r.sqlite")


def test_a_seed_given_twice_is_refused_naming_it(capsys, tmp_path, no_sweep):
    assert exit_code(*RUN, "--task", "copy", "--seeds", "3,3", "--db", str(tmp_path / "r.sqlite")) == 2
    assert "seed 3 is given twice" in capsys.readouterr().err


def test_the_extension_study_refuses_an_encoding_given_twice_or_not_of_language_modelling():
    with pytest.raises(ValueError, match="--encodings names encoding 'alibi' twice"):
        plan("extension", encodings="alibi,t5,alibi")
    with pytest.raises(ValueError, match="encoding 'swin_v2' does not apply to task lm: "):
        plan("extension", encodings="swin_v2")


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
