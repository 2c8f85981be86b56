"""Where the ``posenc`` command writes: JSON files and the terminal (output paths are checked by
:mod:`posenc._paths`)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from posenc._extras import installed
from posenc.table import Table, to_rich, to_text

if TYPE_CHECKING:  # rich is imported when something is printed
    import rich.console


def write_json(result: dict, path: Path | None) -> None:
    """``result`` as indented JSON at ``path`` (checked by :func:`posenc._paths.writable_file` first); nothing if None."""
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result, indent=2))


class Lines:
    """Lines on stdout that say what was just done (a path written), while the work goes on when
    stdout's reader has gone (``posenc plot all | head -1``): the files are the results, the lines
    only name them. :meth:`done` then raises the BrokenPipeError, which :func:`posenc.cli.main` ends
    quietly with 141."""

    def __init__(self) -> None:
        self.closed: BrokenPipeError | None = None

    def say(self, line: object) -> None:
        """Print ``line`` now (flushed, so a reader sees each as it comes); nothing once stdout is closed."""
        if self.closed is not None:
            return
        try:
            print(line, flush=True)
        except BrokenPipeError as error:
            self.closed = error

    def done(self) -> None:
        """Raise the BrokenPipeError met while printing, if any."""
        if self.closed is not None:
            raise self.closed


class Plain:
    """What :func:`console` gives where rich is not installed (``pip install posenc`` alone): lines on
    stdout, rich's style tags (``[green]``) removed; :func:`print_table` writes tables as plain text."""

    def print(self, text: object, *, markup: bool = True) -> None:
        print(re.sub(r"\[/?[a-z]+\]", "", str(text)) if markup else text)


def console(wide: bool = False) -> rich.console.Console | Plain:
    """A rich console on stdout; ``wide``: 200 columns when stdout is not a terminal (files, pipes).
    Without rich, a :class:`Plain` one.

    On a closed stdout it raises BrokenPipeError, which :func:`posenc.cli.main` ends quietly with 141;
    rich's own handling would exit with 1, the status ``posenc verify`` keeps for "the claim fails".
    """
    if not installed("rich"):
        return Plain()
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
    out: rich.console.Console | Plain | None = None,
) -> None:
    """Print ``table`` with the rich writer of :mod:`posenc.table` (on ``out`` or a new console), or as
    plain text on a :class:`Plain` console."""
    out = out or console()
    if isinstance(out, Plain):
        out.print(to_text(table) + "\n", markup=False)
    else:
        out.print(to_rich(table, cell_style=cell_style))
