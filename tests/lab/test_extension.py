"""The context-extension study: its plan, its scalings' arguments, and a tiny study end to end.

The strongest check: the zero-shot unscaled run starts from the base run's weights and changes
nothing, so its bits per byte at L equal the base run's to the last digit; after the base's weights
are deleted they are trained again, and that still holds.
"""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import posenc
from posenc.functional.rope import SCALINGS
from posenc.lab import distributed
from posenc.lab.extension import UNSCALED, longrope_factors, scaling_kwargs
from posenc.lab.presets import PRESETS, ExtensionStudy, ModelConfig, Overrides, Preset, TaskSetup, TrainConfig
from posenc.lab.records import Records
from posenc.lab.remaps import FINE_TUNE_ONLY, IN_ATTENTION
from posenc.lab.report import comparison_markdown
from posenc.lab.sweep import plan, run_sweep, weights_path

TINY = Preset(
    "extension",
    "tiny",
    (0,),
    {
        "lm": TaskSetup(
            ModelConfig(16, 1, 2),
            TrainConfig(8, 4, 3e-3, 2, checkpoint_every=4, log_every=2),
            8,
            eval_size=512,
        )
    },
    ExtensionStudy(
        scalings=(UNSCALED, "linear", "yarn"),
        factors=(2,),
        finetune_fraction=0.5,
        from_scratch=("alibi",),
        remaps=("self_extend", "pose"),
    ),
)


def test_longrope_factors_rise_geometrically_from_one_to_the_factor():
    factors = longrope_factors(8, 4)
    assert factors[0] == 1.0 and math.isclose(factors[-1], 8.0)
    assert all(math.isclose(b / a, 2.0) for a, b in zip(factors, factors[1:], strict=False))
    assert longrope_factors(4, 1) == [4.0]


@pytest.mark.parametrize("scaling", [UNSCALED, *SCALINGS])
def test_every_scaling_changes_the_rotation_past_l_and_unscaled_changes_nothing(scaling):
    kwargs = scaling_kwargs(scaling, 4, 64, 16)
    q = k = torch.randn(1, 2, 256, 16, dtype=torch.float64)  # [b, h, s, d]: a call at 4L
    positions = torch.arange(256)
    scaled = posenc.build("rope", d_head=16, **kwargs).rotate(q, k, positions)[0]
    plain = posenc.build("rope", d_head=16).rotate(q, k, positions)[0]
    if scaling == UNSCALED:
        assert kwargs == {} and torch.equal(scaled, plain)
    else:
        assert kwargs["scaling"] == scaling and not torch.allclose(scaled, plain)


@pytest.mark.parametrize(
    ("scaling", "factor"), [("nosuch", 2), ("linear", 1), ("linear", 2.5), ("ntk", True)]
)
def test_bad_scalings_and_factors_are_named(scaling, factor):
    with pytest.raises(ValueError, match="nosuch|factor"):
        scaling_kwargs(scaling, factor, 64, 16)


def test_the_preset_plans_a_base_per_seed_and_every_scaling_factor_and_budget_from_it():
    preset = PRESETS["extension"]
    study = preset.extension
    runs = plan("extension").runs
    bases = [run for run in runs if run.encoding == study.base and run.init_from is None]
    derived = [run for run in runs if run.init_from is not None]
    assert len(bases) == len(preset.seeds)
    # every scaling and the remaps in attention zero-shot and fine-tuned; PoSE and continuous fine-tuned
    per_factor = 2 * len(study.scalings) + 2 * len(IN_ATTENTION) + len(FINE_TUNE_ONLY)
    assert len(derived) == len(bases) * len(study.factors) * per_factor
    assert {run.init_from for run in derived} == {base.config_hash for base in bases}
    length = preset.tasks["lm"].train_length
    pretraining = preset.tasks["lm"].train
    for run in derived:
        target = max(run.eval_lengths)
        assert run.eval_lengths == (length, target) and run.train_length == length
        remap = (run.position_remap or {}).get("name")
        if run.train.steps == 0:
            assert run.finetune_length is None and run.batch_length == length
            assert remap not in FINE_TUNE_ONLY
            continue
        assert run.train.steps == round(pretraining.steps * study.finetune_fraction)
        assert run.train.batch_size * run.batch_length == pretraining.batch_size * length  # tokens per step
        if remap in FINE_TUNE_ONLY:  # at L, with positions spanning the target
            assert run.finetune_length == length and run.position_remap["target"] == target
        else:
            assert run.finetune_length == target == run.batch_length
    scratch = {run.encoding for run in runs if run.init_from is None} - {study.base}
    assert scratch == set(study.from_scratch)
    assert runs.index(bases[-1]) < min(runs.index(run) for run in derived)  # bases first


