"""Pure tensor maths: no modules, no state."""

from posenc.functional.alibi import alibi_attention, alibi_bias, alibi_distance_bias, alibi_slopes
from posenc.functional.angles import MAX_POSITION, exact_cos_sin, reduced_angles
from posenc.functional.relative import swin_relative_index, swin_table_size, t5_relative_bucket
from posenc.functional.rope import (
    SCALINGS,
    apply_rope,
    apply_rope_qk,
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
    "alibi_attention",
    "alibi_bias",
    "alibi_distance_bias",
    "alibi_slopes",
    "apply_rope",
    "apply_rope_qk",
    "exact_cos_sin",
    "interleaved_to_half_permutation",
    "permute_qk_weight",
    "reduced_angles",
    "rope_cos_sin",
    "rope_inv_freq",
    "sinusoidal_frequencies",
    "sinusoidal_table",
    "swin_relative_index",
    "swin_table_size",
    "t5_relative_bucket",
    "xpos_scale",
]
