"""One representative instance of each registered encoding, the one every figure and property table shows."""

from __future__ import annotations

import torch

from posenc.encodings import PositionalEncoding, build, encoding_class


def specimen_arguments(name: str) -> dict:
    """Constructor arguments of the instance shown for ``name``: the encoding's own ``specimen_kwargs``,
    else those of a small model (d_model 64, 8 heads, 256 positions).

    Raises:
        ValueError: an unknown name (lists the registered ones).
    """
    return encoding_class(name).specimen_arguments()


def specimen(name: str, *, seed: int = 0) -> PositionalEncoding:
    """The encoding ``name`` built with ``specimen_arguments(name)``, in eval mode; learned tables drawn from ``seed``.

    Raises:
        ValueError: an unknown name (lists the registered ones).
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build(name, **specimen_arguments(name)).eval()
