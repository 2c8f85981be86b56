"""`posenc bench sinusoidal` runs and measures what it says (a smoke test, not the benchmark)."""

from __future__ import annotations

import pytest

from posenc.bench import time_alternating
from posenc.bench.sinusoidal import run


def test_bench_reports_every_candidate_and_the_precision_of_each_recipe():
    result = run(length=64, d_model=16, rounds=2)
    names = [t["name"] for t in result["timings"]]
    assert names == ["posenc (exact)", "float32 recipe", "float64 recipe", "clone (memory floor)"]
    assert all(t["min_ms"] <= t["median_ms"] <= t["max_ms"] for t in result["timings"])
    errors = result["max_abs_error_at_positions_up_to_2^21"]
    assert errors["posenc (float64 output)"] < 1e-14 < errors["float64 recipe (float64 output)"]
    assert errors["float32 recipe"] > 1e-3


def test_alternating_rounds_refuse_zero_rounds():
    with pytest.raises(ValueError, match="rounds must be at least 1, got 0"):
        time_alternating({"noop": lambda: None}, rounds=0)


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"length": -5}, "length must be positive, got -5"),
        ({"length": 0}, "length must be positive, got 0"),
        ({"d_model": 7}, "d_model must be even, got 7"),
        ({"d_model": -2}, "d_model must be positive, got -2"),
        ({"rounds": 0}, "rounds must be positive, got 0"),
    ],
)
def test_bench_refuses_bad_sizes_before_timing_anything(kwargs, message):
    with pytest.raises(ValueError, match=message):
        run(**{"length": 8, "d_model": 8, "rounds": 1, **kwargs})


def test_bench_refuses_a_length_that_is_not_an_int():
    with pytest.raises(TypeError, match="length must be an int, got float"):
        run(length=8.0, d_model=8, rounds=1)
