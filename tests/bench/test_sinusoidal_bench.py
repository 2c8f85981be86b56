"""`posenc bench sinusoidal` runs and measures what it says (a smoke test, not the benchmark)."""

from __future__ import annotations

import json

import pytest

from posenc.bench import time_alternating
from posenc.bench.sinusoidal import run
from posenc.cli import main


def test_bench_reports_every_candidate_and_the_precision_of_each_recipe():
    result = run(length=64, d_model=16, rounds=2)
    names = [t["name"] for t in result["timings"]]
    assert names == ["posenc (exact)", "float32 recipe", "float64 recipe", "clone (memory floor)"]
    assert all(t["min_ms"] <= t["median_ms"] <= t["max_ms"] for t in result["timings"])
    errors = result["max_abs_error_at_positions_up_to_2^21"]
    assert errors["posenc (float64 output)"] < 1e-14 < errors["float64 recipe (float64 output)"]
    assert errors["float32 recipe"] > 1e-3


def test_bench_command_writes_json(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert (
        main(["bench", "sinusoidal", "--length", "32", "--d-model", "8", "--rounds", "1", "--json", str(out)])
        == 0
    )
    assert json.loads(out.read_text())["length"] == 32
    assert "clone (memory floor)" in capsys.readouterr().out


def test_alternating_rounds_refuse_zero_rounds():
    with pytest.raises(ValueError, match="rounds must be at least 1, got 0"):
        time_alternating({"noop": lambda: None}, rounds=0)
