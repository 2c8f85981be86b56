"""properties(encoding): every claim measured on every encoding, and each check catches a planted violation."""

from __future__ import annotations

import math

import pytest
import torch

from posenc import available, build
from posenc.analysis import PROPERTY_NAMES, properties, properties_by_name, specimen
from posenc.analysis.float_error import _ulps
from posenc.analysis.specimens import specimen_arguments
from posenc.encodings import (
    ENCODINGS,
    ALiBi,
    PositionalEncoding,
    RotaryEncoding,
    SinusoidalEncoding,
    T5RelativeBias,
    resolve_positions,
)
from posenc.functional.alibi import alibi_bias

#: What the literature claims and the measurement must confirm on the representative instances:
#: {encoding: {property: holds}}; properties not named are checked elsewhere or do not apply.
EXPECTED = {
    "sinusoidal": {
        "bounded": True,
        "unique": True,
        "translation_invariant": True,
        "closed_form": True,
        "linear_map": True,
        "relative": False,
        "decay": True,
        "parameters": True,
        "precision": True,
    },
    "learned": {"unique": True, "translation_invariant": False, "relative": False, "parameters": True},
    "rope": {
        "bounded": True,
        "unique": True,
        "linear_map": True,
        "relative": True,
        "decay": True,
        "precision": True,
    },
    "alibi": {"bounded": False, "unique": True, "relative": True, "decay": True, "precision": True},
    "t5": {"bounded": True, "unique": False, "relative": True, "precision": True},
    "swin": {"unique": True, "relative": True, "parameters": True},
    "nope": {"relative": True, "unique": None, "bounded": None, "precision": None},
}
CATEGORIES = {
    "sinusoidal": "implicit",
    "learned": "no",
    "rope": "explicit",
    "alibi": "explicit",
    "t5": "explicit",
    "swin": "explicit",
    "nope": "none",
}


@pytest.fixture(scope="module")
def measured():
    return properties_by_name()  # measured once per session (tests/conftest.py), as the report's


@pytest.mark.parametrize("name", available())
def test_every_encoding_gets_every_property_with_a_value_and_a_reason(measured, name):
    result = measured[name]
    assert tuple(result) == PROPERTY_NAMES
    for prop in result.values():
        assert prop.holds in (True, False, None)
        assert (prop.value is None) == (prop.holds is None), prop
        assert prop.reason and prop.threshold
        assert prop.verdict in ("holds", "fails", "n/a")


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_measured_verdicts_match_the_mathematics(measured, name):
    verdicts = {key: measured[name][key].holds for key in EXPECTED[name]}
    assert verdicts == EXPECTED[name]


@pytest.mark.parametrize("name", sorted(CATEGORIES))
def test_relative_position_column_is_measured(measured, name):
    assert measured[name]["relative"].category == CATEGORIES[name]


def test_parameters_counted_from_modules_grow_as_the_formula_says(measured):
    assert measured["learned"]["parameters"].value == 256 * 64  # the specimen's table
    assert "grows with L, d" in measured["learned"]["parameters"].reason
    assert measured["t5"]["parameters"].value == 32 * 8
    assert "grows with h" in measured["t5"]["parameters"].reason
    for name in ("sinusoidal", "rope", "alibi", "nope"):
        assert measured[name]["parameters"].value == 0


@pytest.mark.parametrize("name", available())
def test_every_registered_encoding_has_a_specimen_in_eval_mode_drawn_from_its_seed(name):
    first, again, other = specimen(name), specimen(name), specimen(name, seed=1)
    assert first.training is False
    assert isinstance(first, type(build(name, **specimen_arguments(name))))
    for (key, p), q, r in zip(
        first.state_dict().items(), again.state_dict().values(), other.state_dict().values(), strict=True
    ):
        assert torch.equal(p, q), key  # the same seed draws the same table
        if p.is_floating_point() and p.numel() > 1 and not bool((p == p.flatten()[0]).all()):
            assert not torch.equal(p, r), key  # another seed another one (a constant start is drawn from none)
    with pytest.raises(ValueError, match="unknown encoding 'nosuch'; available: alibi"):
        specimen("nosuch")


def test_length_too_short_is_refused():
    with pytest.raises(ValueError, match="length must be at least 32.*got 8"):
        properties(specimen("rope"), length=8)


# --- planted violations -------------------------------------------------------------------------


