"""Where the ``posenc`` command writes: output paths checked before any work, JSON files, the terminal."""

from __future__ import annotations

import json
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from posenc.table import Table, to_rich

if TYPE_CHECKING:  # rich is imported when something is printed
    import rich.console


def _nearest_existing(path: Path) -> Path:
    """``path`` or its closest ancestor that exists."""
    for candidate in (path, *path.parents):
        if candidate.exists():
            return candidate
    return Path(".")


def _creatable_folder(folder: Path, option: str, target: Path) -> None:
    """Make ``folder`` (and its parents) and create and remove a file in it; ValueError naming
    ``option``, ``target`` and the reason when that is not possible."""
    problem = f"{option} {str(target)!r} cannot be written"
    blocker = _nearest_existing(folder)
    if not blocker.is_dir():
        raise ValueError(f"{problem}: {str(blocker)!r} is a file, not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ValueError(f"{problem}: cannot make folder {str(error.filename)!r}: {error.strerror}") from None
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".posenc-write-test-"):
            pass
    except OSError as error:
        raise ValueError(f"{problem}: cannot create files in {str(folder)!r}: {error.strerror}") from None


def writable_file(path: Path, option: str) -> Path:
    """Check, before any work, that the file ``path`` can be written (its folder is made if needed).

    Raises:
        ValueError: naming ``option`` (``"--json"``), the path and why: a folder is in the way, a file
            stands where a folder should be, the folder cannot be made or written, the file is read-only.
    """
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{option} {str(path)!r} is a folder; give a file name")
    _creatable_folder(path.parent, option, path)
    if path.exists() and not os.access(path, os.W_OK):
        raise ValueError(f"{option} {str(path)!r} cannot be written: the file is read-only")
    return path


def writable_folder(path: Path, option: str) -> Path:
    """Check, before any work, that files can be written into the folder ``path`` (made if needed).

    Raises:
        ValueError: naming ``option``, the path and why (a file in the way, a folder that cannot be made
            or written).
    """
    path = Path(path)
    _creatable_folder(path, option, path)
    return path


def write_json(result: dict, path: Path | None) -> None:
    """``result`` as indented JSON at ``path`` (checked by :func:`writable_file` first); nothing if None."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2))


def console(wide: bool = False) -> rich.console.Console:
    """A rich console on stdout; ``wide``: 200 columns when stdout is not a terminal (files, pipes).

    On a closed stdout it raises BrokenPipeError, which :func:`posenc.cli.main` ends quietly with 141;
    rich's own handling would exit with 1, the status ``posenc verify`` keeps for "the claim fails".
    """
    from rich.console import Console

    class _Console(Console):
        def on_broken_pipe(self) -> None:  # rich's hook for a BrokenPipeError while writing
            self.quiet = True
            raise BrokenPipeError(32, "Broken pipe")

    return _Console(width=None if not wide or sys.stdout.isatty() else 200)


def print_table(
    table: Table,
    *,
    cell_style: Callable[[str], str | None] | None = None,
    out: rich.console.Console | None = None,
) -> None:
    """Print ``table`` with the rich writer of :mod:`posenc.table` (on ``out`` or a new console)."""
    (out or console()).print(to_rich(table, cell_style=cell_style))
