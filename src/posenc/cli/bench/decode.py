"""``posenc bench decode``: decoding one token after n, with each kind of KV cache: time and memory."""

from __future__ import annotations

import argparse

from posenc._paths import writable_file
from posenc.cli.bench.options import add_json
from posenc.cli.options import positive_int, some_lengths
from posenc.cli.output import console, print_table, write_json
from posenc.table import Column, Table


def configure(subparsers) -> None:
    """Add the ``bench decode`` parser."""
    parser = subparsers.add_parser("decode", help="per-token decode time and memory of each KV cache")
    parser.add_argument(
        "--lengths",
        type=some_lengths,
        default=None,
        help="tokens cached before timing (default 1024,8192,32768)",
    )
    parser.add_argument(
        "--steps", type=positive_int, default=None, help="tokens decoded and timed (default 32)"
    )
    parser.add_argument(
        "--no-memory", action="store_true", help="leave out the memory measurement (subprocesses)"
    )
    add_json(parser)


def decode_table(result: dict) -> Table:
    """One row per (length, cache): median (range) ms per token, cache MiB, peak extra MiB while decoding."""
    rows = []
    for case in result["cases"]:
        peak = case.get("peak_extra_mib")
        rows.append(
            [
                str(case["length"]),
                case["cache"],
                f"{case['median_ms']:.2f} ({case['min_ms']:.2f}–{case['max_ms']:.2f})",
                str(case["cached_tokens"]),
                f"{case['cache_mib']:.1f}",
                case.get("error", "not measured") if peak is None else f"{peak:.1f}",
            ]
        )
    columns = ["cached before", "cache", "ms per token", "tokens kept", "cache MiB", "peak extra MiB"]
    return Table(
        [Column(name, "left" if index < 2 else "right") for index, name in enumerate(columns)],
        rows,
        title=f"decoding {result['steps']} tokens one by one, {result['model']['n_layers']} layers of width "
        f"{result['model']['d_model']}, {result['threads']} threads",
    )


def run(args: argparse.Namespace) -> int:
    """Time, write ``--json``, print the table (the file first: a closed stdout ends the command with
    141 but keeps what was measured)."""
    from posenc.bench import decode

    json_path = None if args.json is None else writable_file(args.json, "--json")
    result = decode.run(
        lengths=decode.LENGTHS if args.lengths is None else args.lengths,
        steps=decode.STEPS if args.steps is None else args.steps,
        memory=not args.no_memory,
    )
    write_json(result, json_path)
    print_table(decode_table(result), out=console(wide=True))
    return 0
