"""Pure tensor maths: no modules, no state."""

from posenc.functional.alibi import alibi_attention, alibi_bias, alibi_distance_bias, alibi_slopes
from posenc.functional.angles import MAX_POSITION, coordinate_angles, exact_cos_sin, reduced_angles
from posenc.functional.coordinates import (
    from_mrope_layout,
    grid_positions,
    mrope_decode_positions,
    mrope_positions,
    to_mrope_layout,
)
from posenc.functional.normalized import (
    CoordinateAugmentation,
    augment_coordinates,
    diagonal_video_positions,
    normalized_grid,
    sincos_grid_positions,
    video_positions,
)
from posenc.functional.randomized import randomized_positions
from posenc.functional.relative import swin_relative_index, swin_table_size, t5_relative_bucket
from posenc.functional.resample import resample_table, resize_relative_table
from posenc.functional.rope import (
    SCALINGS,
    AxisFrequencies,
    apply_rope,
    apply_rope_qk,
    interleaved_to_half_permutation,
    permute_qk_weight,
    rope_axial_frequencies,
    rope_cos_sin,
    rope_inv_freq,
    rope_logit_scale,
    rope_mixed_cos_sin,
    rope_mixed_frequencies,
    rope_section_axes,
    xpos_scale,
)
from posenc.functional.sinusoidal import sinusoidal_frequencies, sinusoidal_table

__all__ = [
    "AxisFrequencies",
    "CoordinateAugmentation",
    "MAX_POSITION",
    "SCALINGS",
    "alibi_attention",
    "alibi_bias",
    "alibi_distance_bias",
    "alibi_slopes",
    "apply_rope",
    "apply_rope_qk",
    "augment_coordinates",
    "coordinate_angles",
    "diagonal_video_positions",
    "exact_cos_sin",
    "from_mrope_layout",
    "grid_positions",
    "interleaved_to_half_permutation",
    "mrope_decode_positions",
    "mrope_positions",
    "normalized_grid",
    "permute_qk_weight",
    "randomized_positions",
    "reduced_angles",
    "resample_table",
    "resize_relative_table",
    "rope_axial_frequencies",
    "rope_cos_sin",
    "rope_inv_freq",
    "rope_logit_scale",
    "rope_mixed_cos_sin",
    "rope_mixed_frequencies",
    "rope_section_axes",
    "sincos_grid_positions",
    "sinusoidal_frequencies",
    "sinusoidal_table",
    "swin_relative_index",
    "swin_table_size",
    "t5_relative_bucket",
    "to_mrope_layout",
    "video_positions",
    "xpos_scale",
]
