"""`posenc report`: every figure, the verification table and the lab's measured table in one folder.

Writes ``index.html`` (open it in a browser), ``report.md`` (the same content for a Markdown
viewer), ``verification.json`` and ``figures/*.png``. The page reads as a paper's appendix: a table of
contents, the verification table, the lab's tables (when a lab database with finished runs exists),
one section per encoding with its figures shown at the size they are drawn and linked to their files,
and the reasons for every verdict; wide tables scroll inside their box and settings stay collapsed.
An encoding whose measurement or figure raises gets the error in its cells and in place of its
figure; every other encoding is reported all the same.
"""

from __future__ import annotations

import datetime
import html
import json
import platform
import re
import struct
from collections.abc import Callable
from pathlib import Path

import torch

import posenc
from posenc._memory import out_of_memory
from posenc.analysis import PROPERTY_NAMES, Property, properties_by_name
from posenc.document import Block, Heading, Image, Paragraph, inline_html, to_html, to_markdown
from posenc.encodings import ENCODINGS, describe, encoding_class
from posenc.table import Table

#: Column titles of the verification table, one per property.
PROPERTY_TITLES = {
    "bounded": "bounded",
    "unique": "unique",
    "translation_invariant": "dot ∝ distance",
    "closed_form": "Σ cos(d·ω)",
    "linear_map": "PE(p+k) = M·PE(p)",
    "relative": "shift-invariant logits",
    "decay": "decay",
    "parameters": "parameters",
    "precision": "float32 error",
}


def verification_table(names: list[str] | None = None) -> dict[str, dict[str, Property]]:
    """``{encoding: {property: Property}}`` for the representative instance of each encoding; one that
    raises gets its claims as errors (``posenc.analysis.properties_by_name``)."""
    return properties_by_name(names)


#: Figures are written at this resolution and shown at their own size (≈ 15 px labels).
DPI = 110


def format_value(prop: Property, digits: int = 3) -> str:
    """The measured number: a count of parameters as an integer with thousands separators
    (``16,384``), anything else to ``digits`` significant digits; ``—`` when there is none."""
    if prop.value is None:
        return "—"
    return f"{int(prop.value):,}" if prop.name == "parameters" else f"{prop.value:.{digits}g}"


def format_cell(prop: Property) -> str:
    """``holds 3.3e-16`` / ``fails 0.61`` / ``holds 16,384`` / ``error ValueError`` / ``—`` (the verdict
    with its number)."""
    if prop.error is not None:
        return f"error {prop.error.split(':', 1)[0]}"
    if prop.holds is None:
        return "—"
    return f"{prop.verdict} {format_value(prop)}"


def properties_table(table: dict[str, dict[str, Property]], *, title: str = "") -> Table:
    """Encoding × property: each cell the verdict and its number, "—" where the claim does not concern
    the encoding, then the measured relative-position category. The one builder of this table: the
    report shows it, ``posenc verify --all`` shows it transposed."""
    columns = ["encoding", "kind", *(PROPERTY_TITLES[name] for name in PROPERTY_NAMES), "relative position"]
    rows = [
        [
            name,
            ENCODINGS[name].kind,
            *(format_cell(result[p]) for p in PROPERTY_NAMES),
            result["relative"].category or "",
        ]
        for name, result in table.items()
    ]
    return Table(columns, rows, title=title)


def _verification_section(table: dict[str, dict[str, Property]]) -> list[Block]:
    text = (
        "Each cell is a measurement on the encoding's representative instance "
        "(`posenc.analysis.specimen`), its verdict against the threshold of "
        "`posenc.analysis.properties`, and — where a claim does not concern an encoding or needs a view "
        "it does not give — a dash; `error` where measuring it raised (the reasons below say what). "
        "`parameters` is counted on that instance and checked against its formula. "
        "The last column is seed 004's Relative Position column, measured: explicit when shifting "
        "every position leaves the attention logits unchanged, implicit when it does not but code "
        "dot products depend only on distance, none when the logits do not see position."
    )
    return [Heading(2, "Verification", "verification"), Paragraph(text), properties_table(table)]


def _reasons_section(table: dict[str, dict[str, Property]]) -> list[Block]:
    columns = ["encoding", "property", "value", "threshold", "verdict", "why"]
    rows = [
        [
            name,
            prop.name,
            format_value(prop, 4),
            prop.threshold,
            prop.verdict,
            prop.reason,
        ]
        for name, result in table.items()
        for prop in result.values()
    ]
    return [Heading(2, "Why each verdict", "reasons"), Table(columns, rows)]