class ShuffledColumn(SinusoidalEncoding):
    """A sinusoidal table whose column 3 is permuted across positions."""

    def codes(self, positions):
        codes = super().codes(positions).clone()
        order = torch.randperm(codes.shape[0], generator=torch.Generator().manual_seed(0))
        codes[:, 3] = codes[order, 3]
        return codes


class RepeatedPosition(SinusoidalEncoding):
    """Position 5 gets the code of position 3."""

    def codes(self, positions):
        codes = super().codes(positions).clone()
        codes[positions == 5] = super().codes(torch.tensor([3]))
        return codes


class Float32Angles(SinusoidalEncoding):
    """The usual recipe: float32 positions times float32 frequencies."""

    def codes(self, positions):
        omega = self.base ** (-torch.arange(0, self.d_model, 2, dtype=torch.float32) / self.d_model)
        angle = positions.to(torch.float32)[..., None] * omega  # [..., d/2]
        return torch.stack((angle.sin(), angle.cos()), dim=-1).flatten(-2).to(torch.float64)


class WrongBase(SinusoidalEncoding):
    """Codes built with base 100 while claiming base 10000."""

    def codes(self, positions):
        return SinusoidalEncoding(self.d_model, base=100.0).codes(positions)


class PerPositionFrequencies(RotaryEncoding):
    """Rotary angles m·θ_m with frequencies drawn anew for every position m."""

    def cos_sin(self, positions):
        generator = torch.Generator().manual_seed(0)
        table = torch.rand(1 << 12, self.rotary_dim // 2, generator=generator, dtype=torch.float64)
        angle = positions.to(torch.float64)[..., None] * table[positions % (1 << 12)]  # [..., s, r/2]
        return angle.cos(), angle.sin()


def test_learned_table_fails_translation_invariance():
    result = properties(build("learned", max_len=128, d_model=32))
    assert result["translation_invariant"].holds is False
    assert result["translation_invariant"].value > 0.1


def test_rope_with_frequencies_drawn_per_position_fails_the_relative_test():
    result = properties(PerPositionFrequencies(32))
    assert result["relative"].holds is False
    assert result["relative"].value > 1e-3
    assert properties(RotaryEncoding(32))["relative"].holds is True


def test_shuffled_column_fails_the_linear_map():
    result = properties(ShuffledColumn(32))
    assert result["linear_map"].holds is False
    assert result["translation_invariant"].holds is False
    assert properties(SinusoidalEncoding(32))["linear_map"].holds is True


def test_repeated_code_fails_uniqueness():
    result = properties(RepeatedPosition(32))
    assert result["unique"].holds is False and result["unique"].value == 0.0


def test_float32_angles_fail_precision():
    result = properties(Float32Angles(32))
    assert result["precision"].holds is False
    assert result["precision"].value > 100  # ulps


def test_wrong_base_fails_the_closed_form_but_not_invariance():
    result = properties(WrongBase(32))
    assert result["translation_invariant"].holds is True
    assert result["closed_form"].holds is False


def test_xpos_fails_norm_preservation_but_keeps_relative_logits():
    result = properties(RotaryEncoding(32, xpos=True))
    assert result["bounded"].holds is False
    assert result["relative"].holds is True
    assert result["linear_map"].holds is True


def test_alibi_without_slopes_does_not_decay():
    alibi = ALiBi(4)
    alibi.slopes.zero_()
    assert properties(alibi)["decay"].holds is False


def test_scaled_rope_keeps_its_properties():
    for scaling, args in (
        ("linear", {"factor": 4.0}),
        ("yarn", {"factor": 4.0, "original_max_position_embeddings": 64}),
    ):
        result = properties(RotaryEncoding(32, scaling=scaling, scaling_args=args))
        assert result["relative"].holds is True, scaling
        assert result["linear_map"].holds is True, scaling


@pytest.mark.parametrize(
    ("kwargs", "count"),
    [
        ({"name": "t5", "n_heads": 8, "num_buckets": 8}, 8 * 8),
        ({"name": "t5", "n_heads": 3, "num_buckets": 20}, 20 * 3),
        ({"name": "swin", "n_heads": 4, "window": 3}, 5 * 5 * 4),
        ({"name": "swin", "n_heads": 2, "window": (2, 5)}, 3 * 9 * 2),
        ({"name": "learned", "max_len": 40, "d_model": 8}, 40 * 8),
    ],
)
def test_parameters_are_counted_on_the_encoding_given(kwargs, count):
    # used to count a default-sized module instead (256 for T5 with 8 buckets, 338 for a 3×3 Swin window)
    kwargs = dict(kwargs)
    result = properties(build(kwargs.pop("name"), **kwargs), length=32)["parameters"]
    assert result.value == count and result.holds is True, result.reason


def test_a_formula_that_miscounts_fails_parameters():
    class Miscounted(SinusoidalEncoding):
        parameter_formula = "d"

        @staticmethod
        def count_parameters(max_len, d_model, n_heads):
            return d_model

    result = properties(Miscounted(32))
    assert result["parameters"].holds is False
    assert "differs from the formula" in result["parameters"].reason


def test_ulps_counts_units_in_the_last_place():
    exact = torch.tensor([1.0, 3.0, -0.25], dtype=torch.float64)
    assert _ulps(exact.to(torch.float32), exact, torch.float32) == 0.0
    one_up = torch.tensor([1.0 + 2**-23], dtype=torch.float64)
    assert _ulps(one_up, torch.tensor([1.0], dtype=torch.float64), torch.float32) == pytest.approx(1.0)
    two_up = torch.tensor([0.25 + 2 * 2**-25], dtype=torch.float64)
    assert _ulps(two_up, torch.tensor([0.25], dtype=torch.float64), torch.float32) == pytest.approx(2.0)


def test_codes_outside_the_unit_interval_fail_boundedness():
    class Doubled(SinusoidalEncoding):
        def codes(self, positions):
            return 2 * super().codes(positions)

    result = properties(Doubled(32))
    assert result["bounded"].holds is False and result["bounded"].value == pytest.approx(2.0)


def test_a_small_learned_table_is_measured_inside_its_positions():
    result = properties(build("learned", max_len=40, d_model=8))  # shifts of 1 and 7 fit, 100 does not
    assert result["relative"].category == "no"
    assert result["translation_invariant"].holds is False


# --- encodings that give only their own hook ----------------------------------------------------


class Turn(PositionalEncoding):
    """Turns pair (2k, 2k+1) by position / (k + 1), times ``scale``; it keeps no d_head."""

    kind = "rotary"
    scale = 1.0

    def rotate(self, q, k, q_positions=None, k_positions=None):
        return self._turn(q, q_positions), self._turn(k, k_positions)

    def _turn(self, x, positions):
        positions = resolve_positions(positions, x, seq_dim=2).to(torch.float64)  # [s]
        angles = positions[:, None] / torch.arange(1, x.shape[-1] // 2 + 1, dtype=torch.float64)  # [s, d/2]
        even, odd = x[..., 0::2], x[..., 1::2]
        turned = torch.stack(
            (even * angles.cos() - odd * angles.sin(), even * angles.sin() + odd * angles.cos())
        )
        return self.scale * turned.movedim(0, -1).flatten(-2)


class ScaledTurn(Turn):
    """Turn with a factor on q and k that no attribute names (as RoPE's attention factor)."""

    scale = 2.0


class LearnedDistanceBias(PositionalEncoding):
    """A learned bias per head and clipped distance; declares neither a formula nor a count."""

    kind = "bias"

    def __init__(self, n_heads: int, *, max_distance: int = 8) -> None:
        super().__init__()
        self.n_heads, self.max_distance = n_heads, max_distance
        self.table = torch.nn.Parameter(torch.linspace(0.0, -1.0, max_distance + 1).repeat(n_heads, 1))

    def bias(self, q_positions, k_positions):
        distance = (q_positions[:, None] - k_positions[None, :]).abs().clamp_max(self.max_distance)
        return self.table[:, distance]  # [h, i, j]


def test_a_rotation_without_d_head_is_measured_through_rotate():
    # used to raise AttributeError: 'Turn' object has no attribute 'd_head'
    result = properties(Turn())
    assert all(prop.error is None for prop in result.values()), result
    assert result["bounded"].holds is True and result["linear_map"].holds is True
    assert result["relative"].category == "explicit" and result["decay"].holds in (True, False)
    assert result["unique"].holds is None and "rotation_tables" in result["unique"].reason


def test_a_rotation_factor_is_read_from_rotate_not_from_an_attribute():
    result = properties(ScaledTurn())
    assert result["linear_map"].holds is True, result["linear_map"]  # R(m + k) = R(k)·R(m) / 2
    assert result["bounded"].holds is False  # the factor changes ‖q‖


def test_a_learned_table_with_a_formula_but_no_count_is_counted_not_failed():
    class Declared(LearnedDistanceBias):
        parameter_formula = "(K+1)·h"

    # used to fail: "36 counted, formula gives 0"
    result = properties(Declared(4))["parameters"]
    assert result.holds is True and result.value == 36 and "grows with h" in result.reason


def test_an_encoding_without_a_formula_gets_its_count_and_no_verdict():
    result = properties(LearnedDistanceBias(4, max_distance=5))["parameters"]
    assert result.holds is None and result.value is None
    assert "declares no parameter_formula" in result.reason and "24 counted" in result.reason


def test_a_hook_that_raises_is_that_claims_error_and_the_others_are_measured():
    class Broken(SinusoidalEncoding):
        def closed_form_dot(self, distances):
            raise RuntimeError("no closed form today")

    result = properties(Broken(32))
    closed = result["closed_form"]
    assert closed.verdict == "error" and closed.holds is False  # never hidden as a pass or n/a
    assert closed.error == "RuntimeError: no closed form today" and closed.error in closed.reason
    assert result["bounded"].holds is True and result["linear_map"].holds is True


def test_an_encoding_that_cannot_be_built_does_not_stop_the_others(monkeypatch):
    class Unbuildable(PositionalEncoding):
        def __init__(self) -> None:
            raise ValueError("needs a table file")

    monkeypatch.setitem(ENCODINGS, "unbuildable", Unbuildable)
    table = properties_by_name(["sinusoidal", "unbuildable"], length=32)
    assert {prop.verdict for prop in table["unbuildable"].values()} == {"error"}
    assert "ValueError: needs a table file" in table["unbuildable"]["bounded"].reason
    assert table["sinusoidal"]["bounded"].holds is True
    with pytest.raises(ValueError, match="length must be at least 32.*got 8"):
        properties_by_name(["sinusoidal"], length=8)


def test_running_out_of_memory_is_raised_not_recorded_as_one_encodings_error():
    class Hungry(SinusoidalEncoding):
        def closed_form_dot(self, distances):
            raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 GiB")

    with pytest.raises(RuntimeError, match="can't allocate memory"):
        properties(Hungry(32))


def test_a_bias_is_described_by_its_measured_growth_not_by_alibis_or_t5s_design():
    # the reasons were ALiBi's ("a penalty linear in distance, by design") and T5's ("past the last
    # bucket") for every bias; Kerple's log-distance bias grows far slower than linearly, and FIRE has
    # no buckets
    alibi = properties(build("alibi", n_heads=4))["bounded"]
    assert alibi.holds is False and "×4.01 over 4× the distance" in alibi.reason
    torch.manual_seed(0)
    kerple = properties(build("kerple", n_heads=4))["bounded"]
    assert kerple.holds is False and f"×{kerple.value:.3g} over 4× the distance" in kerple.reason
    assert "linear" not in kerple.reason
    torch.manual_seed(2)  # a FIRE whose bias is flat beyond 256
    fire = properties(build("fire", n_heads=4))["bounded"]
    assert fire.holds is True and "bucket" not in fire.reason and "stops growing" in fire.reason


# --- keys after the query, NaNs, the cached tables, scaled tables, float32 biases ------------------


class RisingFuture(ALiBi):
    """Declared symmetric (−m·|i − j|), but a key after the query gets +m·(j − i): causal ALiBi's formula."""

    def bias(self, q_positions, k_positions):
        return alibi_bias(q_positions, k_positions, self.slopes, symmetric=False)


class FlatFuture(ALiBi):
    """Declared symmetric, but every key after the query gets bias 0: they cannot be told apart."""

    def bias(self, q_positions, k_positions):
        after = (k_positions[None, :] > q_positions[:, None]).to(torch.float32)  # [i, j]
        return super().bias(q_positions, k_positions) * (1 - after)


class GrowingFutureT5(T5RelativeBias):
    """Bidirectional T5 (bounded by its buckets) plus 0.01·(j − i) for keys after the query."""

    def bias(self, q_positions, k_positions):
        ahead = (k_positions[None, :] - q_positions[:, None]).clamp_min(0).to(torch.float32)  # [i, j]
        return super().bias(q_positions, k_positions) + 0.01 * ahead


def test_a_bidirectional_bias_is_measured_on_keys_after_the_query():
    # every bias claim read the query at T − 1 and keys 0 … T − 1: keys after the query were never seen
    correct, rising = properties(ALiBi(8, symmetric=True)), properties(RisingFuture(8, symmetric=True))
    assert correct["decay"].holds is True and correct["precision"].holds is True
    assert rising["decay"].holds is False and rising["precision"].holds is False
    assert properties(FlatFuture(8, symmetric=True))["unique"].holds is False
    assert properties(T5RelativeBias(4, bidirectional=True))["bounded"].holds is True
    assert properties(GrowingFutureT5(4, bidirectional=True))["bounded"].holds is False


def test_a_causal_bias_is_measured_on_keys_up_to_the_query_only():
    # causal ALiBi gives keys after the query +m·(j − i), which the mask removes: not a claim
    result = properties(ALiBi(8))
    assert result["decay"].holds is True and result["precision"].holds is True


class NaNPast100(RotaryEncoding):
    """RoPE whose rotation is NaN at positions ≥ 100 (an overflowing table): only the shift by 100 sees it."""

    def cos_sin(self, positions, *, seq_len=None):
        cos, sin = super().cos_sin(positions, seq_len=seq_len)
        broken = (positions >= 100)[..., None]
        return cos.masked_fill(broken, float("nan")), sin.masked_fill(broken, float("nan"))


def test_logits_that_turn_nan_at_one_shift_fail_the_relative_claim():
    # Python's max() over the shifts dropped the NaN of the last one: "holds, explicit" at ~1e-16
    result = properties(NaNPast100(64))["relative"]
    assert result.holds is False and not math.isfinite(result.value)  # inf: the finite logits moved
    assert "NaN" in result.reason


class Float32CacheRope(RotaryEncoding):
    """RoPE whose cache (positions below 2^16) is filled from float32 angles; far positions are exact."""

    def _grow(self, length):
        angle = torch.arange(length, dtype=torch.float32)[:, None] * self.inv_freq.to(torch.float32)
        self.cos_cached = angle.cos().double() * self.attention_factor
        self.sin_cached = angle.sin().double() * self.attention_factor


class Float32CacheSinusoidal(SinusoidalEncoding):
    """A sinusoidal code whose cached table (positions below 2^16) is filled from float32 angles."""

    def _grow(self, length):
        if length > self.table.shape[0]:
            length = max(length, 2 * self.table.shape[0])
            omega = self.base ** (-torch.arange(0, self.d_model, 2, dtype=torch.float32) / self.d_model)
            angle = torch.arange(length, dtype=torch.float32)[:, None] * omega
            self.table = torch.stack((angle.sin(), angle.cos()), -1).flatten(-2).double()


@pytest.mark.parametrize("planted", [Float32CacheRope, Float32CacheSinusoidal])
def test_a_cache_filled_from_float32_angles_fails_precision(planted):
    # one call reaching 2^21 took the direct path: the cache every ordinary call reads was never measured
    result = properties(planted(64))["precision"]
    assert result.holds is False and result.value > 100


def test_yarn_tables_are_judged_without_a_rounding_of_the_check():
    # dividing the float32 table by a float32 attention factor added a rounding: 1.37 ulps, "fails"
    enc = RotaryEncoding(
        64, scaling="yarn", scaling_args={"factor": 4.0, "original_max_position_embeddings": 64}
    )
    assert enc.attention_factor != 1.0
    result = properties(enc)["precision"]
    assert result.holds is True and result.value <= 0.5 + 1e-6, result.reason


class SlowlyGrowingBias(ALiBi):
    """A float32 bias −(1 + 1e-5·log(1 + |i − j|)): it grows without limit, 1.4e-5 between 256 and 1024."""

    def bias(self, q_positions, k_positions):
        distance = (q_positions[:, None] - k_positions[None, :]).abs().to(torch.float32)  # [i, j]
        return -(1 + 1e-5 * torch.log1p(distance)).expand(self.n_heads, -1, -1)


def test_a_float32_bias_is_bounded_within_float32_rounding_but_a_slow_growth_is_caught():
    # FIRE's f_θ lies on [0, 1]; its float32 max moved by one rounding (1.1e-7) and failed against 1e-9
    fire = properties(specimen("fire"))["bounded"]
    assert fire.holds is True and fire.value - 1 < 4 * torch.finfo(torch.float32).eps, fire.reason
    slow = properties(SlowlyGrowingBias(4))["bounded"]
    assert slow.holds is False and slow.value > 1 + 1e-5
