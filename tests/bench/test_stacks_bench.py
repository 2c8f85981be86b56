"""The stacks benchmark's code path on tiny sizes: every row timed against the unbiased layer and checked
against the eager backend first, and `posenc bench stacks` prints its table."""

from __future__ import annotations

import pytest

from posenc.bench import stacks
from posenc.cli import main


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setattr(stacks, "LAYER", {"batch": 1, "d_model": 32, "heads": 2})


def test_every_row_is_timed_against_the_unbiased_layer(tiny):
    result = stacks.run((16,), rounds=1, window=4, chunk=4, memory=False)
    assert [row["case"] for row in result["rows"]] == list(stacks.CASES)
    assert all(row["median_ms"] > 0 and row["max_error"] <= stacks.TOLERANCE for row in result["rows"])
    assert result["rows"][0]["ratio"] == 1.0


def test_a_row_that_differs_from_the_eager_layer_is_refused_before_timing(tiny, monkeypatch):
    monkeypatch.setattr(stacks, "check", lambda case, seq_len, **_: 1.0 if case == "sinks" else 0.0)
    with pytest.raises(RuntimeError, match="'sinks': 1.0"):
        stacks.run((24,), rounds=1, memory=False)


@pytest.mark.slow  # a fresh interpreter importing torch
def test_the_memory_of_a_training_step_is_measured_in_a_subprocess():
    from posenc.bench.memory import measure

    result = measure(
        "posenc.bench.stacks:memory_call", {"case": "window", "seq_len": 64, "window": 16, "chunk": 16}
    )
    assert result.get("peak_extra_mib", -1) >= 0, result


def test_the_command_prints_its_table(tiny, capsys):
    assert (
        main(
            [
                "bench",
                "stacks",
                "--seq-lens",
                "16",
                "--rounds",
                "1",
                "--window",
                "4",
                "--chunk",
                "4",
                "--no-memory",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "× unbiased" in printed and "temperature" in printed
