"""``posenc plot``: the figures of one encoding, of the comparison across encodings, or of all."""

from __future__ import annotations

import argparse
from pathlib import Path

from posenc._extras import require
from posenc._paths import writable_folder
from posenc.cli.output import Lines

FORMATS = ("png", "svg", "pdf")


def configure(subparsers) -> None:
    """Add the ``plot`` parser."""
    parser = subparsers.add_parser("plot", help="draw the figures of one encoding, or of all, as PNG files")
    parser.add_argument("name", help="an encoding name, 'comparison' (across encodings) or 'all'")
    parser.add_argument("--out", type=Path, default=Path("figures"), help="folder (default ./figures)")
    parser.add_argument("--format", choices=FORMATS, default="png", help="file format")


def run(args: argparse.Namespace) -> int:
    """Write each figure of ``args.name`` into ``--out`` and print its path; a closed stdout stops the
    paths, not the figures (exit 141 once every figure is written)."""
    require("matplotlib", "plots", "drawing figures")
    from posenc.plots import gallery

    names = gallery.names() if args.name == "all" else [args.name]
    for name in names:
        if name not in gallery.names():
            raise ValueError(f"unknown figure set {name!r}; valid: all, {', '.join(gallery.names())}")
    writable_folder(args.out, "--out")
    written = Lines()
    for name in names:
        for spec in gallery.figures(name):
            path = args.out / f"{spec.name}.{args.format}"
            spec.build().savefig(path, dpi=110)
            written.say(path)
    written.done()
    return 0
