"""posenc.table: one table as data, written as Markdown, HTML and a rich table, each escaping its markup."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from rich.console import Console

from posenc.table import Column, Table, markdown_escape, to_html, to_markdown, to_rich

TRICKY = "a | b <i>x</i> & `c` *d* [e](f) _g_ snake_case \\"


def render(view, width: int = 200) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(view)
    return console.export_text()


def test_markdown_is_a_pipe_table_with_alignment_rules_title_and_notes():
    table = Table(
        [Column("name"), Column("ms", "right"), Column("note", "center")],
        [["clone", "0.30", "floor"], ["posenc", "13.98", ""]],
        title="Timings",
        notes=["median of 15 rounds"],
    )
    assert to_markdown(table) == (
        "Timings\n\n"
        "| name | ms | note |\n"
        "|---|---:|:---:|\n"
        "| clone | 0.30 | floor |\n"
        "| posenc | 13.98 |  |\n\n"
        "median of 15 rounds"
    )


def test_markdown_escapes_cell_borders_html_and_emphasis_but_not_snake_case():
    escaped = markdown_escape(TRICKY)
    assert escaped == ("a \\| b \\<i>x\\</i> \\& \\`c\\` \\*d\\* \\[e](f) \\_g\\_ snake_case \\\\")
    markdown = to_markdown(Table(["a|b"], [[TRICKY]]))
    header, _, row = markdown.splitlines()
    assert header == "| a\\|b |" and row.count(" | ") == 0  # the cell's pipes do not split it


def test_markdown_keeps_a_multi_line_cell_on_its_row():
    assert to_markdown(Table(["x"], [["two\nlines"]])).splitlines()[-1] == "| two lines |"


def test_html_escapes_every_text_and_aligns_by_style():
    table = Table(
        [Column("<name>"), Column("value", "right")],
        [[TRICKY, "1 & 2"]],
        title="a < b",
        notes=["x > y & z"],
    )
    html = to_html(table)
    assert html.startswith("<table><caption>a &lt; b</caption><thead><tr><th>&lt;name&gt;</th>")
    assert '<th style="text-align: right">value</th>' in html
    assert "<td>a | b &lt;i&gt;x&lt;/i&gt; &amp; `c`" in html and "<i>" not in html
    assert '<td style="text-align: right">1 &amp; 2</td>' in html
    assert html.endswith('<tfoot><tr><td colspan="2">x &gt; y &amp; z</td></tr></tfoot></table>')


def test_html_cell_class_marks_chosen_body_cells_only():
    table = Table(["encoding", "bounded"], [["rope", "holds 1"], ["learned", "fails 0.6"]])
    html = to_html(table, cell_class=lambda text: text.split(" ")[0] if " " in text else None)
    assert '<td class="holds">holds 1</td>' in html and '<td class="fails">fails 0.6</td>' in html
    assert "<td>rope</td>" in html and "<th>bounded</th>" in html


def test_rich_table_shows_cells_literally_with_alignment_title_and_notes():
    table = Table(
        [Column("name"), Column("ms", "right")],
        [["[red]not markup[/red]", "1.5"], ["x", "100.25"]],
        title="Timings [b]",
        notes=["note one", "note [two]"],
    )
    view = to_rich(table, cell_style=lambda text: "green" if text == "x" else None)
    assert [column.justify for column in view.columns] == ["left", "right"]
    text = render(view)
    assert "[red]not markup[/red]" in text and "Timings [b]" in text
    assert "note one" in text and "note [two]" in text
    assert "│    1.5 │" in text  # right-aligned under the wider 100.25


def test_empty_table_renders_its_headers_in_every_format():
    table = Table([Column("a"), Column("b", "right")])
    assert to_markdown(table) == "| a | b |\n|---|---:|"
    assert "<tbody></tbody>" in to_html(table) and "<caption>" not in to_html(table)
    assert "a" in render(to_rich(table)) and to_rich(table).row_count == 0


def test_table_refuses_no_columns_ragged_rows_unformatted_cells_and_unknown_alignment():
    with pytest.raises(ValueError, match="a table needs at least one column, got none"):
        Table([])
    with pytest.raises(ValueError, match=r"row 1 has 1 cells for 2 columns: \('x',\)"):
        Table(["a", "b"], [["1", "2"], ["x"]])
    with pytest.raises(TypeError, match="cells must be formatted strings, got 1.5 in row 0"):
        Table(["a"], [[1.5]])
    with pytest.raises(ValueError, match="align must be one of left, right, center; got 'justify'"):
        Column("a", "justify")


def test_table_is_immutable_data_with_columns_from_strings():
    table = Table(["a", Column("b", "right")], [["1", "2"]])
    assert table.columns == (Column("a", "left"), Column("b", "right")) and table.rows == (("1", "2"),)
    assert table == Table(["a", Column("b", "right")], [("1", "2")])
    with pytest.raises(AttributeError):
        table.title = "changed"


def test_table_module_imports_nothing_of_posenc():
    source = Path(__file__).parents[1] / "src" / "posenc" / "table.py"
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(ast.parse(source.read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in getattr(node, "names", [None])
    ]
    assert not [name for name in imported if name and name.startswith("posenc")]
