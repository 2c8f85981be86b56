"""``posenc lab``: the length-generalisation lab, whose parser and commands live in posenc.lab.cli."""

from __future__ import annotations

import argparse


def configure(subparsers) -> None:
    """Add the ``lab`` parser and let :func:`posenc.lab.cli.configure` fill it."""
    parser = subparsers.add_parser("lab", help="the length-generalisation lab: train, evaluate, report")
    try:
        from posenc.lab.cli import configure as configure_lab
    except ImportError:  # an installation without the lab: the command says so when run
        parser.set_defaults(lab_missing=True)
        return
    configure_lab(parser)


def run(args: argparse.Namespace) -> int:
    """Run the chosen lab command through :func:`posenc.lab.cli.main`."""
    if getattr(args, "lab_missing", False):
        raise ValueError("the lab is not available in this installation")
    from posenc.lab.cli import main as lab_main

    return lab_main(args)
