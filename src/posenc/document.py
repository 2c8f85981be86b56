"""A document as data (headings, paragraphs, lists, tables, images) and one writer per format.

The lab's tables and the report are built once as a list of blocks; :func:`to_markdown` writes them
for a Markdown viewer and :func:`to_html` as an HTML fragment. Tables are :class:`posenc.table.Table`
and go through that module's writers. Paragraph and list text is plain text with one piece of inline
markup, `code` between backticks; both writers render it, and escape everything else. A leaf module:
it imports nothing of posenc but :mod:`posenc.table`.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from posenc.table import Table
from posenc.table import to_html as table_to_html
from posenc.table import to_markdown as table_to_markdown


@dataclass(frozen=True)
class Heading:
    """A heading of ``level`` 1 … 6."""

    level: int
    text: str
    anchor: str = ""  # an id for links (HTML)


@dataclass(frozen=True)
class Paragraph:
    """A paragraph of plain text (with `code` spans)."""

    text: str


@dataclass(frozen=True)
class Bullets:
    """A bulleted list, one item of plain text (with `code` spans) each."""

    items: tuple[str, ...]


@dataclass(frozen=True)
class Image:
    """A figure: a relative path, a title and a caption."""

    path: str
    title: str
    caption: str = ""


Block = Heading | Paragraph | Bullets | Image | Table

_CODE = re.compile(r"`([^`]+)`")
# What could start markup in running text: an escape, emphasis, an HTML tag or entity. A bracket starts
# a link only as [text](url), which plain text does not write; a pipe matters only in tables.
_MARKDOWN_SPECIAL = re.compile(r"[\\*<&]|(?<![0-9A-Za-z])_|_(?![0-9A-Za-z])")


def _markdown_inline(text: str) -> str:
    """Plain text with `code` spans as Markdown: code kept, everything else escaped."""
    parts = _CODE.split(" ".join(text.splitlines()))
    return "".join(
        f"`{part}`" if index % 2 else _MARKDOWN_SPECIAL.sub(lambda m: "\\" + m.group(0), part)
        for index, part in enumerate(parts)
    )


def _html_inline(text: str) -> str:
    """Plain text with `code` spans as HTML: everything escaped, code spans as ``<code>``."""
    parts = _CODE.split(text)
    return "".join(
        f"<code>{html.escape(part)}</code>" if index % 2 else html.escape(part)
        for index, part in enumerate(parts)
    )


def to_markdown(blocks: Iterable[Block]) -> str:
    """The blocks as Markdown, one paragraph per block."""
    parts = []
    for block in blocks:
        if isinstance(block, Heading):
            parts.append("#" * block.level + " " + _markdown_inline(block.text))
        elif isinstance(block, Paragraph):
            parts.append(_markdown_inline(block.text))
        elif isinstance(block, Bullets):
            parts.append("\n".join("- " + _markdown_inline(item) for item in block.items))
        elif isinstance(block, Image):
            image = f"![{_markdown_inline(block.title)}]({block.path})"
            parts.append(f"{image}\n\n{_markdown_inline(block.caption)}" if block.caption else image)
        else:
            parts.append(table_to_markdown(block))
    return "\n\n".join(parts) + "\n"


def to_html(blocks: Iterable[Block], *, cell_class: Callable[[str], str | None] | None = None) -> str:
    """The blocks as an HTML fragment; ``cell_class`` names a CSS class for a table cell (or None)."""
    parts = []
    for block in blocks:
        if isinstance(block, Heading):
            level = min(max(block.level, 1), 6)
            anchor = f' id="{html.escape(block.anchor)}"' if block.anchor else ""
            parts.append(f"<h{level}{anchor}>{_html_inline(block.text)}</h{level}>")
        elif isinstance(block, Paragraph):
            parts.append(f"<p>{_html_inline(block.text)}</p>")
        elif isinstance(block, Bullets):
            parts.append("<ul>" + "".join(f"<li>{_html_inline(item)}</li>" for item in block.items) + "</ul>")
        elif isinstance(block, Image):
            parts.append(
                f'<figure><img src="{html.escape(block.path)}" alt="{html.escape(block.title)}">'
                f"<figcaption><b>{html.escape(block.title)}.</b> {_html_inline(block.caption)}</figcaption></figure>"
            )
        else:
            parts.append(table_to_html(block, cell_class=cell_class))
    return "\n".join(parts)
