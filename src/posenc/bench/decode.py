"""``posenc bench decode``: the time and memory of decoding one token after n, for each kind of KV cache.

A small model (:data:`MODEL`, RoPE) prefills n tokens, decodes one (untimed), then :data:`STEPS` more
one at a time; the time of each of those steps is taken, and, in a fresh subprocess, the peak resident memory added while those
steps run above what the prefilled model and caches hold. The caches: a cache that concatenates every
step (what posenc's KVCache did before it was preallocated: O(n) bytes copied per token), the KVCache
growing by doubling, the KVCache with its capacity given, and StreamingLLM's sinks and window (constant
memory; positions are places in the cache).
"""

from __future__ import annotations

import gc
import json
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

import torch

from posenc.bench.memory import reset_peak, resident_extra_mib, return_freed_memory, status_kib
from posenc.bench.rope import steady_malloc
from posenc.kv_cache import KVCache
from posenc.model import TransformerLM

#: Tokens already in the cache when the timed steps start.
LENGTHS: tuple[int, ...] = (1024, 8192, 32768)
#: Tokens decoded and timed one by one after the prefill.
STEPS = 32
#: The model decoding: 2 layers of width 256, 4 heads of 64.
MODEL = {"vocab_size": 256, "d_model": 256, "n_layers": 2, "n_heads": 4, "encoding": "rope"}
#: Tokens per prefill call (a sink cache takes at most its window per call).
PREFILL_CHUNK = 1024
SINKS, WINDOW = 4, 1020


class ConcatenatingCache(KVCache):
    """The baseline: every append concatenates the new keys to all the cached ones (a fresh tensor)."""

    def append(self, keys, values, positions, columns=1) -> None:
        if self._keys is None:
            self._keys, self._values, self._positions, self._columns = keys, values, positions, columns
        else:
            self._keys = torch.cat((self._keys, keys), dim=2)
            self._values = torch.cat((self._values, values), dim=2)
            self._positions = torch.cat((self._positions, positions), dim=-1)
        self.length = self._keys.shape[2]


#: name -> (a model, the prefilled tokens n, the steps decoded after them) -> one cache per layer.
CACHES: dict[str, Callable[[TransformerLM, int, int], list[KVCache]]] = {
    "concatenating cache (torch.cat per step)": lambda model, n, steps: [
        ConcatenatingCache() for _ in model.blocks
    ],
    "KVCache, grown by doubling": lambda model, n, steps: model.new_caches(),
    # the first step, untimed, and the timed ones (it was sized for the default steps: more overflowed it)
    "KVCache(capacity=n + steps)": lambda model, n, steps: model.new_caches(capacity=n + 1 + steps),
    f"KVCache(sinks={SINKS}, window={WINDOW})": lambda model, n, steps: model.new_caches(
        sinks=SINKS, window=WINDOW
    ),
}


def _model() -> TransformerLM:
    torch.manual_seed(0)
    return TransformerLM(**MODEL).eval()


def _prefilled(model: TransformerLM, name: str, n: int, steps: int = STEPS) -> list[KVCache]:
    caches = CACHES[name](model, n, steps)
    chunk = min(PREFILL_CHUNK, WINDOW) if caches[0].positions_move else PREFILL_CHUNK
    tokens = torch.randint(0, MODEL["vocab_size"], (1, n), generator=torch.Generator().manual_seed(n))
    with torch.no_grad():
        for start in range(0, n, chunk):
            model(tokens[:, start : start + chunk], caches=caches)
    return caches


def _decode(model: TransformerLM, caches: list[KVCache], steps: int) -> list[float]:
    """Milliseconds of each of ``steps`` one-token steps."""
    token = torch.zeros(1, 1, dtype=torch.long)
    times = []
    with torch.no_grad():
        for _ in range(steps):
            start = time.perf_counter()
            model(token, caches=caches)
            times.append((time.perf_counter() - start) * 1e3)
    return times


def _cache_mib(caches: list[KVCache]) -> float:
    return sum(t.numel() * t.element_size() for c in caches for t in (c._keys, c._values)) / 2**20


def time_case(name: str, n: int, steps: int = STEPS) -> dict:
    """Per-token decode time after n tokens and one more with the cache ``name``, and the memory its
    tensors hold. The first step is not timed (RoPE's table grows with the positions, and at a power of
    two the doubling cache doubles): the steps timed are those :func:`_child` measures the memory of."""
    model = _model()
    caches = _prefilled(model, name, n, steps)
    _decode(model, caches, 1)
    times = _decode(model, caches, steps)
    return {
        "cache": name,
        "length": n,
        "median_ms": statistics.median(times),
        "min_ms": min(times),
        "max_ms": max(times),
        "cached_tokens": caches[0].length,
        "cache_mib": _cache_mib(caches),
    }


def _child(spec: dict) -> dict:
    """In a fresh interpreter: prefill and one step, then the peak resident memory added while decoding."""
    return_freed_memory()
    torch.set_num_threads(spec["threads"])
    model = _model()
    caches = _prefilled(model, spec["cache"], spec["length"], spec["steps"])
    _decode(model, caches, 1)  # a first step allocates once (RoPE's table grows with the positions)
    gc.collect()
    reset_peak()
    baseline = status_kib("VmHWM")  # the resident set at the reset: the peak can only grow from it
    _decode(model, caches, spec["steps"])
    return {"peak_extra_mib": resident_extra_mib(baseline)}


def memory_case(name: str, n: int, steps: int = STEPS, timeout: float = 600) -> dict:
    """:func:`_child` in a subprocess: {"peak_extra_mib": …} or {"error": …}."""
    spec = {"cache": name, "length": n, "steps": steps, "threads": torch.get_num_threads()}
    code = (
        "import json, sys; from posenc.bench.decode import _child; "
        "print('\\0' + json.dumps(_child(json.loads(sys.argv[1]))))"
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", code, json.dumps(spec)], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"not finished within {timeout:g} s"}
    marked = [line for line in done.stdout.splitlines() if line.startswith("\0")]
    if done.returncode != 0 or not marked:
        tail = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return {"error": f"exit status {done.returncode}: {tail[:160]}"}
    return json.loads(marked[-1][1:])


def check_agreement(n: int = 256, steps: int = 4) -> float:
    """max |logits| difference of every cache from the concatenating one over a short decode (0 expected;
    n + steps within the sink cache's window, where it keeps every token)."""
    logits = {}
    for name in CACHES:
        model = _model()
        caches = _prefilled(model, name, n, steps)
        token = torch.zeros(1, 1, dtype=torch.long)
        with torch.no_grad():
            logits[name] = torch.cat([model(token, caches=caches) for _ in range(steps)], dim=1)
    baseline, *others = CACHES
    differences = {name: float((logits[name] - logits[baseline]).abs().max()) for name in others}
    for name, difference in differences.items():
        if difference != 0.0:
            raise AssertionError(
                f"{name} decodes other logits than the concatenating cache ({difference:.3g})"
            )
    return max(differences.values())


def run(lengths: Sequence[int] = LENGTHS, steps: int = STEPS, memory: bool = True) -> dict:
    """Every cache at every length: per-token time (and peak extra memory in a subprocess); JSON-ready."""
    check_agreement()
    malloc = "glibc thresholds raised (freed blocks reused)" if steady_malloc() else "default"
    cases = []
    for n in lengths:
        for name in CACHES:
            case = time_case(name, n, steps)
            if memory:
                case |= memory_case(name, n, steps)
            cases.append(case)
    return {
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "model": MODEL,
        "steps": steps,
        "malloc": malloc,
        "cases": cases,
    }
