"""``posenc list``: the registered encodings as the README's table (encoding, kind, where it acts,
parameters, used by), in the terminal, as Markdown or as JSON.

Every cell is the encoding's own declaration: ``kind``, ``where_it_acts``, ``parameter_formula`` and
``used_by`` (where it acts defaults to its kind's place, who uses it to "not declared"), so a new
encoding needs no line here.
"""

from __future__ import annotations

import argparse
import json

from posenc.cli.output import print_table
from posenc.table import Table, to_markdown

COLUMNS = ("encoding", "kind", "where it acts", "parameters", "used by")
TITLE = "posenc encodings   (L = max_len, d = d_model, h = n_heads)"
#: A cell the encoding declares nothing for.
NOT_DECLARED = "not declared"


def configure(subparsers) -> None:
    """Add the ``list`` parser."""
    parser = subparsers.add_parser(
        "list", help="registered encodings: kind, where each acts, parameters, who uses it"
    )
    output = parser.add_mutually_exclusive_group()
    output.add_argument(
        "--json", action="store_true", help="print JSON (with each summary) instead of a table"
    )
    output.add_argument("--markdown", action="store_true", help="print the table as Markdown (the README's)")


def summary(doc: str | None) -> str:
    """The first paragraph of a docstring on one line: a summary line that wraps is read whole."""
    paragraph = (doc or "").strip().split("\n\n", 1)[0]
    return " ".join(paragraph.split())


def rows() -> list[dict]:
    """One dict per registered encoding: name, kind, where it acts, parameter formula, used by, summary."""
    from posenc.encodings import ENCODINGS, available, describe

    listed = []
    for name in available():
        cls, description = ENCODINGS[name], describe(name)
        listed.append(
            {
                "name": name,
                "kind": cls.kind,
                "where": description.where_it_acts,
                "parameters": description.parameter_formula,
                "used_by": description.used_by,
                "summary": summary(cls.__doc__),
            }
        )
    return listed


def table(encodings: list[dict]) -> Table:
    """The README's table of ``encodings`` (dicts of :func:`rows`)."""
    keys = ("name", "kind", "where", "parameters", "used_by")
    cells = [[NOT_DECLARED if row[key] is None else str(row[key]) for key in keys] for row in encodings]
    return Table(COLUMNS, cells, title=TITLE)


def run(args: argparse.Namespace) -> int:
    """Print the encodings as a table, as Markdown with ``--markdown``, or as JSON with ``--json``."""
    encodings = rows()
    if args.json:
        print(json.dumps(encodings, indent=2, ensure_ascii=False))
    elif args.markdown:
        print(to_markdown(table(encodings)))
    else:
        print_table(table(encodings))
    return 0
