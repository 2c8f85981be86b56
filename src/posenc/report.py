"""`posenc report`: every figure, the verification table and the lab's measured table in one folder.

Writes ``index.html`` (open it in a browser), ``report.md`` (the same content for a Markdown
viewer), ``verification.json`` and ``figures/*.png``. The lab section appears when a lab
database with finished runs exists.
"""

from __future__ import annotations

import datetime
import html
import json
import platform
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

import posenc
from posenc.analysis import PROPERTY_NAMES, Property, properties, specimen
from posenc.encodings import ENCODINGS, available

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


@dataclass
class Section:
    """A heading, a paragraph, figures (file, title, caption) and an optional Markdown table."""

    title: str
    text: str = ""
    figures: list[tuple[str, str, str]] = field(default_factory=list)
    table: tuple[list[str], list[list[str]]] | None = None
    anchor: str = ""


def verification_table(names: list[str] | None = None) -> dict[str, dict[str, Property]]:
    """``{encoding: {property: Property}}`` for the representative instance of each encoding."""
    return {name: properties(specimen(name)) for name in names or available()}


def format_cell(prop: Property) -> str:
    """``holds 3.3e-16`` / ``fails 0.61`` / ``—`` (the verdict with its number)."""
    if prop.holds is None:
        return "—"
    value = f"{prop.value:.3g}" if prop.name != "parameters" else f"{int(prop.value)}"
    return f"{prop.verdict} {value}"


def _verification_section(table: dict[str, dict[str, Property]]) -> Section:
    headers = ["encoding", "kind", *(PROPERTY_TITLES[name] for name in PROPERTY_NAMES), "relative position"]
    rows = []
    for name, result in table.items():
        category = result["relative"].category or ""
        rows.append([name, ENCODINGS[name].kind, *(format_cell(result[p]) for p in PROPERTY_NAMES), category])
    text = (
        "Each cell is a measurement on the encoding's representative instance "
        "(`posenc.analysis.specimen`), its verdict against the threshold of "
        "`posenc.analysis.properties`, and — where a claim does not concern an encoding — a dash. "
        "`parameters` is counted from modules built at L = 512, d = 512, h = 8. "
        "The last column is seed 004's *Relative Position* column, measured: explicit when shifting "
        "every position leaves the attention logits unchanged, implicit when it does not but code "
        "dot products depend only on distance, none when the logits do not see position."
    )
    return Section("Verification", text, table=(headers, rows), anchor="verification")


def _reasons_section(table: dict[str, dict[str, Property]]) -> Section:
    headers = ["encoding", "property", "value", "threshold", "verdict", "why"]
    rows = [
        [
            name,
            prop.name,
            "—" if prop.value is None else f"{prop.value:.4g}",
            prop.threshold,
            prop.verdict,
            prop.reason,
        ]
        for name, result in table.items()
        for prop in result.values()
    ]
    return Section("Why each verdict", table=(headers, rows), anchor="reasons")


def _figure_sections(out: Path, advance: Callable[[str], None]) -> list[Section]:
    from matplotlib import pyplot  # noqa: F401  (the Agg backend is chosen on first use)

    from posenc.plots import gallery

    sections = []
    figures_dir = out / "figures"
    figures_dir.mkdir(parents=True, exist_ok=True)
    for name in gallery.names():
        section = Section(
            name if name != "comparison" else "Across encodings",
            _encoding_summary(name),
            anchor=f"figures-{name}",
        )
        for spec in gallery.figures(name):
            advance(spec.name)
            figure = spec.build()
            path = figures_dir / f"{spec.name}.png"
            figure.savefig(path, dpi=110)
            section.figures.append((f"figures/{path.name}", spec.title, spec.caption))
        sections.append(section)
    return sections


def _encoding_summary(name: str) -> str:
    if name not in ENCODINGS:
        return "Figures that compare every registered encoding."
    cls = ENCODINGS[name]
    first = (cls.__doc__ or "").strip().splitlines()[0]
    return f"{first} Kind: {cls.kind}; parameters: {cls.parameter_formula}."


def _lab_section(out: Path, lab_db: Path | None) -> Section | None:
    if lab_db is None or not Path(lab_db).exists():
        return None
    from posenc.lab import report as lab_report

    markdown = lab_report.comparison_markdown(lab_db)
    if markdown is None:
        return None
    title = "Length generalisation, measured"
    first, _, rest = markdown.strip().partition("\n")
    if first.startswith("## "):  # the lab's own heading becomes the section's
        title, markdown = first[3:].strip(), rest
    section = Section(title, markdown.strip(), anchor="lab")
    figure = lab_report.bits_per_position_figure(lab_db)
    if figure is not None:
        path = out / "figures" / "lab-bits-per-position.png"
        figure.savefig(path, dpi=110)
        section.figures.append(
            (f"figures/{path.name}", "Bits per byte against position", "Mean over seeds with 95% intervals.")
        )
    return section


