"""`posenc bench rope` times every candidate after checking it against apply_rope (a smoke test)."""

from __future__ import annotations

import pytest
import torch

from posenc.bench import rope
from posenc.kernels import native_available
from posenc.kernels.rope_triton import TRITON_INSTALLED

TINY = ((1, 2, 16, 8),)


@pytest.fixture(scope="module")
def result():
    return rope.run(shapes=TINY, rounds=1, compile=False, reuse_memory=False)


def test_bench_times_every_candidate_for_every_dtype_and_layout(result):
    cases = {(c["dtype"], c["layout"], c["cache"]): c for c in result["cases"]}
    assert set(cases) == {
        (d, layout, cache)
        for d in ("float32", "bfloat16")
        for layout in ("half", "interleaved")
        for cache in ("cold", "warm")
    }
    for (_, layout, _), case in cases.items():
        names = [t["name"] for t in case["timings"]]
        assert names[:6] == [
            rope.CLONE,
            rope.EAGER,
            rope.NATIVE,
            "posenc apply_rope_qk, in place",
            "posenc native backend's torch fallback",
            "HF-style eager",
        ]
        assert ("complex multiply (Meta LLaMA)" in names) == (layout == "interleaved")
        assert case["not_timed"]["torch.compile(HF-style)"] == "not requested"
        assert all(t["min_ms"] <= t["median_ms"] <= t["max_ms"] for t in case["timings"])
        assert next(t for t in case["timings"] if t["name"] == rope.CLONE)["vs_clone"] == 1.0


def test_every_candidate_agrees_with_apply_rope_within_its_dtype(result):
    for case in result["cases"]:
        bound = rope.AGREEMENT[getattr(torch, case["dtype"])] * 8  # |values| stay below 8 here
        for t in case["timings"][1:]:  # the clone does not rotate
            assert t["max_abs_diff_vs_apply_rope"] <= bound, (case["dtype"], case["layout"], t["name"])
        if case["dtype"] == "float32" and native_available():  # bit-identical to apply_rope in float32
            kernel = next(t for t in case["timings"] if t["name"] == rope.NATIVE)
            assert kernel["max_abs_diff_vs_apply_rope"] == 0.0


def test_training_times_forward_and_backward_against_the_floor_and_the_reference(result):
    entries = {(t["dtype"], t["layout"]): t for t in result["training"]}
    assert set(entries) == {
        (d, layout) for d in ("float32", "bfloat16") for layout in ("half", "interleaved")
    }
    assert list(result["training_candidates"]) == [
        rope.CLONE,
        rope.NATIVE,
        rope.EAGER,
        rope.ROTARY,
        rope.ROTARY_PROJECTED,
    ]
    for (dtype, _), entry in entries.items():
        timings = {t["name"]: t for t in entry["timings"]}
        assert list(timings) == list(rope.TRAINING)
        assert timings[rope.CLONE]["vs_floor"] == 1.0 and timings[rope.EAGER]["vs_eager"] == 1.0
        for name, t in timings.items():
            assert t["vs_floor"] == pytest.approx(t["median_ms"] / timings[rope.CLONE]["median_ms"])
            assert t["vs_eager"] == pytest.approx(t["median_ms"] / timings[rope.EAGER]["median_ms"])
            error = t["max_abs_grad_error_vs_float64"]
            assert (error is None) == (name == rope.CLONE)
        bound = {"float32": 1e-5, "bfloat16": 2**-8 * 8}[dtype]  # float32 math rounded once, |grad| < 8
        assert timings[rope.NATIVE]["max_abs_grad_error_vs_float64"] <= bound
        assert timings[rope.ROTARY]["max_abs_grad_error_vs_float64"] <= bound
        assert timings[rope.ROTARY_PROJECTED]["max_abs_grad_error_vs_float64"] <= bound


def test_the_training_check_catches_a_wrong_gradient(monkeypatch):
    steps = rope._training_steps

    def wrong(q, k, grads, tables, layout):
        found = steps(q, k, grads, tables, layout)
        found[rope.NATIVE] = lambda: tuple(g * 2 for g in grads)
        return found

    monkeypatch.setattr(rope, "_training_steps", wrong)
    with pytest.raises(AssertionError, match="posenc apply_rope_qk disagrees with posenc apply_rope"):
        rope._training_case((1, 2, 8, 8), torch.float32, "half", rounds=1)


def test_a_fast_wrong_recipe_fails_the_agreement_check():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(1, 2, 8, 8, generator=generator)
    cos, sin = rope.rope_cos_sin(8, rope.rope_inv_freq(8)[0])
    right = rope.apply_rope(x, cos, sin)
    wrong = rope.apply_rope(x, cos, -sin)  # rotates the wrong way
    assert rope.check_agreement("right", [right], [right], "case") == 0.0
    with pytest.raises(AssertionError, match="wrong disagrees with posenc apply_rope"):
        rope.check_agreement("wrong", [wrong], [right], "case")


def test_complex_recipe_upcasts_bfloat16_and_casts_back():
    q = torch.randn(1, 1, 4, 8).to(torch.bfloat16)
    cos, sin = rope.rope_cos_sin(4, rope.rope_inv_freq(8)[0])
    got, _ = rope.complex_multiply(q, q, torch.complex(cos, sin))
    assert got.dtype == torch.bfloat16
    expected = rope.apply_rope(q.float(), cos, sin, layout="interleaved").to(torch.bfloat16)
    torch.testing.assert_close(got, expected, atol=2e-2, rtol=2e-2)


