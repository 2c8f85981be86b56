"""`posenc bench attention --device cuda`, its code run on CPU: every candidate checked against the float64
oracle, then timed per length; a candidate out of memory is reported there and not tried further."""

from __future__ import annotations

import pytest
import torch

from posenc.bench import attention_cuda as attention

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
