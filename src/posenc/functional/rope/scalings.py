"""RoPE frequencies and their scalings: θ_k = base^(−2k/r), and the context-extension methods that
change them (linear, NTK, dynamic NTK, YaRN, Llama 3, LongRoPE, …) as a dict of functions with one
signature, ``(rotary_dim, base, **arguments) -> (inv_freq, attention_factor)``."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence

import torch

from posenc._validation import (
    check_bool,
    check_even_positive_int,
    check_nonnegative_float,
    check_positive_float,
    check_positive_floats,
    check_positive_int,
)


def _exponents(rotary_dim: int) -> torch.Tensor:
    """2k/r for k = 0 … r/2 − 1, float64 ``[r/2]``."""
    return torch.arange(0, rotary_dim, 2, dtype=torch.float64) / rotary_dim


def _default(rotary_dim: int, base: float) -> tuple[torch.Tensor, float]:
    return base ** -_exponents(rotary_dim), 1.0


def _linear(rotary_dim: int, base: float, *, factor: float) -> tuple[torch.Tensor, float]:
    """Position interpolation (Chen et al., 2023, https://arxiv.org/abs/2306.15595): θ_k / factor."""
    inv_freq, _ = _default(rotary_dim, base)
    return inv_freq / factor, 1.0


def _ntk(rotary_dim: int, base: float, *, factor: float) -> tuple[torch.Tensor, float]:
    """NTK-aware scaling (bloc97, 2023): base · factor^(r/(r−2)), stretching low frequencies most."""
    return _default(rotary_dim, base * factor ** (rotary_dim / (rotary_dim - 2)))


def _dynamic(
    rotary_dim: int,
    base: float,
    *,
    factor: float,
    original_max_position_embeddings: int,
    seq_len: int | None = None,
) -> tuple[torch.Tensor, float]:
    """Dynamic NTK (emozilla, 2023): the NTK base for the current length L' = max(seq_len, L).

    base' = base · (factor·L'/L − (factor − 1))^(r/(r−2)); identical to the default below L.
    (transformers names L ``max_position_embeddings`` for this scaling.)
    """
    length = original_max_position_embeddings
    seq_len = length if seq_len is None else max(seq_len, length)
    scaled = base * ((factor * seq_len / length) - (factor - 1)) ** (rotary_dim / (rotary_dim - 2))
    return _default(rotary_dim, scaled)


def _yarn_mscale(scale: float, mscale: float = 1.0) -> float:
    """YaRN's magnitude correction 0.1·mscale·ln(scale) + 1 (1 for scale ≤ 1)."""
    return 1.0 if scale <= 1 else 0.1 * mscale * math.log(scale) + 1.0


def _yarn_frequencies(
    rotary_dim: int,
    base: float,
    factor: float,
    original_max_position_embeddings: int,
    beta_fast: float,
    beta_slow: float,
    truncate: bool,
    extrapolation_factor: float,
) -> torch.Tensor:
    """YaRN's "NTK-by-parts" frequencies, float64 ``[r/2]``: θ_k·m_k + θ_k/factor·(1 − m_k).

    The mask m_k = (1 − ramp_k)·``extrapolation_factor`` is 1 for pairs that turn more than
    ``beta_fast`` times over the original length (kept) and 0 for those turning fewer than
    ``beta_slow`` times (divided by ``factor``), linear in the pair index between; ``truncate``
    rounds the ramp's ends outwards to whole pairs.
    """

    def correction_dim(rotations: float) -> float:
        # the channel index whose frequency turns `rotations` times over the original length
        return (
            rotary_dim
            * math.log(original_max_position_embeddings / (rotations * 2 * math.pi))
            / (2 * math.log(base))
        )

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, rotary_dim - 1)
    if low == high:
        high += 0.001  # the ramp needs a width
    ramp = ((torch.arange(rotary_dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
    extrapolation, _ = _default(rotary_dim, base)
    interpolation = extrapolation / factor
    keep = (1 - ramp) * extrapolation_factor  # 1 for high frequencies (kept), 0 for low ones (interpolated)
    return interpolation * (1 - keep) + extrapolation * keep


def _yarn(
    rotary_dim: int,
    base: float,
    *,
    factor: float,
    original_max_position_embeddings: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    attention_factor: float | None = None,
    mscale: float | None = None,
    mscale_all_dim: float | None = None,
    truncate: bool = True,
    extrapolation_factor: float = 1.0,
    attn_factor: float = 1.0,
) -> tuple[torch.Tensor, float]:
    """YaRN (Peng et al., 2023, https://arxiv.org/abs/2309.00071).

    Frequencies that turn more than ``beta_fast`` times over the original length keep their value,
    those turning fewer than ``beta_slow`` times are divided by ``factor``, with a linear ramp over
    the channel index between (the ramp mask times ``extrapolation_factor``, 1 by default, as in
    vLLM); attention logits are scaled by the attention factor² through cos and sin. The attention
    factor is ``attention_factor`` when given, else 0.1·ln(factor) + 1 (or DeepSeek's
    mscale / mscale_all_dim ratio when both are given), times ``attn_factor`` (vLLM's, 1 by default).
    """
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
        else:
            attention_factor = _yarn_mscale(factor)
    inv_freq = _yarn_frequencies(
        rotary_dim,
        base,
        factor,
        original_max_position_embeddings,
        beta_fast,
        beta_slow,
        truncate,
        extrapolation_factor,
    )
    return inv_freq, float(attention_factor) * attn_factor


def _deepseek_yarn(
    rotary_dim: int,
    base: float,
    *,
    factor: float,
    original_max_position_embeddings: int,
    beta_fast: float = 32.0,
    beta_slow: float = 1.0,
    mscale: float = 1.0,
    mscale_all_dim: float = 0.0,
    extrapolation_factor: float = 1.0,
    attn_factor: float = 1.0,
) -> tuple[torch.Tensor, float]:
    """DeepSeek's YaRN (DeepSeek-V2, DeepSeek-AI, 2024, https://arxiv.org/abs/2405.04434), as vLLM's
    ``DeepseekScalingRotaryEmbedding`` defines it.

    YaRN's frequencies with the ramp's ends truncated to whole pairs; cos and sin are scaled by
    mscale(factor, ``mscale``) / mscale(factor, ``mscale_all_dim``) · ``attn_factor``, where
    mscale(s, m) = 0.1·m·ln(s) + 1 (1 for s ≤ 1). The attention's softmax scale is multiplied by
    mscale(factor, ``mscale_all_dim``)² as well (:func:`rope_logit_scale`), so that the logits carry
    mscale(factor, ``mscale``)² overall.
    """
    inv_freq = _yarn_frequencies(
        rotary_dim,
        base,
        factor,
        original_max_position_embeddings,
        beta_fast,
        beta_slow,
        True,
        extrapolation_factor,
    )
    ratio = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim)
    return inv_freq, ratio * attn_factor


def _llama3(
    rotary_dim: int,
    base: float,
    *,
    factor: float,
    original_max_position_embeddings: int,
    low_freq_factor: float = 1.0,
    high_freq_factor: float = 4.0,
) -> tuple[torch.Tensor, float]:
    """Llama 3.1 scaling (Meta, 2024): wavelengths above L/low_freq_factor divided by ``factor``,
    below L/high_freq_factor kept, smoothly interpolated between (defaults: Meta's 1 and 4)."""
    inv_freq, _ = _default(rotary_dim, base)
    length = original_max_position_embeddings
    wavelength = 2 * math.pi / inv_freq
    scaled = torch.where(wavelength > length / low_freq_factor, inv_freq / factor, inv_freq)
    smooth = (length / wavelength - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelength >= length / high_freq_factor) & (wavelength <= length / low_freq_factor)
    return torch.where(medium, smoothed, scaled), 1.0


def _longrope(
    rotary_dim: int,
    base: float,
    *,
    short_factor: Sequence[float],
    long_factor: Sequence[float],
    original_max_position_embeddings: int,
    factor: float | None = None,
    attention_factor: float | None = None,
    seq_len: int | None = None,
) -> tuple[torch.Tensor, float]:
    """LongRoPE (Ding et al., 2024, https://arxiv.org/abs/2402.13753), as in Phi-3.

    θ_k / ext_k with the per-frequency ``long_factor`` when ``seq_len`` exceeds the original length,
    ``short_factor`` otherwise; attention factor √(1 + ln(factor)/ln(L)) unless given, where ``factor``
    is the context extension (max_position_embeddings / original_max_position_embeddings).
    """
    if attention_factor is None:
        if factor is None:
            raise ValueError(
                "longrope needs factor (max_position_embeddings / original_max_position_embeddings) or attention_factor"
            )
        length = original_max_position_embeddings
        if factor > 1 and length < 2:
            raise ValueError(
                "longrope's attention factor divides by log(original_max_position_embeddings): it must be at "
                f"least 2, got {length}"
            )
        attention_factor = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(length))
    use_long = seq_len is not None and seq_len > original_max_position_embeddings
    ext = torch.tensor(long_factor if use_long else short_factor, dtype=torch.float64)
    inv_freq, _ = _default(rotary_dim, base)
    return inv_freq / ext, float(attention_factor)


def _ntk_su(
    rotary_dim: int, base: float, *, factor: float, mixed_b: float | None = None
) -> tuple[torch.Tensor, float]:
    """Su's NTK scaling (Jianlin Su, 2023, https://kexue.fm/archives/9706), as vLLM's
    ``NTKScalingRotaryEmbedding`` defines it.

    Without ``mixed_b`` ("fixed" NTK): θ_k = (base·factor)^(−2k/r) / factor^(2/r), so that every pair
    k = 0 … r/2 − 1 is divided by factor^((2k + 2)/r), the slowest by ``factor`` exactly. With
    ``mixed_b`` ("NTK-RoPE-mixed"): θ_k = base^(−2k/r) / λ_k, λ_k = exp(a·(k + 1)^b) with
    a = ln(factor) / (r/2)^b and b = ``mixed_b``, so λ rises from about 1 to ``factor`` at the slowest pair.
    """
    if mixed_b is None:
        inv_freq, _ = _default(rotary_dim, base * factor)
        return inv_freq / factor ** (2 / rotary_dim), 1.0
    inv_freq, _ = _default(rotary_dim, base)
    a = math.log(factor) / (rotary_dim / 2) ** mixed_b
    pair = torch.arange(1, rotary_dim // 2 + 1, dtype=torch.float64)  # k + 1
    return inv_freq / torch.exp(a * pair**mixed_b), 1.0


def _ntk_alpha(rotary_dim: int, base: float, *, alpha: float) -> tuple[torch.Tensor, float]:
    """NTK scaling by ``alpha`` (Hunyuan; vLLM's ``DynamicNTKAlphaRotaryEmbedding``, transformers'
    ``ntk_alpha``): base · alpha^(r/(r−2)), whatever the length. Checkpoints label it ``"dynamic"``
    with an ``alpha`` key, but the frequencies are static."""
    return _default(rotary_dim, base * alpha ** (rotary_dim / (rotary_dim - 2)))


def _proportional(
    rotary_dim: int, base: float, *, factor: float = 1.0, partial_rotary_factor: float = 1.0
) -> tuple[torch.Tensor, float]:
    """Proportional RoPE (Gemma 4; transformers' ``proportional``, vLLM's ``Gemma4RotaryEmbedding``).

    ``rotary_dim`` is the whole head width d here: θ_k = base^(−2k/d) / factor for
    k < ⌊partial_rotary_factor·d/2⌋ and θ_k = 0 after, so the trailing pairs of each half (not the
    trailing channels, as with a smaller ``rotary_dim``) do not turn.
    """
    turning = int(partial_rotary_factor * rotary_dim // 2)
    inv_freq, _ = _default(rotary_dim, base)
    inv_freq[turning:] = 0.0
    return inv_freq / factor, 1.0


#: scaling name -> function (rotary_dim, base, **arguments) -> (inv_freq, attention_factor).
SCALINGS: dict[str, Callable[..., tuple[torch.Tensor, float]]] = {
    "linear": _linear,
    "ntk": _ntk,
    "dynamic": _dynamic,
    "yarn": _yarn,
    "llama3": _llama3,
    "longrope": _longrope,
    "deepseek_yarn": _deepseek_yarn,
    "ntk_su": _ntk_su,
    "ntk_alpha": _ntk_alpha,
    "proportional": _proportional,
}


def scaling_arguments(scaling: str) -> tuple[list[str], list[str]]:
    """(required, optional) argument names of a scaling."""
    parameters = list(inspect.signature(SCALINGS[scaling]).parameters.values())[2:]
    required = [p.name for p in parameters if p.default is inspect.Parameter.empty]
    optional = [p.name for p in parameters if p.default is not inspect.Parameter.empty]
    return required, optional


def rope_inv_freq(
    rotary_dim: int, *, base: float = 10000.0, scaling: str | None = None, **scaling_args
) -> tuple[torch.Tensor, float]:
    """RoPE inverse frequencies θ_k = base^(−2k/r), optionally scaled for a longer context, in float64.

    Args:
        rotary_dim: rotated channels r (even).
        base: ``rope_theta``.
        scaling: None or one of ``linear | ntk | dynamic | yarn | llama3 | longrope`` (the context
            extensions of transformers' ``rope_type``), ``deepseek_yarn | ntk_su | ntk_alpha`` (as
            vLLM defines them) or ``proportional`` (Gemma 4).
        **scaling_args: the ``rope_scaling`` keys of the model that introduced the scaling
            (``factor``, ``original_max_position_embeddings``, ``beta_fast``, ``beta_slow``,
            ``attention_factor``, ``mscale``, ``mscale_all_dim``, ``truncate``, ``extrapolation_factor``,
            ``attn_factor``, ``low_freq_factor``, ``high_freq_factor``, ``short_factor``, ``long_factor``,
            ``mixed_b``, ``alpha``, ``partial_rotary_factor``; ``seq_len`` for dynamic and longrope).

    Returns:
        ``(inv_freq [r/2] float64, attention_factor)``; the factor multiplies cos and sin.

    Raises:
        ValueError: odd or non-positive rotary_dim, unknown scaling (lists the valid ones), missing or
            unknown scaling arguments (names them), non-positive factor.
    """
    rotary_dim = check_even_positive_int("rotary_dim", rotary_dim)
    base = check_positive_float("base", base)
    if scaling is None:
        if scaling_args:
            raise ValueError(f"scaling arguments given without a scaling: {', '.join(sorted(scaling_args))}")
        return _default(rotary_dim, base)
    if scaling not in SCALINGS:
        raise ValueError(f"unknown scaling {scaling!r}; valid: None, {', '.join(repr(s) for s in SCALINGS)}")
    required, optional = scaling_arguments(scaling)
    missing = [name for name in required if name not in scaling_args]
    if missing:
        raise ValueError(f"scaling {scaling!r} needs {', '.join(missing)}")
    unknown = sorted(set(scaling_args) - set(required) - set(optional))
    if unknown:
        raise ValueError(
            f"scaling {scaling!r} does not take {', '.join(unknown)}; it takes {', '.join(required + optional)}"
        )
    if scaling in ("ntk", "dynamic", "ntk_alpha") and rotary_dim < 4:
        raise ValueError(
            f"scaling {scaling!r} needs rotary_dim ≥ 4 (it raises base to r/(r−2)), got {rotary_dim}"
        )
    checked = _checked_scaling_args(scaling, rotary_dim, scaling_args)
    return SCALINGS[scaling](rotary_dim, base, **checked)


def rope_logit_scale(d_head: int, *, scaling: str | None = None, **scaling_args) -> float:
    """The scale on q·k before the softmax that a RoPE scaling calls for: d^(−1/2), or more.

    DeepSeek's YaRN (``scaling="deepseek_yarn"``; DeepSeek-V2, https://arxiv.org/abs/2405.04434)
    multiplies the softmax scale by mscale(factor, mscale_all_dim)², mscale(s, m) = 0.1·m·ln(s) + 1
    (1 for s ≤ 1), as vLLM's and transformers' DeepSeek attention do; every other scaling keeps d^(−1/2).
    The attention factor on cos and sin (:func:`rope_inv_freq`) comes on top of this.

    Args:
        d_head: the head width d of q·k (DeepSeek: the RoPE and no-RoPE parts together).
        scaling, **scaling_args: as for :func:`rope_inv_freq`; only ``factor`` and ``mscale_all_dim``
            are read, and only for ``deepseek_yarn``.

    Raises:
        ValueError: non-positive d_head, an unknown scaling (lists the valid ones), a bad ``factor`` or
            ``mscale_all_dim``.
    """
    d_head = check_positive_int("d_head", d_head)
    if scaling is not None and scaling not in SCALINGS:
        raise ValueError(f"unknown scaling {scaling!r}; valid: None, {', '.join(repr(s) for s in SCALINGS)}")
    scale = d_head**-0.5
    if scaling != "deepseek_yarn":
        return scale
    if "factor" not in scaling_args:
        raise ValueError("scaling 'deepseek_yarn' needs factor")
    factor = check_positive_float("factor", scaling_args["factor"])
    mscale_all_dim = check_nonnegative_float("mscale_all_dim", scaling_args.get("mscale_all_dim", 0.0))
    return scale * _yarn_mscale(factor, mscale_all_dim) ** 2


def _check_argument(name: str, value: object, rotary_dim: int) -> object:
    """One scaling argument checked for its type and domain (a ValueError or TypeError naming it)."""
    checks = {
        "original_max_position_embeddings": check_positive_int,
        "seq_len": check_positive_int,
        "truncate": check_bool,
        "mscale": check_nonnegative_float,
        "mscale_all_dim": check_nonnegative_float,
        "extrapolation_factor": check_nonnegative_float,
        "short_factor": lambda n, v: check_positive_floats(n, v, rotary_dim // 2, "rotary_dim/2"),
        "long_factor": lambda n, v: check_positive_floats(n, v, rotary_dim // 2, "rotary_dim/2"),
    }
    # factors, betas, attention_factor, attn_factor, mixed_b, alpha, partial_rotary_factor
    return checks.get(name, check_positive_float)(name, value)


def _checked_scaling_args(scaling: str, rotary_dim: int, scaling_args: dict) -> dict:
    """The scaling's arguments checked one by one, then against each other.

    ``None`` is accepted only where the scaling's own default is None (e.g. longrope's ``factor``);
    ``factor=None`` for linear scaling is an error, not a silent default.
    """
    defaults = {p.name: p.default for p in list(inspect.signature(SCALINGS[scaling]).parameters.values())[2:]}
    checked = {}
    for name, value in scaling_args.items():
        if value is None and defaults[name] is None:
            checked[name] = None
            continue
        if value is None:
            raise ValueError(f"scaling {scaling!r} needs a value for {name}, got None")
        checked[name] = _check_argument(name, value, rotary_dim)
    merged = {name: default for name, default in defaults.items()} | checked
    if scaling in ("yarn", "deepseek_yarn") and merged["beta_fast"] <= merged["beta_slow"]:
        raise ValueError(
            f"{scaling}'s beta_fast must exceed beta_slow, got beta_fast={merged['beta_fast']} "
            f"and beta_slow={merged['beta_slow']}"
        )
    if scaling in ("yarn", "deepseek_yarn") and merged["factor"] < 1:
        raise ValueError(
            f"{scaling}'s factor is the context extension and must be at least 1, got factor={merged['factor']}"
        )
    if scaling == "proportional" and merged["partial_rotary_factor"] > 1:
        raise ValueError(
            "proportional's partial_rotary_factor is the share of pairs that turn and must be at most 1, "
            f"got partial_rotary_factor={merged['partial_rotary_factor']}"
        )
    if scaling == "llama3" and merged["high_freq_factor"] <= merged["low_freq_factor"]:
        raise ValueError(
            f"llama3's high_freq_factor must exceed low_freq_factor, got high_freq_factor="
            f"{merged['high_freq_factor']} and low_freq_factor={merged['low_freq_factor']}"
        )
    return checked


__all__ = [
    "SCALINGS",
    "rope_inv_freq",
    "rope_logit_scale",
    "scaling_arguments",
]
