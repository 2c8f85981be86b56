"""Options that several ``posenc bench`` sub-commands share, and the checks of ``--device cuda``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from posenc.cli.options import positive_int


def add_rounds(parser: argparse.ArgumentParser, defaults: str) -> None:
    """``--rounds N`` (None: the benchmark's default, described by ``defaults``)."""
    parser.add_argument(
        "--rounds", type=positive_int, default=None, help=f"alternating rounds (default {defaults})"
    )


def add_json(parser: argparse.ArgumentParser) -> None:
    """``--json PATH``: the results also as JSON (the path is checked before anything runs)."""
    parser.add_argument("--json", type=Path, default=None, help="also write the results to this JSON file")


def add_device(parser: argparse.ArgumentParser, gpu: str) -> None:
    """``--device cpu|cuda``; ``gpu`` says what runs on cuda."""
    parser.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help=f"where to run (default cpu); cuda runs {gpu} and needs a CUDA GPU",
    )


def require_cuda() -> None:
    """ValueError (one line for the user) when no CUDA GPU is usable."""
    import torch

    from posenc.bench.rope import CUDA_MISSING

    if not torch.cuda.is_available():
        raise ValueError(CUDA_MISSING.format(torch.__version__))


def on_gpu(run: Callable[[], dict]) -> dict:
    """Call ``run()``; a RuntimeError from it (triton missing, a CUDA failure) becomes a ValueError,
    which the command reports in one line with exit status 2."""
    try:
        return run()
    except RuntimeError as error:
        raise ValueError(str(error)) from None
