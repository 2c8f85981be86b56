"""`posenc bench decode`: its lengths checked before anything is measured."""

from __future__ import annotations

import pytest

from posenc.bench import decode


@pytest.fixture
def not_timed(monkeypatch):
    def timed(**kwargs):
        raise AssertionError("timed before the options were checked")

    monkeypatch.setattr(decode, "run", timed)


@pytest.mark.parametrize(
    ("value", "named"),
    [
        ("", "at least one length, got ''"),
        (",", "at least one length, got ','"),
        ("none", "at least one length, got 'none'"),
        ("8,0", "lengths must be positive, got '8,0'"),
        ("x", "comma-separated integers, got 'x'"),
    ],
)
def test_lengths_that_measure_nothing_or_are_not_lengths_are_refused(cli, not_timed, value, named):
    cli("bench", "decode", "--lengths", value, "--no-memory").assert_refused("--lengths", named)


def test_the_lengths_given_are_measured(cli, monkeypatch):
    seen = {}

    def fake_run(**kwargs):
        seen.update(kwargs)
        return {"cases": [], "steps": 1, "model": {"n_layers": 1, "d_model": 8}, "threads": 1}

    monkeypatch.setattr(decode, "run", fake_run)
    assert cli("bench", "decode", "--lengths", "8,16", "--steps", "1", "--no-memory").code == 0
    assert seen == {"lengths": (8, 16), "steps": 1, "memory": False}
