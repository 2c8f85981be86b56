"""`posenc bench sinusoidal`: only its own options, checked (with --json's path) before any timing."""

from __future__ import annotations

import json

import pytest

from posenc.bench import sinusoidal


def test_bench_command_writes_json(cli, tmp_path):
    out = tmp_path / "bench.json"
    run = cli("bench", "sinusoidal", "--length", "32", "--d-model", "8", "--rounds", "1", "--json", str(out))
    assert run.code == 0
    assert json.loads(out.read_text())["length"] == 32
    assert "clone (memory floor)" in run.out and "max |value − exact|" in run.out


@pytest.fixture
def not_timed(monkeypatch):
    def timed(*args, **kwargs):
        raise AssertionError("timed before the options were checked")

    monkeypatch.setattr(sinusoidal, "run", timed)


@pytest.mark.parametrize(
    ("argv", "fragments"),
    [
        (["--length", "-5"], ["--length", "-5"]),
        (["--length", "0"], ["--length", "got 0"]),
        (["--d-model", "-2"], ["--d-model", "-2"]),
        (["--d-model", "0"], ["--d-model", "got 0"]),
        (["--rounds", "0"], ["--rounds", "got 0"]),
        (["--rounds", "many"], ["--rounds", "'many'"]),
        (["--json", "/proc/x.json"], ["--json", "/proc/x.json", "cannot create files in '/proc'"]),
        (["--length", "99999999999"], ["--length", "at most 2^27 = 134217728", "got 99999999999"]),
    ],
)
def test_bad_options_are_refused_in_one_line_before_any_timing(cli, not_timed, argv, fragments):
    cli("bench", "sinusoidal", *argv).assert_refused(*fragments)


def test_an_odd_d_model_is_refused_naming_it(cli):
    cli("bench", "sinusoidal", "--length", "8", "--d-model", "7", "--rounds", "1").assert_refused(
        "d_model must be even, got 7"
    )


def test_json_under_an_existing_file_is_refused_before_any_timing(cli, not_timed, tmp_path):
    blocker = tmp_path / "results"
    blocker.write_text("")
    cli("bench", "sinusoidal", "--json", str(blocker / "x.json")).assert_refused(
        "--json", str(blocker / "x.json"), f"{str(blocker)!r} is a file, not a folder"
    )


@pytest.mark.parametrize(
    "option", [["--device", "cuda"], ["--seq-lens", "64"], ["--no-compile"], ["--sweep", "none"]]
)
def test_options_of_other_benchmarks_are_not_accepted(cli, not_timed, option):
    cli("bench", "sinusoidal", *option).assert_refused("unrecognized arguments", option[0])
