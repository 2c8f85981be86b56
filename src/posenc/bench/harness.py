"""Timing in alternating rounds (every candidate runs once per round, so machine noise hits all alike),
on the CPU by the wall clock and on CUDA by events, with the allocator settings and the device checks
the benchmarks share."""

from __future__ import annotations

import ctypes
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch


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
    candidates: dict[str, Callable[[], object]],
    *,
    rounds: int = 15,
    warmup: int = 2,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Timing]:
    """Median, min and max time of each candidate, measured in `rounds` alternating rounds.

    ``clock``: seconds, read before and after each call; the wall clock by default.
    ``time.thread_time`` counts only the time the calling thread ran (one torch thread: all the work),
    so that on a machine shared with other jobs the time it waited for a core is left out.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    for _ in range(warmup):
        for run in candidates.values():
            run()
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for _ in range(rounds):
        for name, run in candidates.items():
            start = clock()
            run()
            samples[name].append((clock() - start) * 1e3)
    return {
        name: Timing(name, statistics.median(times), min(times), max(times), rounds)
        for name, times in samples.items()
    }


def steady_malloc() -> bool:
    """Make glibc reuse freed blocks (mmap and trim thresholds at 1 GiB) instead of fresh pages.

    With glibc's defaults a new 16–32 MiB tensor is often freshly mapped memory, and its page faults
    (about 1 µs per 4 KiB page here) then dominate a clone; a caching allocator (jemalloc,
    tcmalloc) avoids them, and so does this. Process-wide; returns False where it is not glibc.
    """
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(mallopt(m_mmap_threshold, 1 << 30)) and bool(mallopt(m_trim_threshold, 1 << 30))


CUDA_MISSING = "--device cuda needs a CUDA GPU; torch.cuda.is_available() is False (torch {})"


def require_cuda(device: str) -> None:
    """RuntimeError naming the problem when ``device`` is CUDA and no GPU is usable."""
    if torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(CUDA_MISSING.format(torch.__version__))


def time_on_device(
    candidates: dict[str, Callable[[], object]],
    *,
    rounds: int,
    device: torch.device | str,
    before: Callable[[], object] | None = None,
    warmup: int = 2,
) -> dict[str, Timing]:
    """Median, min and max of each candidate over alternating rounds, ``before()`` run ahead of each call.

    On CUDA each call is timed between two CUDA events (``before`` outside them); elsewhere by the
    wall clock. Round order is the same every round.
    """
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    cuda = torch.device(device).type == "cuda"
    samples: dict[str, list[float]] = {name: [] for name in candidates}
    for round_index in range(warmup + rounds):
        events = []
        for name, run in candidates.items():
            if before is not None:
                before()
            if cuda:
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                run()
                end.record()
                events.append((name, start, end))
            else:
                began = time.perf_counter()
                run()
                events.append((name, (time.perf_counter() - began) * 1e3, None))
        if cuda:
            torch.cuda.synchronize(device)
        if round_index >= warmup:
            for name, start, end in events:
                samples[name].append(start.elapsed_time(end) if cuda else start)
    return {
        name: Timing(name, statistics.median(times), min(times), max(times), rounds)
        for name, times in samples.items()
    }


def peak_extra_mib(run: Callable[[], object], device: torch.device | str) -> float | None:
    """MiB allocated at the peak of one call above what was allocated before it (its outputs
    included); None off CUDA."""
    if torch.device(device).type != "cuda":
        return None
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    before = torch.cuda.memory_allocated(device)
    out = run()
    torch.cuda.synchronize(device)
    peak = torch.cuda.max_memory_allocated(device) - before
    del out
    return peak / 2**20
