"""Resident memory of this process, for benchmarks that measure a candidate's peak in a subprocess (Linux)."""

from __future__ import annotations

import ctypes
import re
from pathlib import Path


def status_kib(field: str) -> int:
    """A ``/proc/self/status`` field in KiB: ``VmRSS`` (resident now), ``VmHWM`` (its high-water mark)."""
    match = re.search(rf"^{field}:\s+(\d+) kB", Path("/proc/self/status").read_text(), re.MULTILINE)
    if match is None:
        raise RuntimeError(f"/proc/self/status has no {field}")
    return int(match.group(1))


def return_freed_memory() -> None:
    """glibc: allocations ≥ 64 KiB are mapped and unmapped on free (no dynamic threshold), the heap
    trimmed beyond 128 KiB, so the resident set follows what is live."""
    mallopt = ctypes.CDLL(None).mallopt
    m_trim_threshold, m_mmap_threshold = -1, -3
    mallopt(m_mmap_threshold, 64 << 10)
    mallopt(m_trim_threshold, 128 << 10)


def reset_peak() -> None:
    """Reset ``VmHWM`` to the current resident set (Linux ≥ 4.0)."""
    Path("/proc/self/clear_refs").write_text("5")


def resident_extra_mib(baseline_kib: int) -> float:
    """``VmHWM`` above ``baseline_kib``, in MiB, never below 0: Linux folds each thread's resident-set
    count into the process's lazily (up to 64 pages a thread), so two readings can disagree by a fraction
    of a MiB either way; a negative difference is that noise, not memory given back."""
    return max(0, status_kib("VmHWM") - baseline_kib) / 1024
