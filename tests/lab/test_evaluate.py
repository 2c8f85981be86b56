"""Evaluation: the same bytes at every length, per-position curves, and learned tables never run past L."""

from __future__ import annotations

import math

import torch

from posenc.lab.algorithmic import AlgorithmicTask
from posenc.lab.corpus import build_corpus
from posenc.lab.evaluate import CANNOT_RUN, evaluate
from posenc.lab.language_modelling import LanguageModelling, bits_per_position, sliding_bits_per_byte
from posenc.lab.presets import PRESETS, Overrides, run_config
from posenc.lab.train import build_model, set_backend


def _corpus(tmp_path):
    for index in range(30):
        (tmp_path / f"m{index}.py").write_text(f"def f{index}(x):\n    return x * {index}\n" * 40)
    return build_corpus(str(tmp_path), 0.3)


def test_every_length_reads_the_same_validation_bytes(tmp_path):
    task = LanguageModelling(_corpus(tmp_path))
    config = run_config(PRESETS["smoke"], "lm", "rope", 0, corpus_sha256="x")
    model = build_model(config, task).eval()
    metrics = evaluate(model, task, config)
    for length in config.eval_lengths:
        entry = metrics[str(length)]
        assert entry["windows"] * length == config.eval_size
        assert len(entry["curve"]) == length
        assert math.isclose(entry["bpb"], sum(entry["curve"]) / length, rel_tol=1e-5)
        if length > config.train_length:
            assert entry["bpb_from_L"] is not None


def test_untrained_model_is_near_eight_bits_per_byte(tmp_path):
    task = LanguageModelling(_corpus(tmp_path))
    config = run_config(PRESETS["smoke"], "lm", "nope", 0, corpus_sha256="x")
    curve, _ = bits_per_position(build_model(config, task).eval(), task.corpus.validation[:1024], 16)
    assert torch.all((curve > 7.5) & (curve < 8.5))  # log2(257) = 8.006 for uniform logits


def test_sliding_window_with_full_stride_equals_non_overlapping(tmp_path):
    task = LanguageModelling(_corpus(tmp_path))
    config = run_config(PRESETS["smoke"], "lm", "alibi", 0, corpus_sha256="x")
    model = build_model(config, task).eval()
    set_backend(model, config.eval_backend)  # as the sweep evaluates: no flex compilation
    data = task.corpus.validation[:512]
    curve, _ = bits_per_position(model, data, 32)
    assert math.isclose(sliding_bits_per_byte(model, data, 32, 32), float(curve.mean()), rel_tol=1e-6)


def test_learned_table_is_reported_not_clamped_nor_crashed(tmp_path):
    task = LanguageModelling(_corpus(tmp_path))
    config = run_config(PRESETS["smoke"], "lm", "learned", 0, corpus_sha256="x")
    metrics = evaluate(build_model(config, task).eval(), task, config)
    assert metrics[str(config.train_length)]["status"] == "ok"
    beyond = [metrics[str(n)] for n in config.eval_lengths if n > config.train_length]
    assert beyond and all(
        entry["status"] == CANNOT_RUN and "learned table" in entry["reason"] for entry in beyond
    )
    copy = AlgorithmicTask("copy")
    config = run_config(PRESETS["smoke"], "copy", "learned", 0)
    metrics = evaluate(build_model(config, copy).eval(), copy, config)
    assert [metrics[str(n)]["status"] for n in config.eval_lengths] == ["ok", CANNOT_RUN, CANNOT_RUN]


def test_lengths_that_do_not_divide_each_other_read_the_same_bytes(tmp_path):
    task = LanguageModelling(_corpus(tmp_path))
    config = run_config(
        PRESETS["smoke"], "lm", "rope", 0, corpus_sha256="x", overrides=Overrides(eval_lengths=(16, 20, 24))
    )
    metrics = evaluate(build_model(config, task).eval(), task, config)
    assert {metrics[str(n)]["windows"] * n for n in config.eval_lengths} == {config.eval_size}
