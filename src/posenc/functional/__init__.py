"""Pure tensor maths: no modules, no state."""

from posenc.functional.angles import MAX_POSITION, exact_cos_sin, reduced_angles
from posenc.functional.rope import (
    SCALINGS,
    apply_rope,
    interleaved_to_half_permutation,
    permute_qk_weight,
    rope_cos_sin,
    rope_inv_freq,
    xpos_scale,
)
from posenc.functional.sinusoidal import sinusoidal_frequencies, sinusoidal_table

__all__ = [
    "MAX_POSITION",
    "SCALINGS",
    "apply_rope",
    "exact_cos_sin",
    "interleaved_to_half_permutation",
    "permute_qk_weight",
    "reduced_angles",
    "rope_cos_sin",
    "rope_inv_freq",
    "sinusoidal_frequencies",
    "sinusoidal_table",
    "xpos_scale",
]
