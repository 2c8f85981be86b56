"""The per-distance attention path under its former name: see :mod:`posenc.kernels.per_distance`.

``relative_attention`` is :func:`~posenc.kernels.per_distance.per_distance_attention` and
``alibi_windows`` :func:`~posenc.kernels.per_distance.decay_windows`. ``alibi_attention``, which puts
ALiBi's formula on that path, is :func:`posenc.functional.alibi_attention` (a kernel imports nothing
above it, so it is not re-exported here).
"""

from __future__ import annotations

from posenc.kernels.per_distance import (
    DEFAULT_BLOCK,
    DEFAULT_WINDOW_TOLERANCE,
    alibi_windows,
    decay_windows,
    per_distance_attention,
    relative_attention,
)

__all__ = [
    "DEFAULT_BLOCK",
    "DEFAULT_WINDOW_TOLERANCE",
    "alibi_windows",
    "decay_windows",
    "per_distance_attention",
    "relative_attention",
]


def __getattr__(name: str):
    if name == "alibi_attention":
        raise AttributeError(
            "posenc.kernels.alibi_cpu.alibi_attention moved to posenc.functional.alibi_attention "
            "(ALiBi's formula lives in posenc.functional; kernels import nothing above them)"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
