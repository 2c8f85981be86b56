"""What a preset runs by default: its tasks, each task's encodings and evaluation lengths; and the
token-embedding scale a run can ask for."""

from __future__ import annotations

import json
import math
from dataclasses import fields, replace

import pytest
import torch

import posenc
from posenc.lab import presets
from posenc.lab.presets import (
    KAZEMNEJAD_ENCODINGS,
    OVERRIDE_PLACES,
    PRESETS,
    Overrides,
    run_config,
    skip_reason,
)
from posenc.lab.records import Records
from posenc.lab.report import comparison_markdown
from posenc.lab.stacks import stack_named
from posenc.lab.sweep import plan
from posenc.lab.tasks import make_task, task_names
from posenc.lab.train import build_model
from tests.lab.helpers import FAKE_CORPUS, record_run


def test_fractional_multipliers_give_rounded_lengths_in_order():
    setup = replace(PRESETS["cpu"].tasks["copy"], eval_multipliers=(2, 1, 1.25, 1.5, 1.5))
    assert setup.eval_lengths(20) == (20, 25, 30, 40)
    assert setup.eval_lengths(6) == (6, 8, 9, 12)  # 7.5 rounds to the even 8


def test_the_cpu_preset_trains_its_named_encodings_on_its_default_tasks():
    cpu = PRESETS["cpu"]
    runs = plan("cpu").runs
    assert {run.task for run in runs} == set(cpu.sweep_tasks) == {"lm", "copy", "reverse", "sort"}
    assert {run.encoding for run in runs} == set(KAZEMNEJAD_ENCODINGS)
    assert len(runs) == len(cpu.sweep_tasks) * len(KAZEMNEJAD_ENCODINGS) * len(cpu.seeds)
    copy = next(run for run in runs if run.task == "copy")
    assert (copy.train_length, copy.eval_lengths) == (20, (20, 25, 30, 40))


def test_tasks_and_encodings_named_on_the_command_line_replace_the_presets():
    runs = plan("cpu", tasks="addition", encodings="fire,kerple", seeds=[0]).runs
    assert [(run.task, run.encoding) for run in runs] == [("addition", "fire"), ("addition", "kerple")]


def test_a_preset_without_a_task_refuses_it_naming_its_tasks(monkeypatch):
    only_lm = replace(
        PRESETS["cpu"], name="only-lm", setups={"lm": PRESETS["cpu"].tasks["lm"]}, default_tasks=None
    )
    monkeypatch.setitem(presets.PRESETS, "only-lm", only_lm)
    with pytest.raises(ValueError, match="the only-lm preset does not run task 'copy'; its tasks: lm"):
        plan("only-lm", tasks="copy")


@pytest.mark.parametrize("name", [name for name in PRESETS if PRESETS[name].extension is None])
def test_every_encoding_a_preset_names_is_registered_and_trained_on_the_task(name):
    preset = PRESETS[name]
    assert set(preset.sweep_tasks) <= set(preset.tasks)
    for task, setup in preset.tasks.items():
        for encoding in setup.encodings or ():
            assert encoding in posenc.available() or stack_named(encoding) is not None
            assert skip_reason(encoding, task) is None, (task, encoding)


def test_the_gpu_preset_runs_kazemnejads_five_on_five_algorithmic_tasks_and_every_task_when_named():
    gpu = PRESETS["gpu"]
    assert set(gpu.sweep_tasks) == {"copy", "reverse", "addition", "sort", "summation"}
    assert set(gpu.tasks) == set(task_names())
    for task in gpu.sweep_tasks:
        assert gpu.tasks[task].encodings == presets.KAZEMNEJAD_ENCODINGS
        expected = (8, 10, 12, 14, 16) if task == "summation" else (20, 25, 30, 35, 40)  # the paper's L
        assert gpu.tasks[task].eval_lengths(gpu.tasks[task].train_length) == expected
    assert gpu.tasks["lm"].encodings is None and gpu.tasks["grid"].encodings is None


def test_the_cpu_preset_trains_summation_on_kazemnejads_lengths():
    summation = PRESETS["cpu"].tasks["summation"]
    assert summation.train_length == 8 and summation.eval_lengths(8) == (8, 10, 12, 16)
    assert summation.encodings == presets.KAZEMNEJAD_ENCODINGS


def test_sqrt_scales_token_embeddings_by_the_square_root_of_the_models_width():
    config = run_config(PRESETS["cpu"], "copy", "sinusoidal", 0, overrides=Overrides(embedding_scale="sqrt"))
    assert config.model.embedding_scale == math.sqrt(config.model.d_model) == 8.0
    assert (
        run_config(
            PRESETS["cpu"], "copy", "sinusoidal", 0, overrides=Overrides(embedding_scale=2.5)
        ).model.embedding_scale
        == 2.5
    )
    plain = run_config(PRESETS["cpu"], "copy", "sinusoidal", 0)
    assert plain.model.embedding_scale == 1.0 and plain.config_hash != config.config_hash


