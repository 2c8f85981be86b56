"""Helpers of the lab tests: run ``posenc lab`` in this process or in a fresh one."""

from __future__ import annotations

import argparse
import subprocess
import sys

from posenc.lab.cli import configure, main


def lab(*argv: str) -> int:
    """Run ``posenc lab ARGV`` in this process; the exit code."""
    parser = argparse.ArgumentParser(prog="posenc lab")
    configure(parser)
    return main(parser.parse_args(list(argv)))


def lab_command(*argv: str) -> list[str]:
    """The command line of ``python -m posenc.lab ARGV``."""
    return [sys.executable, "-m", "posenc.lab", *argv]


def lab_subprocess(*argv: str, timeout: float = 240) -> subprocess.CompletedProcess:
    """Run ``python -m posenc.lab ARGV`` in a fresh process."""
    return subprocess.run(lab_command(*argv), capture_output=True, text=True, timeout=timeout)