def _figure_sections(
    out: Path, chosen: dict[str, list | Exception], advance: Callable[[str], None]
) -> list[Block]:
    """A section per gallery name: its figures written under ``out/figures``, or the errors they raised."""
    from matplotlib import pyplot  # noqa: F401  (the Agg backend is chosen on first use)

    blocks: list[Block] = [Heading(2, "Encodings", "encodings"), Paragraph(ENCODINGS_TEXT)]
    figures_dir = out / "figures"
    figures_dir.mkdir(parents=True, exist_ok=True)
    for name, specs in chosen.items():
        if name == "comparison":
            blocks.append(Heading(2, "Across encodings", f"figures-{name}"))
        else:
            blocks.append(Heading(3, _encoding_title(name), f"figures-{name}"))
        blocks.append(Paragraph(_encoding_summary(name)))
        if isinstance(specs, Exception):
            blocks.append(Paragraph(f"No figures: choosing them raised {_error_text(specs)}."))
            continue
        for spec in specs:
            advance(spec.name)
            blocks.append(_figure_block(spec, figures_dir))
    return blocks


def _gallery(encodings: list[str] | None = None) -> dict[str, list | Exception]:
    """Gallery name -> its figure specs, or the error choosing them raised (the others go on); only
    ``encodings`` when given (and then no figure across every encoding)."""
    from posenc.plots import gallery

    chosen: dict[str, list | Exception] = {}
    for name in gallery.names() if encodings is None else encodings:
        try:
            chosen[name] = gallery.figures(name)
        except Exception as error:  # an encoding's specimen or views may raise anything
            if out_of_memory(error):
                raise
            chosen[name] = error
    return chosen


def _figure_block(spec, figures_dir: Path) -> Block:
    """The figure written as a PNG and linked, or a paragraph naming the error drawing it raised."""
    path = figures_dir / f"{spec.name}.png"
    try:
        figure = spec.build()
    except Exception as error:  # one encoding's failing hook must not take down every other figure
        if out_of_memory(error):
            raise
        return Paragraph(f"Figure {spec.name} could not be drawn: {_error_text(error)}.")
    return _saved(figure, path, spec.title, spec.caption)


def _saved(figure, path: Path, title: str, caption: str) -> Image:
    """``figure`` written to ``path`` at :data:`DPI`, as an image block of its size in pixels."""
    figure.savefig(path, dpi=DPI)
    width, height = png_size(path)
    return Image(f"figures/{path.name}", title, caption, width, height)


def png_size(path: Path) -> tuple[int, int]:
    """(width, height) in pixels of the PNG at ``path``, read from its header."""
    header = Path(path).read_bytes()[:24]
    if header[:8] != b"\x89PNG\r\n\x1a\n" or header[12:16] != b"IHDR":
        raise ValueError(f"{str(path)!r} is not a PNG file (it starts with {header[:8]!r})")
    width, height = struct.unpack(">II", header[16:24])
    return width, height


def _error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


ENCODINGS_TEXT = (
    "One section per registered encoding: what it is, its kind and its parameter formula, then its "
    "figures, each computed from the encoding's representative instance by the analysis functions the "
    "verification uses. Click a figure for its full-size image."
)


def _encoding_title(name: str) -> str:
    """``ALiBi — `alibi` ``: the encoding's label and its registered name, or the name alone."""
    label = describe(name).label if name in ENCODINGS else None
    return f"{label} — `{name}`" if label and label != name else f"`{name}`"


# reST's inline literal and roles (``x``, :class:`X`) as the report's one inline markup, `x`.
_REST_LITERAL = re.compile(r"``(.+?)``|:[a-z]+:`~?([^`]+)`")
# A sentence ends at a full stop, question or exclamation mark followed by a space and a capital
# letter (or the end), unless the stop ends an abbreviation ("et al.", "e.g.", "i.e.", "cf.", "vs.").
_SENTENCE_END = re.compile(r"(?<!\bal)(?<!\be\.g)(?<!\bi\.e)(?<!\bcf)(?<!\bvs)[.!?](?=\s+[A-Z(]|\s*$)")


def first_sentence(docstring: str | None) -> str:
    """The whole first sentence of a docstring's first paragraph, on one line, reST literals as
    `code`; the whole paragraph when no sentence in it ends (never a cut sentence)."""
    paragraph = " ".join((docstring or "").strip().split("\n\n", 1)[0].split())
    paragraph = _REST_LITERAL.sub(lambda m: f"`{m.group(1) or m.group(2)}`", paragraph)
    end = _SENTENCE_END.search(paragraph)
    return paragraph if end is None else paragraph[: end.end()]


def _encoding_summary(name: str) -> str:
    if name not in ENCODINGS:
        return "Figures that compare every registered encoding."
    cls = ENCODINGS[name]
    first = first_sentence(cls.__doc__)
    formula = describe(name).parameter_formula or "not declared"
    return f"{first} Kind: {cls.kind}; parameters: {formula}."


