"""The addition study's tables (exact match per layout, when each run learns at L, the bootstrap of the
ranking) and the extension study's remap rows appear in ``posenc lab report`` and in ``posenc report``."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

import posenc.report
from posenc.lab import distributed
from posenc.lab.presets import PRESETS
from posenc.lab.report import comparison_markdown
from posenc.lab.sweep import plan, run_sweep
from posenc.report import build_report
from tests.lab.helpers import lab
from tests.lab.test_extension import TINY


def _tiny_addition():
    """The addition preset at a tiny size: 4 steps, exact match at L after every 2."""
    preset = PRESETS["addition"]
    setups = {
        task: replace(
            setup,
            model=replace(setup.model, d_model=16, n_layers=1, n_heads=2),
            train=replace(setup.train, steps=4, warmup=1, curve_every=2, log_every=2),
            train_length=3,
            eval_size=16,
        )
        for task, setup in preset.setups.items()
    }
    return replace(preset, setups=setups)


@pytest.fixture(scope="module")
def study_db(tmp_path_factory):
    db = tmp_path_factory.mktemp("studies") / "records.sqlite"
    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(PRESETS, "addition", _tiny_addition())
        patch.setitem(PRESETS, "extension", TINY)
        argv = [
            "run",
            "--preset",
            "addition",
            "--task",
            "addition,addition_coupled",
            "--encodings",
            "nope,rope",
        ]
        assert lab(*argv, "--seeds", "0,1", "--db", str(db), "--threads", "1", "--no-progress") == 0
        torch.set_num_threads(1)
        context = distributed.start("spread", "cpu")
        run_sweep(plan("extension"), db=db, workdir=db.parent / "work", context=context, progress=False)
        yield db


def _check(markdown: str) -> None:
    assert "addition_coupled at 3 (1L)" in markdown and "addition at 6 (2L)" in markdown
    assert "When each run learns its task at L: exact match at L every 2 steps (16 test examples)" in markdown
    assert "| addition_coupled | rope | d_model 16, 1 layer, 2 heads | not in 4, not in 4 |" in markdown
    assert "MRR \\[95% bootstrap interval]" in markdown and "P(place 1)" in markdown
    for row in ("RoPE, self_extend", "RoPE, pose"):
        assert f"| {row} |" in markdown


def test_the_lab_report_shows_the_new_tables(study_db):
    _check(comparison_markdown(study_db))


@pytest.mark.slow  # the whole report page (the gallery left out): about as long as the sweeps above
def test_posenc_report_shows_the_new_tables(study_db, tmp_path, monkeypatch):
    monkeypatch.setattr(posenc.report, "_gallery", lambda encodings=None: {})
    build_report(tmp_path, lab_db=study_db, progress=False)
    _check((tmp_path / "report.md").read_text())
