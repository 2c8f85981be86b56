"""posenc: transformer positional encodings, implemented as the named models use them and verified.

The names below load on first use (PEP 562), so that ``import posenc.cli`` does not import torch:
the ``posenc`` command imports it inside its own error handling, where Ctrl-C is one line.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

#: public name -> the module that defines it
_EXPORTS = {
    "ENCODINGS": "posenc.encodings",
    "PositionalEncoding": "posenc.encodings",
    "available": "posenc.encodings",
    "build": "posenc.encodings",
    "register": "posenc.encodings",
    "sinusoidal_frequencies": "posenc.functional",
    "sinusoidal_table": "posenc.functional",
}

__all__ = [*_EXPORTS, "__version__"]


def __getattr__(name: str):
    """A public name, or a subpackage (``posenc.encodings``) the first time it is asked for."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    elif not name.startswith("_"):
        try:
            value = importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as error:
            if error.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
