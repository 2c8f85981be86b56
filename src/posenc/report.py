"""`posenc report`: every figure, the verification table and the lab's measured table in one folder.

Writes ``index.html`` (open it in a browser), ``report.md`` (the same content for a Markdown
viewer), ``verification.json`` and ``figures/*.png``. The lab section appears when a lab
database with finished runs exists. An encoding whose measurement or figure raises gets the error in
its cells and in place of its figure; every other encoding is reported all the same.
"""

from __future__ import annotations

import datetime
import html
import json
import platform
from collections.abc import Callable
from pathlib import Path

import torch

import posenc
from posenc._memory import out_of_memory
from posenc.analysis import PROPERTY_NAMES, Property, properties_by_name
from posenc.document import Block, Heading, Image, Paragraph, to_html, to_markdown
from posenc.encodings import ENCODINGS
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


def format_cell(prop: Property) -> str:
    """``holds 3.3e-16`` / ``fails 0.61`` / ``error ValueError`` / ``—`` (the verdict with its number)."""
    if prop.error is not None:
        return f"error {prop.error.split(':', 1)[0]}"
    if prop.holds is None:
        return "—"
    value = f"{prop.value:.3g}" if prop.name != "parameters" else f"{int(prop.value)}"
    return f"{prop.verdict} {value}"


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
            "—" if prop.value is None else f"{prop.value:.4g}",
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

    blocks: list[Block] = []
    figures_dir = out / "figures"
    figures_dir.mkdir(parents=True, exist_ok=True)
    for name, specs in chosen.items():
        title = name if name != "comparison" else "Across encodings"
        blocks += [Heading(2, title, f"figures-{name}"), Paragraph(_encoding_summary(name))]
        if isinstance(specs, Exception):
            blocks.append(Paragraph(f"No figures: choosing them raised {_error_text(specs)}."))
            continue
        for spec in specs:
            advance(spec.name)
            blocks.append(_figure_block(spec, figures_dir))
    return blocks


def _gallery() -> dict[str, list | Exception]:
    """Gallery name -> its figure specs, or the error choosing them raised (the others go on)."""
    from posenc.plots import gallery

    chosen: dict[str, list | Exception] = {}
    for name in gallery.names():
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
    figure.savefig(path, dpi=110)
    return Image(f"figures/{path.name}", spec.title, spec.caption)


def _error_text(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def _encoding_summary(name: str) -> str:
    if name not in ENCODINGS:
        return "Figures that compare every registered encoding."
    cls = ENCODINGS[name]
    first = (cls.__doc__ or "").strip().splitlines()[0]
    formula = cls.parameter_formula or "not declared"
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
        figure.savefig(path, dpi=110)
        section.append(
            Image(f"figures/{path.name}", alt[0].upper() + alt[1:], "Mean over seeds with 95% intervals.")
        )
    return section


def build_report(out: Path, *, lab_db: Path | None = None, progress: bool = True) -> dict:
    """Write the report into ``out``; returns a summary (paths, figure count, failures per encoding)."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    out = Path(out)
    _check_writable(out)
    chosen = _gallery()
    total = sum(len(specs) for specs in chosen.values() if isinstance(specs, list)) + 1
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"))
    with Progress(*columns, TimeElapsedColumn(), disable=not progress, transient=False) as bar:
        task = bar.add_task("verifying every encoding", total=total)
        table = verification_table()
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
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1200px; padding: 0 1rem;
       color: #1d1d1f; line-height: 1.45; }
nav a { margin-right: 1rem; }
table { border-collapse: collapse; margin: 1rem 0; font-size: 0.85rem; }
th, td { border: 1px solid #ccc; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
th { background: #f2f2f2; } caption { text-align: left; font-weight: bold; padding: 0.25rem 0; }
td.holds { background: #e6f4ea; } td.fails { background: #fdecea; } td.na { color: #888; }
figure { display: inline-block; margin: 0.5rem; max-width: 48%; vertical-align: top; }
figure img { max-width: 100%; border: 1px solid #ddd; }
figcaption { font-size: 0.85rem; }
"""


def _verdict_class(text: str) -> str | None:
    """The CSS class of a table cell by the verdict it starts with."""
    return {"holds": "holds", "fails": "fails", "error": "fails", "—": "na"}.get(text.split(" ", 1)[0])


def render_html(header: dict, blocks: list[Block]) -> str:
    """The report as one HTML page with relative image links (no scripts, no external resources)."""
    nav = "".join(
        f'<a href="#{html.escape(b.anchor)}">{html.escape(b.text)}</a>'
        for b in blocks
        if isinstance(b, Heading) and b.anchor
    )
    intro = (
        f"<h1>{html.escape(header['title'])}</h1>"
        f"<p>Generated {html.escape(header['generated'])} by <code>posenc report</code> "
        f"({html.escape(header['versions'])}; {html.escape(header['machine'])}).</p><nav>{nav}</nav>"
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1"><link rel="icon" href="data:,">'
        f"<title>{html.escape(header['title'])}</title><style>{CSS}</style></head>"
        f"<body>{intro}{''.join(_sections_html(blocks))}</body></html>\n"
    )


def _sections_html(blocks: list[Block]) -> list[str]:
    """One ``<section id=…>`` per level-2 heading with an anchor, holding the blocks up to the next one."""
    starts = [i for i, b in enumerate(blocks) if isinstance(b, Heading) and b.level == 2 and b.anchor]
    parts = [to_html(blocks[: starts[0]] if starts else blocks, cell_class=_verdict_class)]
    for start, end in zip(starts, [*starts[1:], len(blocks)], strict=True):
        body = to_html(blocks[start:end], cell_class=_verdict_class)
        parts.append(f'<section id="{html.escape(blocks[start].anchor)}">{body}</section>')
    return parts
