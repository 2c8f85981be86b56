"""A table as data (title, aligned columns, rows of formatted strings, notes) and one writer per format.

The same :class:`Table` becomes GitHub-flavoured Markdown (:func:`to_markdown`), an HTML fragment
(:func:`to_html`), a ``rich`` table for the terminal (:func:`to_rich`) or aligned plain text where rich
is not installed (:func:`to_text`). Cells are plain text, already formatted by the caller
(``f"{ms:.2f}"``); each writer escapes what its format would otherwise read as markup, so a cell shows
exactly its characters everywhere. A leaf module: it imports nothing of posenc.

Example::

    table = Table(
        [Column("candidate"), Column("median ms", "right")],
        [["clone", "0.30"], ["posenc", "13.98"]],
        title="sinusoidal table 4096×512",
    )
    print(to_markdown(table))
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # rich is imported by to_rich only
    import rich.table

ALIGNMENTS = ("left", "right", "center")


@dataclass(frozen=True)
class Column:
    """A column's header and how its cells are aligned (``"left"``, ``"right"`` or ``"center"``)."""

    header: str
    align: str = "left"

    def __post_init__(self) -> None:
        if not isinstance(self.header, str):
            raise TypeError(f"header must be a str, got {type(self.header).__name__}")
        if self.align not in ALIGNMENTS:
            raise ValueError(f"align must be one of {', '.join(ALIGNMENTS)}; got {self.align!r}")


@dataclass(frozen=True, init=False)
class Table:
    """Columns, rows of cell strings (one per column), an optional title and notes shown below.

    ``columns`` may mix :class:`Column` and plain strings (a left-aligned column of that header).
    Rows and notes are stored as tuples; a row whose length differs from the columns' is refused.
    """

    columns: tuple[Column, ...]
    rows: tuple[tuple[str, ...], ...] = ()
    title: str = ""
    notes: tuple[str, ...] = ()

    def __init__(
        self,
        columns: Iterable[Column | str],
        rows: Iterable[Sequence[str]] = (),
        *,
        title: str = "",
        notes: Iterable[str] = (),
    ) -> None:
        columns = tuple(c if isinstance(c, Column) else Column(c) for c in columns)
        if not columns:
            raise ValueError("a table needs at least one column, got none")
        rows = tuple(tuple(row) for row in rows)
        for index, row in enumerate(rows):
            if len(row) != len(columns):
                raise ValueError(f"row {index} has {len(row)} cells for {len(columns)} columns: {row!r}")
            for cell in row:
                if not isinstance(cell, str):
                    raise TypeError(f"cells must be formatted strings, got {cell!r} in row {index}")
        object.__setattr__(self, "columns", columns)
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "title", title)
        object.__setattr__(self, "notes", tuple(notes))


def transposed(table: Table, *, align: str = "right") -> Table:
    """The same cells with rows and columns swapped: the first column's cells become the headers (and
    the headers, but the first, the first column). The other columns are aligned ``align``."""
    first = table.columns[0]
    columns = [Column(first.header), *(Column(row[0], align) for row in table.rows)]
    rows = [
        [column.header, *(row[index] for row in table.rows)]
        for index, column in enumerate(table.columns)
        if index
    ]
    return Table(columns, rows, title=table.title, notes=table.notes)


# --- Markdown -----------------------------------------------------------------------------------

# What could start markup inside a GitHub table cell (a cell border, code, emphasis, a link, an HTML
# tag or entity, an escape) gets a backslash. An underscore inside a word (snake_case) cannot start
# emphasis, so it stays as it is; `]` and `>` start nothing on their own.
_MARKDOWN_SPECIAL = re.compile(r"[\\`*\[<&|]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")
_MARKDOWN_RULE = {"left": "---", "right": "---:", "center": ":---:"}


def markdown_escape(text: str) -> str:
    """``text`` as Markdown inline text that renders as exactly these characters, on one line."""
    return _MARKDOWN_SPECIAL.sub(lambda m: "\\" + m.group(0), " ".join(text.splitlines()))


