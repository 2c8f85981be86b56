"""Adding a lab task is one class and one ``register_task`` line: the proof.

``Increment`` below is defined here, outside ``src/``: an exact-match task (each symbol of the question
plus one, mod 10). Registered, it runs through ``posenc lab run``, ``posenc lab report`` (its tables,
ranking and figures among the algorithmic tasks') and ``posenc report``, and named by ``--plugin`` it
does the same from the command line; an entry point of ``posenc.tasks`` naming it registers it too.
Nothing under ``src/`` knows it, and no module there compares a task's name but the task's own file.
"""

from __future__ import annotations

import ast
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from posenc import plugins
from posenc.cli import main
from posenc.lab.exact_match import ExactMatchTask, Examples
from posenc.lab.presets import PRESETS
from posenc.lab.tasks import REGISTRY, register_task, task_names, unregister_task
from tests.lab.helpers import lab_command

NAME = "increment"
ROOT = Path(__file__).parents[2]
PAD, BOS, SEP, EOS, FIRST = 0, 1, 2, 3, 4
SYMBOLS = 10


class Increment(ExactMatchTask):
    """``BOS x1 … xn SEP (x1 + 1) … (xn + 1) EOS``, each symbol plus one mod 10 (2n + 3 tokens)."""

    vocab_size = FIRST + SYMBOLS

    def sequence_length(self, length: int) -> int:
        return 2 * length + 3

    def examples(self, lengths: torch.Tensor, generator: torch.Generator) -> Examples:
        width = self.sequence_length(int(lengths.max()))
        tokens = torch.full((len(lengths), width), PAD, dtype=torch.int64)  # [b, s]
        answer = torch.zeros((len(lengths), width), dtype=torch.bool)  # [b, s]
        for row, n in enumerate(lengths.tolist()):
            x = torch.randint(0, SYMBOLS, (n,), generator=generator)  # [n]
            tokens[row, : 2 * n + 3] = torch.cat(
                (
                    torch.tensor([BOS]),
                    FIRST + x,
                    torch.tensor([SEP]),
                    FIRST + (x + 1) % SYMBOLS,
                    torch.tensor([EOS]),
                )
            )
            answer[row, n + 2 : 2 * n + 3] = True  # the answer and EOS
        return Examples(tokens, answer)


@pytest.fixture
def registered():
    """``increment`` registered for one test, and forgotten after it."""
    register_task(NAME, Increment)
    yield NAME
    unregister_task(NAME)


def test_the_task_is_known_with_its_familys_setup(registered, capsys):
    assert task_names()[-2:] == (NAME, "grid")  # among the exact-match tasks, before the grid
    assert PRESETS["smoke"].tasks[NAME] == PRESETS["smoke"].tasks["copy"]
    assert NAME not in PRESETS["cpu"].sweep_tasks and NAME in PRESETS["cpu"].tasks  # run when named
    assert main(["lab", "presets"]) == 0
    assert f"  {NAME} (run when named with --task): L=20" in capsys.readouterr().out


def test_its_examples_are_what_it_defines():
    examples = Increment().examples(torch.tensor([2, 4]), torch.Generator().manual_seed(0))
    for tokens, answer in zip(examples.tokens.tolist(), examples.answer.tolist(), strict=True):
        sep = tokens.index(SEP)
        question = tokens[1:sep]
        given = [token for token, selected in zip(tokens, answer, strict=True) if selected]
        assert given == [FIRST + (t - FIRST + 1) % SYMBOLS for t in question] + [EOS]


def test_it_is_trained_recorded_and_reported_by_every_command(registered, tmp_path, capsys, monkeypatch):
    db = tmp_path / "records.sqlite"
    run = ["lab", "run", "--preset", "smoke", "--task", NAME, "--encodings", "nope,rope", "--steps", "3"]
    assert main([*run, "--db", str(db), "--threads", "1", "--no-progress"]) == 0
    with sqlite3.connect(db) as connection:
        rows = connection.execute("SELECT task, encoding, status, metrics FROM runs").fetchall()
    assert sorted(row[:3] for row in rows) == [(NAME, "nope", "done"), (NAME, "rope", "done")]
    assert all('"exact_match"' in row[3] and '"position_accuracy"' in row[3] for row in rows)
    assert re.search(rf"{NAME} nope seed 0: 3: \d\.\d\d EM, 6: ", capsys.readouterr().out)

    assert main(["lab", "report", "--db", str(db), "--out", str(tmp_path / "lab")]) == 0
    markdown = capsys.readouterr().out
    assert f"| Encoding | {NAME} at 3 (1L) | {NAME} at 6 (2L) | {NAME} at 12 (4L) | s/step |" in markdown
    assert f"Learned at L (mean exact match ≥ 0.9): {NAME}: " in markdown  # what "learned" means: its own
    assert f"pairs beyond L of {NAME}." in markdown  # ranked among the algorithmic tasks
    assert f"| {NAME} EM at 2L |" in markdown  # in seed 004's table
    assert {"lab_exact_match.png", "lab_answer_positions.png"} <= {
        p.name for p in (tmp_path / "lab").iterdir()
    }

    from posenc.lab.report import lab_figures

    figures = {stem: figure for stem, _, figure in lab_figures(db)}
    drawn = {line.get_gid() for axes in figures["exact-match"].axes for line in axes.get_lines()}
    assert {f"{NAME}-nope", f"{NAME}-rope"} <= drawn

    from posenc.plots import gallery

    monkeypatch.setattr(gallery, "names", lambda: [])  # the encodings' figures are other tests'
    out = tmp_path / "report"
    assert main(["report", "--out", str(out), "--no-progress", "--lab-db", str(db)]) == 0
    page = (out / "report.md").read_text()
    assert f"{NAME} at 6 (2L)" in page and "lab-exact-match.png" in page