@pytest.mark.parametrize("scale", [0, -1.0, math.nan, math.inf, "cube"])
def test_a_bad_embedding_scale_is_refused_naming_it(scale):
    with pytest.raises((TypeError, ValueError), match="embedding_scale"):
        run_config(PRESETS["cpu"], "copy", "sinusoidal", 0, overrides=Overrides(embedding_scale=scale))


def test_scaled_runs_are_a_configuration_of_their_own_named_by_the_scale(tmp_path):
    path = tmp_path / "r.sqlite"
    smoke = PRESETS["smoke"]
    with Records(path) as records:
        for seed, scale in ((0, None), (0, "sqrt"), (1, "sqrt")):
            overrides = Overrides(embedding_scale=scale)
            config = run_config(
                smoke, "lm", "sinusoidal", seed, corpus_sha256=FAKE_CORPUS["sha256"], overrides=overrides
            )
            record_run(records, "smoke", config, dict.fromkeys(config.eval_lengths, 2.0))
    markdown = comparison_markdown(path)
    width = smoke.tasks["lm"].model.d_model
    assert f"#### Configuration: embedding_scale={math.sqrt(width)}" in markdown
    assert "#### Configuration: preset defaults" in markdown
    assert "model.embedding_scale" not in markdown  # named once, as the option that set it


def test_lr_and_warmup_overrides_are_a_configuration_of_their_own(tmp_path):
    cpu = PRESETS["cpu"]
    corpus = FAKE_CORPUS["sha256"]
    default = run_config(cpu, "lm", "t5", 0, corpus_sha256=corpus)
    changed = run_config(cpu, "lm", "t5", 0, corpus_sha256=corpus, overrides=Overrides(lr=5e-4, warmup=50))
    assert (changed.train.lr, changed.train.warmup) == (5e-4, 50)
    assert replace(changed.train, lr=default.train.lr, warmup=default.train.warmup) == default.train
    assert changed.config_hash != default.config_hash
    path = tmp_path / "r.sqlite"
    with Records(path) as records:
        for config in (default, changed):
            record_run(records, "cpu", config, dict.fromkeys(config.eval_lengths, 2.0))
    markdown = comparison_markdown(path)
    assert "#### Configuration: lr=0.0005, warmup=50" in markdown, markdown


def _outside_the_encoding(encoding: str) -> dict[str, torch.Tensor]:
    config = run_config(PRESETS["cpu"], "copy", encoding, 0)
    model = build_model(config, make_task("copy"))
    return {
        name: value
        for name, value in model.state_dict().items()
        if not name.startswith("encoding.") and ".encoding." not in name
    }


def test_encodings_without_random_parameters_start_from_the_same_weights_outside_the_encoding():
    # docs/LAB.md: the same seed gives NoPE, sinusoidal, RoPE and ALiBi the same initial weights, while an
    # encoding that draws its own parameters first (T5) leaves the others another draw
    reference = _outside_the_encoding("nope")
    for encoding in ("sinusoidal", "rope", "alibi"):
        weights = _outside_the_encoding(encoding)
        assert weights.keys() == reference.keys(), encoding
        assert all(torch.equal(weights[name], reference[name]) for name in reference), encoding
    t5 = _outside_the_encoding("t5")
    assert not torch.equal(t5["token_embedding.weight"], reference["token_embedding.weight"])


def test_every_override_lands_in_the_config_and_is_read_back_from_it():
    # the report re-plans a recorded run from the overrides its config holds: one missed there is
    # named by its dotted place (train.lr) as if the preset had changed
    assert [f.name for f in fields(Overrides)] == list(OVERRIDE_PLACES)
    overrides = Overrides(
        steps=7,
        lr=0.004,
        warmup=3,
        train_length=5,
        eval_lengths=(5, 10),
        sliding_stride=2,
        checkpoint_every=2,
        random_positions=64,
        embedding_scale=2.0,
    )
    config = run_config(PRESETS["smoke"], "lm", "rope", 0, corpus_sha256="x", overrides=overrides)
    assert Overrides.of_config(json.loads(config.canonical_json())) == overrides


@pytest.mark.parametrize("name", ["stacks", "gpu-stacks"])
def test_the_stacks_studies_run_every_design_on_both_tasks_in_a_model_its_pattern_covers(name):
    preset = PRESETS[name]
    assert set(preset.sweep_tasks) == {"lm", "copy"}
    for task in preset.sweep_tasks:
        setup = preset.tasks[task]
        assert setup.encodings == ("rope", "nope", "alibi", "rnope", "rnope_swa", "rnope_temperature", "fox")
        for encoding in setup.encodings:
            stack = stack_named(encoding)
            if stack is not None:  # a ValueError here: the pattern does not cover the model's layers
                assert len(stack.specs(setup.model.n_layers)) == setup.model.n_layers
