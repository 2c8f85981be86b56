"""Frequency spectra as numbers: sinusoidal wavelengths (seed 004 §2.3) and RoPE inv_freq under each scaling.

λ_i = 2π·base^(2i/d_model) is the number of positions over which pair i (dimensions 2i, 2i+1)
turns once: 2π for the fastest pair, close to 2π·base for the slowest. RoPE's context-extension
scalings change these frequencies, each in its own way; ``scaled_inv_freq`` puts them side by side.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch

from posenc._validation import check_even_positive_int, check_positive_float
from posenc.functional.rope import SCALINGS, rope_inv_freq

#: Context extension every example scaling targets, and the original context it extends.
EXAMPLE_FACTOR = 8.0
EXAMPLE_ORIGINAL_LENGTH = 4096

#: The key under which ``scaled_inv_freq`` returns the unscaled frequencies.
UNSCALED = "none"


def wavelengths(d_model: int, base: float = 10000.0) -> torch.Tensor:
    """λ_i = 2π·base^(2i/d_model) for pairs i = 0 … d_model/2 − 1, float64 ``[d_model/2]``.

    Args:
        d_model: width of the code (even: one sin/cos pair per wavelength).
        base: the wavelength base (10000 in the paper).

    Returns:
        float64 ``[d_model/2]``, increasing from 2π.

    Raises:
        ValueError: odd or non-positive ``d_model``, non-positive ``base``.
        TypeError: non-integer ``d_model``, non-numeric ``base``.
    """
    d_model = check_even_positive_int("d_model", d_model)
    base = check_positive_float("base", base)
    exponents = torch.arange(0, d_model, 2, dtype=torch.float64) / d_model  # [d/2]: 2i/d
    return 2 * math.pi * base**exponents


def scaling_examples(rotary_dim: int) -> dict[str, dict]:
    """Representative arguments of every RoPE scaling: an 8× extension of a 4096-position context.

    Each scaling gets the arguments it requires and keeps its published defaults for the rest
    (YaRN's β_fast 32 / β_slow 1, Llama 3's low/high frequency factors 1 and 4). Two need more:

    - ``dynamic`` is shown at ``seq_len`` = 2 × 4096, where it has started to rescale (below the
      original length it equals the unscaled frequencies);
    - ``longrope``'s per-frequency factors are searched per model (Phi-3 ships its own lists);
      these are an illustrative ramp, ``short_factor`` all 1 and ``long_factor`` rising linearly
      from 1 for the fastest pair to 8 for the slowest, shown at a ``seq_len`` past the original
      context so that the long factors apply;
    - ``ntk_su`` is Su's mixed NTK with an illustrative ``mixed_b`` of 0.625; ``ntk_alpha`` takes
      ``alpha`` = the factor; ``deepseek_yarn`` DeepSeek-V2's ``mscale`` = ``mscale_all_dim`` = 1;
      ``proportional`` divides by the factor and stops the second half of the pairs (θ_k = 0, off
      the log axes; Gemma 4's global layers stop three quarters, partial_rotary_factor 0.25).

    Returns:
        ``{"none": {}, scaling: arguments}`` for every name in ``SCALINGS``, in its order.
    """
    rotary_dim = check_even_positive_int("rotary_dim", rotary_dim)
    half = rotary_dim // 2
    ramp = [1.0 + (EXAMPLE_FACTOR - 1.0) * k / max(half - 1, 1) for k in range(half)]
    extension = {"factor": EXAMPLE_FACTOR, "original_max_position_embeddings": EXAMPLE_ORIGINAL_LENGTH}
    examples = {
        UNSCALED: {},
        "linear": {"factor": EXAMPLE_FACTOR},
        "ntk": {"factor": EXAMPLE_FACTOR},
        "dynamic": {**extension, "seq_len": 2 * EXAMPLE_ORIGINAL_LENGTH},
        "yarn": dict(extension),
        "llama3": dict(extension),
        "longrope": {
            **extension,
            "short_factor": [1.0] * half,
            "long_factor": ramp,
            "seq_len": 2 * EXAMPLE_ORIGINAL_LENGTH,
        },
        "deepseek_yarn": {**extension, "mscale": 1.0, "mscale_all_dim": 1.0},
        "ntk_su": {"factor": EXAMPLE_FACTOR, "mixed_b": 0.625},
        "ntk_alpha": {"alpha": EXAMPLE_FACTOR},
        "proportional": {"factor": EXAMPLE_FACTOR, "partial_rotary_factor": 0.5},
    }
    missing = sorted(set(SCALINGS) - set(examples))
    if missing:
        raise ValueError(f"scalings without an example in scaling_examples: {', '.join(missing)}")
    return examples


def scaled_inv_freq(
    rotary_dim: int, base: float = 10000.0, scalings: Mapping[str, Mapping] | None = None
) -> dict[str, torch.Tensor]:
    """RoPE's inv_freq θ_k before and after each scaling, from ``rope_inv_freq``.

    Args:
        rotary_dim: rotated channels r (even).
        base: ``rope_theta``.
        scalings: ``{name: arguments}``; ``"none"`` is the unscaled θ_k = base^(−2k/r). Defaults
            to ``scaling_examples(rotary_dim)``.

    Returns:
        ``{name: float64 [r/2]}`` in the order of ``scalings``.

    Raises:
        ValueError: an unknown scaling name (listing the valid ones), missing or unknown arguments.
    """
    scalings = scaling_examples(rotary_dim) if scalings is None else scalings
    spectra = {}
    for name, arguments in scalings.items():
        scaling = None if name == UNSCALED else name
        inv_freq, _ = rope_inv_freq(rotary_dim, base=base, scaling=scaling, **dict(arguments))
        spectra[name] = inv_freq.to(torch.float64)
    return spectra
