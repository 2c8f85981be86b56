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


def exit_code(*argv: str) -> int:
    """The exit code of ``posenc lab ARGV`` in this process, whether argparse exits or ``main`` returns."""
    try:
        return lab(*argv)
    except SystemExit as error:
        return error.code


#: A corpus fingerprint for records written without reading the corpus.
FAKE_CORPUS = {
    "files": 10,
    "bytes": 100_000,
    "sha256": "c" * 64,
    "validation_files": 1,
    "validation_bytes": 10_000,
}


def record_run(records, preset: str, config, bpb: dict[int, float]) -> None:
    """Record ``config`` (a RunConfig of an lm run) as if trained, with ``bpb[n]`` bits per byte at each
    evaluation length n (the same value at every position), without training anything."""
    evaluation = {}
    for n in config.eval_lengths:
        length_l = config.train_length
        evaluation[str(n)] = {
            "status": "ok",
            "windows": config.eval_size // n,
            "bpb": bpb[n],
            "bpb_before_L": bpb[n],
            "bpb_from_L": bpb[n] if n > length_l else None,
            "curve": [bpb[n]] * n,
        }
    _write(records, preset, config, evaluation, FAKE_CORPUS)


def record_algorithmic_run(records, preset: str, config, exact: dict[int, float | None]) -> None:
    """Record ``config`` (a RunConfig of an algorithmic run) as if trained, with exact match ``exact[n]``
    at each evaluation length n (None: cannot run there), without training anything."""
    evaluation = {}
    for n in config.eval_lengths:
        if exact[n] is None:
            evaluation[str(n)] = {"status": "cannot run past L", "reason": "the learned table ends"}
        else:
            evaluation[str(n)] = {
                "status": "ok",
                "examples": config.eval_size,
                "exact_match": exact[n],
                "token_accuracy": exact[n],
                "loss": 1.0,
            }
    _write(records, preset, config, evaluation, None)


def _write(records, preset: str, config, evaluation: dict, corpus: dict | None) -> None:
    metrics = {
        "eval": evaluation,
        "train_loss": [[config.train.steps, 1.0]],
        "positional_parameters": 0,
        "positional_parameters_at_2L": 0,
        "fixed_constants": config.model.n_heads,
        "model_parameters": 1000,
        "relative_position": {"verdict": "explicit"},
    }
    records.write(
        config_hash=config.config_hash,
        preset=preset,
        config=config.to_dict(),
        status="done",
        metrics=metrics,
        timings={"seconds_per_step": 0.01, "steps": config.train.steps},
        versions={"python": "3", "torch": "2", "posenc": "0", "device": "cpu"},
        corpus=corpus,
    )
