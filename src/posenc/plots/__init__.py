"""Matplotlib figures drawn from analysis results; each function returns a Figure and never shows it."""

from posenc.plots.bias import bias_heads, bucket_map, bucket_table, distance_bias, offset_tables
from posenc.plots.dot_product import flat_lines
from posenc.plots.lab import bits_per_position
from posenc.plots.matrix import encoding_matrix, gram_heatmap
from posenc.plots.precision import angle_errors
from posenc.plots.rotation import rotating_vector
from posenc.plots.shift import logit_shift
from posenc.plots.spectrum import inv_freq_scalings, wavelength_spectrum

__all__ = [
    "angle_errors",
    "bias_heads",
    "bits_per_position",
    "bucket_map",
    "bucket_table",
    "distance_bias",
    "encoding_matrix",
    "flat_lines",
    "gram_heatmap",
    "inv_freq_scalings",
    "logit_shift",
    "offset_tables",
    "rotating_vector",
    "wavelength_spectrum",
]
