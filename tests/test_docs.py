"""The guide's snippets run and print what the guide shows, and every figure it shows exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).parents[1] / "docs" / "guide.md"
#: (code, the ```text block right after it or None)
SNIPPETS = re.findall(r"```python\n(.*?)```\n(?:\n```text\n(.*?)```)?", GUIDE.read_text(), re.DOTALL)


def test_the_guide_has_snippets():
    assert len(SNIPPETS) >= 8


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_guide_snippet_runs_and_prints_what_the_guide_shows(index, capsys):
    code, shown = SNIPPETS[index]
    # a snippet checks itself (assert) or shows its output; one that does neither proves nothing
    assert "assert " in code or shown, f"snippet {index} neither asserts nor shows its output"
    exec(compile(code, f"{GUIDE.name}[snippet {index}]", "exec"), {})
    printed = capsys.readouterr().out
    if shown:
        assert printed == shown
    else:
        assert printed == "", "a snippet that prints must show its output in a ```text block"


def test_every_figure_in_the_guide_exists():
    figures = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", GUIDE.read_text())
    assert figures
    missing = [path for path in figures if not (GUIDE.parent / path).is_file()]
    assert missing == []


def test_guide_has_a_section_for_every_registered_encoding():
    from posenc import available

    text = GUIDE.read_text()
    for name in available():
        assert re.search(rf"^## .*\(`{name}`\)$", text, re.MULTILINE), name
