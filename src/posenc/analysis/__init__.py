"""Properties and diagnostics of encodings, as numbers (plots live in posenc.plots)."""

from posenc.analysis.dot_product import (
    DistanceSummary,
    closed_form_dot,
    dot_by_distance,
    gram_matrix,
    translation_invariance,
)

__all__ = [
    "DistanceSummary",
    "closed_form_dot",
    "dot_by_distance",
    "gram_matrix",
    "translation_invariance",
]
