"""The posenc command as a process: what a user sees at the terminal, exit statuses included.

In-process tests of each command live in tests/cli/, one module per command module.
"""

from __future__ import annotations

import importlib
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from posenc.cli import main


def posenc(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "posenc", *argv], capture_output=True, text=True, check=False, timeout=timeout
    )


def test_the_console_script_is_posenc_cli_main():
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    target = re.search(r'^posenc = "([\w.]+):(\w+)"$', pyproject, re.MULTILINE)
    assert target is not None
    assert getattr(importlib.import_module(target.group(1)), target.group(2)) is main


def test_the_installed_command_verifies_d_model_512_over_4096_positions():
    start = time.perf_counter()
    completed = posenc("verify", "--d-model", "512", "--seq-len", "4096", "--distances", "1,64,1024")
    elapsed = time.perf_counter() - start
    assert completed.returncode == 0, completed.stderr
    assert "Distance 1024 (3072 pairs):" in completed.stdout and "holds" in completed.stdout
    assert elapsed < 20  # sanity bound only; the measured time is recorded in docs/BENCHMARKS.md


def test_an_unwritable_json_path_stops_a_long_benchmark_before_it_starts():
    # the full RoPE benchmark takes about a minute; the refusal must come before any of it
    completed = posenc("bench", "rope", "--json", "/proc/posenc-rope.json", timeout=30)
    assert completed.returncode == 2 and completed.stdout == ""
    assert completed.stderr.splitlines() == [
        "posenc bench: error: --json '/proc/posenc-rope.json' cannot be written: "
        "cannot create files in '/proc': No such file or directory"
    ]


def test_a_bad_value_is_one_line_without_usage_or_traceback():
    completed = posenc("bench", "sinusoidal", "--length", "-5")
    assert completed.returncode == 2
    assert completed.stderr.splitlines() == [
        "posenc bench sinusoidal: error: argument --length: must be a positive integer, got -5 "
        "(see posenc bench sinusoidal --help)"
    ]


@pytest.mark.skipif(sys.platform == "win32", reason="SIGINT to a child process is POSIX")
def test_ctrl_c_ends_a_command_with_one_line_and_status_130():
    script = (
        "import sys, torch; from posenc.cli import main; print('ready', flush=True); "
        "sys.exit(main(['bench', 'sinusoidal', '--length', '4096', '--rounds', '100000']))"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # as from a terminal: a suite started in the background (`&`) ignores SIGINT, and so would its child
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert child.stdout.readline() == "ready\n"
        time.sleep(1.0)  # inside main, timing
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=30)
    finally:
        child.kill()
    assert child.returncode == 130
    assert err.splitlines() == ["posenc bench: interrupted"]


@pytest.mark.skipif(sys.platform == "win32", reason="a closed pipe raises EPIPE on POSIX")
@pytest.mark.parametrize("argv", [["lab", "presets"], ["verify"], ["list"]])
def test_a_reader_that_goes_away_ends_the_command_quietly_with_status_141(argv):
    # `posenc lab presets | head -1`: the reader closes the pipe, here before anything is written
    child = subprocess.Popen(
        [sys.executable, "-m", "posenc", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    child.stdout.close()
    try:
        err = child.stderr.read()
        child.wait(timeout=60)
    finally:
        child.kill()
    assert (child.returncode, err) == (141, "")


def test_more_positions_than_have_exact_angles_are_one_line_and_status_2_not_a_memory_error():
    completed = posenc("verify", "--seq-len", "99999999999")
    assert completed.returncode == 2
    assert completed.stderr.splitlines() == [
        "posenc verify: error: argument --seq-len: must be at most 2^27 = 134217728 (the positions with "
        "exact angles), got 99999999999 (see posenc verify --help)"
    ]
