"""`posenc bench rope`: tables of measured times and ratios (no verdicts), on CPU and, faked, on CUDA."""

from __future__ import annotations

import json

import pytest
import torch

from posenc.bench import rope
from posenc.kernels.rope_triton import TRITON_INSTALLED

TINY = ((1, 2, 16, 8),)
needs_triton = pytest.mark.skipif(not TRITON_INSTALLED, reason="triton is not installed")
no_cuda = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal where there is no GPU")


def test_bench_rope_command_prints_ratios_and_writes_json(cli, tmp_path, monkeypatch, wide):
    monkeypatch.setattr(rope, "SHAPES", TINY)
    monkeypatch.setattr(rope, "steady_malloc", lambda: False)  # leave this process's malloc alone
    out = tmp_path / "rope.json"
    run = cli("bench", "rope", "--rounds", "1", "--no-compile", "--json", str(out))
    assert run.code == 0
    written = json.loads(out.read_text())
    assert written["rounds"] == 1 and len(written["cases"]) == 8
    assert "clone of q and k (memory floor)" in run.out and "× clone" in run.out
    assert "(b, h, s, d) = 1×2×16×8, float32, half" in run.out and "cold cache: median (range) ms" in run.out
    assert "n/a: not requested" in run.out and "C kernel:" in run.out
    assert "training (warm): median (range) ms" in run.out and "× floor" in run.out and "× eager" in run.out
    assert "posenc RotaryEncoding.rotate" in run.out and len(written["training"]) == 4
    assert "goal" not in run.out and "met" not in run.out


def test_training_columns_line_up_with_the_inference_rows():
    entry = {
        "shape": [1, 2, 16, 8],
        "dtype": "float32",
        "layout": "half",
        "cache": "warm",
        "timings": [{"name": rope.CLONE, "median_ms": 1.0, "min_ms": 0.5, "max_ms": 2.0, "vs_clone": 1.0}],
        "not_timed": {"HF-style": "not requested"},
    }
    training = {
        "cache": "warm",
        "timings": [
            {"name": n, "median_ms": m, "min_ms": m, "max_ms": m, "vs_floor": m / 2, "vs_eager": m / 8}
            for n, m in ((rope.CLONE, 2.0), (rope.ROTARY, 3.0))
        ],
    }
    from posenc.cli.bench.rope import cpu_table

    table = cpu_table([entry], training)
    rows = {row[0]: list(row) for row in table.rows}
    assert rows[rope.CLONE] == [rope.CLONE, "1.00 (0.50–2.00)", "1.00", "2.00 (2.00–2.00)", "1.00", "0.25"]
    assert rows[rope.ROTARY] == [rope.ROTARY, "", "", "3.00 (3.00–3.00)", "1.50", "0.38"]
    assert rows["HF-style"] == ["HF-style", "n/a: not requested", "", "", "", ""]


def _record_runs(monkeypatch) -> dict:
    """Replace the bench by one that records the arguments it is called with (returned) and measures
    nothing."""
    seen = {}

    def fake_run(**kwargs):
        seen.update(kwargs)
        return {
            "threads": 1,
            "rounds": 1,
            "malloc": "default",
            "caches": {},
            "native_kernel": "",
            "cases": [],
        }

    monkeypatch.setattr(rope, "run", fake_run)
    return seen


def test_no_training_leaves_the_training_out(cli, tmp_path, monkeypatch):
    seen = _record_runs(monkeypatch)
    assert cli("bench", "rope", "--no-training", "--no-compile").code == 0
    assert seen == {"rounds": 41, "compile": False, "training": False}


def test_shapes_dtypes_layouts_and_caches_reach_the_bench_when_given(cli, monkeypatch):
    seen = _record_runs(monkeypatch)
    argv = ["--shape", "1", "2", "16", "8", "--shape", "2", "2", "8", "8", "--dtype", "bfloat16"]
    assert cli("bench", "rope", *argv, "--layout", "half", "--cache", "warm", "--no-compile").code == 0
    assert seen["shapes"] == [[1, 2, 16, 8], [2, 2, 8, 8]] and seen["dtypes"] == ["bfloat16"]
    assert seen["layouts"] == ["half"] and seen["caches"] == ["warm"]
    cli("bench", "rope", "--dtype", "float16").assert_refused("--dtype", "float16")


def test_cpu_time_is_passed_on_for_one_thread_and_refused_for_more(cli, monkeypatch):
    seen = _record_runs(monkeypatch)
    monkeypatch.setattr(torch, "get_num_threads", lambda: 2)
    cli("bench", "rope", "--cpu-time", "--no-compile").assert_refused("--cpu-time", "2 threads")
    assert seen == {}
    monkeypatch.setattr(torch, "get_num_threads", lambda: 1)
    assert cli("bench", "rope", "--cpu-time", "--no-compile").code == 0
    assert seen["cpu_time"] is True


def test_bad_rounds_and_json_are_refused_before_any_timing(cli, monkeypatch):
    def timed(**kwargs):
        raise AssertionError("timed before the options were checked")

    monkeypatch.setattr(rope, "run", timed)
    cli("bench", "rope", "--rounds", "0").assert_refused("--rounds", "got 0")
    cli("bench", "rope", "--json", "/proc/rope.json").assert_refused("--json", "/proc/rope.json")


@pytest.mark.parametrize(
    "option", [["--length", "8"], ["--d-model", "8"], ["--seq-lens", "64"], ["--no-memory"]]
)
def test_options_of_other_benchmarks_are_not_accepted(cli, option):
    cli("bench", "rope", *option).assert_refused("unrecognized arguments", option[0])


@no_cuda
def test_bench_rope_on_cuda_without_a_gpu_exits_2_with_the_reason(cli):
    cli("bench", "rope", "--device", "cuda").assert_refused(
        "posenc bench: error: --device cuda needs a CUDA GPU"
    )


@needs_triton
def test_bench_rope_cuda_command_prints_tables_and_writes_json(
    cli, rope_gpu_result, tmp_path, monkeypatch, wide
):
    seen = {}

    def fake_run_cuda(**kwargs):
        seen.update(kwargs)
        return rope_gpu_result

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(rope, "run_cuda", fake_run_cuda)
    out = tmp_path / "rope_cuda.json"
    run = cli("bench", "rope", "--device", "cuda", "--no-compile", "--json", str(out))
    assert run.code == 0 and seen == {"rounds": 30, "compile": False}
    assert len(json.loads(out.read_text())["cases"]) == 8
    assert "copy of the same bytes (memory floor)" in run.out and "posenc Triton, in place" in run.out
    assert "of copy bandwidth; the fastest peer, HF-style eager, takes" in run.out
    assert "goal" not in run.out and " met" not in run.out


def test_a_gpu_failure_is_one_line_and_status_2(cli, monkeypatch):
    def failing(**kwargs):
        raise RuntimeError("the GPU benchmark needs triton (pip install triton)")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(rope, "run_cuda", failing)
    cli("bench", "rope", "--device", "cuda").assert_refused(
        "posenc bench: error: the GPU benchmark needs triton"
    )
