"""A document as data (headings, paragraphs, lists, tables, images) and one writer per format.

The lab's tables and the report are built once as a list of blocks; :func:`to_markdown` writes them
for a Markdown viewer and :func:`to_html` as an HTML fragment. Tables are :class:`posenc.table.Table`
and go through that module's writers (in HTML inside a box that scrolls sideways, so that a wide
table never widens the page). Paragraph and list text is plain text with one piece of inline markup,
`code` between backticks; both writers render it, and escape everything else (HTML also links the
web addresses in it). A leaf module: it imports nothing of posenc but :mod:`posenc.table`.
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
    """A figure: a relative path, a title and a caption; in HTML linked to its file, and shown at its
    ``width`` × ``height`` pixels (when given) or narrower where the page is."""

    path: str
    title: str
    caption: str = ""
    width: int | None = None
    height: int | None = None


@dataclass(frozen=True)
class Details:
    """Blocks under a one-line summary: collapsed in HTML until opened; in Markdown the summary as a
    paragraph, then the blocks."""

    summary: str
    blocks: tuple[Block, ...]


Block = Heading | Paragraph | Bullets | Image | Table | Details

_CODE = re.compile(r"`([^`]+)`")
# A web address in running text, up to a space or a closing bracket; a final full stop, comma,
# semicolon or colon ends the sentence, not the address.
_URL = re.compile(r"https?://[^\s<>()\[\]]+[^\s<>()\[\].,;:]")
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


def inline_html(text: str) -> str:
    """Plain text with `code` spans as HTML: everything escaped, code spans as ``<code>``, web
    addresses as links."""
    parts = _CODE.split(text)
    return "".join(
        f"<code>{html.escape(part)}</code>" if index % 2 else _linked(part)
        for index, part in enumerate(parts)
    )


def _linked(text: str) -> str:
    pieces, start = [], 0
    for match in _URL.finditer(text):
        url = html.escape(match.group(0))
        pieces += [html.escape(text[start : match.start()]), f'<a href="{url}">{url}</a>']
        start = match.end()
    return "".join(pieces) + html.escape(text[start:])


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
        elif isinstance(block, Details):
            parts.append(to_markdown([Paragraph(block.summary), *block.blocks]).rstrip("\n"))
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
            parts.append(f"<h{level}{anchor}>{inline_html(block.text)}</h{level}>")
        elif isinstance(block, Paragraph):
            parts.append(f"<p>{inline_html(block.text)}</p>")
        elif isinstance(block, Bullets):
            parts.append("<ul>" + "".join(f"<li>{inline_html(item)}</li>" for item in block.items) + "</ul>")
        elif isinstance(block, Image):
            parts.append(_figure_html(block))
        elif isinstance(block, Details):
            inner = to_html(block.blocks, cell_class=cell_class)
            parts.append(f"<details><summary>{inline_html(block.summary)}</summary>{inner}</details>")
        else:
            table = table_to_html(block, cell_class=cell_class)
            parts.append(f'<div class="table-scroll" role="region" tabindex="0">{table}</div>')
    return "\n".join(parts)


def _figure_html(image: Image) -> str:
    """The image linked to its file (full size a click away), its title and caption below."""
    path, title = html.escape(image.path), html.escape(image.title)
    size = "".join(
        f' {name}="{value}"' for name, value in (("width", image.width), ("height", image.height)) if value
    )
    return (
        f'<figure><a href="{path}"><img src="{path}" alt="{title}"{size}></a>'
        f"<figcaption><b>{title}.</b> {inline_html(image.caption)}</figcaption></figure>"
    )
