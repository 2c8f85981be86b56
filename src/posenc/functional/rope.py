"""Rotary position embedding (RoFormer, Su et al., 2021, https://arxiv.org/abs/2104.09864).

Each pair of query/key channels is rotated by the angle pos·θ_k, θ_k = base^(−2k/r), so that
⟨R_m q, R_n k⟩ depends only on m − n. Two conventions pair the channels differently:

- ``layout="interleaved"``: pairs (2k, 2k+1), the seed formula; GPT-J and Meta's original LLaMA.
- ``layout="half"``: pairs (k, k + r/2); LLaMA and GPT-NeoX as implemented in transformers.

Only the first ``rotary_dim`` = r channels rotate (GPT-NeoX's partial rotary); the rest pass through.

Notation used for tensor shapes: b batch, h heads, s sequence, d head width, r rotary_dim.
``cos`` and ``sin`` hold one value per frequency: ``[s, r/2]`` or ``[b, s, r/2]``.

:func:`apply_rope` and :func:`apply_rope_qk` are the one dispatcher to the RoPE kernels: they check
their arguments once and pick a path per call (``backend="auto"``, names in :mod:`posenc.backends`):
the Triton kernel of :mod:`posenc.kernels.rope_triton` for CUDA tensors, the C kernel of
:mod:`posenc.kernels.rope_cpu` (``"native"``) for CPU tensors, forward and backward;
``backend="eager"`` forces the plain torch recipe, the reference the kernels are checked against.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence

import torch

from posenc import backends
from posenc._validation import (
    as_coordinates,
    as_positions,
    check_bool,
    check_choice,
    check_even_positive_int,
    check_float_dtype,
    check_float_tensor,
    check_nonnegative_float,
    check_positive_float,
    check_positive_floats,
    check_positive_int,
    check_positive_ints,
)
from posenc.backends import check_backend
from posenc.functional.angles import coordinate_angles, exact_cos_sin, split_frequencies
from posenc.kernels import rope_cpu, rope_triton

LAYOUTS = ("half", "interleaved")


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


#: How a spectrum is split among axes (:func:`rope_section_axes`): Qwen2-VL's runs, Qwen3-VL's interleaving.
SECTION_LAYOUTS = ("contiguous", "interleaved")


def rope_axial_frequencies(
    axes: Sequence[int], *, base: float = 10000.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """Axial RoPE: each coordinate axis rotates its own channels with its own frequencies, concatenated.

    Axis a takes d_a channels (d_a/2 pairs) with θ_{a,i} = base^(−2i/d_a), i = 0 … d_a/2 − 1: the
    construction of Flux / diffusers' ``FluxPosEmbed`` (``axes_dim``), RoPE-ViT's axial variant
    (Heo et al., 2024, https://arxiv.org/abs/2403.13298), timm's ``RotaryEmbeddingCat`` and
    rotary-embedding-torch's ``get_axial_freqs``. The pairs follow the axes in order, so both layouts
    apply unchanged: ``"interleaved"`` pairs (2k, 2k+1) as Flux, ``"half"`` pairs (k, k + r/2).

    Args:
        axes: the rotary width d_a of each axis (even), r = Σ d_a.
        base: ``theta`` of every axis.

    Returns:
        ``(inv_freq [r/2] float64, axis [r/2] int64)``: the frequency of each pair and the axis it turns with.

    Raises:
        ValueError: an odd or non-positive width (named by its index), a non-positive base.
        TypeError: widths that are not a sequence of ints.
    """
    widths = check_positive_ints("axes", axes, even=True)
    base = check_positive_float("base", base)
    inv_freq = torch.cat([_default(width, base)[0] for width in widths])  # [r/2]
    axis = torch.cat([torch.full((width // 2,), a, dtype=torch.int64) for a, width in enumerate(widths)])
    return inv_freq, axis


def rope_section_axes(sections: Sequence[int], *, layout: str = "contiguous") -> torch.Tensor:
    """The axis each frequency of one RoPE spectrum turns with when it is split among axes (M-RoPE).

    ``sections`` (s_1 … s_n) counts the pairs of each axis, Σ s_a = r/2, as Qwen2-VL's
    ``mrope_section`` (Wang et al., 2024, https://arxiv.org/abs/2409.12191) with axes (t, h, w):

    - ``"contiguous"`` (Qwen2-VL, Qwen2.5-VL): pairs 0 … s_1 − 1 turn with axis 0, the next s_2 with
      axis 1, and so on; the frequencies are the 1-D spectrum θ_k = base^(−2k/r) unchanged.
    - ``"interleaved"`` (Qwen3-VL): pair k turns with axis a = k mod n when a ≥ 1 and k < n·s_a, with
      axis 0 otherwise, so that every axis sees high and low frequencies.

    Returns:
        int64 ``[r/2]``.

    Raises:
        ValueError: non-positive section sizes (named), an unknown layout; with ``"interleaved"``,
            sections that the interleaving cannot give (n·s_a > r/2 for an axis a ≥ 1).
        TypeError: sections that are not a sequence of ints.
    """
    sections = check_positive_ints("sections", sections)
    layout = check_choice("layout", layout, SECTION_LAYOUTS)
    pairs, n = sum(sections), len(sections)
    if layout == "contiguous":
        return torch.cat([torch.full((size,), a, dtype=torch.int64) for a, size in enumerate(sections)])
    k = torch.arange(pairs)
    axis = torch.zeros(pairs, dtype=torch.int64)
    for a in range(1, n):
        if n * sections[a] > pairs:
            raise ValueError(
                f"interleaved sections {sections} cannot give axis {a} {sections[a]} pairs: the interleaving "
                f"takes every {n}th pair below {n}·{sections[a]} = {n * sections[a]}, past the {pairs} pairs"
            )
        axis[(k % n == a) & (k < n * sections[a])] = a
    return axis


def rope_mixed_frequencies(
    n_heads: int, rotary_dim: int, axes: int, *, base: float = 10.0, generator: torch.Generator | None = None
) -> torch.Tensor:
    """RoPE-Mixed's initial frequencies (Heo et al., 2024, https://arxiv.org/abs/2403.13298): ``[h, r/2, n]``.

    Pair k of head h turns by Σ_a pos_a·F[h, k, a], a learned direction in coordinate space. The pairs
    fall in n groups of r/(2n); group c of head h points along column c of a random rotation R_h, with
    magnitudes base^(−2i·n/r), i = 0 … r/(2n) − 1. For two axes, R_h turns by a uniform angle φ_h, so
    the groups point along φ_h and φ_h + π/2: the paper's initialisation (its ``theta`` is ``base``, 10),
    with the paper's x and y as coordinates 0 and 1.

    Raises:
        ValueError: r not divisible by 2n, non-positive sizes or base.
    """
    n_heads = check_positive_int("n_heads", n_heads)
    rotary_dim = check_even_positive_int("rotary_dim", rotary_dim)
    axes = check_positive_int("axes", axes)
    base = check_positive_float("base", base)
    if rotary_dim % (2 * axes):
        raise ValueError(
            f"RoPE-Mixed splits rotary_dim={rotary_dim} into 2·axes = {2 * axes} groups of pairs"
        )
    group = rotary_dim // (2 * axes)
    magnitude = base ** (-torch.arange(group, dtype=torch.float64) * 2 * axes / rotary_dim)  # [r/(2n)]
    if axes == 2:
        phi = torch.rand(n_heads, generator=generator, dtype=torch.float64) * 2 * math.pi  # [h]
        directions = torch.stack(
            (torch.stack((phi.cos(), phi.sin()), -1), torch.stack((-phi.sin(), phi.cos()), -1)), 1
        )  # [h, group c, axis a]: φ, φ + π/2
    else:
        directions = _uniform_rotations(n_heads, axes, generator).transpose(-1, -2)  # [h, c, a]
    return (directions[:, :, None, :] * magnitude[None, None, :, None]).reshape(
        n_heads, rotary_dim // 2, axes
    )


def _uniform_rotations(count: int, n: int, generator: torch.Generator | None) -> torch.Tensor:
    """``count`` rotations of R^n drawn uniformly (Haar measure on SO(n)), float64 ``[count, n, n]``.

    Q of the QR decomposition of a Gaussian matrix, its columns' signs fixed by R's diagonal (Mezzadri,
    2007: without that, Q is biased by the factorisation's sign convention), then the first column negated
    where the determinant is −1.
    """
    gaussian = torch.randn(count, n, n, generator=generator, dtype=torch.float64)
    q, r = torch.linalg.qr(gaussian)
    q = q * torch.sign(torch.diagonal(r, dim1=-2, dim2=-1)).unsqueeze(-2)  # Haar on O(n)
    flip = torch.ones(count, n, dtype=torch.float64)
    flip[:, 0] = torch.sign(torch.linalg.det(q))
    return q * flip.unsqueeze(-2)  # det +1


def rope_mixed_cos_sin(
    positions: torch.Tensor, frequencies: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of RoPE-Mixed's angles Σ_a pos_a·F[h, k, a] in float64, differentiable in F.

    Args:
        positions: ``[s, n]`` or ``[b, s, n]`` coordinates (integer or float; used as float64).
        frequencies: ``[h, r/2, n]`` (any float dtype; a learned parameter).

    Returns:
        ``(cos, sin)`` float64, ``[1, h, s, r/2]`` or ``[b, h, s, r/2]``: one table per head.

    The exact reduction of integer angles cannot carry a gradient to F, so the angle is the float64
    product itself: an absolute error of about |angle|·2^-53 (1e-10 rad at 10^6 positions), against
    0.06 rad for a float32 recipe at 2^20.
    """
    coordinates = positions.to(torch.float64)
    if coordinates.dim() == 2:
        coordinates = coordinates[None]  # [1, s, n]
    angle = torch.einsum("bsn,hkn->bhsk", coordinates, frequencies.to(torch.float64))  # [b, h, s, r/2]
    return torch.cos(angle), torch.sin(angle)


def check_frequency_axes(axis: object, pairs: int) -> torch.Tensor:
    """``axis`` as int64 ``[pairs]`` of axis indices 0 … n − 1, every axis used (a ValueError naming it)."""
    if not isinstance(axis, torch.Tensor) or axis.dim() != 1 or axis.dtype.is_floating_point:
        raise ValueError(f"axis must be a 1-d integer tensor [r/2], got {getattr(axis, 'shape', axis)!r}")
    if axis.shape[0] != pairs:
        raise ValueError(f"axis must name the axis of each of the {pairs} frequencies, got {axis.shape[0]}")
    axis = axis.to(torch.int64)
    if int(axis.min()) < 0 or set(axis.tolist()) != set(range(int(axis.max()) + 1)):
        raise ValueError(
            f"axis must use every axis 0 … n − 1 and no other, got axes {sorted(set(axis.tolist()))}"
        )
    return axis


def rope_cos_sin(
    positions: torch.Tensor | int,
    inv_freq: torch.Tensor,
    *,
    dtype: torch.dtype = torch.float32,
    attention_factor: float = 1.0,
    axis: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of pos·θ_k (times ``attention_factor``), exact from integer positions, cast once.

    The angle is reduced modulo 2π exactly (:mod:`posenc.functional.angles`) from the float64
    frequencies, so float32 values are within one rounding of the exact ones at any position < 2^27.
    On several axes (``axis`` given) frequency k turns with coordinate ``axis[k]`` of each position:
    integer coordinates stay exact, float ones are used as given with the angle in float64.

    Args:
        positions: integer positions ``[s]`` or ``[b, s]`` (or an int length); with ``axis``,
            coordinates ``[s, n]`` or ``[b, s, n]``, integer or float.
        inv_freq: frequencies ``[r/2]`` (any float dtype; used as float64).
        axis: the axis of each frequency, int ``[r/2]`` (from :func:`rope_axial_frequencies` or
            :func:`rope_section_axes`); None for one axis.

    Returns:
        ``(cos, sin)``, each ``[..., s, r/2]`` in ``dtype``.

    Raises:
        ValueError: non-integer positions on one axis, coordinates without a column for every axis
            named in ``axis``, non-finite coordinates, ``inv_freq`` not 1-d or of another length than
            ``axis``, an attention factor that is not positive and finite.
        TypeError: a non-float ``dtype`` or ``inv_freq`` (integer, bool or complex).
    """
    check_float_dtype("dtype", dtype)
    if not isinstance(inv_freq, torch.Tensor) or inv_freq.dim() != 1:
        raise ValueError(f"inv_freq must be a 1-d tensor [r/2], got {getattr(inv_freq, 'shape', inv_freq)}")
    check_float_tensor("inv_freq", inv_freq)
    if not torch.compiler.is_compiling():
        bad = inv_freq[~torch.isfinite(inv_freq)]
        if bad.numel():
            raise ValueError(f"inv_freq must be finite, got {float(bad[0])}")
    attention_factor = check_positive_float("attention_factor", attention_factor)
    pieces = split_frequencies(inv_freq.to(torch.float64))
    if axis is not None:
        axis = check_frequency_axes(axis, inv_freq.shape[0])
    return cos_sin_of_pieces(positions, pieces, dtype=dtype, attention_factor=attention_factor, axis=axis)


def cos_sin_of_pieces(
    positions: torch.Tensor | int,
    frequency_pieces: torch.Tensor,
    *,
    dtype: torch.dtype,
    attention_factor: float,
    axis: torch.Tensor | None = None,
    axes: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`rope_cos_sin` from frequencies already split into exact pieces ``[r/2, P]``
    (:func:`posenc.functional.angles.split_frequencies`) and an ``axis`` already checked: what a module
    that keeps its frequencies calls, so that a compiled graph holds no split (inductor's CPU code for
    ``frexp`` does not build) and no host read. ``axes``: the number of coordinate axes (default
    ``axis.max() + 1``, a host read)."""
    if axis is None:
        cos, sin = exact_cos_sin(as_positions(positions), frequency_pieces)  # [..., r/2] float64
    else:
        axes = int(axis.max()) + 1 if axes is None else axes
        positions = as_coordinates(positions, axes)  # [..., s, n]
        angle = coordinate_angles(positions, frequency_pieces, axis)  # [..., s, r/2]
        cos, sin = torch.cos(angle), torch.sin(angle)
    if attention_factor != 1.0:
        cos, sin = cos * attention_factor, sin * attention_factor
    return cos.to(dtype), sin.to(dtype)


def _check_rotation(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    layout: str,
    rotary_dim: int | None,
    name: str = "x",
) -> int:
    """apply_rope's checks of one tensor and its tables, for every backend; the rotary width r."""
    check_choice("layout", layout, LAYOUTS)
    check_float_tensor(name, x)
    for table_name, table in (("cos", cos), ("sin", sin)):
        check_float_tensor(table_name, table)
    if x.dim() < 2:
        raise ValueError(f"{name} must be [..., s, d] with at least 2 dimensions, got shape {tuple(x.shape)}")
    width = x.shape[-1]
    rotary_dim = width if rotary_dim is None else check_even_positive_int("rotary_dim", rotary_dim)
    if rotary_dim > width or rotary_dim % 2:
        raise ValueError(f"rotary_dim must be even and at most the head width {width}, got {rotary_dim}")
    if cos.shape != sin.shape:
        raise ValueError(
            f"cos and sin must have the same shape, got {tuple(cos.shape)} and {tuple(sin.shape)}"
        )
    if cos.shape[-1] != rotary_dim // 2:
        raise ValueError(
            f"cos and sin must hold rotary_dim/2 = {rotary_dim // 2} frequencies, got {cos.shape[-1]}"
        )
    per_head = cos.dim() == 4 and x.dim() == 4
    if cos.dim() not in (2, 3) and not per_head or cos.shape[-2] != x.shape[-2]:
        raise ValueError(
            f"cos and sin must be [s, r/2] or [b, s, r/2] (or per head [b, h, s, r/2] for a 4-d {name}) with "
            f"s = {x.shape[-2]} to match {name} of shape {tuple(x.shape)}, got {tuple(cos.shape)}"
        )
    if per_head and (cos.shape[0] not in (1, x.shape[0]) or cos.shape[1] not in (1, x.shape[1])):
        raise ValueError(
            f"per-head cos and sin of shape {tuple(cos.shape)} must have batch and heads 1 or those of "
            f"{name} of shape {tuple(x.shape)}"
        )
    batch = _table_batch_axis(x, cos)
    if batch is not None and cos.shape[0] not in (1, batch):
        raise ValueError(
            f"cos and sin of shape {tuple(cos.shape)} have batch {cos.shape[0]}, but {name} of shape "
            f"{tuple(x.shape)} has batch {batch}; the batch must match (or be 1)"
        )
    for table_name, table in (("cos", cos), ("sin", sin)):
        if table.device != x.device:
            raise ValueError(
                f"{table_name} is on {table.device} and {name} on {x.device}; they must share a device"
            )
    return rotary_dim


def _table_batch_axis(x: torch.Tensor, cos: torch.Tensor) -> int | None:
    """The size of x's axis that a batched cos/sin ``[b, s, r/2]`` lines up with (None: unbatched)."""
    if cos.dim() != 3 or x.dim() < 3:  # per-head tables [b, h, s, r/2] are checked on their own
        return None
    return x.shape[0] if x.dim() == 4 else x.shape[-3]


def _enlarges(x: torch.Tensor, cos: torch.Tensor) -> bool:
    """Whether the rotation of x would not have x's shape: cos/sin ``[b, s, r/2]`` with x ``[s, d]``
    (a batch x lacks; any other batch mismatch is refused by :func:`_check_rotation`)."""
    return cos.dim() == 3 and x.dim() == 2


def _overlaps(x: torch.Tensor) -> bool:
    """Whether two indices of x may address the same memory (an expanded view): unsafe to write in place."""
    extent = 1  # elements spanned by the dimensions of smaller stride
    for stride, size in sorted((st, s) for s, st in zip(x.shape, x.stride(), strict=True) if s > 1):
        if stride < extent:
            return True
        extent += (size - 1) * stride
    return False


def _needs_grad(t: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and t.requires_grad


#: (name, x, cos, sin): one tensor to rotate and its tables, as the checks name it.
_Item = tuple[str, torch.Tensor, torch.Tensor, torch.Tensor]
#: What stops a backend from taking the tensors: the error to raise and its message.
_Problem = tuple[type[Exception], str]


def _check_rotations(items: list[_Item], layout: str, rotary_dim: int | None, inplace: bool) -> list[int]:
    """Every check of every tensor, before anything is rotated; each tensor's rotary width."""
    rotaries = [_check_rotation(x, cos, sin, layout, rotary_dim, name) for name, x, cos, sin in items]
    if inplace:
        for name, x, cos, _ in items:
            if _enlarges(x, cos):
                raise ValueError(
                    f"inplace needs cos/sin that broadcast to {name}'s shape {tuple(x.shape)}, got cos of "
                    f"shape {tuple(cos.shape)}"
                )
            if _overlaps(x):
                raise ValueError(
                    f"inplace needs {name} to own its memory, got an expanded view (shape {tuple(x.shape)}, "
                    f"strides {x.stride()})"
                )
        starts = [x.data_ptr() for _, x, _, _ in items if x.numel()]
        if len(set(starts)) < len(starts):  # views from the same element: it would turn twice
            raise ValueError(
                f"inplace needs {' and '.join(name for name, *_ in items)} not to share memory, got views that "
                "start at the same element (one tensor given as both?)"
            )
    return rotaries


def _path(backend: str, items: list[_Item], rotaries: list[int]) -> str:
    """``"eager"``, ``"native"`` or ``"triton"``: where these tensors rotate under ``backend`` (already
    resolved by :func:`posenc.backends.check_backend`).

    ``auto`` takes the Triton kernel for CUDA tensors and the C kernel for CPU tensors where they
    apply, the reference otherwise; a named kernel that cannot take the tensors raises.
    """
    if backend == "eager":
        return "eager"
    if _transformed():
        if backend != "auto":
            raise ValueError(
                f"the {backend} kernel does not run under torch.func transforms (vmap, grad, jacrev, …); "
                "backend='eager' does (backend='auto' takes it there by itself)"
            )
        return "eager"
    if backend == "auto":
        devices = {t.device.type for _, x, cos, sin in items for t in (x, cos, sin)}
        if devices == {"cuda"} and rope_triton.TRITON_INSTALLED and _triton_problem(items, rotaries) is None:
            return "triton"
        if devices == {"cpu"} and _native_problem(items) is None:
            return "native"
        return "eager"
    if backend == "triton":
        problem = _triton_tables_problem(items) or _triton_problem(items, rotaries)
    else:
        problem = _native_problem(items)
    if problem is not None:
        error, message = problem
        raise error(message)
    return backend


def _transformed() -> bool:
    """Whether a torch.func transform (vmap, grad, …) is active: the kernels' ops do not support them.
    (torch.compile traces such code itself, so the question is not asked while it traces.)"""
    return not torch.compiler.is_compiling() and torch._C._are_functorch_transforms_active()


def _enlarge_problem(name: str, x: torch.Tensor, cos: torch.Tensor, kernel: str) -> _Problem:
    return (
        ValueError,
        f"cos/sin of shape {tuple(cos.shape)} would enlarge {name} of shape {tuple(x.shape)}; {kernel} "
        "need their batch to be 1 or the batch of the tensor they rotate (backend='eager' broadcasts)",
    )


#: Why the kernels refuse per-head tables (RoPE-Mixed): they read one table row per position.
_PER_HEAD_TABLES = (
    "the kernels read one cos/sin row per position, shared by the heads; per-head tables [b, h, s, r/2] "
    "rotate on backend='eager' (backend='auto' takes it by itself)"
)


def _native_problem(items: list[_Item]) -> _Problem | None:
    """Why the C kernel (``native``) cannot take these tensors, or None."""
    for name, x, cos, sin in items:
        if x.device.type != "cpu":
            return ValueError, (
                f"the native kernel runs CPU tensors, got {name} on {x.device}; backend='auto' picks "
                "the kernel for the device"
            )
        if x.dim() not in (2, 3, 4):
            return ValueError, (
                f"the native kernel takes {name} as [b, h, s, d], [b, s, d], [n, s, d] or [s, d], got "
                f"shape {tuple(x.shape)}"
            )
        for table_name, table in (("cos", cos), ("sin", sin)):
            if _needs_grad(table):
                return ValueError, (
                    f"the native kernel does not differentiate {table_name}; use backend='eager' "
                    "(backend='auto' does so by itself)"
                )
        if cos.dim() == 4:
            return ValueError, _PER_HEAD_TABLES
        if _enlarges(x, cos):
            return _enlarge_problem(name, x, cos, "the native kernel does not broadcast; its tables")
    return None


def _triton_tables_problem(items: list[_Item]) -> _Problem | None:
    """The table dtypes the Triton kernels take when named (``auto`` casts any to float32)."""
    for name, x, cos, sin in items:
        if cos.dtype != sin.dtype:
            return TypeError, f"cos and sin must have the same dtype, got cos {cos.dtype} and sin {sin.dtype}"
        if cos.dtype not in (torch.float32, torch.float64, x.dtype):
            return TypeError, (
                f"cos and sin must be float32, float64 or {name}'s dtype {x.dtype}, got {cos.dtype}"
            )
    return None


def _triton_problem(items: list[_Item], rotaries: list[int]) -> _Problem | None:
    """Why the Triton kernels cannot take these tensors (in one launch), or None."""
    _, q, _, _ = items[0]
    for name, x, cos, sin in items:
        if x.dtype not in rope_triton.DTYPES:
            return (
                TypeError,
                f"{name} must be float16, bfloat16 or float32 for the Triton kernels, got {x.dtype}",
            )
        if x.dtype != q.dtype:
            return TypeError, f"q and k must have the same dtype, got q {q.dtype} and k {x.dtype}"
        if x.shape[-1] > rope_triton.MAX_D_HEAD:
            return ValueError, (
                f"{name} has head width {x.shape[-1]}; the Triton kernels take at most "
                f"{rope_triton.MAX_D_HEAD} (MAX_D_HEAD)"
            )
        if x.dim() not in (2, 3, 4):
            return ValueError, (
                f"{name} must be [b, h, s, d], [b, s, d], [n, s, d] or [s, d], got {tuple(x.shape)}"
            )
        for table_name, table in (("cos", cos), ("sin", sin)):
            if _needs_grad(table):
                return ValueError, (
                    f"the Triton kernels do not differentiate {table_name}; use apply_rope(..., backend='eager')"
                )
        if cos.dim() == 4:
            return ValueError, _PER_HEAD_TABLES
        if x.device != q.device:
            return ValueError, f"q is on {q.device} and k on {x.device}; they must share a device"
        if x.device.type != "cuda" and not (x.device.type == "cpu" and rope_triton.interpreting()):
            return ValueError, (
                "the Triton kernels run CUDA tensors, or CPU tensors under TRITON_INTERPRET=1 (Triton's "
                f"interpreter); got a tensor on {x.device}. backend='auto' takes the native kernel there"
            )
        if _enlarges(x, cos):
            return _enlarge_problem(name, x, cos, "the Triton kernels do not broadcast; their tables")
    if len(items) == 2 and (rotaries[1], items[1][1].shape[-1]) != (rotaries[0], q.shape[-1]):
        return ValueError, (
            "one launch needs q and k of the same head width and rotary_dim, got head widths "
            f"{q.shape[-1]} and {items[1][1].shape[-1]}, rotary_dim {rotaries[0]} and {rotaries[1]}"
        )
    return None


#: Where :func:`apply_rope` and :func:`apply_rope_qk` rotate (:data:`posenc.backends.ROPE`); the older
#: names ``"reference"`` and ``"cpu"`` are accepted for ``"eager"`` and ``"native"``.
BACKENDS = backends.ROPE

_BACKEND_DOC = """backend: where the rotation runs (:mod:`posenc.backends`).

            - ``"auto"``: the Triton kernel (:mod:`posenc.kernels.rope_triton`) for CUDA tensors where
              it applies (triton installed; float16, bfloat16 or float32; head width ≤ 256), the C
              kernel (:mod:`posenc.kernels.rope_cpu`) for CPU tensors, the reference everywhere else
              and wherever cos/sin need a gradient. Both kernels serve autograd (q and k) and
              torch.compile.
            - ``"eager"`` (alias ``"reference"``): torch ops, the product taken in x's dtype like the
              models do.
            - ``"native"`` (alias ``"cpu"``) or ``"triton"``: that kernel, or a ValueError/TypeError
              saying why it cannot take these tensors."""


def apply_rope(
    x: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    layout: str = "half",
    rotary_dim: int | None = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Rotate the first ``rotary_dim`` channels of x by the angles whose cos/sin are given (RoPE, Su et al., 2021).

    Args:
        x: ``[b, h, s, d]`` (or ``[..., s, d]``).
        cos, sin: ``[s, r/2]`` or ``[b, s, r/2]`` from :func:`rope_cos_sin`, on x's device; for a 4-d x
            also one table per head, ``[b or 1, h or 1, s, r/2]`` (RoPE-Mixed), which rotates eagerly.
        layout: ``"half"`` pairs (k, k + r/2); ``"interleaved"`` pairs (2k, 2k+1).
        rotary_dim: rotated channels r (default: all d); the other d − r pass through.
        BACKEND

    Returns:
        Rotated x, same shape and dtype. The kernels compute in float32 (float64 for float64 x on CPU)
        from float32 cos/sin and round once: bit-identical to the reference in float32, within one
        unit of bfloat16/float16 of it there (and closer to the exact rotation).

    Raises:
        ValueError: unknown layout or backend, rotary_dim odd or wider than x, cos/sin shapes that do
            not match x or on another device; a named kernel that cannot take x (the reason).
        TypeError: non-float tensors; a named kernel's dtype limits.
    """
    backend = check_backend("rope", backend)
    items = [("x", x, cos, sin)]
    rotaries = _check_rotations(items, layout, rotary_dim, inplace=False)
    path = _path(backend, items, rotaries)
    if path == "triton":
        return rope_triton.apply_rope_triton(x, cos, sin, layout=layout, rotary_dim=rotaries[0])
    if path == "native":
        return rope_cpu.apply_rope_native(x, cos, sin, layout=layout, rotary_dim=rotaries[0])
    return _apply_rope_reference(x, cos, sin, layout, rotaries[0])


def apply_rope_qk(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    *,
    k_cos: torch.Tensor | None = None,
    k_sin: torch.Tensor | None = None,
    layout: str = "half",
    rotary_dim: int | None = None,
    inplace: bool = False,
    backend: str = "auto",
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rotate q and k: ``(apply_rope(q, cos, sin, …), apply_rope(k, k_cos, k_sin, …))``, in one pass each.

    On CUDA the Triton kernel rotates both in one launch; on CPU the C kernel rotates each in one
    pass, and under autograd the backward pass is the same kernel rotating the gradients back.

    Args:
        q, k: ``[b, h, s, d]`` (or ``[..., s, d]``); k may have fewer heads than q (GQA) and another length.
        cos, sin: q's angles ``[s, r/2]`` or ``[b, s, r/2]``, and k's unless ``k_cos``/``k_sin`` are given.
        k_cos, k_sin: k's own angles (keys at other positions than the queries).
        layout, rotary_dim: as for :func:`apply_rope`.
        inplace: rotate q and k in their own memory and return them (they must not share elements).
        BACKEND

    Returns:
        ``(q_rotated, k_rotated)``, each with its input's shape and dtype.

    Raises:
        ValueError: the errors of :func:`apply_rope`; k_cos without k_sin (or the reverse); with
            ``inplace``, cos/sin whose batch would enlarge q or k, or an expanded q or k. Nothing is
            rotated when it raises.
        TypeError: ``backend="triton"`` with q and k (or cos and sin) of different dtypes.
    """
    backend = check_backend("rope", backend)
    if (k_cos is None) != (k_sin is None):
        raise ValueError("k_cos and k_sin must be given together, or neither")
    k_cos, k_sin = (cos, sin) if k_cos is None else (k_cos, k_sin)
    items = [("q", q, cos, sin), ("k", k, k_cos, k_sin)]
    q_rotary, k_rotary = _check_rotations(items, layout, rotary_dim, inplace)
    path = _path(backend, items, [q_rotary, k_rotary])
    if path == "triton":
        return rope_triton.apply_rope_qk_triton(
            q, k, cos, sin, k_cos=k_cos, k_sin=k_sin, layout=layout, rotary_dim=q_rotary, inplace=inplace
        )
    if path == "native" and q_rotary == k_rotary:
        return rope_cpu.apply_rope_qk_native(
            q, k, cos, sin, k_cos, k_sin, layout=layout, rotary_dim=q_rotary, inplace=inplace
        )
    if path == "native":  # heads of different widths (each with its own tables): one call each
        return (
            rope_cpu.apply_rope_native(q, cos, sin, layout=layout, rotary_dim=q_rotary, inplace=inplace),
            rope_cpu.apply_rope_native(k, k_cos, k_sin, layout=layout, rotary_dim=k_rotary, inplace=inplace),
        )
    rotated = (
        _apply_rope_reference(q, cos, sin, layout, q_rotary),
        _apply_rope_reference(k, k_cos, k_sin, layout, k_rotary),
    )
    return (q.copy_(rotated[0]), k.copy_(rotated[1])) if inplace else rotated


apply_rope.__doc__ = apply_rope.__doc__.replace("BACKEND", _BACKEND_DOC)  # type: ignore[union-attr]
apply_rope_qk.__doc__ = apply_rope_qk.__doc__.replace("BACKEND", _BACKEND_DOC)  # type: ignore[union-attr]


def _apply_rope_reference(
    x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str, rotary_dim: int
) -> torch.Tensor:
    """The plain torch recipe: cos/sin cast to x's dtype, products and sums in x's dtype."""
    if cos.dim() == 3 and x.dim() == 4:
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # [b, 1, s, r/2]: shared by the heads
    # (per-head tables [b, h, s, r/2] broadcast as they are)
    cos, sin = cos.to(x.dtype), sin.to(x.dtype)
    rotary, rest = x[..., :rotary_dim], x[..., rotary_dim:]
    if layout == "half":
        first, second = rotary.chunk(2, dim=-1)  # [..., r/2] each
        rotated = torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)
    else:
        even, odd = rotary[..., 0::2], rotary[..., 1::2]  # [..., r/2] each
        rotated = torch.stack((even * cos - odd * sin, odd * cos + even * sin), dim=-1).flatten(-2)
    return torch.cat((rotated, rest), dim=-1) if rest.shape[-1] else rotated


def interleaved_to_half_permutation(rotary_dim: int, head_dim: int | None = None) -> torch.Tensor:
    """Channel order that turns an interleaved head into a half-split one: ``half = inter[..., perm]``.

    Pair k sits at (2k, 2k+1) interleaved and at (k, k + r/2) half-split; channels past r stay.
    """
    rotary_dim = check_even_positive_int("rotary_dim", rotary_dim)
    head_dim = rotary_dim if head_dim is None else check_positive_int("head_dim", head_dim)
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim must be at most head_dim {head_dim}, got {rotary_dim}")
    pairs = torch.arange(rotary_dim).view(rotary_dim // 2, 2)  # [r/2, 2]: (2k, 2k+1)
    return torch.cat((pairs[:, 0], pairs[:, 1], torch.arange(rotary_dim, head_dim)))


def permute_qk_weight(
    weight: torch.Tensor, n_heads: int, *, rotary_dim: int | None = None, to: str = "half"
) -> torch.Tensor:
    """Permute a q or k projection weight ``[n_heads·d, d_in]`` between layouts.

    ``to="half"`` converts an interleaved checkpoint (GPT-J, Meta's LLaMA) for half-split RoPE
    (transformers' LLaMA); ``to="interleaved"`` converts back. Attention outputs are unchanged:
    the permutation is applied to both q and k, so q·k is a sum over the same pairs.
    A bias ``[n_heads·d]`` is permuted by the same call.
    """
    n_heads = check_positive_int("n_heads", n_heads)
    check_choice("to", to, LAYOUTS)
    if weight.shape[0] % n_heads:
        raise ValueError(f"weight rows {weight.shape[0]} are not divisible by n_heads={n_heads}")
    head_dim = weight.shape[0] // n_heads
    permutation = interleaved_to_half_permutation(head_dim if rotary_dim is None else rotary_dim, head_dim)
    if to == "interleaved":
        permutation = torch.argsort(permutation)
    heads = weight.reshape(n_heads, head_dim, *weight.shape[1:])  # [h, d, ...]
    return heads[:, permutation.to(weight.device)].reshape(weight.shape)


#: xPos's γ (Sun et al., 2022): ζ_k = (2k/r + γ)/(1 + γ).
XPOS_GAMMA = 0.4


def xpos_zeta(rotary_dim: int, gamma: float = XPOS_GAMMA) -> torch.Tensor:
    """xPos's per-pair decay base ζ_k = (2k/r + γ)/(1 + γ), float64 ``[r/2]``, each in (0, 1) for γ > 0.

    Raises:
        ValueError: γ not positive and finite (ζ_0 = γ/(1 + γ) would be 0 or less).
    """
    gamma = check_positive_float("gamma", gamma)
    return (_exponents(check_even_positive_int("rotary_dim", rotary_dim)) + gamma) / (1 + gamma)


def xpos_scale(
    positions: torch.Tensor | int,
    rotary_dim: int,
    *,
    gamma: float = XPOS_GAMMA,
    scale_base: float = 512.0,
    reference: torch.Tensor | int = 0,
) -> torch.Tensor:
    """xPos decay (Sun et al., 2022, https://arxiv.org/abs/2212.10554): ζ_k^((pos − c)/scale_base), float64 ``[..., r/2]``.

    ζ_k = (2k/r + γ)/(1 + γ). Queries are scaled by it and keys by its inverse, so q·k gains the
    relative factor ζ_k^((m−n)/scale_base), decaying with distance, whatever the reference position c
    (``reference``: an int, or a tensor broadcasting against ``positions``, e.g. ``[b, 1]``). Measured
    from c = 0 the scale leaves float32 near |pos| = 36,000 and float16 near 4,500; a reference near
    the positions keeps it finite at any position.
    """
    check_positive_float("scale_base", scale_base)
    zeta = xpos_zeta(rotary_dim, gamma)  # [r/2]
    positions = as_positions(positions)
    offsets = (positions - torch.as_tensor(reference, device=positions.device)).to(torch.float64)
    return zeta.to(positions.device) ** (offsets.unsqueeze(-1) / scale_base)  # [..., r/2]
