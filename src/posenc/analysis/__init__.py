"""Properties and diagnostics of encodings, as numbers (plots live in posenc.plots)."""

from posenc.analysis.dot_product import (
    DistanceSummary,
    closed_form_dot,
    dot_by_distance,
    gram_matrix,
    translation_invariance,
)
from posenc.analysis.precision import angle_error, float32_recipe
from posenc.analysis.rotation import (
    linear_map_residual,
    norm_change,
    relative_logit_deviation,
    rotation_matrix,
    sinusoidal_shift_matrix,
)
from posenc.analysis.shift import attention_logits, logit_shift_change, position_sensitivity
from posenc.analysis.specimens import SPECIMEN_KWARGS, specimen, specimen_arguments
from posenc.analysis.spectrum import scaled_inv_freq, scaling_examples, wavelengths
from posenc.analysis.tables import (
    bias_by_distance,
    bias_matrix,
    code_table,
    swin_offset_table,
    t5_bucket_map,
)
from posenc.analysis.trajectory import pair_channels, rotation_trajectory
from posenc.analysis.verification import PROPERTY_NAMES, Property, failed, properties, properties_by_name

__all__ = [
    "SPECIMEN_KWARGS",
    "PROPERTY_NAMES",
    "specimen_arguments",
    "DistanceSummary",
    "Property",
    "attention_logits",
    "logit_shift_change",
    "position_sensitivity",
    "failed",
    "properties",
    "properties_by_name",
    "specimen",
    "angle_error",
    "closed_form_dot",
    "dot_by_distance",
    "float32_recipe",
    "gram_matrix",
    "linear_map_residual",
    "norm_change",
    "relative_logit_deviation",
    "rotation_matrix",
    "sinusoidal_shift_matrix",
    "translation_invariance",
    "bias_by_distance",
    "bias_matrix",
    "code_table",
    "pair_channels",
    "rotation_trajectory",
    "scaled_inv_freq",
    "scaling_examples",
    "swin_offset_table",
    "t5_bucket_map",
    "wavelengths",
]
