"""`posenc bench attention`: one causal attention layer per registered encoding on each backend, on CPU.

Rows come from the registry: for every name of ``posenc.available()`` (plugins included) and every
backend of :data:`posenc.backends.ATTENTION`, ``MultiHeadAttention(d_model, h, encoding=build(name,
**model_arguments), backend=…)``, the encoding built through its own ``model_arguments`` for a model of
this length and drawn from a fixed seed (parameters as the encoding initialises them; the projections the
same in every layer). On CPU the flex backend evaluates the score_mod on index grids (posenc's reference
path): it is timed as it runs. The declared extra rows (:mod:`posenc.bench.extras`, posenc's in
:mod:`posenc.bench.peers`: naive and materialised forms) stand beside the encoding they are forms of.

Configuration: b=1, h=8, d_head=64 (d_model 512), causal, float32, x ``[b, s, d_model]`` N(0, 1). For each
length every row's output is first checked against one float64 oracle (:func:`posenc.bench.oracle.layer_oracle`:
the encoding's own hooks, the softmax query by query, from the layer's weights), to :data:`TOLERANCE`
(:data:`CONTEXTUAL_TOLERANCE` for an encoding that counts positions from the content); a row whose encoding
refuses the positions (a window smaller than s) is reported as not run, with its reason, and so is a row
whose forward or forward + backward fails to allocate (in the check, a training pass run once before the
timings, or any timed round). Then the rows are timed in alternating rounds in one process, inference (``torch.no_grad``) and forward + backward (the
gradients of x and of every parameter), as ratios to the unbiased baseline: the same projections around
``F.scaled_dot_product_attention(q, k, v, is_causal=True)``.

Memory (:mod:`posenc.bench.memory`): one fresh subprocess per (row, length), the peak extra resident memory
of one steady inference call. The sweep: the longest length each row completes within 16 GiB of address
space, a subprocess per (row, length), a row stopping at its first failure.

The ALiBi folding study (:mod:`posenc.bench.alibi_folding`) is reported beside, not timed; the GPU bench is
:mod:`posenc.bench.attention_cuda`.
"""

from __future__ import annotations

import functools
import platform
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from posenc._memory import out_of_memory
from posenc.backends import ATTENTION
from posenc.bench import alibi_folding, peers  # noqa: F401  (peers declares posenc's extras)
from posenc.bench import memory as memory_harness
from posenc.bench.extras import EXTRAS, NAIVE_SWEEP, Extra, heads_of, merged
from posenc.bench.harness import steady_malloc, time_alternating
from posenc.bench.oracle import layer_oracle
from posenc.encodings.views import along_line

SEQ_LENS: tuple[int, ...] = (1024, 2048, 4096)
BATCH, HEADS, D_HEAD = 1, 8, 64
#: Largest |row − float64 oracle| accepted (float32 outputs of d_model 512).
TOLERANCE = 1e-5
#: The same for an encoding that counts positions from the content (``contextual_positions``): its counts add
#: up float32 gates, each rounded, and the interpolation multiplies a count's error by the step between two
#: table logits, so any float32 form of it ends about 1e-4 from float64.
CONTEXTUAL_TOLERANCE = 3e-4
#: Sequence lengths the memory sweep tries, in order, per row.
SWEEP: tuple[int, ...] = (4096, 8192, 16384, 32768, 65536)
MEMORY_LIMIT_BYTES = 16 << 30
#: Wall-clock limit of one sweep subprocess; longer counts as not completed.
SWEEP_TIMEOUT_S = 300
MODES = ("inference", "training")

UNBIASED = "SDPA, no bias (is_causal)"


@dataclass(frozen=True)
class Row:
    """One row: an encoding on a backend, a declared extra of it, or the unbiased baseline."""

    name: str
    encoding: str | None  # the registered name (None: the baseline)
    backend: str | None  # an attention backend (None: the baseline or an extra)
    what: str
    extra: Extra | None = None


