"""`posenc bench attention` checks every candidate against float64 before timing it (a smoke test)."""

from __future__ import annotations

import json

import pytest
import torch

from posenc.bench import attention
from posenc.cli import main


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
        assert 0 <= t["max_abs_error_vs_float64"] <= attention.TOLERANCE, t["name"]
        assert t["min_ms"] <= t["median_ms"] <= t["max_ms"]
        assert t["peak_extra_mib"] is None  # memory=False
    assert next(t for t in case["timings"] if t["name"] == attention.UNBIASED)["vs_sdpa"] == 1.0
    assert case["not_timed"] == {"compiled flex_attention": "not requested: flex runs uncompiled"}
    assert set(result["goal"]) == {"64"} and result["sweep"]["results"] == {}
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


def test_bench_attention_command_prints_tables_and_writes_json(result, tmp_path, capsys, monkeypatch):
    seen = {}

    def fake_run(**kwargs):
        seen.update(kwargs)
        return result

    monkeypatch.setattr(attention, "run", fake_run)
    monkeypatch.setenv("COLUMNS", "200")  # one table row per line
    out = tmp_path / "attention.json"
    argv = ["bench", "attention", "--seq-lens", "64", "--rounds", "1", "--no-compile", "--no-memory"]
    assert main([*argv, "--sweep", "none", "--json", str(out)]) == 0
    assert seen == {"seq_lens": (64,), "rounds": 1, "compile": False, "memory": False, "sweep_sizes": ()}
    assert json.loads(out.read_text())["cases"][0]["seq_len"] == 64
    printed = capsys.readouterr().out
    assert "SDPA, no bias (is_causal)" in printed and "posenc alibi_attention" in printed
    assert "goal ALiBi ≤ 1.2× unbiased SDPA, s=64" in printed


def test_bench_refuses_bad_lengths_and_rounds():
    with pytest.raises(ValueError, match="sequence lengths must be positive integers, got 0"):
        attention.run(seq_lens=(0,), memory=False, sweep_sizes=())
    with pytest.raises(ValueError, match="rounds must be at least 1, got 0"):
        attention.run(seq_lens=(64,), rounds=0, memory=False, sweep_sizes=())
