"""``posenc bench stacks``: one layer's training with a window, chunks, sinks or a temperature, against unbiased SDPA."""

from __future__ import annotations

import argparse

from posenc._paths import writable_file
from posenc.cli.bench.options import add_json, add_rounds
from posenc.cli.options import positive_int, some_lengths
from posenc.cli.output import console, print_table, write_json
from posenc.table import Column, Table


def configure(subparsers) -> None:
    """Add the ``bench stacks`` parser."""
    parser = subparsers.add_parser(
        "stacks",
        help="one layer's forward + backward with a sliding window, chunks, learned sinks or a query "
        "temperature, against unbiased SDPA, and its memory",
    )
    parser.add_argument(
        "--seq-lens", type=some_lengths, default=None, help="sequence lengths (default 512,2048)"
    )
    parser.add_argument(
        "--window", type=positive_int, default=None, help="sliding window in tokens (default 128)"
    )
    parser.add_argument("--chunk", type=positive_int, default=None, help="chunk in tokens (default 128)")
    parser.add_argument(
        "--no-memory", action="store_true", help="leave out the memory measurement (subprocesses)"
    )
    add_rounds(parser, "7")
    add_json(parser)


def stacks_table(result: dict) -> Table:
    """One row per (length, case): median (range) ms, × the unbiased layer, peak extra MiB and its ×."""
    rows = []
    for row in result["rows"]:
        peak, ratio = row["peak_extra_mib"], row["memory_ratio"]
        rows.append(
            [
                str(row["seq_len"]),
                row["case"],
                f"{row['median_ms']:.2f} ({row['min_ms']:.2f}–{row['max_ms']:.2f})",
                f"{row['ratio']:.2f}",
                "not measured" if peak is None else f"{peak:.1f}",
                "—" if ratio is None else f"{ratio:.2f}",
            ]
        )
    layer = result["layer"]
    columns = ["s", "layer", "ms, forward + backward", "× unbiased", "peak extra MiB", "× unbiased MiB"]
    return Table(
        [Column(name, "left" if index < 2 else "right") for index, name in enumerate(columns)],
        rows,
        title=f"one attention layer, b={layer['batch']}, d={layer['d_model']}, h={layer['heads']}, window "
        f"{layer['window']}, chunk {layer['chunk']}, {layer['dtype']}, {result['threads']} threads",
    )


def run(args: argparse.Namespace) -> int:
    """Time, write ``--json``, print the table."""
    from posenc.bench import stacks

    json_path = None if args.json is None else writable_file(args.json, "--json")
    result = stacks.run(
        stacks.SEQ_LENS if args.seq_lens is None else args.seq_lens,
        rounds=7 if args.rounds is None else args.rounds,
        window=stacks.WINDOW if args.window is None else args.window,
        chunk=stacks.CHUNK if args.chunk is None else args.chunk,
        memory=not args.no_memory,
    )
    write_json(result, json_path)
    print_table(stacks_table(result), out=console(wide=True))
    return 0
