"""`posenc bench attention`: rows from the registry on every backend, each checked against one float64 oracle
before it is timed; the declared extras beside their encodings (smoke tests at tiny sizes)."""

from __future__ import annotations

import pytest
import torch

from posenc.backends import ATTENTION
from posenc.bench import attention, extras
from posenc.encodings import available

TINY = {"heads": 2, "d_head": 16}


@pytest.fixture(scope="module")
def result():
    return attention.run(seq_lens=(64,), rounds=1, reuse_memory=False, memory=False, sweep_sizes=(), **TINY)


def test_every_encoding_has_a_row_on_every_backend_and_the_extras_stand_beside_theirs():
    names = list(attention.rows())
    assert names[0] == attention.UNBIASED
    for encoding in available():
        for backend in ATTENTION:
            assert f"{encoding} on {backend}" in names
    assert {"SDPA + alibi bias (materialised)", "SDPA + t5 bias (materialised)"} <= set(names)
    for declared in extras.EXTRAS.values():
        if declared.encoding is not None:
            assert names.index(declared.name) > names.index(f"{declared.encoding} on flex")


def test_every_row_runs_and_agrees_with_the_float64_oracle(result):
    (case,) = result["cases"]
    assert case["seq_len"] == 64
    timed = [t["name"] for t in case["timings"]]
    assert sorted(timed + list(case["not_timed"])) == sorted(attention.rows())
    # Swin's window of 7 × 7 has no token 63: its rows say so instead of failing the run
    assert set(case["not_timed"]) == {f"swin on {backend}" for backend in ATTENTION}
    assert all("7 window" in why for why in case["not_timed"].values())
    for t in case["timings"]:
        assert 0 <= t["max_abs_error_vs_float64"] <= attention.CONTEXTUAL_TOLERANCE, t["name"]
        for mode in attention.MODES:
            assert t[mode]["min_ms"] <= t[mode]["median_ms"] <= t[mode]["max_ms"]
        assert t["peak_extra_mib"] is None  # memory=False
    baseline = next(t for t in case["timings"] if t["name"] == attention.UNBIASED)
    assert baseline["inference"]["vs_sdpa"] == baseline["training"]["vs_sdpa"] == 1.0
    assert result["sweep"]["results"] == {}
    (study,) = result["extra_channel_precision"]
    assert study[attention.alibi_folding.FOLDED] < 1e-5  # m·j is small at s=64


def test_the_oracle_reads_the_encodings_terms():
    x, _ = attention._inputs(40, **TINY)
    # (parameters as initialised: CoPE's table starts at zero, so its term weighs nothing yet)
    names = ["alibi on sdpa", "deberta on sdpa", "shaw on eager", "fire on flex", "rope on sdpa"]
    built = attention.build_rows(names, x, **TINY)
    plain = built.oracle_of[attention.UNBIASED]()
    for name in names:
        assert (built.oracle_of[name]() - plain).abs().max() > 1e-4, name  # without the terms, far from it


def test_a_row_with_a_wrong_bias_fails_the_check(monkeypatch):
    x, _ = attention._inputs(40, **TINY)
    built = attention.build_rows(["kerple on sdpa"], x, **TINY)
    expected = built.oracle_of["kerple on sdpa"]()
    call = built.calls["kerple on sdpa"]
    layer = call.__closure__[0].cell_contents
    with torch.no_grad():
        for parameter in layer.encoding.parameters():
            parameter.mul_(2)
        got = call(x)
    with pytest.raises(AssertionError, match="kerple on sdpa disagrees with the float64 oracle"):
        attention.check("kerple on sdpa", got, expected, 40)


def test_check_names_the_row_and_catches_nan():
    expected = torch.zeros(1, 4, 8, dtype=torch.float64)
    assert attention.check("right", expected.float(), expected, 4) == 0.0
    with pytest.raises(AssertionError, match=r"wrong disagrees with the float64 oracle by 0.0001 > 1e-05"):
        attention.check("wrong", expected.float() + 1e-4, expected, 4)
    with pytest.raises(AssertionError, match="nan disagrees"):
        attention.check("nan", torch.full((1, 4, 8), float("nan")), expected, 4)


def test_naive_rows_step_aside_where_their_pairs_tensor_is_too_large(monkeypatch):
    naive = extras.EXTRAS["DeBERTa naive: [b, h, i, j, d] gathered"]
    assert naive.not_run(1024, 8, 64, 1) is None  # 8 heads × 1024² × 64 float32: 2 GiB
    assert naive.not_run(2048, 8, 64, 1) == "not run: its [b, h, i, j, d] tensor would hold 8 GiB"
    monkeypatch.setattr(extras, "NAIVE_LIMIT_BYTES", 1 << 10)
    x, _ = attention._inputs(32, **TINY)
    built = attention.build_rows(["deberta on sdpa", naive.name], x, **TINY)
    assert "deberta on sdpa" in built.calls and naive.name in built.not_run
    assert attention.sweep_lengths(naive.name, (4096,)) == [1024, 1536, 2048, 3072, 4096]
    assert attention.sweep_lengths("deberta on sdpa", (4096,)) == [4096]


