"""posenc.cli.options: a parser whose refusals are one line, and the value types of the options."""

from __future__ import annotations

import argparse

import pytest

from posenc.cli.options import (
    Parser,
    UsageError,
    distances,
    file_name,
    lengths,
    positive_int,
    some_lengths,
    tolerance,
    width,
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
        (distances, "1,,3", "distances must be comma-separated integers, got '1,,3'"),
        (distances, "1,3,", "distances must be comma-separated integers, got '1,3,'"),
        (lengths, "64,,128", "lengths must be comma-separated integers or 'none', got '64,,128'"),
        (some_lengths, ",64", "lengths must be comma-separated integers, got ',64'"),
    ],
)
def test_bad_values_are_refused_with_the_value(parse, text, message):
    with pytest.raises(argparse.ArgumentTypeError, match=f"^{message.replace('(', '[(]')}$"):
        parse(text)


@pytest.mark.parametrize("parse", [distances, lengths, some_lengths])
def test_an_empty_item_between_commas_is_refused_not_skipped(parse):
    # "1,,3" is a typo; reading it as "1,3" would measure something other than what was asked
    with pytest.raises(argparse.ArgumentTypeError, match="got '1,,3'"):
        parse("1,,3")


def test_d_model_above_the_widest_width_is_refused_naming_the_value():
    with pytest.raises(argparse.ArgumentTypeError, match="^must be at most 65536 .*, got 100000000$"):
        width("100000000")
    assert width("16384") == 16384 and width("-2") == -2  # the sign and parity: the library's own checks


@pytest.mark.parametrize("text", ["", "  "])
def test_an_empty_file_name_is_refused_naming_it(text):
    with pytest.raises(argparse.ArgumentTypeError, match=f"^must name a file, got {text!r}$"):
        file_name(text)
