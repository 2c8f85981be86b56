"""What the optional parts of posenc need, and the one error that names the extra to install.

``pip install posenc`` brings torch and numpy: the encodings, attention, the model, the analysis, and
the ``posenc`` command's ``list``, ``verify`` and ``bench`` (plain tables; rich draws them when
installed). Figures, the report and the lab need more, installed as the extras of :data:`EXTRAS`
(pyproject.toml's ``[project.optional-dependencies]``, where ``all`` brings every one).
"""

from __future__ import annotations

import importlib.util

#: Extra -> the modules posenc imports from it (each the import name of the package the extra installs).
EXTRAS = {
    "plots": ("matplotlib",),
    "report": ("matplotlib", "rich"),
    "lab": ("matplotlib", "rich"),
    "bench": ("mpmath", "rich"),
    "cli": ("rich",),
}


class MissingExtra(ModuleNotFoundError):
    """A module of an extra is not installed; the message says what needs it and what to install.
    The ``posenc`` command ends with it in one line and status 2."""


def installed(module: str) -> bool:
    """Whether ``module`` can be imported (found on the path; not imported here)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing, or an import hook refusing it
        return False


def require(module: str, extra: str, purpose: str) -> None:
    """Return when ``module`` is installed; otherwise raise :class:`MissingExtra`, e.g.
    ``drawing figures needs matplotlib: pip install 'posenc[plots]'`` for
    ``require("matplotlib", "plots", "drawing figures")``.

    Raises:
        ValueError: an ``extra`` not in :data:`EXTRAS`, or one that does not bring ``module``.
    """
    if module not in EXTRAS.get(extra, ()):
        known = ", ".join(f"{name} ({', '.join(modules)})" for name, modules in EXTRAS.items())
        raise ValueError(f"extra {extra!r} does not bring {module!r}; the extras: {known}")
    if not installed(module):
        raise MissingExtra(f"{purpose} needs {module}: pip install 'posenc[{extra}]'", name=module)