def test_only_selects_rows_case_insensitively_and_keeps_the_baseline():
    names = attention.selected("KERPLE")
    assert names[0] == attention.UNBIASED
    assert set(names[1:]) == {*(f"kerple on {b}" for b in ATTENTION), "SDPA + kerple bias (materialised)"}
    assert attention.selected(None) == list(attention.rows())
    with pytest.raises(ValueError, match="matches no row"):
        attention.selected("nosuch")
    with pytest.raises(ValueError, match="not a regular expression"):
        attention.selected("(")


def test_an_extra_is_declared_once_with_its_encoding_or_a_rule():
    with pytest.raises(ValueError, match="already declared"):
        extras.extra(next(iter(extras.EXTRAS.values())))
    with pytest.raises(ValueError, match="exactly one of encoding and applies"):
        extras.extra(extras.Extra("x", "y", "z", make=lambda layer, positions: None))


def test_sweep_stops_at_the_first_length_that_does_not_fit_the_limit(monkeypatch):
    # 256 MiB: s=64 fits; s=4096 needs a 512 MiB float32 [8, 4096, 4096] bias and is refused
    monkeypatch.setattr(attention, "MEMORY_LIMIT_BYTES", 256 << 20)
    name = "SDPA + alibi bias (materialised)"
    outcome = attention.sweep([name], (64, 4096, 8192))[name]
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


def keys(value) -> set[str]:
    """Every dict key anywhere in a JSON-like value."""
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in keys(v)}
    if isinstance(value, list):
        return {k for v in value for k in keys(v)}
    return set()


def test_the_bench_reports_measurements_not_verdicts_against_targets(result):
    assert not [key for key in keys(result) if "goal" in key or key == "met"]
    assert not [name for name in dir(attention) if name.startswith("GOAL")]


def test_a_row_that_does_not_fit_in_memory_is_reported_not_run_and_the_others_are_measured(monkeypatch):
    # one row at s=4096 needing 32 GiB used to end the whole run, every row measured before it lost
    build = attention.build_rows

    def with_one_too_large(selected, x, heads=attention.HEADS, d_head=attention.D_HEAD):
        built = build(selected, x, heads, d_head)

        def too_large(_):
            raise RuntimeError(
                "[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory"
            )

        built.calls["alibi on eager"] = too_large
        return built

    monkeypatch.setattr(attention, "build_rows", with_one_too_large)
    (case,) = attention.run(
        seq_lens=(32,), rounds=1, reuse_memory=False, memory=False, sweep_sizes=(), only="alibi", **TINY
    )["cases"]
    assert case["not_timed"]["alibi on eager"].startswith("not run: does not fit in memory at s=32")
    assert {"alibi on sdpa", "alibi on flex"} <= {row["name"] for row in case["timings"]}


class _BackwardOutOfMemory(torch.autograd.Function):
    """The identity, whose backward fails to allocate as a 32 GiB gradient would."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")


def _planting(monkeypatch, name, wrap):
    build = attention.build_rows

    def planted(selected, x, heads=attention.HEADS, d_head=attention.D_HEAD):
        built = build(selected, x, heads, d_head)
        built.calls[name] = wrap(built.calls[name])
        return built

    monkeypatch.setattr(attention, "build_rows", planted)


def test_a_row_whose_backward_does_not_fit_in_memory_is_reported_not_run_and_the_others_are_measured(
    monkeypatch,
):
    # the check runs the forward only: an allocation failing in the timed backward ended the whole run
    _planting(monkeypatch, "alibi on eager", lambda call: lambda x: _BackwardOutOfMemory.apply(call(x)))
    (case,) = attention.run(
        seq_lens=(32,), rounds=1, reuse_memory=False, memory=False, sweep_sizes=(), only="alibi", **TINY
    )["cases"]
    assert case["not_timed"]["alibi on eager"].startswith(
        "not run: does not fit in memory at s=32 (training:"
    )
    assert {"alibi on sdpa", "alibi on flex"} <= {row["name"] for row in case["timings"]}
    assert "alibi on eager" not in {row["name"] for row in case["timings"]}


def test_a_row_failing_to_allocate_only_in_the_timed_rounds_is_reported_not_run(monkeypatch):
    def fails_from_the_fourth_call(call):
        calls = []

        def run(x):
            calls.append(None)
            if len(calls) > 3:  # the check, the training probe, the warm-up pass: then the timed rounds
                raise MemoryError("planted")
            return call(x)

        return run

    _planting(monkeypatch, "alibi on eager", fails_from_the_fourth_call)
    (case,) = attention.run(
        seq_lens=(32,), rounds=2, reuse_memory=False, memory=False, sweep_sizes=(), only="alibi", **TINY
    )["cases"]
    assert case["not_timed"]["alibi on eager"].startswith("not run: does not fit in memory at s=32")
    assert "alibi on eager" not in {row["name"] for row in case["timings"]}
