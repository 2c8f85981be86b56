"""One representative instance of each registered encoding, the one every figure and property table shows."""

from __future__ import annotations

import torch

from posenc.encodings import PositionalEncoding, available, build

#: Constructor arguments of the instance shown for each registered encoding: the width, heads and
#: table sizes of a small model (d_model 64, 8 heads of 8 channels, a 256-position learned table).
SPECIMEN_KWARGS: dict[str, dict] = {
    "sinusoidal": {"d_model": 64},
    "learned": {"max_len": 256, "d_model": 64},
    "nope": {},
    "rope": {"d_head": 64},
    "alibi": {"n_heads": 8},
    "t5": {"n_heads": 8},
    "swin": {"n_heads": 8, "window": 7},
}


def specimen(name: str, *, seed: int = 0) -> PositionalEncoding:
    """The encoding ``name`` built with ``SPECIMEN_KWARGS[name]``; learned tables drawn from ``seed``.

    Raises:
        ValueError: an unknown name (lists the registered ones), or a registered encoding with no
            entry in ``SPECIMEN_KWARGS``.
    """
    if name not in SPECIMEN_KWARGS:
        if name in available():
            raise ValueError(f"encoding {name!r} has no entry in SPECIMEN_KWARGS; add one")
        raise ValueError(f"unknown encoding {name!r}; available: {', '.join(available())}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build(name, **SPECIMEN_KWARGS[name]).eval()
