"""Query temperature: Llama 4's, Ministral 3's and SSMax's schedules against float64 loops of their formulas,
the layer against a loop of attention with the factors, the refusals, and the analysis claim that the
shift invariance such a layer keeps below its threshold breaks past it (a planted violation is caught)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from posenc import build
from posenc.analysis.temperature import layer_properties, temperature_shift
from posenc.attention import BACKENDS, KVCache, MultiHeadAttention
from posenc.temperature import Llama4Temperature, Ministral3Temperature, QueryTemperature, ScalableSoftmax
from tests.reference.layer_loop import attend as loop_attend
from tests.reference.layer_loop import llama4_factor, ministral3_factor, ssmax_factor

POSITIONS = [0, 1, 6, 7, 8, 9, 15, 16, 17, 100, 8190, 8191, 8192, 16383, 16384, 100_000]
SCHEDULES = [
    (Llama4Temperature(), lambda p: llama4_factor(p, 8192, 0.1)),
    (Llama4Temperature(floor_scale=8, attn_scale=0.5), lambda p: llama4_factor(p, 8, 0.5)),
    (Ministral3Temperature(), lambda p: ministral3_factor(p, 0.1, 16384)),
    (
        Ministral3Temperature(llama_4_scaling_beta=0.3, original_max_position_embeddings=8),
        lambda p: ministral3_factor(p, 0.3, 8),
    ),
    (ScalableSoftmax(s=0.5), lambda p: ssmax_factor(p, 0.5)),
]


@pytest.mark.parametrize(("schedule", "formula"), SCHEDULES, ids=lambda x: repr(x)[:40])
def test_schedule_is_its_formula_and_its_threshold_the_first_position_it_moves(schedule, formula):
    factors = schedule(torch.tensor(POSITIONS))
    assert factors.dtype == torch.float64
    torch.testing.assert_close(
        factors, torch.tensor([formula(p) for p in POSITIONS], dtype=torch.float64), rtol=1e-15, atol=0
    )
    t = schedule.threshold
    assert formula(t) != formula(0) and all(formula(p) == formula(0) for p in range(max(0, t - 3), t))


@pytest.mark.slow  # importing transformers' model takes seconds
def test_schedules_match_transformers_where_installed():
    ministral = pytest.importorskip("transformers.models.ministral3.modeling_ministral3")
    positions = torch.tensor([POSITIONS])
    theirs = ministral.get_llama_4_attn_scale(positions.float(), 0.1, 16384)[:, 0, :, 0]
    torch.testing.assert_close(Ministral3Temperature()(positions).float(), theirs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_layer_multiplies_each_query_by_its_factor(backend):
    schedule = Llama4Temperature(floor_scale=4, attn_scale=0.7)
    layer_ = MultiHeadAttention(16, 2, backend=backend, temperature=schedule).double()
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(3, 1, 2, 9, 8, generator=g, dtype=torch.float64)
    positions = torch.arange(20, 29)
    out = layer_.attend(q, k, v, positions, positions)
    factors = [llama4_factor(p, 4, 0.7) for p in range(20, 29)]
    expected = torch.tensor(
        [
            [
                loop_attend(
                    q[0, m].tolist(), k[0, m].tolist(), v[0, m].tolist(), scale=8**-0.5, factors=factors
                )
                for m in range(2)
            ]
        ],
        dtype=torch.float64,
    )
    torch.testing.assert_close(out, expected, atol=1e-12, rtol=1e-12)


def test_temperature_errors_name_the_value():
    with pytest.raises(ValueError, match="ContextualPositionEncoding does not accept"):
        MultiHeadAttention(16, 2, encoding=build("cope", d_head=8, npos_max=8), temperature=ScalableSoftmax())
    with pytest.raises(ValueError, match="floor_scale must be positive, got 0"):
        Llama4Temperature(floor_scale=0)
    with pytest.raises(ValueError, match="s must be a finite number > 0, got -1"):
        ScalableSoftmax(s=-1)
    with pytest.raises(TypeError, match="temperature must be a QueryTemperature"):
        MultiHeadAttention(16, 2, temperature=0.5)
    layer_ = MultiHeadAttention(16, 2, temperature=Llama4Temperature())
    with pytest.raises(
        ValueError, match="temperature=Llama4Temperature.* reads each token's place in the text"
    ):
        layer_(torch.randn(1, 2, 16), cache=KVCache(sinks=1, window=4))


def test_shift_invariance_holds_below_the_threshold_and_its_break_past_it_is_measured():
    claim = temperature_shift(build("rope", d_head=16), Llama4Temperature(floor_scale=64, attn_scale=0.5))
    assert claim.holds and claim.value > 1e-3
    assert "past it the logits move by" in claim.reason


@dataclasses.dataclass(frozen=True)
class _EarlyTemperature(QueryTemperature):
    """A planted violation: declares its factor constant below 64, moves it from position 20."""

    threshold: int = 64

    def factors(self, positions):
        return 1 + 0.1 * (positions >= 20)


def test_a_schedule_that_moves_before_its_declared_threshold_is_caught():
    claim = temperature_shift(build("rope", d_head=16), _EarlyTemperature())
    assert claim.holds is False and "declares its factor constant below position 64" in claim.reason


@pytest.mark.slow  # every claim of the encoding is measured too
def test_the_claim_is_a_row_of_the_layers_properties():
    rows = layer_properties(build("nope"), Llama4Temperature(floor_scale=64), length=32)
    assert rows["temperature_shift"].holds and rows["relative"].holds


def test_the_claim_is_na_for_an_encoding_a_shift_already_moves():
    claim = temperature_shift(build("sinusoidal", d_model=32), Llama4Temperature(floor_scale=64))
    assert claim.holds is None and "a shift changes the encoding's own logits" in claim.reason


def test_only_kinds_whose_scores_are_linear_in_the_query_accept_a_temperature_by_default():
    from posenc.encodings import PositionalEncoding
    from posenc.encodings.capabilities import declare

    class Unknown(PositionalEncoding):
        kind = "gated"  # a kind posenc does not know: the safe answer is a refusal

    class Counted(PositionalEncoding):
        kind = "bias"
        capabilities = declare(contextual_positions=True)

    assert (
        build("rope", d_head=8).capabilities.accepts_query_temperature
        and build("alibi", n_heads=2).capabilities.accepts_query_temperature
    )
    assert (
        not Unknown().capabilities.accepts_query_temperature
        and not Counted().capabilities.accepts_query_temperature
    )
    with pytest.raises(ValueError, match="Unknown does not accept"):
        MultiHeadAttention(16, 2, encoding=Unknown(), temperature=ScalableSoftmax())
