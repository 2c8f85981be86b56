"""Pure tensor maths: no modules, no state."""

from posenc.functional.angles import MAX_POSITION, exact_cos_sin, reduced_angles
from posenc.functional.sinusoidal import sinusoidal_frequencies, sinusoidal_table

__all__ = [
    "MAX_POSITION",
    "exact_cos_sin",
    "reduced_angles",
    "sinusoidal_frequencies",
    "sinusoidal_table",
]