def test_a_plugin_module_adds_it_to_the_command_line(tmp_path):
    (tmp_path / "increment_plugin.py").write_text(
        "from posenc.lab.tasks import register_task\n"
        "from tests.lab.test_new_task import Increment\n\n"
        f"register_task({NAME!r}, Increment)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(tmp_path), str(ROOT)))}
    db = str(tmp_path / "records.sqlite")

    def lab(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            lab_command(*argv), capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300
        )

    unknown = lab("run", "--task", NAME, "--db", db)
    assert unknown.returncode == 2 and f"unknown task {NAME!r}" in unknown.stderr
    plugin = ("--plugin", "increment_plugin")
    ran = lab(
        *plugin, "run", "--task", NAME, "--encodings", "nope", "--steps", "3", "--db", db, "--no-progress"
    )
    assert ran.returncode == 0, ran.stderr
    assert "1 run(s) trained" in ran.stdout
    reported = lab(*plugin, "report", "--db", db, "--out", str(tmp_path / "out"))
    assert reported.returncode == 0, reported.stderr
    assert f"{NAME} at 3 (1L)" in reported.stdout
    without = lab("report", "--db", db, "--out", str(tmp_path / "without"))  # its records, not its code
    assert without.returncode == 0, without.stderr
    assert f"task `{NAME}` is not registered here (load the plugin that defines it)" in without.stdout


@pytest.mark.parametrize("named", [Increment, Increment()], ids=["class", "instance"])
def test_an_entry_point_naming_a_task_registers_it_under_the_entry_points_name(named):
    plugins._install(plugins.TASK_GROUP, "increment_entry", named)
    try:
        assert isinstance(REGISTRY["increment_entry"], Increment)
        assert REGISTRY["increment_entry"].name == "increment_entry" and "increment_entry" in task_names()
    finally:
        unregister_task("increment_entry")


def test_register_task_refuses_what_is_not_a_task_and_names_it():
    with pytest.raises(TypeError, match="got 'copy'"):
        register_task("copy2", "copy")
    with pytest.raises(ValueError, match="got 'Bad Name'"):
        register_task("Bad Name", Increment)
    with pytest.raises(ValueError, match="'copy' is taken by AlgorithmicTask"):
        register_task("copy", Increment)

    class Vague(ExactMatchTask):
        vocab_size = 0

    with pytest.raises(ValueError, match="Vague.vocab_size must be a positive integer, got 0"):
        register_task("vague", Vague)
    assert "vague" not in REGISTRY and "copy2" not in REGISTRY


def _task_comparisons(tree: ast.AST, names: set[str]) -> list[int]:
    """Lines comparing something named like a task (``task``, ``row["task"]``, ``config.task``) with
    a literal task name, or a tuple, list or set holding one."""

    def literal(node: ast.AST) -> bool:
        if isinstance(node, ast.Constant):
            return node.value in names
        return isinstance(node, ast.Tuple | ast.List | ast.Set) and any(literal(item) for item in node.elts)

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(literal(side) for side in sides) and any("task" in ast.unparse(side) for side in sides):
                lines.append(node.lineno)
    return lines


def test_no_module_but_a_tasks_own_compares_task_names():
    names = set(task_names())
    own = {Path(sys.modules[type(REGISTRY[name]).__module__].__file__).resolve() for name in names}
    found = {}
    for path in sorted((ROOT / "src" / "posenc").rglob("*.py")):
        if path.resolve() in own:
            continue
        lines = _task_comparisons(ast.parse(path.read_text()), names)
        if lines:
            found[str(path.relative_to(ROOT))] = lines
    assert found == {}


def test_the_scan_finds_a_planted_comparison():
    planted = (
        'if config.task == "lm":\n    pass\nif row["task"] in ("copy", "grid"):\n    pass\nok = {"lm": 1}\n'
    )
    assert _task_comparisons(ast.parse(planted), {"lm", "copy", "grid"}) == [1, 3]
