"""The guide's snippets run, and every figure it shows exists in docs/figures."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

GUIDE = Path(__file__).parents[1] / "docs" / "guide.md"
SNIPPETS = re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.DOTALL)


@pytest.mark.parametrize("index", range(len(SNIPPETS)))
def test_guide_snippet_runs(index, capsys):
    exec(compile(SNIPPETS[index], f"{GUIDE.name}[snippet {index}]", "exec"), {})


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
