"""DINOv3's coordinate augmentation as a training option of the lab: recorded in the run's config, drawn
once per step from the run's seed for every layer alike, left out of evaluation, and refused where a
run has no grid coordinates to move."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch

from posenc.functional.normalized import normalized_grid
from posenc.lab import train as training
from posenc.lab.distributed import Context
from posenc.lab.grid import grid_accuracy
from posenc.lab.presets import PRESETS, Overrides, run_config
from posenc.lab.records import Records
from posenc.lab.report import comparison_markdown
from posenc.lab.tasks import make_task
from tests.lab.helpers import lab

RESCALE = Overrides(coordinate_augmentation=(None, None, 2.0))


def test_the_augmentation_is_recorded_and_a_run_without_it_keeps_its_config():
    plain = run_config(PRESETS["grid"], "grid", "dinov3", 0)
    augmented = run_config(PRESETS["grid"], "grid", "dinov3", 0, overrides=RESCALE)
    assert augmented.coordinate_augmentation == (None, None, 2.0)
    assert "coordinate_augmentation" not in plain.to_dict()  # the runs recorded before it keep their hashes
    assert augmented.to_dict()["coordinate_augmentation"] == (None, None, 2.0)
    assert augmented.config_hash != plain.config_hash
    assert Overrides.of_config({"coordinate_augmentation": [None, None, 2.0]}).coordinate_augmentation == (
        None,
        None,
        2.0,
    )


@pytest.mark.parametrize(
    ("task", "encoding", "augmentation", "message"),
    [
        ("copy", "rope", (None, None, 2.0), "task copy has positions on one axis"),
        ("grid", "rope", (None, None, 2.0), "encoding rope reads one position per patch"),
        ("grid", "dinov3", (None, 0.5, None), "jitter=0.5 would flip or shrink"),
        ("grid", "dinov3", (-1.0, None, None), "shift must be finite and ≥ 0"),
        ("grid", "dinov3", (None, None, None), "at least one of shift, jitter and rescale"),
    ],
)
def test_a_run_without_grid_coordinates_to_move_or_a_bad_part_is_refused(
    task, encoding, augmentation, message
):
    overrides = Overrides(coordinate_augmentation=augmentation)
    with pytest.raises(ValueError, match=message):
        run_config(PRESETS["smoke" if task == "copy" else "grid"], task, encoding, 0, overrides=overrides)


def _positions_each_layer_reads(monkeypatch, config) -> list[list[torch.Tensor]]:
    """Train ``config`` and return, per training step, the query coordinates every layer rotated."""
    steps: list[list[torch.Tensor]] = []
    original = training.build_model

    def build(*arguments):
        model = original(*arguments)
        model.register_forward_pre_hook(lambda *_: steps.append([]))
        rotate = model.encoding.rotate

        def recording(q, k, q_positions=None, k_positions=None):
            steps[-1].append(q_positions.detach().clone())
            return rotate(q, k, q_positions, k_positions)

        model.encoding.rotate = recording
        return model

    monkeypatch.setattr(training, "build_model", build)
    torch.manual_seed(1234)  # the draws must come from the run's seed, whatever came before
    outcome = training.train(
        config, make_task("grid"), Context(0, 1, 0, "spread", torch.device("cpu")), Path("/nope")
    )
    grid_accuracy(outcome.model, 8, 2, seed=0)  # evaluation, recorded as one more forward
    return steps


def test_one_draw_per_step_moves_every_layer_alike_and_a_seed_repeats_its_draws(monkeypatch):
    torch.set_num_threads(1)
    config = run_config(PRESETS["grid"], "grid", "dinov3", 3, overrides=RESCALE)
    config = replace(
        config, train=replace(config.train, steps=3, warmup=1), model=replace(config.model, n_layers=2)
    )
    *steps, evaluation = _positions_each_layer_reads(monkeypatch, config)
    grid = normalized_grid((8, 8))  # DINOv3's declared coordinates of the 8 × 8 training grid
    assert all(torch.equal(layer, grid) for layer in evaluation)  # evaluation reads the grid as it is
    factors = []
    for layers in steps:
        assert len(layers) == 2 and torch.equal(layers[0], layers[1])  # one draw for the whole forward
        factor = layers[0] / grid  # rescale only: one factor for every coordinate, in [1/2, 2]
        torch.testing.assert_close(factor, torch.full_like(grid, float(factor[0, 0])), rtol=1e-12, atol=0)
        assert 0.5 <= float(factor[0, 0]) <= 2.0
        factors.append(float(factor[0, 0]))
    assert len(set(factors)) == 3  # a new draw every step
    *again, _ = _positions_each_layer_reads(monkeypatch, config)
    assert [float((layers[0] / grid)[0, 0]) for layers in again] == factors


def test_lab_run_records_the_augmentation_and_the_report_names_its_configuration(tmp_path):
    db = tmp_path / "r.sqlite"
    arguments = ("run", "--preset", "grid", "--encodings", "rope_axial", "--seeds", "0", "--steps", "2")
    arguments += ("--warmup", "1", "--eval-lengths", "8", "--no-progress", "--db", str(db))
    assert lab(*arguments, "--coordinate-augmentation", "rescale=2", "--workdir", str(tmp_path / "w")) == 0
    with Records(db, readonly=True) as records:
        [row] = records.rows(status="done")
    assert row["config"]["coordinate_augmentation"] == [None, None, 2.0]
    shown = comparison_markdown(db, preset="grid")  # what posenc lab report prints, without its figures
    assert "coordinate_augmentation=None,None,2.0" in shown and "| rope_axial |" in shown


def test_the_option_names_a_bad_part():
    with pytest.raises(SystemExit):
        lab("run", "--preset", "grid", "--coordinate-augmentation", "scale=2")
