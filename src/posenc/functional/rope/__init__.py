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

One idea per module: :mod:`.scalings` (frequencies and their scalings), :mod:`.frequencies` (each
axis's frequencies as data), :mod:`.axes` (frequencies on several axes), :mod:`.tables` (exact cos/sin), :mod:`.apply` (the dispatcher), :mod:`.layouts` (weight
permutations) and :mod:`.xpos`; every name is also here, where it has always been.
"""

from posenc.functional.rope.apply import (
    BACKENDS,
    LAYOUTS,
    _apply_rope_reference,  # noqa: F401  (read by tests)
    _path,  # noqa: F401  (read by tests)
    apply_rope,
    apply_rope_qk,
)
from posenc.functional.rope.axes import (
    SECTION_LAYOUTS,
    check_frequency_axes,
    rope_axial_frequencies,
    rope_mixed_cos_sin,
    rope_mixed_frequencies,
    rope_section_axes,
)
from posenc.functional.rope.frequencies import (
    PAIR_LAYOUTS,
    AxisFrequencies,
    axes_spectrum,
    geometric_frequencies,
)
from posenc.functional.rope.layouts import (
    interleaved_to_half_permutation,
    permute_qk_weight,
)
from posenc.functional.rope.scalings import (
    SCALINGS,
    _default,  # noqa: F401  (read by tests)
    _exponents,  # noqa: F401  (read by tests)
    _yarn_frequencies,  # noqa: F401  (read by tests)
    rope_inv_freq,
    rope_logit_scale,
    scaling_arguments,
)
from posenc.functional.rope.tables import (
    cos_sin_of_pieces,
    rope_cos_sin,
)
from posenc.functional.rope.xpos import (
    XPOS_GAMMA,
    xpos_scale,
    xpos_zeta,
)

__all__ = [
    "PAIR_LAYOUTS",
    "AxisFrequencies",
    "axes_spectrum",
    "geometric_frequencies",
    "BACKENDS",
    "LAYOUTS",
    "SCALINGS",
    "SECTION_LAYOUTS",
    "XPOS_GAMMA",
    "apply_rope",
    "apply_rope_qk",
    "check_frequency_axes",
    "cos_sin_of_pieces",
    "interleaved_to_half_permutation",
    "permute_qk_weight",
    "rope_axial_frequencies",
    "rope_cos_sin",
    "rope_inv_freq",
    "rope_logit_scale",
    "rope_mixed_cos_sin",
    "rope_mixed_frequencies",
    "rope_section_axes",
    "scaling_arguments",
    "xpos_scale",
    "xpos_zeta",
]