def to_markdown(table: Table) -> str:
    """A GitHub-flavoured pipe table; the title a paragraph above it, each note a paragraph below."""

    def line(cells: Iterable[str]) -> str:
        return "| " + " | ".join(markdown_escape(cell) for cell in cells) + " |"

    lines = [line(c.header for c in table.columns)]
    lines.append("|" + "|".join(_MARKDOWN_RULE[c.align] for c in table.columns) + "|")
    lines.extend(line(row) for row in table.rows)
    parts = [markdown_escape(table.title)] if table.title else []
    parts.append("\n".join(lines))
    parts.extend(markdown_escape(note) for note in table.notes)
    return "\n\n".join(parts)


# --- HTML ---------------------------------------------------------------------------------------


def to_html(table: Table, *, cell_class: Callable[[str], str | None] | None = None) -> str:
    """One ``<table>`` element: title as ``<caption>``, notes in ``<tfoot>``, every text escaped.

    ``cell_class(text)`` may name a CSS class for a body cell (``"holds"``), or return None.
    """

    def attributes(column: Column, text: str | None = None) -> str:
        css = cell_class(text) if cell_class is not None and text is not None else None
        parts = [f' class="{html.escape(css)}"' if css else ""]
        if column.align != "left":
            parts.append(f' style="text-align: {column.align}"')
        return "".join(parts)

    head = "".join(f"<th{attributes(c)}>{html.escape(c.header)}</th>" for c in table.columns)
    body = "".join(
        "<tr>"
        + "".join(
            f"<td{attributes(c, text)}>{html.escape(text)}</td>"
            for c, text in zip(table.columns, row, strict=True)
        )
        + "</tr>"
        for row in table.rows
    )
    parts = ["<table>"]
    if table.title:
        parts.append(f"<caption>{html.escape(table.title)}</caption>")
    parts.append(f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody>")
    if table.notes:
        span = len(table.columns)
        notes = "".join(f'<tr><td colspan="{span}">{html.escape(note)}</td></tr>' for note in table.notes)
        parts.append(f"<tfoot>{notes}</tfoot>")
    parts.append("</table>")
    return "".join(parts)


# --- plain text ---------------------------------------------------------------------------------


def to_text(table: Table) -> str:
    """Aligned plain text: the title, the headers over a rule, the rows, the notes; what the ``posenc``
    command prints where rich is not installed. A cell's line breaks become spaces."""
    header = [" ".join(c.header.splitlines()) for c in table.columns]
    rows = [[" ".join(cell.splitlines()) for cell in row] for row in table.rows]
    widths = [max(len(text) for text in column) for column in zip(header, *rows, strict=True)]
    justify = {"left": str.ljust, "right": str.rjust, "center": str.center}

    def line(cells: Sequence[str]) -> str:
        aligned = (
            justify[c.align](text, width) for c, text, width in zip(table.columns, cells, widths, strict=True)
        )
        return "  ".join(aligned).rstrip()

    lines = [table.title] if table.title else []
    lines += [line(header), "  ".join("-" * width for width in widths)]
    lines += [line(row) for row in rows]
    lines += table.notes
    return "\n".join(lines)


# --- terminal (rich) ------------------------------------------------------------------------------


def to_rich(table: Table, *, cell_style: Callable[[str], str | None] | None = None) -> rich.table.Table:
    """A ``rich.table.Table``; cells are literal text (never read as rich markup), notes its caption.

    ``cell_style(text)`` may give a rich style for a body cell (``"green"``), or return None.
    """
    from rich.table import Table as RichTable
    from rich.text import Text

    view = RichTable(
        title=Text(table.title, style="table.title") if table.title else None,
        caption=Text("\n".join(table.notes), style="table.caption") if table.notes else None,
        caption_justify="left",
    )
    for column in table.columns:
        view.add_column(Text(column.header), justify=column.align)
    for row in table.rows:
        view.add_row(*(Text(text, style=(cell_style(text) if cell_style else None) or "") for text in row))
    return view
