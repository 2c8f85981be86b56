"""A closed stdout (``posenc bench … --json out.json | head -1``) may end a benchmark with 141, but its
--json file holds what was measured: it is written before any table is printed."""

from __future__ import annotations

import json
import sys

import pytest

from posenc.bench import attention, decode, rope
from posenc.cli import main
from tests.cli.test_main import ClosedPipe

#: What each faked benchmark returns: enough for its first printed line, which meets the closed pipe.
RESULTS = {
    "rope": {"threads": 1, "rounds": 1, "malloc": "default", "cases": [], "caches": {}, "native_kernel": "-"},
    "attention": {
        "config": {"batch": 1, "heads": 1, "d_head": 8},
        "threads": 1,
        "rounds": 1,
        "malloc": "default",
        "cases": [],
        "extra_channel_precision": [],
        "sweep": {"results": {}},
    },
    "decode": {"cases": [], "steps": 1, "model": {"n_layers": 1, "d_model": 8}, "threads": 1},
}
ARGV = {
    "rope": ["--rounds", "1", "--no-compile"],
    "attention": ["--seq-lens", "64", "--sweep", "none", "--no-memory", "--rounds", "1"],
    "decode": ["--lengths", "8", "--steps", "1", "--no-memory"],
}


def test_the_sinusoidal_json_is_written_even_when_stdout_is_closed(monkeypatch, tmp_path):
    out = tmp_path / "bench.json"
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    code = main(
        ["bench", "sinusoidal", "--length", "8", "--d-model", "8", "--rounds", "1", "--json", str(out)]
    )
    assert code == 141
    assert json.loads(out.read_text())["length"] == 8, "the benchmark ran, and its --json was discarded"


@pytest.mark.parametrize("bench", list(RESULTS))
def test_the_json_is_written_before_the_tables(bench, monkeypatch, tmp_path):
    module = {"rope": rope, "attention": attention, "decode": decode}[bench]
    monkeypatch.setattr(module, "run", lambda **kwargs: RESULTS[bench])
    out = tmp_path / f"{bench}.json"
    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["bench", bench, *ARGV[bench], "--json", str(out)]) == 141
    assert json.loads(out.read_text()) == RESULTS[bench]
