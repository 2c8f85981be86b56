"""A plugin written outside posenc reaches every command: installed with pip (an entry point), named by
``--plugin`` or by ``POSENC_PLUGINS``; a plugin's bug keeps its traceback, a user's mistake stays one line.

The installed plugin is the example package of docs/plugins/distance_decay, installed with pip into a
folder of its own (on PYTHONPATH for the commands run here), so the test environment is left as it was.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
#: The example plugins of docs/plugins: an encoding and a lab task, each a package with an entry point.
EXAMPLES = [ROOT / "docs" / "plugins" / "distance_decay", ROOT / "docs" / "plugins" / "increment"]
BIN = Path(sys.executable).parent


def run(args: list[str], env: dict, cwd: Path, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """The environment of commands that see the example plugins installed with pip."""
    work = tmp_path_factory.mktemp("plugin")
    sources = [work / example.name for example in EXAMPLES]
    for example, source in zip(EXAMPLES, sources, strict=True):
        shutil.copytree(example, source)  # pip builds in the source folder: a copy keeps docs/ clean
    site = work / "site"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation"]
    done = run([*pip, "--target", str(site), *map(str, sources)], dict(os.environ), work)
    assert done.returncode == 0, done.stderr
    env = dict(os.environ, PYTHONPATH=str(site), POSENC_PLUGINS="")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def test_an_installed_plugin_is_listed_verified_drawn_and_benched(installed, tmp_path):
    listed = run([str(BIN / "posenc"), "list"], installed, tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "distance_decay" in listed.stdout
    verified = run([str(BIN / "posenc"), "verify", "distance_decay", "--json"], installed, tmp_path)
    assert verified.returncode == 0, verified.stderr
    assert "distance_decay" in verified.stdout
    drawn = run(
        [str(BIN / "posenc"), "plot", "distance_decay", "--out", str(tmp_path / "f")], installed, tmp_path
    )
    assert drawn.returncode == 0, drawn.stderr
    assert list((tmp_path / "f").glob("distance_decay*.png"))
    bench = ["bench", "attention", "--seq-lens", "64", "--rounds", "1", "--no-memory", "--sweep", "none"]
    out = tmp_path / "bench.json"
    benched = run(
        [str(BIN / "posenc"), *bench, "--only", "distance_decay", "--json", str(out)], installed, tmp_path
    )
    assert benched.returncode == 0, benched.stderr
    (case,) = json.loads(out.read_text())["cases"]
    rows = {row["name"]: row for row in case["timings"]}
    assert {"distance_decay on eager", "distance_decay on sdpa", "distance_decay on flex"} <= set(rows)
    assert all(
        rows[name]["max_abs_error_vs_float64"] <= 1e-5 for name in rows if name.startswith("distance_decay")
    )


def test_an_installed_plugin_trains_in_the_lab_under_torchrun_and_is_reported(installed, tmp_path):
    db = tmp_path / "records.sqlite"
    command = [
        str(BIN / "torchrun"),
        "--standalone",
        "--nproc_per_node=2",
        "-m",
        "posenc.lab",
        "run",
        "--preset",
        "smoke",
        "--task",
        "copy,increment",
        "--encodings",
        "distance_decay,nope",
        "--seeds",
        "0",
        "--steps",
        "3",
        "--db",
        str(db),
        "--workdir",
        str(tmp_path / "work"),
        "--parallel",
        "spread",
        "--no-progress",
    ]
    trained = run(command, dict(installed, OMP_NUM_THREADS="1"), tmp_path, timeout=600)
    assert trained.returncode == 0, trained.stderr[-3000:]
    with sqlite3.connect(db) as connection:
        runs = set(connection.execute("SELECT task, encoding FROM runs WHERE status = 'done'"))
    assert runs == {(task, name) for task in ("copy", "increment") for name in ("distance_decay", "nope")}
    reported = run([str(BIN / "posenc"), "lab", "report", "--db", str(db)], installed, tmp_path)
    assert reported.returncode == 0, reported.stderr
    assert "distance_decay" in reported.stdout and "increment" in reported.stdout
    out = tmp_path / "report"
    report = [
        "report",
        "--encodings",
        "distance_decay",
        "--lab-db",
        str(db),
        "--out",
        str(out),
        "--no-progress",
    ]
    whole = run([str(BIN / "posenc"), *report], installed, tmp_path)
    assert whole.returncode == 0, whole.stderr
    page = (out / "index.html").read_text()
    assert 'id="figures-distance_decay"' in page and "increment" in page
    assert list((out / "figures").glob("distance_decay*.png"))


PLUGIN_MODULE = '''
import torch
import posenc


class HalfDistance(posenc.PositionalEncoding):
    """−|i − j| / 2 on every head."""

    kind = "bias"

    def __init__(self, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads

    def bias(self, q_positions, k_positions):
        distance = (q_positions.unsqueeze(-1) - k_positions.unsqueeze(-2)).abs().double()
        return -0.5 * distance.expand(self.n_heads, *distance.shape){bug}


posenc.register("half_distance", HalfDistance)
'''


def write_plugin(folder: Path, name: str, bug: str = "") -> dict:
    (folder / f"{name}.py").write_text(textwrap.dedent(PLUGIN_MODULE).replace("{bug}", bug))
    return dict(os.environ, PYTHONPATH=str(folder), POSENC_PLUGINS="")


@pytest.mark.parametrize("how", ["option", "option=", "environment", "after the command"])
def test_a_plugin_module_named_on_the_command_line_or_in_the_environment_is_a_valid_name(how, tmp_path):
    env = write_plugin(tmp_path, "my_plugin")
    args = {
        "option": ["--plugin", "my_plugin", "verify", "half_distance", "--json"],
        "option=": ["--plugin=my_plugin", "verify", "half_distance", "--json"],
        "environment": ["verify", "half_distance", "--json"],
        "after the command": ["verify", "half_distance", "--json", "--plugin", "my_plugin"],
    }[how]
    if how == "environment":
        env["POSENC_PLUGINS"] = "my_plugin"
    done = run([str(BIN / "posenc"), *args], env, tmp_path)
    assert done.returncode == 0, done.stderr
    assert "half_distance" in done.stdout


def test_a_plugin_that_cannot_be_found_is_one_line_and_status_2(tmp_path):
    done = run([str(BIN / "posenc"), "--plugin", "no_such_plugin", "list"], dict(os.environ), tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "posenc: error: plugin module 'no_such_plugin' cannot be found (is it installed, or on PYTHONPATH?)"
    ]


def test_a_bug_inside_a_plugin_shows_its_traceback_and_names_the_plugin(tmp_path):
    # a TypeError inside the plugin's bias used to be one usage line with status 2 and no traceback
    env = write_plugin(tmp_path, "buggy_plugin", bug=" + 'oops'")
    plot = [str(BIN / "posenc"), "--plugin", "buggy_plugin", "plot", "half_distance", "--out", str(tmp_path)]
    done = run(plot, env, tmp_path)
    assert done.returncode == 1, done.stderr
    assert "Traceback (most recent call last)" in done.stderr
    assert "buggy_plugin.py" in done.stderr
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("posenc plot: error: the plugin buggy_plugin raised TypeError")
    )


def test_a_plugin_that_raises_while_loading_shows_its_traceback(tmp_path):
    (tmp_path / "broken_plugin.py").write_text("import posenc\nraise KeyError('missing setting')\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path), POSENC_PLUGINS="broken_plugin")
    done = run([str(BIN / "posenc"), "list"], env, tmp_path)
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr
    assert "plugin 'broken_plugin' raised KeyError while loading" in done.stderr


def test_a_users_bad_input_to_a_plugin_encoding_stays_one_line(tmp_path):
    env = write_plugin(tmp_path, "my_plugin")
    done = run([str(BIN / "posenc"), "--plugin", "my_plugin", "verify", "no_such_encoding"], env, tmp_path)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "half_distance" in done.stderr  # the valid names include the plugin's
