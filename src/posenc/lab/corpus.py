"""The byte-level corpus: the Python standard library's own source files, split by a hash of each path.

Built at run time from the machine's ``sysconfig.get_paths()["stdlib"]``: every ``*.py`` file below
it (third-party ``site-packages`` / ``dist-packages`` excluded), in sorted path order. A file goes to
validation when the first 8 bytes of sha256(relative path) read as an integer fall in the lowest
``validation_fraction`` of the range, so the split does not depend on file order or content.
The fingerprint (file count, bytes, sha256 over the sorted (path, content hash) list) is recorded
with every run, so results from different Python installations are never mixed up.
"""

from __future__ import annotations

import functools
import hashlib
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import torch

#: Directories under the stdlib that hold third-party packages, not the standard library.
EXCLUDED_PARTS = frozenset({"site-packages", "dist-packages", "__pycache__"})


@dataclass(frozen=True)
class Corpus:
    """Training and validation bytes of the stdlib corpus, and its fingerprint."""

    train: torch.Tensor  # [n_train] uint8, the training files concatenated in path order
    validation: torch.Tensor  # [n_validation] uint8, the validation files concatenated in path order
    fingerprint: dict  # files, bytes, sha256, train/validation files and bytes, root, split rule


def stdlib_root() -> Path:
    """The directory of this interpreter's standard library."""
    return Path(sysconfig.get_paths()["stdlib"])


def source_files(root: Path) -> list[Path]:
    """Every ``*.py`` file below ``root`` outside third-party directories, sorted by relative path."""
    files = (p for p in root.rglob("*.py") if not EXCLUDED_PARTS.intersection(p.relative_to(root).parts))
    return sorted((p for p in files if p.is_file()), key=lambda p: p.relative_to(root).as_posix())


def in_validation(relative_path: str, validation_fraction: float) -> bool:
    """Whether a file (named by its POSIX path relative to the root) belongs to the validation split."""
    digest = hashlib.sha256(relative_path.encode()).digest()
    return int.from_bytes(digest[:8], "big") < validation_fraction * 2**64


@functools.lru_cache(maxsize=4)
def build_corpus(root: str | None = None, validation_fraction: float = 0.1) -> Corpus:
    """Read the corpus below ``root`` (default: the stdlib) and split it; cached per process.

    Raises:
        ValueError: a ``validation_fraction`` outside (0, 1), or a root with no ``*.py`` files.
    """
    if not 0 < validation_fraction < 1:
        raise ValueError(f"validation_fraction must be in (0, 1), got {validation_fraction}")
    base = stdlib_root() if root is None else Path(root)
    files = source_files(base)
    if not files:
        raise ValueError(f"root {str(base)!r} holds no *.py files to build a corpus from")
    listing = hashlib.sha256()
    parts: dict[bool, list[bytes]] = {False: [], True: []}
    for path in files:
        relative = path.relative_to(base).as_posix()
        content = path.read_bytes()
        listing.update(f"{relative}\0{hashlib.sha256(content).hexdigest()}\n".encode())
        parts[in_validation(relative, validation_fraction)].append(content)
    train, validation = b"".join(parts[False]), b"".join(parts[True])
    if not train or not validation:
        raise ValueError(f"the corpus below {str(base)!r} is too small to split into train and validation")
    fingerprint = {
        "root": str(base),
        "files": len(files),
        "bytes": len(train) + len(validation),
        "sha256": listing.hexdigest(),
        "train_files": len(parts[False]),
        "train_bytes": len(train),
        "validation_files": len(parts[True]),
        "validation_bytes": len(validation),
        "split": f"sha256(relative path)[:8] < {validation_fraction} · 2^64 -> validation",
    }
    return Corpus(
        train=torch.frombuffer(bytearray(train), dtype=torch.uint8),
        validation=torch.frombuffer(bytearray(validation), dtype=torch.uint8),
        fingerprint=fingerprint,
    )
