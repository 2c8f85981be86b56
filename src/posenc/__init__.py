"""posenc: transformer positional encodings, implemented as the named models use them and verified."""

from posenc.encodings import ENCODINGS, PositionalEncoding, available, build, register
from posenc.functional import sinusoidal_frequencies, sinusoidal_table

__version__ = "0.1.0"

__all__ = [
    "ENCODINGS",
    "PositionalEncoding",
    "__version__",
    "available",
    "build",
    "register",
    "sinusoidal_frequencies",
    "sinusoidal_table",
]