def test_the_extension_preset_refuses_other_tasks_and_evaluation_lengths():
    with pytest.raises(ValueError, match="studies task lm only; --task must be lm"):
        plan("extension", tasks="copy")
    with pytest.raises(ValueError, match="its own evaluation lengths"):
        plan("extension", overrides=Overrides(eval_lengths=(64, 128)))


@pytest.mark.parametrize(
    ("option", "value", "flag"),
    [
        ("sliding_stride", 8, "--sliding-stride"),
        ("random_positions", 4096, "--random-positions"),
        ("embedding_scale", "sqrt", "--embedding-scale"),
        ("lr", 1e-2, "--lr"),
        ("warmup", 0, "--warmup"),
    ],
)
def test_the_extension_preset_refuses_the_options_it_does_not_apply(option, value, flag):
    # they were dropped without a word: every run recorded the defaults and trained without them
    with pytest.raises(ValueError, match=f"the extension preset does not take {flag}"):
        plan("extension", seeds=[0], overrides=Overrides(**{option: value}))


def test_the_report_averages_only_runs_of_one_study(tmp_path, monkeypatch):
    # two budgets, one seed, in one database: each cell was the mean of both, "[6.622, 9.001]" wide
    monkeypatch.setitem(PRESETS, "extension", TINY)
    torch.set_num_threads(1)
    db, work = tmp_path / "records.sqlite", tmp_path / "work"
    context = distributed.start("spread", "cpu")
    for steps in (8, 4):  # each above the warm-up's 2 steps
        run_sweep(
            plan("extension", overrides=Overrides(steps=steps)),
            db=db,
            workdir=work,
            context=context,
            progress=False,
        )
    markdown = comparison_markdown(db, preset="extension")
    assert "context extension (study 1 of 2)" in markdown and "context extension (study 2 of 2)" in markdown
    cells = [line for line in markdown.splitlines() if line.startswith(("| RoPE", "| alibi"))]
    assert len(cells) == 2 * 6  # unscaled, linear, yarn, self_extend, pose and alibi, in each study
    assert not any("[" in line for line in cells)  # one seed: a value, never an interval


def _by_label(db) -> dict[str, dict]:
    with Records(db, readonly=True) as records:
        rows = records.rows(status="done")
    return {
        f"{row['config']['encoding']} "
        f"{(row['config'].get('position_remap') or {}).get('name') or row['config']['encoding_kwargs'].get('scaling')} "
        f"{row['config']['train']['steps']} {row['config']['init_from'] is not None}": row
        for row in rows
    }


