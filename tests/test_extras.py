"""`pip install posenc` is torch and numpy: the library, `posenc list` and `posenc verify` run without
matplotlib and rich (in a process that refuses them), and each command that needs an extra says which
in one line, with status 2."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from posenc import _extras
from posenc._extras import EXTRAS, MissingExtra, require

PYPROJECT = Path(__file__).parents[1] / "pyproject.toml"
#: Prepended to each script run here: matplotlib and rich cannot be imported, as after `pip install posenc`.
WITHOUT_EXTRAS = '''
import sys

class Missing:
    """A meta path finder that refuses matplotlib and rich, as if they were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("matplotlib", "rich"):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, Missing())
try:
    import matplotlib
except ModuleNotFoundError:
    pass
else:
    raise AssertionError("matplotlib was imported all the same")

def loaded():
    return sorted(m for m in sys.modules if m.split(".")[0] in ("matplotlib", "rich"))
'''


def _without_extras(script: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    code = WITHOUT_EXTRAS + textwrap.dedent(script)
    return subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, cwd=cwd, timeout=300, check=False
    )


def test_the_library_needs_neither_matplotlib_nor_rich(tmp_path):
    script = """
    import torch

    import posenc
    import posenc.analysis, posenc.attention, posenc.functional, posenc.model

    encoding = posenc.build("rope", d_head=16)
    model = posenc.model.TransformerLM(50, d_model=32, n_layers=1, n_heads=2)
    assert model(torch.randint(0, 50, (1, 8))).shape == (1, 8, 50)
    properties = posenc.analysis.properties(encoding, length=32)
    assert properties and all(p.verdict != "error" for p in properties.values()), properties
    assert posenc.functional.sinusoidal_table(8, 4).shape == (8, 4)
    assert not loaded(), loaded()
    """
    done = _without_extras(script, cwd=tmp_path)
    assert done.returncode == 0, done.stderr


#: Each command run without the extras: (argv, exit status, the one line it prints on stderr).
COMMANDS = {
    "plot": (
        ["plot", "rope", "--out", "figures"],
        2,
        "posenc plot: error: drawing figures needs matplotlib: pip install 'posenc[plots]'",
    ),
    "verify --out": (
        ["verify", "--out", "flat.png"],
        2,
        "posenc verify: error: the flat-line plot (--out) needs matplotlib: pip install 'posenc[plots]'",
    ),
    "report": (
        ["report", "--out", "report"],
        2,
        "posenc report: error: the report needs matplotlib: pip install 'posenc[report]'",
    ),
    "lab run": (
        ["lab", "run", "--preset", "smoke", "--db", "lab.sqlite"],
        2,
        "posenc lab run: error: the lab needs rich: pip install 'posenc[lab]'",
    ),
    "lab report": (
        ["lab", "report", "--db", "lab.sqlite"],
        2,
        "posenc lab report: error: the lab needs matplotlib: pip install 'posenc[lab]'",
    ),
    "list": (["list"], 0, ""),
    "verify": (["verify", "--d-model", "4", "--seq-len", "5"], 0, ""),
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    """{name of COMMANDS: [status, stdout, stderr]}, "loaded": what of matplotlib and rich was imported,
    "files": what the commands left in their folder."""
    script = """
    import contextlib, io, json
    from posenc.cli import main

    results = {}
    for name, argv in json.loads(sys.argv[1]).items():
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
        results[name] = [code, out.getvalue(), err.getvalue()]
    results["loaded"] = loaded()
    print(json.dumps(results))
    """
    cwd = tmp_path_factory.mktemp("without-extras")
    argvs = json.dumps({name: argv for name, (argv, _, _) in COMMANDS.items()})
    done = _without_extras(script, argvs, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return {**json.loads(done.stdout), "files": sorted(p.name for p in cwd.iterdir())}


@pytest.mark.parametrize("name", [name for name, (_, status, _) in COMMANDS.items() if status])
def test_a_command_that_needs_an_extra_names_it_in_one_line(runs, name):
    _, status, line = COMMANDS[name]
    assert runs[name] == [status, "", line + "\n"]


def test_nothing_is_written_by_a_command_refused_for_a_missing_extra(runs):
    assert runs["files"] == []


def test_list_and_verify_print_plain_tables_without_rich(runs):
    code, out, err = runs["list"]
    assert code == 0 and err == ""
    assert re.search(r"^encoding +kind +where it acts", out, re.MULTILINE)
    assert re.search(r"^rope +rotary +rotates queries and keys", out, re.MULTILINE)
    code, out, err = runs["verify"]
    assert code == 0 and err == ""
    assert re.search(r"^holds: max deviation", out, re.MULTILINE) and "[green]" not in out
    assert runs["loaded"] == []


def test_pip_install_posenc_brings_torch_and_numpy_only():
    tomllib = pytest.importorskip("tomllib")
    dependencies = tomllib.loads(PYPROJECT.read_text())["project"]["dependencies"]
    assert {_name(requirement) for requirement in dependencies} == {"torch", "numpy"}


def test_each_extra_brings_the_modules_posenc_imports_from_it_and_dev_brings_every_extra():
    tomllib = pytest.importorskip("tomllib")
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]

    def brings(extra: str) -> set[str]:
        names = set()
        for requirement in extras[extra]:
            inner = re.fullmatch(r"posenc\[([\w,]+)\]", requirement.split(";")[0].strip())
            names |= set().union(*map(brings, inner[1].split(","))) if inner else {_name(requirement)}
        return names

    for extra, modules in EXTRAS.items():
        assert set(modules) <= brings(extra), extra
    assert set().union(*map(brings, EXTRAS)) <= brings("all") <= brings("dev")


def test_require_names_the_extra_and_refuses_an_extra_that_does_not_bring_the_module(monkeypatch):
    require("matplotlib", "plots", "drawing figures")  # installed here
    with pytest.raises(ValueError, match=r"extra 'plots' does not bring 'rich'"):
        require("rich", "plots", "drawing figures")
    monkeypatch.setattr(_extras, "installed", lambda module: False)
    with pytest.raises(
        MissingExtra, match=re.escape("drawing figures needs matplotlib: pip install 'posenc[plots]'")
    ):
        require("matplotlib", "plots", "drawing figures")


def _name(requirement: str) -> str:
    return re.match(r"[A-Za-z0-9_.-]+", requirement)[0].lower()