def rows(names: Sequence[str] | None = None) -> dict[str, Row]:
    """name -> row: the baseline, then per registered encoding (``names``, default every one) its backends
    and its declared extras; an extra that applies by what encodings declare is read off a specimen."""
    from posenc.encodings import available

    result = {
        UNBIASED: Row(
            UNBIASED, None, None, "the projections around F.scaled_dot_product_attention(is_causal)"
        )
    }
    for name in available() if names is None else names:
        for backend in ATTENTION:
            what = f"MultiHeadAttention(backend={backend!r}) with {name} built by its model_arguments"
            result[f"{name} on {backend}"] = Row(f"{name} on {backend}", name, backend, what)
        encoding = _encoding(name, 64)
        for declared in EXTRAS.values():
            if encoding is not None and declared.for_encoding(name, encoding):
                label = declared.row_name(name)
                what = f"{declared.what} (compared with {declared.compares_with})"
                result[label] = Row(label, name, None, what, declared)
    return result


def _encoding(name: str, seq_len: int, heads: int = HEADS, d_head: int = D_HEAD):
    """The encoding registered as ``name`` for a causal model of this length and width, from seed 0; None
    where it cannot be built for it (the reason is :func:`_build_error`'s)."""
    try:
        return _build(name, seq_len, heads, d_head)
    except (TypeError, ValueError):
        return None


