"""posenc.cli.options: a parser whose refusals are one line, and the value types of the options."""

from __future__ import annotations

import argparse

import pytest

from posenc.cli.options import (
    Parser,
    UsageError,
    distances,
    lengths,
    positive_int,
    some_lengths,
    tolerance,
)


def test_parser_errors_raise_one_line_naming_the_subcommand():
    root = Parser(prog="posenc")
    sub = root.add_subparsers(dest="command").add_parser("bench")
    sub.add_argument("--rounds", type=positive_int)
    with pytest.raises(UsageError) as error:
        root.parse_args(["bench", "--rounds", "0"])
    assert str(error.value) == (
        "posenc bench: error: argument --rounds: must be a positive integer, got 0 (see posenc bench --help)"
    )


@pytest.mark.parametrize(
    ("parse", "text", "expected"),
    [
        (positive_int, "3", 3),
        (tolerance, "0", 0.0),
        (tolerance, "1e-5", 1e-5),
        (distances, "1, 64,1024", [1, 64, 1024]),
        (lengths, "64,128", (64, 128)),
        (lengths, "none", ()),
        (lengths, "", ()),
        (some_lengths, "64, 128", (64, 128)),
    ],
)
def test_values_parse(parse, text, expected):
    assert parse(text) == expected


@pytest.mark.parametrize(
    ("parse", "text", "message"),
    [
        (positive_int, "0", "must be a positive integer, got 0"),
        (positive_int, "-5", "must be a positive integer, got -5"),
        (positive_int, "2.5", "must be a positive integer, got '2.5'"),
        (tolerance, "-1", "must be a finite number ≥ 0, got '-1'"),
        (tolerance, "nan", "must be a finite number ≥ 0, got 'nan'"),
        (tolerance, "inf", "must be a finite number ≥ 0, got 'inf'"),
        (tolerance, "x", "must be a number, got 'x'"),
        (distances, "1,x", "distances must be comma-separated integers, got '1,x'"),
        (distances, ",", "distances must name at least one distance, got ','"),
        (lengths, "64,0", "lengths must be positive, got '64,0'"),
        (lengths, "a", "lengths must be comma-separated integers or 'none', got 'a'"),
        (some_lengths, "", "lengths must name at least one length, got ''"),
        (some_lengths, ",", "lengths must name at least one length, got ','"),
        (some_lengths, "none", "lengths must name at least one length, got 'none'"),
        (some_lengths, "64,0", "lengths must be positive, got '64,0'"),
        (some_lengths, "a", "lengths must be comma-separated integers, got 'a'"),
    ],
)
def test_bad_values_are_refused_with_the_value(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{message.replace('(', '[(]')}$"):
        parse(text)
