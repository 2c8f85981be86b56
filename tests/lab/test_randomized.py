"""The lab's randomized-positions option: recorded in the config, sizing the tables, and refused when too short."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path

import pytest

from posenc.lab.presets import PRESETS, Overrides, run_config
from posenc.lab.records import Records
from tests.lab.helpers import lab


def test_a_randomized_range_is_recorded_and_sizes_a_learned_table_for_it():
    config = run_config(PRESETS["smoke"], "lm", "learned", 0, overrides=Overrides(random_positions=200))
    assert config.random_positions == 200
    assert config.encoding_kwargs["max_len"] == 200  # every trained position has a row
    assert config.config_hash != run_config(PRESETS["smoke"], "lm", "learned", 0).config_hash


def test_a_range_shorter_than_the_longest_evaluated_sequence_is_refused():
    with pytest.raises(
        ValueError, match=re.escape("random_positions=64 must cover the longest evaluated sequence, 128")
    ):
        run_config(
            PRESETS["smoke"], "lm", "rope", 0, overrides=Overrides(random_positions=64)
        )  # smoke's lm evaluates at 8 × 16


def test_lab_run_trains_with_randomized_positions_and_the_report_names_the_setting(tmp_path, capsys):
    db = tmp_path / "r.sqlite"
    arguments = (
        "run",
        "--preset",
        "smoke",
        "--tasks",
        "lm",
        "--encodings",
        "rope",
        "--steps",
        "3",
        "--no-progress",
    )
    assert (
        lab(*arguments, "--random-positions", "256", "--db", str(db), "--workdir", str(tmp_path / "w")) == 0
    )
    with Records(db, readonly=True) as records:
        [row] = records.rows(status="done")
    assert row["config"]["random_positions"] == 256
    capsys.readouterr()
    assert lab("report", "--db", str(db)) == 0
    assert "random_positions=256" in capsys.readouterr().out


def test_training_draws_each_padded_example_its_own_positions(monkeypatch):
    # Ruoss et al. draw n positions from the whole range for a sequence of n tokens; in a batch padded to
    # its longest example, each row's positions end at its own length and its padding repeats the last one
    import torch

    from posenc.lab import train as training
    from posenc.lab.distributed import Context
    from posenc.lab.tasks import make_task

    config = run_config(PRESETS["smoke"], "copy", "rope", 0, overrides=Overrides(random_positions=64))
    config = replace(config, train=replace(config.train, steps=1))
    seen = []
    original = training.build_model

    def build(*arguments):
        model = original(*arguments)
        model.register_forward_pre_hook(lambda _, inputs: seen.append(inputs))
        return model

    monkeypatch.setattr(training, "build_model", build)
    training.train(
        config, make_task("copy"), Context(0, 1, 0, "spread", torch.device("cpu")), Path("/nonexistent")
    )
    [(tokens, positions)] = seen
    assert positions is not None and positions.shape == tokens.shape
    lengths = (tokens != 0).sum(dim=-1)  # PAD is 0; every input before the padding is a real token
    assert len(set(lengths.tolist())) > 1  # the batch mixes lengths
    for row, length in zip(positions, lengths.tolist(), strict=True):
        assert (row[:length].diff() > 0).all() and (row[length:] == row[length - 1]).all()