def test_a_tiny_study_end_to_end(tmp_path, monkeypatch):
    monkeypatch.setitem(PRESETS, "extension", TINY)
    torch.set_num_threads(1)
    sweep = plan("extension")
    assert len(sweep.runs) == 1 + 1 + 3 * 2 + 2 + 1  # Self-Extend zero-shot and fine-tuned, PoSE fine-tuned
    context = distributed.start("spread", "cpu")
    db, workdir = tmp_path / "records.sqlite", tmp_path / "work"
    counts = run_sweep(sweep, db=db, workdir=workdir, context=context, progress=False)
    assert counts["run"] == len(sweep.runs)
    rows = _by_label(db)
    base = rows["rope None 8 False"]
    zero_shot = rows["rope None 0 True"]
    assert zero_shot["metrics"]["eval"]["8"]["bpb"] == base["metrics"]["eval"]["8"]["bpb"]
    assert zero_shot["metrics"]["eval"]["16"]["bpb"] == base["metrics"]["eval"]["16"]["bpb"]
    linear = rows["rope linear 0 True"]
    assert linear["metrics"]["eval"]["16"]["bpb"] != base["metrics"]["eval"]["16"]["bpb"]
    fine_tuned = rows["rope linear 4 True"]
    assert fine_tuned["metrics"]["train_loss"] and fine_tuned["config"]["finetune_length"] == 16
    self_extend = rows["rope self_extend 0 True"]  # grouped beyond its window of 4: other logits
    assert self_extend["metrics"]["eval"]["16"]["bpb"] != base["metrics"]["eval"]["16"]["bpb"]
    assert self_extend["config"]["position_remap"] == {"name": "self_extend", "window": 4, "group": 4}
    pose = rows["rope pose 4 True"]  # fine-tuned at L with ids spanning 2L
    assert pose["config"]["finetune_length"] == 8 and pose["metrics"]["train_loss"]
    base_hash = base["config_hash"]
    kept = torch.load(weights_path(workdir, base_hash), weights_only=True)["model"]

    # the weights gone and the study widened: the base is trained again, to the same weights
    weights_path(workdir, base_hash).unlink()
    wider = replace(TINY, extension=replace(TINY.extension, scalings=(*TINY.extension.scalings, "ntk")))
    monkeypatch.setitem(PRESETS, "extension", wider)
    sweep = plan("extension")
    counts = run_sweep(sweep, db=db, workdir=workdir, context=context, progress=False)
    assert counts["run"] == 2  # ntk, zero-shot and fine-tuned
    retrained = torch.load(weights_path(workdir, base_hash), weights_only=True)["model"]
    assert retrained.keys() == kept.keys()
    assert all(torch.equal(retrained[name], kept[name]) for name in kept)
    ntk = _by_label(db)["rope ntk 0 True"]
    assert ntk["metrics"]["eval"]["16"]["status"] == "ok" and ntk["config"]["init_from"] == base_hash


def test_the_report_has_one_table_per_target_and_the_study_curves(tmp_path, monkeypatch):
    from posenc.lab.report import write_report

    monkeypatch.setitem(PRESETS, "extension", TINY)
    torch.set_num_threads(1)
    db, out = tmp_path / "records.sqlite", tmp_path / "report"
    context = distributed.start("spread", "cpu")
    run_sweep(plan("extension"), db=db, workdir=tmp_path / "work", context=context, progress=False)
    markdown = write_report(db, out)
    assert "context extension" in markdown and "Extended to 16 = 2L (L = 8 bytes)" in markdown
    rows = {line.split(" | ")[0].strip("| "): line for line in markdown.splitlines() if line.startswith("| ")}
    assert {"RoPE, unscaled", "RoPE, linear", "RoPE, yarn", "alibi from scratch at L"} <= rows.keys()
    base = _by_label(db)["rope None 8 False"]["metrics"]["eval"]["16"]["bpb"]
    assert f"{base:.3f}" == rows["RoPE, unscaled"].split(" | ")[1]  # zero-shot unscaled is the base
    assert rows["alibi from scratch at L"].split(" | ")[4] == "—"  # nothing fine-tuned
    for name in ("lab_extension_zero_shot.png", "lab_extension_fine_tuned.png"):
        assert (out / name).stat().st_size > 0 and name in markdown


def test_the_settings_name_each_targets_fine_tuning_batch():
    # the fine-tune keeps the tokens of a step: batch 32 // factor at factor × L (the committed study;
    # PoSE and the continuous remap fine-tune at L itself, batch 32)
    records = Path(__file__).parents[2] / "docs" / "lab" / "extension-records.sqlite"
    markdown = comparison_markdown(records, preset="extension")
    assert "(batch 32 at 64, batch 16 at 128, batch 8 at 256, batch 4 at 512)" in markdown
