"""Stack designs named where a run names an encoding (posenc.lab.stacks): registration, the recorded
layers, the model they build, their properties, and a run that reaches the report."""

from __future__ import annotations

import pytest
import torch

from posenc.encodings.forgetting import DEFAULT_GATE_BIAS
from posenc.lab import stacks
from posenc.lab.presets import PRESETS, check_encodings, run_config, skip_reason
from posenc.lab.properties import distinct_encodings, model_relative_position
from posenc.lab.report import comparison_markdown
from posenc.lab.stacks import register_stack, stack_named, stack_names, unregister_stack
from posenc.lab.tasks import make_task
from posenc.lab.train import build_model
from posenc.stacks import layer, pattern
from tests.lab.helpers import lab


@pytest.fixture
def scratch_stack():
    """A stack registered for one test and forgotten after it."""
    yield register_stack("scratch_rnope", pattern("RN", R=layer("rope"), N=layer("nope")), "scratch", "test")
    unregister_stack("scratch_rnope")


def test_the_stacks_preset_names_each_registered_design_and_the_pure_encodings():
    named = PRESETS["stacks"].tasks["lm"].encodings
    assert set(stack_names()) <= set(named)
    assert {"rope", "nope", "alibi"} <= set(named)


@pytest.mark.parametrize(
    ("name", "layers", "error", "match"),
    [
        ("rope", pattern("R", R=layer("rope")), ValueError, "registered encoding"),
        ("rnope", pattern("R", R=layer("rope")), ValueError, "taken"),
        ("Bad-Name", pattern("R", R=layer("rope")), ValueError, "lower-case"),
        ("no_such", pattern("R", R=layer("not_an_encoding")), ValueError, "not_an_encoding"),
        ("no_pattern", [layer("rope")], TypeError, "pattern"),
    ],
)
def test_registration_refuses_a_name_it_could_confuse_or_layers_it_cannot_build(name, layers, error, match):
    with pytest.raises(error, match=match):
        register_stack(name, layers, "x", "y")
    assert stack_named("no_such") is None


def test_a_stack_is_a_valid_encoding_name_and_an_unknown_name_lists_the_stacks():
    assert check_encodings(["rnope", "rope"]) == ["rnope", "rope"]
    with pytest.raises(ValueError, match="stacks: .*rnope_swa"):
        check_encodings(["rnope_sw"])


def test_a_run_records_the_layers_its_stack_expands_to_and_refuses_a_changed_design(scratch_stack):
    config = run_config(PRESETS["stacks"], "copy", "scratch_rnope", 0)
    assert config.encoding_kwargs == {
        "stack": "scratch_rnope",
        "layers": ["layer('rope')", "layer('nope')", "layer('rope')", "layer('nope')"],
    }
    changed = dict(config.encoding_kwargs, layers=["layer('rope')"] * 4)
    with pytest.raises(ValueError, match="changed design is a new run"):
        stacks.model_arguments(scratch_stack, changed, 4)


def test_the_model_of_a_stack_has_its_layers_masks_and_temperature():
    config = run_config(PRESETS["stacks"], "copy", "rnope_swa", 0)
    model = build_model(config, make_task("copy"))
    assert [type(e).__name__ for e in model.layer_encodings] == ["RotaryEncoding"] * 3 + ["NoPE"]
    assert [block.attention.window for block in model.blocks] == [16, 16, 16, None]
    config = run_config(PRESETS["stacks"], "copy", "rnope_temperature", 0)
    temperatures = [block.attention.temperature for block in build_model(config, make_task("copy")).blocks]
    assert temperatures[:3] == [None] * 3 and temperatures[3].floor_scale == 64


def test_fox_gives_every_layer_its_own_gates_which_keep_their_initialisation():
    # regression: the lab re-drew every Linear outside the first layer's encoding from N(0, 0.02²) with a
    # zero bias, so a stack's later forget gates started at σ(0) = 1/2 per token instead of σ(5)
    model = build_model(run_config(PRESETS["stacks"], "copy", "fox", 0), make_task("copy"))
    gates = [encoding.gate for encoding in model.layer_encodings]
    assert len({id(gate) for gate in gates}) == 4
    for gate in gates:
        assert torch.all(gate.bias == DEFAULT_GATE_BIAS)
    assert float(gates[1].weight.detach().std()) > 0.05  # nn.Linear's own draw, not the lab's std 0.02


def test_properties_count_every_layer_encoding_and_take_the_layer_furthest_from_relative():
    model = build_model(run_config(PRESETS["stacks"], "copy", "fox", 0), make_task("copy"))
    encodings = distinct_encodings(model)
    assert sum(p.numel() for e in encodings for p in e.parameters()) == 4 * 4 * (64 + 1)  # h·(d + 1) a layer
    model = build_model(run_config(PRESETS["stacks"], "copy", "rnope", 0), make_task("copy"))
    assert (
        model_relative_position(distinct_encodings(model))["verdict"] == "explicit"
    )  # RoPE over NoPE's none


def test_a_stack_is_skipped_where_an_encoding_of_its_layers_refuses_the_task():
    assert "forgetting" in skip_reason("fox", "grid")  # FoX refuses bidirectional attention
    assert skip_reason("rnope", "copy") is None


def test_a_stack_trains_from_the_command_line_and_appears_in_the_report(tmp_path):
    db = tmp_path / "records.sqlite"
    argv = ["run", "--preset", "stacks", "--task", "copy", "--encodings", "rnope_swa", "--seeds", "0"]
    argv += ["--steps", "2", "--warmup", "1", "--eval-lengths", "20", "--db", str(db), "--no-progress"]
    assert lab(*argv, "--threads", "1") == 0
    report = comparison_markdown(db, "stacks")
    assert "rnope_swa" in report
