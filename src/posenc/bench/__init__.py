"""Benchmarks behind `posenc bench`: posenc and its baselines timed in one process."""

from posenc.bench.harness import Timing, time_alternating

__all__ = ["Timing", "time_alternating"]
