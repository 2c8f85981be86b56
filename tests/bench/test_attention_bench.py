"""`posenc bench attention` checks every candidate against float64 before timing it (a smoke test)."""

from __future__ import annotations

import pytest
import torch

from posenc.bench import attention


@pytest.fixture(scope="module")
def result():
    return attention.run(
        seq_lens=(64,), rounds=1, compile=False, reuse_memory=False, memory=False, sweep_sizes=()
    )


def test_every_candidate_runs_and_agrees_with_the_float64_reference(result):
    (case,) = result["cases"]
    assert case["seq_len"] == 64
    assert [t["name"] for t in case["timings"]] == list(attention.CANDIDATES)
    for t in case["timings"]:
        bound = attention.ROW_TOLERANCE.get(t["name"], attention.TOLERANCE)
        assert 0 <= t["max_abs_error_vs_float64"] <= bound, t["name"]
        assert t["min_ms"] <= t["median_ms"] <= t["max_ms"]
        assert t["peak_extra_mib"] is None  # memory=False
    assert next(t for t in case["timings"] if t["name"] == attention.UNBIASED)["vs_sdpa"] == 1.0
    assert case["not_timed"] == {"compiled flex_attention": "not requested: flex runs uncompiled"}
    assert result["sweep"]["results"] == {}
    (study,) = result["extra_channel_precision"]
    assert study[attention.FOLDED] < 1e-5  # m·j is small at s=64; it is not at 4096 (see the kernel tests)


def test_a_wrong_candidate_fails_the_run():
    expected = torch.zeros(1, 1, 4, 4, dtype=torch.float64)
    assert attention.check("right", expected.float(), expected, 4) == 0.0
    with pytest.raises(AssertionError, match=r"wrong disagrees with the float64 reference by 0.0001 > 1e-05"):
        attention.check("wrong", expected.float() + 1e-4, expected, 4)
    with pytest.raises(AssertionError, match="nan disagrees"):
        attention.check("nan", torch.full((1, 1, 4, 4), float("nan")), expected, 4)


def test_sweep_stops_at_the_first_length_that_does_not_fit_the_limit(monkeypatch):
    # 256 MiB: s=64 fits; s=4096 needs a 1 GiB float64 ALiBi bias [8, 4096, 4096] and is refused
    monkeypatch.setattr(attention, "MEMORY_LIMIT_BYTES", 256 << 20)
    name = "SDPA + ALiBi bias (materialised)"
    outcome = attention.sweep([name], (64, 4096, 8192), compile=False)[name]
    assert [run["seq_len"] for run in outcome["runs"]] == [64, 4096]  # 8192 is not tried
    first, second = outcome["runs"]
    assert first["ok"] and first["peak_extra_mib"] >= 0 and first["seconds"] > 0
    assert not second["ok"] and "alloc" in second["error"].lower()
    assert outcome["longest_completed"] == 64 and outcome["stopped_by"] == second["error"]


def test_bench_refuses_bad_lengths_and_rounds():
    with pytest.raises(ValueError, match="sequence lengths must be positive integers, got 0"):
        attention.run(seq_lens=(0,), memory=False, sweep_sizes=())
    with pytest.raises(ValueError, match="rounds must be at least 1, got 0"):
        attention.run(seq_lens=(64,), rounds=0, memory=False, sweep_sizes=())


# --- `posenc bench attention --device cuda`, its code run on CPU ------------------------------------

GPU_CONFIG = {"device": "cpu", "dtype": "float32", "heads": 2, "d_head": 16, "rounds": 1, "compile": False}


@pytest.fixture(scope="module")
def gpu_result():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(attention, "CHECK_LEN", 64)
        return attention.run_cuda(seq_lens=(32, 64), **GPU_CONFIG)


def test_gpu_bench_checks_every_candidate_then_times_each_length(gpu_result):
    assert set(gpu_result["check"]["max_abs_error_vs_float64"]) == set(attention.CUDA_CANDIDATES)
    assert (
        max(gpu_result["check"]["max_abs_error_vs_float64"].values())
        <= attention.CUDA_TOLERANCE[torch.float32]
    )
    assert [case["seq_len"] for case in gpu_result["cases"]] == [32, 64]
    for case in gpu_result["cases"]:
        assert [t["name"] for t in case["timings"]] == list(attention.CUDA_CANDIDATES) and case[
            "not_run"
        ] == {}
        flex = next(t for t in case["timings"] if t["name"] == attention.FLEX_UNBIASED)
        assert flex["of_unbiased_flex"] == 1.0 and flex["peak_extra_mib"] is None
    assert gpu_result["out_of_memory_at"] == dict.fromkeys(attention.CUDA_CANDIDATES)


def test_gpu_bench_reports_the_length_that_runs_out_of_memory_and_stops_there(monkeypatch):
    monkeypatch.setattr(attention, "CHECK_LEN", 16)
    original = attention.cuda_candidates
    name = "SDPA + T5 bias (materialised)"

    def candidates(inputs, *, compile=True):
        runs = original(inputs, compile=compile)
        if inputs["q"].shape[2] >= 32:  # as if the [h, s, s] bias did not fit from s=32 on
            runs[name] = lambda: (_ for _ in ()).throw(torch.cuda.OutOfMemoryError("CUDA out of memory."))
        return runs

    monkeypatch.setattr(attention, "cuda_candidates", candidates)
    result = attention.run_cuda(seq_lens=(16, 32, 64), **GPU_CONFIG)
    assert result["out_of_memory_at"][name] == 32
    not_run = [case["not_run"].get(name) for case in result["cases"]]
    assert not_run == [None, "out of memory at s=32: CUDA out of memory.", "out of memory at s=32"]
    assert name not in {t["name"] for t in result["cases"][2]["timings"]}


def test_gpu_bench_refuses_without_cuda_and_names_bad_options():
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="--device cuda needs a CUDA GPU"):
            attention.run_cuda()
    with pytest.raises(ValueError, match="dtype must be one of bfloat16, float16, float32; got 'int8'"):
        attention.run_cuda(device="cpu", dtype="int8")


def test_gpu_bench_times_candidates_one_by_one_when_together_they_run_out_of_memory(monkeypatch):
    monkeypatch.setattr(attention, "CHECK_LEN", 16)
    original = attention.cuda_candidates
    name = "SDPA + ALiBi bias (materialised)"

    def candidates(inputs, *, compile=True):
        runs = original(inputs, compile=compile)
        if inputs["q"].shape[2] == 32:
            calls = iter(range(10**6))
            ok = runs[name]
            # the first run and the memory measurement fit; the timed rounds do not
            runs[name] = lambda: (
                ok() if next(calls) < 2 else (_ for _ in ()).throw(torch.cuda.OutOfMemoryError("oom"))
            )
        return runs

    monkeypatch.setattr(attention, "cuda_candidates", candidates)
    result = attention.run_cuda(seq_lens=(32,), **GPU_CONFIG)
    (case,) = result["cases"]
    assert case["not_run"] == {name: "out of memory at s=32 while timed: oom"}
    assert [t["name"] for t in case["timings"]] == [n for n in attention.CUDA_CANDIDATES if n != name]
    assert result["out_of_memory_at"][name] == 32


def keys(value) -> set[str]:
    """Every dict key anywhere in a JSON-like value."""
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys(v)}
    return set()


def test_benches_report_measurements_not_verdicts_against_targets(result, gpu_result):
    for measured in (result, gpu_result):
        assert not [key for key in keys(measured) if "goal" in key or key == "met"]
    assert not [name for name in dir(attention) if name.startswith("GOAL")]
