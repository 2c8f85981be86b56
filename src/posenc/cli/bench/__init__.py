"""``posenc bench``: time posenc against its baselines in one process, one sub-command per benchmark.

Each benchmark module has ``configure(subparsers)`` (its parser, with only its own options) and
``run(args) -> int``. The commands print measured numbers and ratios; the targets they are compared
against are stated in docs/BENCHMARKS.md, next to the recorded figures.
"""

from __future__ import annotations

import argparse

from posenc.cli.bench import attention, decode, lab, rope, sinusoidal, stacks

BENCHES = {
    "sinusoidal": sinusoidal,
    "rope": rope,
    "attention": attention,
    "decode": decode,
    "stacks": stacks,
    "lab": lab,
}


def configure(subparsers) -> None:
    """Add the ``bench`` parser and one sub-parser per benchmark."""
    parser = subparsers.add_parser(
        "bench",
        help="time posenc against its baselines in one process",
        description="Time posenc against its baselines in one process; `posenc bench NAME --help` "
        "lists each benchmark's options.",
    )
    benches = parser.add_subparsers(dest="bench", required=True, metavar="BENCH")
    for module in BENCHES.values():
        module.configure(benches)


def run(args: argparse.Namespace) -> int:
    """Run the chosen benchmark."""
    return BENCHES[args.bench].run(args)
