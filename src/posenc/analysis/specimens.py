"""One representative instance of each registered encoding, the one every figure and property table shows."""

from __future__ import annotations

from collections.abc import Iterator, Mapping

import torch

from posenc.encodings import PositionalEncoding, available, build, describe, encoding_class


def specimen_arguments(name: str) -> dict:
    """Constructor arguments of the instance shown for ``name``: the encoding's own ``specimen_kwargs``,
    else those of a small model (d_model 64, 8 heads, 256 positions).

    Raises:
        ValueError: an unknown name (lists the registered ones).
    """
    return describe(name).specimen_arguments(encoding_class(name))


def specimen(name: str, *, seed: int = 0) -> PositionalEncoding:
    """The encoding ``name`` built with ``specimen_arguments(name)``, in eval mode; learned tables drawn from ``seed``.

    Raises:
        ValueError: an unknown name (lists the registered ones).
    """
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return build(name, **specimen_arguments(name)).eval()


class _SpecimenArguments(Mapping):
    """name -> :func:`specimen_arguments` of every registered encoding, read from the encodings when asked."""

    def __getitem__(self, name: str) -> dict:
        if name not in available():
            raise KeyError(name)
        return specimen_arguments(name)

    def __iter__(self) -> Iterator[str]:
        return iter(available())

    def __len__(self) -> int:
        return len(available())


#: The specimen arguments of every registered encoding as a read-only mapping (once a dict of this module;
#: each encoding now declares its own ``specimen_kwargs``).
SPECIMEN_KWARGS: Mapping[str, dict] = _SpecimenArguments()
