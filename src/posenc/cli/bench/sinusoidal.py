"""``posenc bench sinusoidal``: sinusoidal_table against the usual recipes, and their precision."""

from __future__ import annotations

import argparse

from posenc._extras import require
from posenc._paths import writable_file
from posenc.cli.bench.options import add_json, add_rounds
from posenc.cli.options import position_count, positive_int
from posenc.cli.output import console, print_table, write_json
from posenc.table import Column, Table

ROUNDS = 15


def configure(subparsers) -> None:
    """Add the ``bench sinusoidal`` parser."""
    parser = subparsers.add_parser(
        "sinusoidal", help="sinusoidal_table against the float32 and float64 recipes"
    )
    parser.add_argument(
        "--length", type=position_count, default=4096, help="positions, at most 2^27 (default 4096)"
    )
    parser.add_argument("--d-model", type=positive_int, default=512, help="code width, even (default 512)")
    add_rounds(parser, str(ROUNDS))
    add_json(parser)


def timings_table(result: dict, rounds: int) -> Table:
    """Median and range of each candidate, as multiples of the float32 recipe and of the clone."""
    return Table(
        [
            Column(name, "right")
            for name in ("candidate", "median ms", "range ms", "× float32 recipe", "× clone")
        ],
        [
            [
                t["name"],
                f"{t['median_ms']:.2f}",
                f"{t['min_ms']:.2f}–{t['max_ms']:.2f}",
                f"{t['vs_float32_recipe']:.2f}",
                f"{t['vs_clone']:.1f}",
            ]
            for t in result["timings"]
        ],
        title=f"sinusoidal table {result['length']}×{result['d_model']}, float32 output, "
        f"{result['threads']} threads, median of {rounds} alternating rounds",
    )


def errors_table(result: dict) -> Table:
    """Max |value − exact| of each recipe at the sampled positions."""
    return Table(
        [Column("recipe"), Column("max abs error", "right")],
        [[name, f"{error:.2e}"] for name, error in result["max_abs_error_at_positions_up_to_2^21"].items()],
        title=f"max |value − exact| at 64 sampled positions ≤ 2^21, d_model={result['d_model']}",
    )


def run(args: argparse.Namespace) -> int:
    """Time, write ``--json``, print the two tables: the file first, so that a closed stdout
    (``… | head -1``, exit 141) does not discard what was measured."""
    require("mpmath", "bench", "the exact reference of the precision table")
    from posenc.bench import sinusoidal

    json_path = None if args.json is None else writable_file(args.json, "--json")
    rounds = ROUNDS if args.rounds is None else args.rounds
    result = sinusoidal.run(args.length, args.d_model, rounds)
    write_json(result, json_path)
    terminal = console()
    print_table(timings_table(result, rounds), out=terminal)
    print_table(errors_table(result), out=terminal)
    return 0
