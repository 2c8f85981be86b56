"""``posenc list``: the registered encodings, their kind and parameter count."""

from __future__ import annotations

import argparse
import json

from posenc.cli.output import print_table
from posenc.table import Table


def configure(subparsers) -> None:
    """Add the ``list`` parser."""
    parser = subparsers.add_parser("list", help="registered encodings, their kind and parameter count")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")


def rows() -> list[dict]:
    """One dict per registered encoding: name, kind, parameter formula, first docstring line."""
    from posenc.encodings import ENCODINGS, available

    return [
        {
            "name": name,
            "kind": ENCODINGS[name].kind,
            "parameters": ENCODINGS[name].parameter_formula,
            "summary": (ENCODINGS[name].__doc__ or "").strip().splitlines()[0],
        }
        for name in available()
    ]


def _cell(value: object) -> str:
    return "not declared" if value is None else str(value)  # a formula an encoding does not give


def run(args: argparse.Namespace) -> int:
    """Print the encodings as a table, or as JSON with ``--json``."""
    encodings = rows()
    if args.json:
        print(json.dumps(encodings, indent=2, ensure_ascii=False))
        return 0
    columns = ["name", "kind", "parameters", "summary"]
    print_table(
        Table(
            columns,
            [[_cell(row[column]) for column in columns] for row in encodings],
            title="posenc encodings   (L = max_len, d = d_model, h = n_heads)",
        )
    )
    return 0
