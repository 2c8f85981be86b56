"""`posenc list`: the registry as the README's table, as Markdown, or as JSON."""

from __future__ import annotations

import json

import pytest


def test_list_shows_each_encoding_its_kind_and_parameter_formula(cli):
    run = cli("list", "--json")
    rows = {row["name"]: row for row in json.loads(run.out)}
    assert run.code == 0
    assert rows["learned"]["kind"] == "additive" and rows["learned"]["parameters"] == "L·d"
    assert rows["sinusoidal"]["parameters"] == "0" and rows["nope"]["kind"] == "none"
    assert rows["alibi"]["used_by"] == "BLOOM, MPT" and rows["rope"]["where"] == "rotates queries and keys"
    run = cli("list")
    assert run.code == 0 and "learned" in run.out and "L·d" in run.out


def test_list_prints_the_readme_columns(cli):
    header, rule, *body = cli("list", "--markdown").out.split("\n\n")[1].splitlines()
    assert header == "| encoding | kind | where it acts | parameters | used by |"
    import posenc

    assert [line.split(" | ")[0].removeprefix("| ") for line in body] == posenc.available()


def test_list_markdown_escapes_what_would_break_the_table(cli):
    # Kerple's |i − j| used to end the README's cell early
    [kerple] = [line for line in cli("list", "--markdown").out.splitlines() if line.startswith("| kerple ")]
    assert r"\|i − j\|" in kerple and kerple.count(" | ") == 4


def test_no_summary_is_cut_mid_sentence(cli):
    # the summary was the docstring's first line: Kerple's, which wraps, ended at "or"
    rows = json.loads(cli("list", "--json").out)
    kerple = next(row for row in rows if row["name"] == "kerple")
    assert kerple["summary"].endswith("per head, r1 and r2 learned.")
    assert all(row["summary"].endswith((".", ")")) for row in rows), [row["summary"] for row in rows]


@pytest.mark.parametrize("flag", ["--json", "--markdown", None])
def test_an_encoding_without_a_formula_says_so_rather_than_none(cli, monkeypatch, flag):
    import posenc
    from posenc.encodings import ENCODINGS

    class Quiet(posenc.PositionalEncoding):
        """A bias with no parameter formula."""

        kind = "bias"

    monkeypatch.setitem(ENCODINGS, "quiet", Quiet)
    run = cli("list", *([flag] if flag else []))
    if flag == "--json":
        [row] = [row for row in json.loads(run.out) if row["name"] == "quiet"]
        assert row["parameters"] is None and row["used_by"] == "not declared"
        assert row["where"] == "biases the attention scores"
        return
    [line] = [line for line in run.out.splitlines() if "quiet" in line]
    assert "not declared" in line and "None" not in line


def test_json_and_markdown_are_one_or_the_other(cli):
    cli("list", "--json", "--markdown").assert_refused("--markdown", "--json")
