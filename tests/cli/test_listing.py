"""`posenc list`: the registry as a table or JSON."""

from __future__ import annotations

import json


def test_list_shows_each_encoding_its_kind_and_parameter_formula(cli):
    run = cli("list", "--json")
    rows = {row["name"]: row for row in json.loads(run.out)}
    assert run.code == 0
    assert rows["learned"]["kind"] == "additive" and rows["learned"]["parameters"] == "L·d"
    assert rows["sinusoidal"]["parameters"] == "0" and rows["nope"]["kind"] == "none"
    run = cli("list")
    assert (
        run.code == 0 and "learned" in run.out and "L·d" in run.out and "[max_len," in run.out
    )  # not markup


def test_an_encoding_without_a_formula_says_so_rather_than_none(cli, monkeypatch):
    import posenc
    from posenc.encodings import ENCODINGS

    class Quiet(posenc.PositionalEncoding):
        """A bias with no parameter formula."""

        kind = "bias"

    monkeypatch.setitem(ENCODINGS, "quiet", Quiet)
    run = cli("list")
    [line] = [line for line in run.out.splitlines() if "quiet" in line]
    assert "not declared" in line and "None" not in line
