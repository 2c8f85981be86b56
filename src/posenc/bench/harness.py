"""Timing in alternating rounds: every candidate runs once per round, so machine noise hits all alike."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass


@dataclass(frozen=True)
class Timing:
    """Wall-clock milliseconds of one candidate over the rounds."""

    name: str
    median_ms: float
    min_ms: float
    max_ms: float
    rounds: int

    def as_dict(self) -> dict:
        return asdict(self)


def time_alternating(
    candidates: dict[str, Callable[[], object]], *, rounds: int = 15, warmup: int = 2
) -> dict[str, Timing]:
    """Median, min and max time of each candidate, measured in `rounds` alternating rounds."""
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    for _ in range(warmup):
        for run in candidates.values():
            run()
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, run in candidates.items():
            start = time.perf_counter()
            run()
            samples[name].append((time.perf_counter() - start) * 1e3)
    return {
        name: Timing(name, statistics.median(times), min(times), max(times), rounds)
        for name, times in samples.items()
    }