def _build(name: str, seq_len: int, heads: int, d_head: int):
    from posenc.encodings import build, encoding_class

    arguments = encoding_class(name).model_arguments(
        d_model=heads * d_head, n_heads=heads, max_len=seq_len, causal=True
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return build(name, **arguments).eval()


def _layers(name: str, seq_len: int, heads: int, d_head: int) -> dict[str, torch.nn.Module]:
    """backend -> ``MultiHeadAttention`` with one shared encoding; the projections drawn from seed 1, the
    same in every layer (and in the baseline's)."""
    from posenc.attention import MultiHeadAttention

    encoding = _build(name, seq_len, heads, d_head)
    layers = {}
    for backend in ATTENTION:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(1)
            layers[backend] = MultiHeadAttention(heads * d_head, heads, encoding=encoding, backend=backend)
    return layers


def _baseline(heads: int, d_head: int) -> Callable[[torch.Tensor], torch.Tensor]:
    """The projections of every layer around is_causal SDPA, reading no encoding."""
    from posenc.attention import MultiHeadAttention

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        layer = MultiHeadAttention(heads * d_head, heads)

    def run(x: torch.Tensor) -> torch.Tensor:
        q, k, v = heads_of(layer, x)
        return merged(layer, F.scaled_dot_product_attention(q, k, v, is_causal=True))

    run.parameters = layer.parameters  # type: ignore[attr-defined]
    return run


@dataclass
class Built:
    """The calls of the rows at one length, and what the check needs."""

    calls: dict[str, Callable[[torch.Tensor], torch.Tensor]]  # name -> a function of x [b, s, d_model]
    parameters: dict[str, Callable]  # name -> its parameters (zeroed between training calls)
    oracle_of: dict[str, Callable[[], torch.Tensor]]  # name -> its encoding's float64 oracle [b, s, d_model]
    tolerance: dict[str, float]
    positions: dict[str, torch.Tensor]
    not_run: dict[str, str]


def build_rows(selected: Sequence[str], x: torch.Tensor, heads: int = HEADS, d_head: int = D_HEAD) -> Built:
    """The rows ``selected`` (names of :func:`rows`) at x's length; a row whose encoding cannot be built for
    it, or a naive one too large, goes to ``not_run`` with its reason."""
    table = rows()
    batch, seq_len = x.shape[0], x.shape[1]
    built = Built({}, {}, {}, {}, {}, {})
    baseline = _baseline(heads, d_head)
    built.calls[UNBIASED], built.parameters[UNBIASED] = baseline, baseline.parameters
    built.tolerance[UNBIASED] = TOLERANCE
    built.oracle_of[UNBIASED] = _cached(
        lambda: layer_oracle(_nope_layer(heads, d_head), x, torch.arange(seq_len))
    )
    built.positions[UNBIASED] = torch.arange(seq_len)
    layers_of: dict[str, dict | str] = {}
    oracles: dict[str, Callable[[], torch.Tensor]] = {}
    for name in selected:
        row = table[name]
        if row.encoding is None:
            continue
        if row.encoding not in layers_of:
            try:
                layers_of[row.encoding] = _layers(row.encoding, seq_len, heads, d_head)
            except (TypeError, ValueError) as error:
                layers_of[row.encoding] = f"not built for s={seq_len}: {error}"
        layers = layers_of[row.encoding]
        if isinstance(layers, str):
            built.not_run[name] = layers
            continue
        layer = layers["eager"]
        positions = along_line(layer.encoding, torch.arange(seq_len))  # [s] or [s, n]
        if row.extra is not None:
            reason = row.extra.not_run(seq_len, heads, d_head, batch)
            if reason is not None:
                built.not_run[name] = reason
                continue
            built.calls[name] = row.extra.make(layer, positions)
        else:
            built.calls[name] = _forward(layers[row.backend], positions)
        built.parameters[name] = layer.parameters
        built.positions[name] = positions
        if row.encoding not in oracles:  # one oracle per encoding, shared by its rows, computed when asked
            oracles[row.encoding] = _cached(functools.partial(layer_oracle, layer, x, positions))
        built.oracle_of[name] = oracles[row.encoding]
        built.tolerance[name] = CONTEXTUAL_TOLERANCE if layer.encoding.capabilities.contextual_positions else TOLERANCE
    return built


def _forward(layer, positions: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda x: layer(x, positions)


def _cached(compute: Callable[[], torch.Tensor]) -> Callable[[], torch.Tensor]:
    value: list[torch.Tensor] = []

    def get() -> torch.Tensor:
        if not value:
            value.append(compute())
        return value[0]

    return get


def _nope_layer(heads: int, d_head: int):
    from posenc.attention import MultiHeadAttention

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        return MultiHeadAttention(heads * d_head, heads)


def check(
    name: str, got: torch.Tensor, expected: torch.Tensor, seq_len: int, tolerance: float = TOLERANCE
) -> float:
    """max |got − expected|; AssertionError beyond ``tolerance`` (NaN included)."""
    error = float((got.double() - expected).abs().max())
    if not error <= tolerance:
        raise AssertionError(
            f"{name} disagrees with the float64 oracle by {error:.3g} > {tolerance:g} (s={seq_len})"
        )
    return error


def _inputs(seq_len: int, heads: int = HEADS, d_head: int = D_HEAD, batch: int = BATCH):
    """x ``[b, s, d_model]`` N(0, 1) and the gradient of the output, from a seed of ``seq_len``."""
    generator = torch.Generator().manual_seed(seq_len)
    x = torch.randn(batch, seq_len, heads * d_head, generator=generator)
    return x, torch.randn(x.shape, generator=generator)


def _timed_calls(built: Built, x: torch.Tensor, grad: torch.Tensor) -> dict[str, Callable[[], object]]:
    """(row, mode) -> a call: inference under no_grad, training forward + backward (x's and the parameters'
    gradients, set to None before each call)."""
    runs: dict[str, Callable[[], object]] = {}
    for name, call in built.calls.items():

        def inference(call=call) -> None:
            with torch.no_grad():
                call(x)

        leaf = x.clone().requires_grad_()

        def training(call=call, leaf=leaf, parameters=built.parameters[name]) -> None:
            leaf.grad = None
            for parameter in parameters():
                parameter.grad = None
            call(leaf).backward(grad)

        runs[f"{name}\0inference"], runs[f"{name}\0training"] = inference, training
    return runs


def _guarded(runs: dict[str, Callable[[], object]]) -> tuple[dict[str, Callable[[], object]], dict[str, str]]:
    """The calls, each stopping (and doing nothing from then on) at an allocation that fails: row name ->
    the first line of the error in ``failed``. Any other error propagates."""
    failed: dict[str, str] = {}

    def guard(key: str, run: Callable[[], object]) -> Callable[[], object]:
        name, mode = key.split("\0")

        def guarded() -> None:
            if name in failed:
                return
            try:
                run()
            except (MemoryError, RuntimeError) as error:
                if not out_of_memory(error):
                    raise
                failed[name] = f"{mode}: {str(error).splitlines()[0]}"

        return guarded

    return {key: guard(key, run) for key, run in runs.items()}, failed


def _drop_failed(built: Built, failed: dict[str, str], seq_len: int, runs: dict) -> None:
    """Rows whose call failed to allocate leave the timings (both modes) for ``not_run``, with the reason."""
    for name, reason in failed.items():
        if name in built.calls:
            built.not_run[name] = f"not run: does not fit in memory at s={seq_len} ({reason})"
            del built.calls[name]
            for mode in MODES:
                runs.pop(f"{name}\0{mode}", None)


def _case(
    seq_len: int, rounds: int, names: Sequence[str], peak: dict | None, heads: int, d_head: int, batch: int
) -> dict:
    """One length: build, check (a refusal of the positions is a row not run), time."""
    x, grad = _inputs(seq_len, heads, d_head, batch)
    built = build_rows(names, x, heads, d_head)
    errors = {}
    for name in list(built.calls):
        try:
            with torch.no_grad():
                got = built.calls[name](x)
                oracle = built.oracle_of[name]()
        except ValueError as error:  # the encoding refuses these positions (a window smaller than s)
            built.not_run[name] = f"not run: {str(error).splitlines()[0]}"
            del built.calls[name]
            continue
        except (MemoryError, RuntimeError) as error:  # a row too large here: the others are still measured
            if not out_of_memory(error):
                raise
            built.not_run[name] = (
                f"not run: does not fit in memory at s={seq_len} ({str(error).splitlines()[0]})"
            )
            del built.calls[name]
            continue
        errors[name] = check(name, got, oracle, seq_len, built.tolerance[name])
    runs, failed = _guarded(_timed_calls(built, x, grad))
    for name in list(built.calls):  # forward + backward once: a backward too large is a row not run too
        runs[f"{name}\0training"]()
        _drop_failed(built, failed, seq_len, runs)
    timings = time_alternating(runs, rounds=rounds, warmup=1)
    _drop_failed(built, failed, seq_len, runs)  # an allocation that failed only in the timed rounds
    floor = {mode: timings[f"{UNBIASED}\0{mode}"].median_ms for mode in MODES}
    return {
        "seq_len": seq_len,
        "timings": [
            {
                "name": name,
                **{
                    mode: {
                        "median_ms": timings[f"{name}\0{mode}"].median_ms,
                        "min_ms": timings[f"{name}\0{mode}"].min_ms,
                        "max_ms": timings[f"{name}\0{mode}"].max_ms,
                        "vs_sdpa": timings[f"{name}\0{mode}"].median_ms / floor[mode],
                    }
                    for mode in MODES
                },
                "max_abs_error_vs_float64": errors[name],
                "peak_extra_mib": None if peak is None else peak.get(name),
            }
            for name in built.calls
        ],
        "not_timed": built.not_run,
    }


def row_call(spec: dict) -> Callable[[], torch.Tensor]:
    """The inference call of row ``spec["name"]`` at ``spec["seq_len"]``, for :func:`posenc.bench.memory.child`."""
    x, _ = _inputs(spec["seq_len"], spec["heads"], spec["d_head"], spec["batch"])
    built = build_rows([spec["name"]], x, spec["heads"], spec["d_head"])
    if spec["name"] in built.not_run:
        raise ValueError(built.not_run[spec["name"]])
    call = built.calls[spec["name"]]
    return lambda: call(x)


def measure(name: str, seq_len: int, sizes: dict, **options) -> dict:
    """The peak extra memory of one call of row ``name`` in a fresh subprocess (:func:`posenc.bench.memory.measure`)."""
    spec = {"name": name, "seq_len": seq_len, **sizes}
    return memory_harness.measure("posenc.bench.attention:row_call", spec, **options)


def sweep_lengths(name: str, sizes: Sequence[int]) -> list[int]:
    """The lengths the sweep tries for ``name``: ``sizes``, after :data:`NAIVE_SWEEP`'s shorter ones for a
    naive row."""
    row = rows().get(name)
    if row is None or row.extra is None or not row.extra.pairs or not sizes:
        return list(sizes)
    return [size for size in NAIVE_SWEEP if size < min(sizes)] + list(sizes)


def sweep(names: Sequence[str], sizes: Sequence[int], config: dict | None = None) -> dict:
    """Per row: each length in order until the first that fails within :data:`MEMORY_LIMIT_BYTES`."""
    config = config or {"heads": HEADS, "d_head": D_HEAD, "batch": BATCH}
    results: dict[str, dict] = {}
    for name in names:
        runs = []
        for seq_len in sweep_lengths(name, sizes):
            outcome = measure(
                name, seq_len, config, warm=False, limit_bytes=MEMORY_LIMIT_BYTES, timeout=SWEEP_TIMEOUT_S
            )
            runs.append({"seq_len": seq_len, **outcome})
            if not outcome["ok"]:
                break
        completed = [r["seq_len"] for r in runs if r["ok"]]
        results[name] = {
            "runs": runs,
            "longest_completed": max(completed) if completed else None,
            "stopped_by": None if runs[-1]["ok"] else runs[-1]["error"],
        }
    return results


def selected(only: str | None) -> list[str]:
    """The rows whose name ``only`` (a regular expression, case-insensitive) finds, with the baseline always;
    every row without ``only``.

    Raises:
        ValueError: an expression that does not compile or finds no row.
    """
    names = list(rows())
    if only is None:
        return names
    try:
        pattern = re.compile(only, re.IGNORECASE)
    except re.error as error:
        raise ValueError(f"--only {only!r} is not a regular expression: {error}") from None
    found = [name for name in names if pattern.search(name)]
    if not found:
        raise ValueError(f"--only {only!r} matches no row; rows: {', '.join(names)}")
    return [UNBIASED, *(name for name in found if name != UNBIASED)]


def run(
    seq_lens: Sequence[int] = SEQ_LENS,
    rounds: int = 9,
    reuse_memory: bool = True,
    memory: bool = True,
    sweep_sizes: Sequence[int] = SWEEP,
    only: str | None = None,
    heads: int = HEADS,
    d_head: int = D_HEAD,
    batch: int = BATCH,
) -> dict:
    """Timings, errors and memory of every row (or those :func:`selected` by ``only``) at every length, the
    folding study and the sweep; JSON-ready.

    Args:
        seq_lens: sequence lengths s.
        rounds: alternating rounds per length (after 1 warm-up round and the check).
        reuse_memory: raise glibc's mmap and trim thresholds for the timings
            (:func:`posenc.bench.harness.steady_malloc`).
        memory: measure each row's peak extra memory (a subprocess per row and length).
        sweep_sizes: lengths for the 16 GiB sweep (empty: no sweep).
        heads, d_head, batch: the configuration (default 8 heads of 64, batch 1).
    """
    for seq_len in (*seq_lens, *sweep_sizes):
        if isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1:
            raise ValueError(f"sequence lengths must be positive integers, got {seq_len!r}")
    if rounds < 1:
        raise ValueError(f"rounds must be at least 1, got {rounds}")
    names = selected(only)
    malloc = (
        "glibc thresholds raised (freed blocks reused)" if reuse_memory and steady_malloc() else "default"
    )
    sizes = {"heads": heads, "d_head": d_head, "batch": batch}
    started = time.perf_counter()
    cases, study = [], []
    for seq_len in seq_lens:
        torch._dynamo.reset()
        peak = (
            {name: measure(name, seq_len, sizes).get("peak_extra_mib") for name in names} if memory else None
        )
        cases.append(_case(seq_len, rounds, names, peak, heads, d_head, batch))
        study.append(alibi_folding.study(seq_len, heads, d_head, batch))
    timed_s = time.perf_counter() - started
    table = rows()
    return {
        "config": {
            **sizes,
            "d_model": heads * d_head,
            "dtype": "float32",
            "causal": True,
            "modes": list(MODES),
        },
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "machine": platform.machine(),
        "rounds": rounds,
        "malloc": malloc,
        "tolerance": TOLERANCE,
        "contextual_tolerance": CONTEXTUAL_TOLERANCE,
        "only": only,
        "rows": {name: table[name].what for name in names},
        "cases": cases,
        "extra_channel_precision": study,
        "timing_and_memory_seconds": timed_s,
        "sweep": {
            "limit_bytes": MEMORY_LIMIT_BYTES,
            "sizes": list(sweep_sizes),
            "timeout_s": SWEEP_TIMEOUT_S,
            "results": sweep(names, sweep_sizes, sizes) if sweep_sizes else {},
        },
    }