def build_report(out: Path, *, lab_db: Path | None = None, progress: bool = True) -> dict:
    """Write the report into ``out``; returns a summary (paths, figure count, failures per encoding)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    from posenc.plots import gallery

    out = Path(out)
    _check_writable(out)
    total = sum(len(gallery.figures(name)) for name in gallery.names()) + 1
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"))
    with Progress(*columns, TimeElapsedColumn(), disable=not progress, transient=False) as bar:
        task = bar.add_task("verifying every encoding", total=total)
        table = verification_table()
        bar.advance(task)

        def advance(label: str) -> None:
            bar.update(task, description=f"figure {label}")
            bar.advance(task)

        figure_sections = _figure_sections(out, advance)
        bar.update(task, description="report written")
    sections = [_verification_section(table), *figure_sections]
    lab = _lab_section(out, lab_db)
    if lab is not None:
        sections.insert(1, lab)
    sections.append(_reasons_section(table))
    header = _header()
    (out / "report.md").write_text(render_markdown(header, sections), encoding="utf-8")
    (out / "index.html").write_text(render_html(header, sections), encoding="utf-8")
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
        "figures": sum(len(s.figures) for s in sections),
        "lab": lab is not None,
        "fails": {
            name: [p for p, prop in result.items() if prop.holds is False] for name, result in table.items()
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


# --- rendering ----------------------------------------------------------------------------------


def _markdown_table(headers: list[str], rows: list[list[str]]) -> str:
    def cell(text: str) -> str:
        return str(text).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def render_markdown(header: dict, sections: list[Section]) -> str:
    """The report as Markdown: figures as relative image links."""
    parts = [
        f"# {header['title']}",
        f"Generated {header['generated']} by `posenc report` ({header['versions']}; {header['machine']}).",
    ]
    for section in sections:
        parts.append(f"## {section.title}")
        if section.text:
            parts.append(section.text)
        if section.table is not None:
            parts.append(_markdown_table(*section.table))
        for path, title, caption in section.figures:
            parts.append(f"### {title}\n\n![{title}]({path})\n\n{caption}")
    return "\n\n".join(parts) + "\n"


CSS = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1200px; padding: 0 1rem;
       color: #1d1d1f; line-height: 1.45; }
nav a { margin-right: 1rem; }
table { border-collapse: collapse; margin: 1rem 0; font-size: 0.85rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f2f2f2; }
td.holds { background: #e6f4ea; } td.fails { background: #fdecea; } td.na { color: #888; }
figure { display: inline-block; margin: 0.5rem; max-width: 48%; vertical-align: top; }
figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.85rem; }
pre { background: #f6f6f6; padding: 0.5rem; overflow-x: auto; }
"""


def _html_cell(text: str) -> str:
    status = str(text).split(" ", 1)[0]
    css = {"holds": "holds", "fails": "fails", "—": "na"}.get(status)
    attribute = f' class="{css}"' if css else ""
    return f"<td{attribute}>{_inline(str(text))}</td>"


def _html_table(headers: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{_inline(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(_html_cell(c) for c in row) + "</tr>" for row in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _inline(text: str) -> str:
    """Escaped text with Markdown's `code` and *emphasis* as HTML."""
    text = html.escape(text)
    text = re.sub(r"`([^`]+)`", r"<code>\1</code>", text)
    return re.sub(r"\*([^*\s][^*]*)\*", r"<em>\1</em>", text)


def _html_text(text: str) -> str:
    """Paragraphs, headings, bullet lists and pipe tables of a Markdown fragment (the lab's tables)."""
    blocks, html_parts = text.strip().split("\n\n"), []
    for block in blocks:
        lines = block.strip().splitlines()
        if len(lines) >= 2 and all(line.strip().startswith("|") for line in lines):
            rows = [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]
            html_parts.append(_html_table(rows[0], [r for r in rows[2:]]))
        elif all(line.lstrip().startswith("- ") for line in lines):
            items = "".join(f"<li>{_inline(line.lstrip()[2:])}</li>" for line in lines)
            html_parts.append(f"<ul>{items}</ul>")
        elif block.strip().startswith("#"):
            level = min(len(block) - len(block.lstrip("#")) + 1, 6)
            html_parts.append(f"<h{level}>{html.escape(block.lstrip('#').strip())}</h{level}>")
        else:
            html_parts.append(f"<p>{_inline(block.strip())}</p>")
    return "\n".join(html_parts)


def render_html(header: dict, sections: list[Section]) -> str:
    """The report as one HTML page with relative image links (no scripts, no external resources)."""
    nav = "".join(f'<a href="#{s.anchor}">{html.escape(s.title)}</a>' for s in sections if s.anchor)
    body = [
        f"<h1>{html.escape(header['title'])}</h1>",
        f"<p>Generated {html.escape(header['generated'])} by <code>posenc report</code> "
        f"({html.escape(header['versions'])}; {html.escape(header['machine'])}).</p>",
        f"<nav>{nav}</nav>",
    ]
    for section in sections:
        body.append(f'<section id="{section.anchor}"><h2>{html.escape(section.title)}</h2>')
        if section.text:
            body.append(_html_text(section.text))
        if section.table is not None:
            body.append(_html_table(*section.table))
        for path, title, caption in section.figures:
            body.append(
                f'<figure><img src="{html.escape(path)}" alt="{html.escape(title)}">'
                f"<figcaption><b>{html.escape(title)}.</b> {html.escape(caption)}</figcaption></figure>"
            )
        body.append("</section>")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">'
        f"<title>{html.escape(header['title'])}</title><style>{CSS}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )
