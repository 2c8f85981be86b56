"""The registered encodings as parameters of the registry-wide tests that cost seconds per encoding.

A configuration (a registered class that only sets another registered class's constructor arguments,
as the vision presets of ``rope`` do) takes its parent's code paths; such tests run it only when asked
(``-m slow``), except for the configurations named in ``DISTINCT_PATHS``, whose arguments choose code the
parent's default does not run.
"""

from __future__ import annotations

import pytest

import posenc
from posenc.encodings import encoding_class

#: Configurations whose arguments take paths of their own: learned per-head frequencies, one spectrum
#: split among axes, per-axis widths.
DISTINCT_PATHS = ("rope_mixed", "mrope", "rope_axial")


def is_configuration(name: str) -> bool:
    """Whether ``name``'s class derives from another registered encoding's class and defines nothing
    but its constructor."""
    cls = encoding_class(name)
    parents = {encoding_class(other) for other in posenc.available() if other != name} - {cls}
    own = {key for key, value in vars(cls).items() if callable(value) or isinstance(value, property)}
    return any(issubclass(cls, parent) for parent in parents) and own <= {"__init__"}


def each_code_path() -> list:
    """Every registered name; the configurations outside ``DISTINCT_PATHS`` marked slow."""
    return [
        pytest.param(name, marks=pytest.mark.slow)
        if is_configuration(name) and name not in DISTINCT_PATHS
        else name
        for name in posenc.available()
    ]
