"""Argument parsing for the ``posenc`` command: a parser whose errors are one line, and value types."""

from __future__ import annotations

import argparse
import math
from pathlib import Path


class UsageError(Exception):
    """A command line the parser refused; its message is the whole line to print."""


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose errors raise :class:`UsageError` (one line, pointing at ``--help``)
    instead of printing the usage block and exiting; :func:`posenc.cli.main` prints it and returns 2.
    Sub-parsers inherit it."""

    def error(self, message: str):  # argparse's hook for every refusal
        raise UsageError(f"{self.prog}: error: {message} (see {self.prog} --help)")


def positive_int(text: str) -> int:
    """An integer ≥ 1 (``--rounds``, ``--length``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return value


def _within_exact_angles(value: int) -> int:
    from posenc.functional.angles import MAX_POSITION  # torch, imported only when a length is given

    if value > MAX_POSITION:
        raise argparse.ArgumentTypeError(
            f"must be at most 2^27 = {MAX_POSITION} (the positions with exact angles), got {value}"
        )
    return value


def position_count(text: str) -> int:
    """A number of positions 1 … 2^27 (``--length``): positions 0 … n − 1 have exact angles only below
    2^27, and refusing a longer table here is cheaper than finding out it does not fit in memory."""
    return _within_exact_angles(positive_int(text))


def seq_len(text: str) -> int:
    """An integer ≤ 2^27 (``verify --seq-len``; its lower bound, 2, is the experiment's own check)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None
    return _within_exact_angles(value)


#: The widest code ``verify --d-model`` builds: wider than any model's d_model (PaLM's 18432 is among the
#: widest), and small enough that the check answers in seconds, not minutes.
MAX_WIDTH = 2**16


def width(text: str) -> int:
    """An integer ≤ :data:`MAX_WIDTH` (``verify --d-model``; its sign and parity are the table's own
    checks, which name the value as ``d_model``)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value > MAX_WIDTH:
        raise argparse.ArgumentTypeError(
            f"must be at most {MAX_WIDTH} (wider than any model's d_model), got {value}"
        )
    return value


def file_name(text: str) -> Path:
    """A path that names something (``--out``): an empty one would become '.', the current folder."""
    if not text.strip():
        raise argparse.ArgumentTypeError(f"must name a file, got {text!r}")
    return Path(text)


def tolerance(text: str) -> float:
    """A finite float ≥ 0 (``nan`` would make every comparison fail, a negative one every claim)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number ≥ 0, got {text!r}")
    return value


def _int_items(text: str) -> list[int] | None:
    """The comma-separated integers of ``text`` (spaces around each allowed), [] when it names none;
    None when an item is not an integer or is empty between commas (``1,,3``, ``1,3,``): a typo, not a
    shorter list."""
    parts = [part.strip() for part in text.split(",")]
    if not any(parts):
        return []
    try:
        return [int(part) for part in parts]
    except ValueError:
        return None


def distances(text: str) -> list[int]:
    """Comma-separated integers, at least one (``--distances 1,64,1024``)."""
    values = _int_items(text)
    if values is None:
        raise argparse.ArgumentTypeError(f"distances must be comma-separated integers, got {text!r}")
    if not values:
        raise argparse.ArgumentTypeError(f"distances must name at least one distance, got {text!r}")
    return values


def _positive_ints(text: str, expected: str) -> tuple[int, ...]:
    """The comma-separated integers of ``text``, each ≥ 1; ``expected`` says what else the option takes."""
    values = _int_items(text)
    if values is None:
        raise argparse.ArgumentTypeError(f"lengths must be {expected}, got {text!r}")
    if any(value < 1 for value in values):
        raise argparse.ArgumentTypeError(f"lengths must be positive, got {text!r}")
    return tuple(values)


def lengths(text: str) -> tuple[int, ...]:
    """Comma-separated positive integers, or ``none`` (or nothing) for none (``--sweep none``)."""
    if text.strip().lower() in ("", "none"):
        return ()
    return _positive_ints(text, "comma-separated integers or 'none'")


def some_lengths(text: str) -> tuple[int, ...]:
    """Comma-separated positive integers, at least one (``bench attention --seq-lens``, ``bench decode
    --lengths``): the lengths a benchmark measures at, where none would measure nothing and succeed.
    ``none`` is :func:`lengths`' word for an optional stage left out (``--sweep none``), not a length."""
    values = () if text.strip().lower() == "none" else _positive_ints(text, "comma-separated integers")
    if not values:
        raise argparse.ArgumentTypeError(f"lengths must name at least one length, got {text!r}")
    return values


def encoding_names(text: str) -> list[str]:
    """Comma-separated names (``--encodings rope,alibi``), each once, none empty; whether each is
    registered is the command's check (after plugins are loaded)."""
    items = [item.strip() for item in text.split(",")]
    if any(not item for item in items):
        raise argparse.ArgumentTypeError(f"must be comma-separated names without empty items, got {text!r}")
    repeated = sorted({item for item in items if items.count(item) > 1})
    if repeated:
        raise argparse.ArgumentTypeError(f"names {', '.join(repeated)} more than once in {text!r}")
    return items
