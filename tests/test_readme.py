"""The README's snippets run as written and print what it shows, its `posenc verify` printout is the
command's, its table of encodings is `posenc list --markdown`, and it says what each seed is."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from posenc.cli import main

ROOT = Path(__file__).parents[1]
README = (ROOT / "README.md").read_text()
#: Every fenced block: (the line before it, its language, its text).
BLOCKS = re.findall(r"([^\n]*)\n```(\w*)\n(.*?)```", README, re.DOTALL)
#: (code, the ```text block right after it or None), as tests/test_docs.py reads the guide.
SNIPPETS = re.findall(r"```python\n(.*?)```\n(?:\n```text\n(.*?)```)?", README, re.DOTALL)
#: What marks a block that is not run, and why: `<!-- not run: REASON -->` on the line before it.
NOT_RUN = re.compile(r"<!-- not run: .+ -->")


def test_every_block_is_a_python_snippet_its_output_a_checked_console_run_or_marked_not_run():
    for before, language, text in BLOCKS:
        if language in ("python", "text") or NOT_RUN.fullmatch(before):
            continue
        assert language == "console" and text.startswith("$ posenc "), (before, language, text[:60])


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_readme_snippet_runs_and_prints_what_the_readme_shows(index, capsys):
    code, shown = SNIPPETS[index]
    assert "assert " in code or shown, f"snippet {index} neither asserts nor shows its output"
    exec(compile(code, f"README.md[snippet {index}]", "exec"), {})
    printed = capsys.readouterr().out
    assert printed == (shown or ""), "a snippet that prints must show its output in a ```text block"


def _console_runs() -> list[tuple[str, list[str]]]:
    """(command, the lines shown after it) of each console block that is run."""
    runs = []
    for before, language, text in BLOCKS:
        if language == "console" and not NOT_RUN.fullmatch(before):
            command, *shown = text.rstrip("\n").splitlines()
            runs.append((command.removeprefix("$ ").split("#")[0].strip(), shown))
    return runs


@pytest.mark.parametrize(("command", "shown"), _console_runs())
def test_readme_console_output_is_what_the_command_prints(command, shown, capsys):
    argv = shlex.split(command)
    assert argv[0] == "posenc" and main(argv[1:]) == 0
    printed = capsys.readouterr().out
    # each shown line is a whole printed line, in order; "..." stands for any lines left out
    pattern = "".join(r"(?:.*\n)*?" if line == "..." else re.escape(line) + r"\n" for line in shown)
    assert re.search(pattern, printed), f"{command!r} printed:\n{printed}"


def test_readme_table_is_what_posenc_list_prints(capsys):
    assert main(["list", "--markdown"]) == 0
    printed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("|")]
    section = README.split("## What is here", 1)[1].split("\n## ", 1)[0]
    assert [line for line in section.splitlines() if line.startswith("|")] == printed


def test_every_seed_the_docs_or_the_cli_name_is_explained_in_the_readme(capsys):
    # "seed 004" in a user's eyes is a random seed unless something says it is a reference document
    assert main(["verify", "--help"]) == 0
    texts = [capsys.readouterr().out, README]
    texts += [path.read_text() for path in sorted((ROOT / "docs").glob("*.md"))]
    named = {number for text in texts for number in re.findall(r"(?i)\bseeds? ?-?(0\d\d)\b", text)}
    assert named >= {"002", "004"}
    seeds = README.split("## The seed documents", 1)[1].split("\n## ", 1)[0]
    for number in sorted(named):
        assert re.search(rf"^- \*\*seed {number}\*\*\W.*\w", seeds, re.MULTILINE), number


def test_docs_that_name_a_seed_point_to_the_readme_where_it_is_explained():
    for path in sorted((ROOT / "docs").glob("*.md")):
        text = path.read_text()
        first = re.search(r"(?i)\bseed ?-?0\d\d\b", text)
        if first is not None:
            assert "README.md#the-seed-documents" in text[: first.end() + 400], path.name
