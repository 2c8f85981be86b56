"""RoPE scalings as the serving engines define them: float64 loops written from each formula.

YaRN's ``extrapolation_factor`` / ``attn_factor`` and DeepSeek's YaRN with its softmax scale (vLLM's
``YaRNScalingRotaryEmbedding`` / ``DeepseekScalingRotaryEmbedding``), Su's NTK with and without
``mixed_b`` (``NTKScalingRotaryEmbedding``, https://kexue.fm/archives/9706), NTK by ``alpha``
(``DynamicNTKAlphaRotaryEmbedding``) and Gemma 4's ``proportional`` RoPE. Each loop below is the formula
per pair k in Python floats, not posenc's code; a planted variant with one term changed shows that the
comparison would catch a wrong formula.
"""

from __future__ import annotations

import math

import pytest
import torch

from posenc.functional import rope as rope_module
from posenc.functional.rope import SCALINGS, rope_inv_freq, rope_logit_scale


def _mscale(scale: float, m: float = 1.0) -> float:
    return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0


def yarn_loop(
    r: int,
    base: float,
    factor: float,
    original: int,
    *,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    truncate: bool = True,
    extrapolation_factor: float = 1.0,
) -> list[float]:
    """θ_k·m_k + θ_k/factor·(1 − m_k), m_k = (1 − ramp_k)·extrapolation_factor."""

    def dim(rotations: float) -> float:
        return r * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = dim(beta_fast), dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, r - 1)
    if low == high:
        high += 0.001
    out = []
    for k in range(r // 2):
        theta = base ** (-2 * k / r)
        ramp = min(max((k - low) / (high - low), 0.0), 1.0)
        mask = (1 - ramp) * extrapolation_factor
        out.append(theta / factor * (1 - mask) + theta * mask)
    return out


def ntk_su_loop(r: int, base: float, factor: float, mixed_b: float | None) -> list[float]:
    """Fixed: (base·f)^(−2k/r) / f^(2/r). Mixed: base^(−2k/r) / exp(a·(k+1)^b), a = ln f / (r/2)^b."""
    if mixed_b is None:
        return [(base * factor) ** (-2 * k / r) / factor ** (2 / r) for k in range(r // 2)]
    a = math.log(factor) / (r / 2) ** mixed_b
    return [base ** (-2 * k / r) / math.exp(a * (k + 1) ** mixed_b) for k in range(r // 2)]


def ntk_alpha_loop(r: int, base: float, alpha: float) -> list[float]:
    """(base·α^(r/(r−2)))^(−2k/r)."""
    scaled = base * alpha ** (r / (r - 2))
    return [scaled ** (-2 * k / r) for k in range(r // 2)]


def proportional_loop(d: int, base: float, factor: float, partial: float) -> list[float]:
    """base^(−2k/d)/factor for k < ⌊partial·d/2⌋, 0 after."""
    turning = int(partial * d // 2)
    return [(base ** (-2 * k / d) if k < turning else 0.0) / factor for k in range(d // 2)]


def _close(actual: torch.Tensor, expected: list[float]) -> bool:
    return actual.dtype == torch.float64 and torch.allclose(
        actual, torch.tensor(expected, dtype=torch.float64), rtol=1e-13, atol=0.0
    )


YARN_CASES = [
    dict(factor=4.0, original=2048, extrapolation_factor=1.0),
    dict(factor=16.0, original=4096, extrapolation_factor=0.5),
    dict(factor=40.0, original=4096, extrapolation_factor=0.0, truncate=False),
    dict(factor=8.0, original=8192, extrapolation_factor=0.8, beta_fast=16.0, beta_slow=2.0),
]


@pytest.mark.parametrize("case", YARN_CASES)
@pytest.mark.parametrize(("r", "base"), [(64, 10000.0), (128, 500000.0)])
def test_yarn_extrapolation_factor_scales_the_ramp_mask_as_the_loop_says(case, r, base):
    case = dict(case)
    factor, original = case.pop("factor"), case.pop("original")
    inv_freq, attention = rope_inv_freq(
        r, base=base, scaling="yarn", factor=factor, original_max_position_embeddings=original, **case
    )
    assert _close(inv_freq, yarn_loop(r, base, factor, original, **case))
    assert attention == pytest.approx(_mscale(factor), rel=1e-15)


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"attn_factor": 0.5}, 0.5 * _mscale(8.0)),
        ({"attention_factor": 1.25, "attn_factor": 2.0}, 2.5),
        ({"mscale": 0.7, "mscale_all_dim": 0.7, "attn_factor": 1.5}, 1.5),
        ({"mscale": 1.0, "mscale_all_dim": 0.5}, _mscale(8.0, 1.0) / _mscale(8.0, 0.5)),
    ],
)
def test_yarn_attn_factor_multiplies_the_mscale(arguments, expected):
    _, attention = rope_inv_freq(
        64, scaling="yarn", factor=8.0, original_max_position_embeddings=4096, **arguments
    )
    assert attention == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize(
    ("factor", "mscale", "mscale_all_dim", "attn_factor", "extrapolation_factor"),
    [
        (40.0, 1.0, 1.0, 1.0, 1.0),
        (40.0, 0.707, 0.707, 1.0, 1.0),
        (16.0, 1.0, 0.0, 1.2, 0.9),
        (1.0, 1.0, 1.0, 1.0, 1.0),
    ],
)
def test_deepseek_yarn_frequencies_and_attention_factor_follow_the_formula(
    factor, mscale, mscale_all_dim, attn_factor, extrapolation_factor
):
    r, base, original = 64, 10000.0, 4096
    inv_freq, attention = rope_inv_freq(
        r,
        base=base,
        scaling="deepseek_yarn",
        factor=factor,
        original_max_position_embeddings=original,
        mscale=mscale,
        mscale_all_dim=mscale_all_dim,
        attn_factor=attn_factor,
        extrapolation_factor=extrapolation_factor,
    )
    expected = yarn_loop(r, base, factor, original, truncate=True, extrapolation_factor=extrapolation_factor)
    assert _close(inv_freq, expected)
    ratio = _mscale(factor, mscale) / _mscale(factor, mscale_all_dim)
    assert attention == pytest.approx(ratio * attn_factor, rel=1e-15)


@pytest.mark.parametrize(
    ("d_head", "factor", "mscale_all_dim"), [(192, 40.0, 1.0), (64, 4.0, 0.707), (128, 40.0, 0.0)]
)
def test_deepseek_softmax_scale_is_mscale_all_dim_squared_over_root_d(d_head, factor, mscale_all_dim):
    scale = rope_logit_scale(d_head, scaling="deepseek_yarn", factor=factor, mscale_all_dim=mscale_all_dim)
    expected = (0.1 * mscale_all_dim * math.log(factor) + 1.0) ** 2 / math.sqrt(d_head)
    assert scale == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("scaling", [None, "yarn", "linear", "ntk_su", "proportional"])
def test_every_other_scaling_keeps_the_softmax_scale_one_over_root_d(scaling):
    arguments = {"factor": 40.0, "mscale_all_dim": 1.0} if scaling == "yarn" else {}
    assert rope_logit_scale(128, scaling=scaling, **arguments) == 128**-0.5


def test_deepseek_logits_carry_mscale_squared_overall():
    """cos·sin carry mscale(f, m)/mscale(f, m_all) each, the softmax scale mscale(f, m_all)²: q·k gains
    mscale(f, m)² — the magnitude YaRN asks for, split the way DeepSeek's checkpoints split it."""
    factor, m, m_all = 40.0, 0.8, 0.6
    _, attention = rope_inv_freq(
        64,
        scaling="deepseek_yarn",
        factor=factor,
        original_max_position_embeddings=4096,
        mscale=m,
        mscale_all_dim=m_all,
    )
    scale = rope_logit_scale(64, scaling="deepseek_yarn", factor=factor, mscale_all_dim=m_all)
    assert attention**2 * scale * math.sqrt(64) == pytest.approx(_mscale(factor, m) ** 2, rel=1e-14)


@pytest.mark.parametrize("mixed_b", [None, 0.625, 1.0, 2.0])
@pytest.mark.parametrize(("r", "factor"), [(64, 8.0), (128, 4.0), (16, 1.5)])
def test_su_ntk_follows_the_fixed_and_mixed_formulas(mixed_b, r, factor):
    arguments = {} if mixed_b is None else {"mixed_b": mixed_b}
    inv_freq, attention = rope_inv_freq(r, scaling="ntk_su", factor=factor, **arguments)
    assert _close(inv_freq, ntk_su_loop(r, 10000.0, factor, mixed_b)) and attention == 1.0


def test_su_ntk_divides_the_slowest_pair_by_the_factor_exactly_and_the_fastest_least():
    plain, _ = rope_inv_freq(64)
    for arguments in ({}, {"mixed_b": 0.625}):
        scaled, _ = rope_inv_freq(64, scaling="ntk_su", factor=8.0, **arguments)
        divisor = plain / scaled
        assert float(divisor[-1]) == pytest.approx(8.0, rel=1e-13)
        assert bool((divisor[1:] >= divisor[:-1]).all())  # rising from fast to slow


@pytest.mark.parametrize(
    ("r", "alpha", "base"), [(64, 1000.0, 10000.0), (128, 2.5, 500000.0), (4, 3.0, 10.0)]
)
def test_ntk_alpha_stretches_the_base_by_alpha_to_r_over_r_minus_2(r, alpha, base):
    inv_freq, attention = rope_inv_freq(r, base=base, scaling="ntk_alpha", alpha=alpha)
    assert _close(inv_freq, ntk_alpha_loop(r, base, alpha)) and attention == 1.0


@pytest.mark.parametrize(
    ("d", "factor", "partial"), [(64, 1.0, 0.25), (256, 8.0, 0.25), (16, 2.0, 1.0), (12, 1.0, 0.5)]
)
def test_proportional_turns_the_first_pairs_and_stops_the_rest(d, factor, partial):
    inv_freq, attention = rope_inv_freq(
        d, base=1e6, scaling="proportional", factor=factor, partial_rotary_factor=partial
    )
    assert _close(inv_freq, proportional_loop(d, 1e6, factor, partial)) and attention == 1.0


def test_proportional_is_not_a_narrower_rotary_dim():
    """The turning pairs keep base^(−2k/d) of the whole head, not base^(−2k/r) of a narrower rotation."""
    proportional, _ = rope_inv_freq(64, scaling="proportional", partial_rotary_factor=0.25)
    narrower, _ = rope_inv_freq(16)
    assert not torch.allclose(proportional[:8], narrower)
    assert bool((proportional[8:] == 0).all())


def _yarn_scaling_the_spectrum(
    r,
    base,
    *,
    factor,
    original_max_position_embeddings,
    beta_fast=32.0,
    beta_slow=1.0,
    extrapolation_factor=1.0,
) -> tuple[torch.Tensor, float]:
    frequencies = rope_module._yarn_frequencies(
        r, base, factor, original_max_position_embeddings, beta_fast, beta_slow, True, 1.0
    )
    return frequencies * extrapolation_factor, 1.0


def _planted(monkeypatch, name, variant):
    monkeypatch.setitem(SCALINGS, name, variant)


@pytest.mark.parametrize(
    ("name", "variant", "arguments", "loop"),
    [
        (  # λ_k from k instead of k + 1
            "ntk_su",
            lambda r, base, *, factor, mixed_b=None: (
                torch.tensor(
                    [
                        base ** (-2 * k / r) / math.exp(math.log(factor) / (r / 2) ** mixed_b * k**mixed_b)
                        for k in range(r // 2)
                    ],
                    dtype=torch.float64,
                ),
                1.0,
            ),
            {"factor": 8.0, "mixed_b": 0.625},
            lambda: ntk_su_loop(64, 10000.0, 8.0, 0.625),
        ),
        (  # the exponent r/(r − 2) left out
            "ntk_alpha",
            lambda r, base, *, alpha: rope_module._default(r, base * alpha),
            {"alpha": 1000.0},
            lambda: ntk_alpha_loop(64, 10000.0, 1000.0),
        ),
        (  # the stopped pairs divided from r/2 · partial instead of ⌊partial · d / 2⌋: one pair more
            "proportional",
            lambda r, base, *, factor=1.0, partial_rotary_factor=1.0: (
                torch.tensor(
                    [
                        base ** (-2 * k / r) / factor if k <= partial_rotary_factor * r // 2 else 0.0
                        for k in range(r // 2)
                    ],
                    dtype=torch.float64,
                ),
                1.0,
            ),
            {"partial_rotary_factor": 0.25},
            lambda: proportional_loop(64, 10000.0, 1.0, 0.25),
        ),
        (  # extrapolation_factor on the whole spectrum instead of the ramp mask
            "yarn",
            _yarn_scaling_the_spectrum,
            {"factor": 16.0, "original_max_position_embeddings": 4096, "extrapolation_factor": 0.5},
            lambda: yarn_loop(64, 10000.0, 16.0, 4096, extrapolation_factor=0.5),
        ),
    ],
)
def test_a_planted_wrong_formula_is_caught_by_the_loop_comparison(
    monkeypatch, name, variant, arguments, loop
):
    inv_freq, _ = rope_inv_freq(64, scaling=name, **arguments)
    assert _close(inv_freq, loop())  # the real formula passes
    _planted(monkeypatch, name, variant)
    planted, _ = rope_inv_freq(64, scaling=name, **arguments)
    assert not _close(planted, loop())


def test_a_planted_softmax_scale_without_the_square_is_caught():
    expected = (0.1 * math.log(40.0) + 1.0) ** 2 / math.sqrt(192)
    assert rope_logit_scale(192, scaling="deepseek_yarn", factor=40.0, mscale_all_dim=1.0) == pytest.approx(
        expected
    )
    assert (0.1 * math.log(40.0) + 1.0) / math.sqrt(192) != pytest.approx(expected)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: rope_inv_freq(
                64, scaling="yarn", factor=4.0, original_max_position_embeddings=64, extrapolation_factor=-1
            ),
            ValueError,
            "extrapolation_factor must be non-negative",
        ),
        (
            lambda: rope_inv_freq(
                64, scaling="yarn", factor=4.0, original_max_position_embeddings=64, attn_factor=0.0
            ),
            ValueError,
            "attn_factor must be positive and finite, got 0.0",
        ),
        (
            lambda: rope_inv_freq(
                64, scaling="deepseek_yarn", factor=0.5, original_max_position_embeddings=64
            ),
            ValueError,
            "deepseek_yarn's factor is the context extension and must be at least 1, got factor=0.5",
        ),
        (
            lambda: rope_inv_freq(
                64, scaling="deepseek_yarn", factor=4.0, original_max_position_embeddings=64, truncate=False
            ),
            ValueError,
            "scaling 'deepseek_yarn' does not take truncate",
        ),
        (lambda: rope_inv_freq(64, scaling="ntk_su"), ValueError, "scaling 'ntk_su' needs factor"),
        (
            lambda: rope_inv_freq(64, scaling="ntk_su", factor=4.0, mixed_b=-1.0),
            ValueError,
            "mixed_b must be positive and finite, got -1.0",
        ),
        (
            lambda: rope_inv_freq(64, scaling="ntk_alpha", alpha=0),
            ValueError,
            "alpha must be positive and finite, got 0",
        ),
        (lambda: rope_inv_freq(2, scaling="ntk_alpha", alpha=2.0), ValueError, "needs rotary_dim ≥ 4"),
        (
            lambda: rope_inv_freq(64, scaling="proportional", partial_rotary_factor=1.5),
            ValueError,
            "partial_rotary_factor=1.5",
        ),
        (lambda: rope_logit_scale(64, scaling="deepseek"), ValueError, "unknown scaling 'deepseek'"),
        (
            lambda: rope_logit_scale(64, scaling="deepseek_yarn"),
            ValueError,
            "scaling 'deepseek_yarn' needs factor",
        ),
        (lambda: rope_logit_scale(0), ValueError, "d_head must be positive, got 0"),
        (
            lambda: rope_logit_scale(64, scaling="deepseek_yarn", factor=4.0, mscale_all_dim=-1.0),
            ValueError,
            "mscale_all_dim must be non-negative",
        ),
    ],
)
def test_bad_serving_scaling_arguments_are_named(call, error, message):
    with pytest.raises(error, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()


@pytest.mark.parametrize("gamma", [-1.0, -0.5, 0.0, float("nan"), float("inf")])
def test_xpos_refuses_a_gamma_outside_its_domain(gamma):
    # ζ_k = (2k/r + γ)/(1 + γ) lies in (0, 1) only for γ > 0: −0.5 gave ζ = −1 … 0.5, −1 a scale of −inf
    from posenc.functional.rope import xpos_scale, xpos_zeta

    with pytest.raises(ValueError, match="gamma must be positive and finite"):
        xpos_zeta(8, gamma=gamma)
    with pytest.raises(ValueError, match="gamma must be positive and finite"):
        xpos_scale(torch.tensor([0, 512]), 8, gamma=gamma)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_cos_sin_refuse_frequencies_that_are_not_finite(bad):
    from posenc.functional.rope import rope_cos_sin

    with pytest.raises(ValueError, match=f"inv_freq must be finite, got {bad}"):
        rope_cos_sin(4, torch.tensor([bad, 1.0], dtype=torch.float64))


def test_longrope_refuses_an_original_length_whose_log_is_zero():
    # its attention factor divides by log(original_max_position_embeddings): ZeroDivisionError before
    with pytest.raises(ValueError, match="must be at least 2, got 1"):
        rope_inv_freq(
            8,
            scaling="longrope",
            short_factor=[1.0] * 4,
            long_factor=[2.0] * 4,
            original_max_position_embeddings=1,
            factor=2.0,
        )
