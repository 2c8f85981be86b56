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
