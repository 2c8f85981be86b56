"""The lab-step benchmark: each encoding's lab model timed for one training step against NoPE's, the
encodings the lab does not train listed with its reason, bad names refused in one line."""

from __future__ import annotations

import json

import pytest

from posenc.bench import lab_step
from posenc.cli import main
from posenc.lab.presets import skip_reason


def test_each_step_is_timed_against_nope_and_the_untrained_are_listed_with_the_reason():
    assert skip_reason("swin", "copy") is not None  # Swin reads a 2-D window, not a line
    result = lab_step.run(["t5", "swin", "rope"], preset="cpu", task="copy", rounds=1)
    assert [row["encoding"] for row in result["rows"]] == ["nope", "t5", "rope"]
    assert result["rows"][0]["ratio"] == 1.0
    assert all(row["median_ms"] > 0 for row in result["rows"])
    assert result["skipped"] == {"swin": skip_reason("swin", "copy")}
    assert result["batch"][0] == 16  # the cpu preset's copy batch


def test_a_step_updates_the_model_and_leaves_no_gradient_behind():
    import torch

    from posenc.lab.presets import PRESETS, run_config
    from posenc.lab.tasks import make_task

    config = run_config(PRESETS["cpu"], "copy", "t5", 0)
    batch = make_task("copy").train_batch(4, config.batch_length, torch.Generator().manual_seed(0))
    step, model = lab_step._step("t5", "cpu", "copy", batch, with_model=True)
    before = [parameter.detach().clone() for parameter in model.parameters()]
    step()
    assert all(parameter.grad is None for parameter in model.parameters())
    assert any(not torch.equal(old, new) for old, new in zip(before, model.parameters(), strict=True))


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"encodings": ["rope", "ropee"]}, "unknown encoding 'ropee'"),
        ({"preset": "cpuu"}, "unknown preset 'cpuu'"),
        ({"task": "sortt"}, "sortt"),
        ({"rounds": 0}, "rounds must be at least 1, got 0"),
    ],
)
def test_bad_input_is_refused_naming_the_value(arguments, message):
    with pytest.raises(ValueError, match=message):
        lab_step.run(**{"encodings": ["rope"], "task": "copy", **arguments})


def test_the_command_prints_its_table_and_writes_json(tmp_path, capsys):
    out = tmp_path / "lab.json"
    assert (
        main(["bench", "lab", "--encodings", "rope", "--task", "copy", "--rounds", "1", "--json", str(out)])
        == 0
    )
    printed = capsys.readouterr().out
    assert "× NoPE" in printed and "rope" in printed
    assert [row["encoding"] for row in json.loads(out.read_text())["rows"]] == ["nope", "rope"]


def test_the_command_refuses_an_unknown_encoding_in_one_line(capsys):
    assert main(["bench", "lab", "--encodings", "ropee", "--task", "copy"]) == 2
    error = capsys.readouterr().err
    assert error.startswith("posenc bench: error: unknown encoding 'ropee'") and "Traceback" not in error