def _lab_section(out: Path, lab_db: Path | None) -> list[Block]:
    if lab_db is None or not Path(lab_db).exists():
        return []
    from posenc.lab import report as lab_report

    blocks = lab_report.comparison_blocks(lab_db)
    if blocks is None:
        return []
    section: list[Block] = [Heading(2, lab_report.TITLE, "lab"), *blocks]
    for stem, alt, figure in lab_report.lab_figures(lab_db):
        path = out / "figures" / f"lab-{stem}.png"
        title = alt[0].upper() + alt[1:]
        section.append(_saved(figure, path, title, "Mean over seeds with 95% intervals."))
    return section


def build_report(
    out: Path, *, lab_db: Path | None = None, progress: bool = True, encodings: list[str] | None = None
) -> dict:
    """Write the report into ``out``; returns a summary (paths, figure count, failures per encoding).

    ``encodings``: registered names to report on (default every one, and the figures across them).

    Raises:
        ValueError: an unknown name in ``encodings`` (the registered ones listed), or an empty list.
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    if encodings is not None:
        if not encodings:
            raise ValueError("encodings must name at least one encoding, got none")
        for name in encodings:
            encoding_class(name)  # an unknown name: the registry's error, listing the valid ones
    out = Path(out)
    _check_writable(out)
    chosen = _gallery(encodings)
    total = sum(len(specs) for specs in chosen.values() if isinstance(specs, list)) + 1
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"))
    with Progress(*columns, TimeElapsedColumn(), disable=not progress, transient=False) as bar:
        task = bar.add_task("verifying every encoding", total=total)
        table = verification_table(encodings)
        bar.advance(task)

        def advance(label: str) -> None:
            bar.update(task, description=f"figure {label}")
            bar.advance(task)

        figure_sections = _figure_sections(out, chosen, advance)
        bar.update(task, description="report written")
    lab = _lab_section(out, lab_db)
    blocks = [*_verification_section(table), *lab, *figure_sections, *_reasons_section(table)]
    header = _header()
    (out / "report.md").write_text(render_markdown(header, blocks), encoding="utf-8")
    (out / "index.html").write_text(render_html(header, blocks), encoding="utf-8")
    (out / "verification.json").write_text(
        json.dumps(
            {name: {p: prop.as_dict() for p, prop in result.items()} for name, result in table.items()},
            indent=2,
            ensure_ascii=False,
        ),
        encoding="utf-8",
    )
    return {
        "out": str(out),
        "figures": sum(isinstance(block, Image) for block in blocks),
        "lab": bool(lab),
        "fails": {
            name: [p for p, prop in result.items() if prop.holds is False] for name, result in table.items()
        },
        "errors": {
            name: [p for p, prop in result.items() if prop.error is not None]
            for name, result in table.items()
        },
    }


def _check_writable(out: Path) -> None:
    try:
        out.mkdir(parents=True, exist_ok=True)
        probe = out / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as error:
        raise ValueError(f"report folder {str(out)!r} is not writable: {error.strerror}") from None


def _header() -> dict:
    return {
        "title": "posenc report",
        "generated": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "versions": f"posenc {posenc.__version__}, torch {torch.__version__}, Python {platform.python_version()}",
        "machine": f"{platform.machine()}, {platform.system()}",
    }


# --- rendering: the blocks through posenc.document's two writers -------------------------------------


def render_markdown(header: dict, blocks: list[Block]) -> str:
    """The report as Markdown: figures as relative image links."""
    intro = Paragraph(
        f"Generated {header['generated']} by `posenc report` ({header['versions']}; {header['machine']})."
    )
    return to_markdown([Heading(1, header["title"]), intro, *blocks])


CSS = """
:root { color-scheme: light; --rule: #d0d0d7; --muted: #5f6368; }
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 0; color: #1d1d1f;
       line-height: 1.5; background: #fff; }
main, header { max-width: 1400px; margin: 0 auto; padding: 0 clamp(0.75rem, 3vw, 2rem); }
header { padding-top: 1.5rem; }
h1 { font-size: 1.9rem; margin: 0 0 0.25rem; }
h2 { font-size: 1.45rem; margin: 2.5rem 0 0.75rem; padding-bottom: 0.25rem; border-bottom: 1px solid var(--rule); }
h3 { font-size: 1.2rem; margin: 2rem 0 0.5rem; }
h4 { font-size: 1.05rem; margin: 1.5rem 0 0.5rem; }
h5 { font-size: 0.95rem; margin: 1.25rem 0 0.25rem; }
h2, h3, h4, h5 { overflow-wrap: anywhere; }
p, li, figcaption, summary { max-width: 52rem; overflow-wrap: anywhere; }
.meta { color: var(--muted); font-size: 0.9rem; }
code { font-size: 0.9em; background: #f3f3f6; padding: 0 0.2em; border-radius: 3px; }
a { color: #1a55b5; }
nav.toc { border: 1px solid var(--rule); border-radius: 6px; padding: 0.75rem 1.25rem; margin: 1.25rem 0;
          max-width: 52rem; background: #fafafc; }
nav.toc h2 { font-size: 1.05rem; margin: 0 0 0.25rem; border: 0; padding: 0; }
nav.toc ol { margin: 0; padding-left: 1.5rem; }
nav.toc li { margin: 0.15rem 0; }
nav.toc ol ol { list-style: none; padding: 0; display: flex; flex-wrap: wrap; gap: 0.1rem 0.9rem; }
nav.toc ol ol li { margin: 0; }
.table-scroll { overflow-x: auto; max-width: 100%; margin: 1rem 0; }
table { border-collapse: collapse; font-size: 0.85rem; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } caption { text-align: left; font-weight: bold; padding: 0.25rem 0; }
td.holds { background: #e6f4ea; } td.fails { background: #fdecea; } td.na { color: #888; }
figure { margin: 1.25rem 0 1.75rem; }
figure img { display: block; max-width: 100%; height: auto; border: 1px solid #e2e2e8; }
figcaption { font-size: 0.9rem; margin-top: 0.4rem; }
details { margin: 0.75rem 0; border: 1px solid var(--rule); border-radius: 6px; padding: 0.4rem 0.9rem; }
summary { cursor: pointer; font-weight: 600; }
details[open] summary { margin-bottom: 0.4rem; }
"""


def _verdict_class(text: str) -> str | None:
    """The CSS class of a table cell by the verdict it starts with."""
    return {"holds": "holds", "fails": "fails", "error": "fails", "—": "na"}.get(text.split(" ", 1)[0])


def contents(blocks: list[Block]) -> str:
    """The table of contents: a numbered list of the level-2 headings with anchors, each holding its
    level-3 ones (an encoding per item) as a list that wraps."""
    items: list[tuple[Heading, list[Heading]]] = []
    for block in blocks:
        if isinstance(block, Heading) and block.anchor and block.level == 2:
            items.append((block, []))
        elif isinstance(block, Heading) and block.anchor and block.level == 3 and items:
            items[-1][1].append(block)

    def link(heading: Heading, text: str) -> str:
        return f'<a href="#{html.escape(heading.anchor)}">{text}</a>'

    parts = []
    for heading, children in items:
        inner = "".join(f"<li>{link(c, _short(c))}</li>" for c in children)
        parts.append(
            f"<li>{link(heading, inline_html(heading.text))}"
            + (f"<ol>{inner}</ol>" if inner else "")
            + "</li>"
        )
    return f'<nav class="toc" aria-label="Contents"><h2>Contents</h2><ol>{"".join(parts)}</ol></nav>'


def _short(heading: Heading) -> str:
    """A level-3 heading in the contents: its `code` span (an encoding's name), else its text."""
    code = re.search(r"`([^`]+)`", heading.text)
    return html.escape(code.group(1)) if code else inline_html(heading.text)


def render_html(header: dict, blocks: list[Block]) -> str:
    """The report as one HTML page with relative image links (no scripts, no external resources)."""
    intro = (
        f"<header><h1>{html.escape(header['title'])}</h1>"
        f'<p class="meta">Generated {html.escape(header["generated"])} by <code>posenc report</code> '
        f"({html.escape(header['versions'])}; {html.escape(header['machine'])}).</p>{contents(blocks)}</header>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">'
        f"<title>{html.escape(header['title'])}</title><style>{CSS}</style></head>"
        f"<body>{intro}<main>{_sections_html(blocks)}</main></body></html>\n"
    )


def _sections_html(blocks: list[Block], level: int = 2) -> str:
    """One ``<section id=…>`` per heading of ``level`` with an anchor, holding the blocks up to the next
    one; within it, the same for the next level (an encoding's section inside "Encodings")."""
    starts = [i for i, b in enumerate(blocks) if isinstance(b, Heading) and b.level == level and b.anchor]
    if level > 3 or not starts:
        return to_html(blocks, cell_class=_verdict_class)
    parts = [_sections_html(blocks[: starts[0]], level + 1)] if starts[0] else []
    for start, end in zip(starts, [*starts[1:], len(blocks)], strict=True):
        heading, body = blocks[start], _sections_html(blocks[start + 1 : end], level + 1)
        head = to_html([Heading(heading.level, heading.text)])  # the id is the section's
        parts.append(f'<section id="{html.escape(heading.anchor)}">{head}\n{body}</section>')
    return "\n".join(parts)
