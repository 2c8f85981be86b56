"""Resident memory of this process, and the subprocess harness that measures one call's peak in it (Linux)."""

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


# --- a candidate's peak memory, one fresh subprocess per call -------------------------------------


def child(target: str, spec: dict) -> dict:
    """Run in a fresh interpreter: build the call ``target(spec)`` (``"module:function"``) and measure it.

    glibc returns freed memory (:func:`return_freed_memory`); with ``spec["limit_bytes"]`` the address
    space is capped that far above what it holds now (``RLIMIT_AS``); with ``spec["warm"]`` the call runs
    once first (compiles, fills caches), then the high-water mark is reset and the call runs again.
    Returns {"ok": True, "peak_extra_mib", "seconds"} or {"ok": False, "error"} for a refused allocation.
    """
    import gc
    import importlib
    import resource
    import time

    import torch

    from posenc import plugins

    plugins.load_modules(spec.get("plugins", []))  # encodings registered from outside posenc
    return_freed_memory()
    if spec.get("limit_bytes") is not None:
        address_space = status_kib("VmSize") << 10
        _, hard = resource.getrlimit(resource.RLIMIT_AS)
        resource.setrlimit(resource.RLIMIT_AS, (address_space + spec["limit_bytes"], hard))
    torch.set_num_threads(spec["threads"])
    module, _, function = target.partition(":")
    baseline_kib = status_kib("VmRSS")
    try:
        with torch.no_grad():
            call = getattr(importlib.import_module(module), function)(spec)
            if spec["warm"]:
                call()
                gc.collect()
            reset_peak()  # VmHWM := the current resident set
            if spec["warm"]:  # the resident set at the reset: the peak can only grow from it
                baseline_kib = status_kib("VmHWM")
            start = time.perf_counter()
            out = call()
            seconds = time.perf_counter() - start
            del out
    except (RuntimeError, MemoryError) as error:  # an allocation refused under RLIMIT_AS
        return {"ok": False, "error": f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"}
    return {"ok": True, "peak_extra_mib": resident_extra_mib(baseline_kib), "seconds": seconds}


def measure(
    target: str,
    spec: dict,
    *,
    warm: bool = True,
    limit_bytes: int | None = None,
    timeout: float | None = None,
) -> dict:
    """:func:`child` in a fresh subprocess, with this process's thread count and the modules of the
    encodings registered from outside posenc; {"ok": False, "error": …} when it fails or times out.

    Args:
        target: ``"module:function"``, a function of ``spec`` (JSON) returning the zero-argument call.
        spec: what the function needs to rebuild the call.
        warm: measure a second, steady call (False: the first, compilation included).
        limit_bytes: cap on the address space the call may add (None: no cap).
        timeout: seconds after which the call counts as not finished.
    """
    import json
    import subprocess
    import sys

    import torch

    from posenc.encodings import ENCODINGS

    outside = sorted(
        {cls.__module__ for cls in ENCODINGS.values() if not cls.__module__.startswith("posenc.")}
    )
    full = {**spec, "warm": warm, "limit_bytes": limit_bytes, "threads": torch.get_num_threads()}
    full["plugins"] = outside
    code = (
        "import json, sys; from posenc.bench.memory import child; "
        "print('\\0' + json.dumps(child(sys.argv[1], json.loads(sys.argv[2]))))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, target, json.dumps(full)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"not finished within {timeout:g} s"}
    marked = [line for line in done.stdout.splitlines() if line.startswith("\0")]
    if done.returncode != 0 or not marked:
        tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return {"ok": False, "error": f"exit status {done.returncode}: {tail[:160]}"}
    return json.loads(marked[-1][1:])
