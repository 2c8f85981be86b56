"""``posenc bench lab``: one training step of a lab preset's model per encoding, against NoPE's."""

from __future__ import annotations

import argparse

from posenc._paths import writable_file
from posenc.cli.bench.options import add_json, add_rounds
from posenc.cli.options import encoding_names
from posenc.cli.output import console, print_table, write_json
from posenc.table import Column, Table


def configure(subparsers) -> None:
    """Add the ``bench lab`` parser."""
    parser = subparsers.add_parser(
        "lab",
        help="one training step of a lab preset's model per encoding (what sets the lab's wall time), "
        "against NoPE's",
    )
    parser.add_argument(
        "--encodings",
        type=encoding_names,
        default=None,
        help="comma-separated encodings or stack designs (default every registered encoding)",
    )
    parser.add_argument("--preset", default="cpu", help="the lab preset whose model is timed (default cpu)")
    parser.add_argument("--task", default="lm", help="the preset's task (default lm)")
    add_rounds(parser, "15")
    add_json(parser)


def lab_step_table(result: dict) -> Table:
    """One row per encoding: median (range) ms per step and × NoPE; then those the lab does not train."""
    rows = [
        [
            row["encoding"],
            f"{row['median_ms']:.1f} ({row['min_ms']:.1f}–{row['max_ms']:.1f})",
            f"{row['ratio']:.2f}",
        ]
        for row in sorted(result["rows"], key=lambda row: row["ratio"])
    ]
    rows += [
        [name, f"not trained on {result['task']}: {reason}", ""] for name, reason in result["skipped"].items()
    ]
    batch = "×".join(str(size) for size in result["batch"])
    return Table(
        [Column("encoding", "left"), Column("ms per step", "right"), Column("× NoPE", "right")],
        rows,
        title=f"one training step of the {result['preset']} preset's {result['task']} model, batch {batch}, "
        f"{result['rounds']} alternating rounds, {result['threads']} threads",
    )


def run(args: argparse.Namespace) -> int:
    """Time, write ``--json``, print the table."""
    from posenc.bench import lab_step

    json_path = None if args.json is None else writable_file(args.json, "--json")
    result = lab_step.run(
        args.encodings, preset=args.preset, task=args.task, rounds=15 if args.rounds is None else args.rounds
    )
    write_json(result, json_path)
    print_table(lab_step_table(result), out=console(wide=True))
    return 0