def test_cpu_time_counts_the_thread_and_needs_one_torch_thread(monkeypatch):
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        with pytest.raises(ValueError, match="one torch thread, got 2"):
            rope.run(shapes=TINY, rounds=1, compile=False, reuse_memory=False, cpu_time=True)
        torch.set_num_threads(1)
        result = rope.run(
            shapes=TINY,
            dtypes=("float32",),
            layouts=("half",),
            caches=("warm",),
            rounds=1,
            compile=False,
            reuse_memory=False,
            training=False,
            cpu_time=True,
        )
    finally:
        torch.set_num_threads(threads)
    assert result["clock"] == "CPU time of the calling thread" and result["threads"] == 1


def test_time_alternating_reads_the_clock_it_is_given():
    ticks = iter(range(100))
    timings = rope.time_alternating({"a": lambda: None}, rounds=3, warmup=0, clock=lambda: next(ticks))
    assert timings["a"].median_ms == 1e3  # one tick (a second) between the reads around each call


def test_bench_refuses_an_unknown_dtype_or_cache_state():
    with pytest.raises(ValueError, match="dtype must be one of float32, bfloat16; got 'float16'"):
        rope.run(shapes=TINY, dtypes=("float16",), rounds=1, compile=False, reuse_memory=False)
    with pytest.raises(ValueError, match="cache must be one of cold, warm; got 'hot'"):
        rope.run(shapes=TINY, caches=("hot",), rounds=1, compile=False, reuse_memory=False)


# --- `posenc bench rope --device cuda`, its code run on CPU (the kernel in Triton's interpreter) -----

GPU_TINY = ((1, 8, 2, 1, 8),)  # (b, s, h_q, h_kv, d)
needs_triton = pytest.mark.skipif(
    not TRITON_INSTALLED, reason="triton is not installed (pip install triton; it is in the dev extra)"
)


@pytest.fixture(scope="module")
def gpu_result():
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRITON_INTERPRET", "1")
        return rope.run_cuda(
            shapes=GPU_TINY, dtypes=("float32", "bfloat16"), rounds=1, compile=False, device="cpu"
        )


@needs_triton
def test_gpu_bench_checks_and_times_every_candidate_forward_and_backward(gpu_result):
    cases = {(c["dtype"], c["layout"], c["direction"]): c for c in gpu_result["cases"]}
    assert set(cases) == {
        (d, layout, direction)
        for d in ("float32", "bfloat16")
        for layout in ("half", "interleaved")
        for direction in ("forward", "backward")
    }
    for (dtype, _, direction), case in cases.items():
        names = [t["name"] for t in case["timings"]]
        assert names[:4] == [rope.COPY, rope.TRITON, rope.REFERENCE, rope.HF_EAGER]
        assert (rope.TRITON_IN_PLACE in names) == (direction == "forward")
        assert case["not_timed"][rope.HF_COMPILED] == "not requested"
        assert case["bytes_moved"] == 2 * (8 * 2 * 8 + 8 * 1 * 8) * (4 if dtype == "float32" else 2)
        bound = rope.CUDA_AGREEMENT[getattr(torch, dtype)] * 8  # |values| stay below 8 here
        for t in case["timings"]:
            assert t["gb_per_s"] > 0 and t["peak_extra_mib"] is None  # no memory figures off CUDA
            assert t["name"] == rope.COPY or t["max_abs_error_vs_float64"] <= bound
        copy = next(t for t in case["timings"] if t["name"] == rope.COPY)
        assert copy["of_copy_bandwidth"] == 1.0
        assert set(case["speedup_vs_peers"]) == {rope.HF_EAGER}  # no compile, no liger-kernel here
        kernel = case["kernel"]
        assert (
            kernel["fastest_peer"] == rope.HF_EAGER
            and kernel["vs_fastest_peer"] == case["speedup_vs_peers"][rope.HF_EAGER]
        )
        assert (
            kernel["of_copy_bandwidth"]
            == next(t for t in case["timings"] if t["name"] == rope.TRITON)["of_copy_bandwidth"]
        )


@needs_triton
def test_gpu_bench_kernel_is_as_exact_as_float32_allows(gpu_result):
    for case in gpu_result["cases"]:
        kernel = next(t for t in case["timings"] if t["name"] == rope.TRITON)
        bound = 1e-5 if case["dtype"] == "float32" else 2**-8 * 8  # half a bfloat16 unit at |value| < 8
        assert kernel["max_abs_error_vs_float64"] <= bound, case["dtype"]


def test_gpu_bench_refuses_without_cuda_and_names_bad_options():
    if not torch.cuda.is_available():
        with pytest.raises(
            RuntimeError, match=r"--device cuda needs a CUDA GPU; torch.cuda.is_available\(\) is False"
        ):
            rope.run_cuda()
    with pytest.raises(ValueError, match="direction must be one of forward, backward; got 'sideways'"):
        rope.run_cuda(directions=("sideways",), device="cpu")


def test_time_on_device_measures_every_candidate_each_round():
    calls = []
    timings = rope.time_on_device(
        {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")},
        rounds=3,
        device="cpu",
        before=lambda: calls.append("flush"),
        warmup=1,
    )
    assert calls == ["flush", "a", "flush", "b"] * 4
    assert set(timings) == {"a", "b"} and timings["a"].rounds == 3
    with pytest.raises(ValueError, match="rounds must be at least 1, got 0"):
        rope.time_on_device({}, rounds=0, device="cpu")


def keys(value) -> set[str]:
    """Every dict key anywhere in a JSON-like value."""
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys(v)}
    return set()


def test_bench_reports_measurements_not_verdicts_against_targets(result):
    assert not [key for key in keys(result) if "goal" in key or key == "met"]
    assert not [name for name in dir(rope) if name.startswith("GOAL")]


@needs_triton
def test_gpu_bench_reports_measurements_not_verdicts_against_targets(gpu_result):
    assert not [key for key in keys(gpu_result) if "goal" in key or key == "met"]
