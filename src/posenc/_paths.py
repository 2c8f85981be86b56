"""Output paths checked before any work: a command that will write a file or into a folder learns at once,
with the option and the reason, that it cannot (a file in the way, a folder it cannot make or write)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


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
