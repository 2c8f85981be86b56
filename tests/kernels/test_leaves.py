"""Kernels are leaves: nothing under posenc.kernels imports the layers that dispatch to them."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import posenc.kernels

#: The layers above the kernels (posenc.<name>); posenc._validation and posenc.backends are leaves too.
ABOVE = (
    "functional",
    "encodings",
    "attention",
    "model",
    "analysis",
    "plots",
    "lab",
    "report",
    "cli",
    "bench",
    "integrations",
)
KERNEL_MODULES = sorted(
    info.name for info in pkgutil.walk_packages(posenc.kernels.__path__, prefix="posenc.kernels.")
)


def imported_modules(path: Path, module: str) -> set[str]:
    """Every module an ``import`` or ``from … import`` statement in the file names, anywhere in it
    (functions included: a lazy import is an import), relative imports resolved against ``module``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{parent}.{base}" if base else parent
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)  # from posenc import functional
    return names


def forbidden(names: set[str]) -> list[str]:
    return sorted(
        name
        for name in names
        if any(name == f"posenc.{up}" or name.startswith(f"posenc.{up}.") for up in ABOVE)
    )


def test_every_kernel_module_is_found():
    assert {"posenc.kernels.rope_cpu", "posenc.kernels.rope_triton", "posenc.kernels.per_distance"} <= set(
        KERNEL_MODULES
    )


@pytest.mark.parametrize("module", ["posenc.kernels", *KERNEL_MODULES])
def test_kernel_modules_import_nothing_above_them(module):
    imported = importlib.import_module(module)  # and each imports on its own
    path = Path(imported.__file__)
    assert forbidden(imported_modules(path, module)) == []


def test_the_check_sees_lazy_relative_and_from_imports(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text(
        "import torch\n"
        "from posenc import functional\n"
        "from ..encodings import rope\n"
        "def f():\n"
        "    from posenc.attention import MultiHeadAttention\n"
        "    import posenc.bench.rope\n"
    )
    names = imported_modules(source, "posenc.kernels.mod")
    assert forbidden(names) == [
        "posenc.attention",
        "posenc.attention.MultiHeadAttention",
        "posenc.bench.rope",
        "posenc.encodings",
        "posenc.encodings.rope",
        "posenc.functional",
    ]
