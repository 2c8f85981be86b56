"""The lab's report: the measured comparison table beside seed 004's claims, a section per family of
tasks, and the figures.

Seed 004 (§7) claims, per encoding, a parameter count, a grade of length generalisation and whether
relative position is explicit. The report puts a measurement beside each claim and a mark:
✓ agrees, ✗ disagrees, ~ the 95% interval over seeds spans the claim's band and another.

- Parameters: learned parameters counted from the modules at L and 2L. "0" agrees with 0 at both;
  "L × d" with a count equal to positions × d_model that doubles at 2L; "O(L)" with a count that
  grows from L to 2L; "h slopes" with h learned parameters.
- Length generalisation: r = bits per byte at 4L over bits per byte at L (language modelling,
  non-overlapping windows, all positions), mean and 95% t-interval over seeds, graded by
  :data:`BANDS`; a model that cannot run past L grades "Poor". The mark compares the grades the
  interval touches with the claimed grade. Exact match at 2L for the exact-match tasks is shown
  beside it (the seed claims nothing separate for them).
- Relative position: the shift test of :mod:`posenc.lab.properties` (explicit | implicit | no).

The exact-match tasks also get exact match per evaluation length (mean and 95% interval over seeds)
and the mean reciprocal rank of the encodings across tasks and lengths beyond L, computed as
Kazemnejad et al. (2023) compute theirs and shown beside their published figures
(:data:`PUBLISHED_MRR`). Which section a task is shown in is its own ``family``.

The database is read once (:mod:`~posenc.lab.report.loading`: typed runs grouped into
configurations), then drawn into tables (:mod:`~posenc.lab.report.tables`,
:mod:`~posenc.lab.report.ranking`) and figures (:mod:`~posenc.lab.report.figures`).
"""

from __future__ import annotations

import sys
from pathlib import Path

from posenc.document import Heading, Image, to_markdown
from posenc.lab.report.figures import (
    accuracy_figures,
    answer_position_figure,
    bits_per_position_figure,
    lab_figures,
)
from posenc.lab.report.loading import (
    Configuration,
    Recorded,
    Run,
    configuration_label,
    configurations,
    differences,
    load,
)
from posenc.lab.report.ranking import (
    PUBLISHED_MRR,
    exact_match_beyond_l,
    learned_at_l,
    mean_reciprocal_rank,
    mean_reciprocal_rank_table,
    ranks,
)
from posenc.lab.report.tables import (
    BANDS,
    GRADES,
    LEGEND,
    TITLE,
    _parameter_cell,
    comparison_blocks,
    comparison_markdown,
    comparison_table,
    grade,
    seed_claims,
)


def write_report(db_path: str | Path, out: str | Path | None, preset: str | None = None) -> str | None:
    """The Markdown report; with ``out``, also ``out/lab.md`` and a PNG per figure (``lab_*.png``).
    The database is read once."""
    runs = load(db_path, preset)
    blocks = comparison_blocks(runs)
    if blocks is None:
        return None
    blocks = [Heading(2, TITLE), *blocks]
    if out is None:
        return to_markdown(blocks)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    for stem, alt, figure in lab_figures(runs):
        name = f"lab_{stem.replace('-', '_')}.png"
        figure.savefig(out / name, dpi=120)
        blocks.append(Image(name, alt))
    markdown = to_markdown(blocks)
    (out / "lab.md").write_text(markdown)
    return markdown


def print_markdown(markdown: str) -> None:
    """The report on stdout: rendered by rich on a terminal (tables drawn, no Markdown escapes shown),
    as Markdown text anywhere else (a file, a pipe), for a Markdown viewer."""
    if not sys.stdout.isatty():
        print(markdown)
        return
    from rich.console import Console
    from rich.markdown import Markdown

    Console().print(Markdown(markdown))


__all__ = [
    "BANDS",
    "GRADES",
    "LEGEND",
    "PUBLISHED_MRR",
    "TITLE",
    "Configuration",
    "Recorded",
    "Run",
    "_parameter_cell",
    "accuracy_figures",
    "answer_position_figure",
    "bits_per_position_figure",
    "comparison_blocks",
    "comparison_markdown",
    "comparison_table",
    "configuration_label",
    "configurations",
    "differences",
    "exact_match_beyond_l",
    "grade",
    "lab_figures",
    "learned_at_l",
    "load",
    "mean_reciprocal_rank",
    "mean_reciprocal_rank_table",
    "print_markdown",
    "ranks",
    "seed_claims",
    "write_report",
]
