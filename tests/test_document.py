"""Documents as data: each block written once as Markdown and once as HTML, escaped, code spans kept."""

from __future__ import annotations

from posenc.document import Bullets, Details, Heading, Image, Paragraph, to_html, to_markdown
from posenc.table import Column, Table


def test_markdown_writes_each_block_in_order_with_code_spans_kept():
    blocks = [
        Heading(2, "Seed 004's table, `measured`"),
        Paragraph("ratio r = bpb(4L)/bpb(L) for `alibi` and seeds [0, 1]"),
        Bullets(("`lm`: L=16", "corpus: 3 files")),
        Table([Column("name"), Column("value", "right")], [["rope", "1.05"]]),
        Image("figures/a.png", "A figure", "What to see."),
    ]
    assert to_markdown(blocks) == (
        "## Seed 004's table, `measured`\n\n"
        "ratio r = bpb(4L)/bpb(L) for `alibi` and seeds [0, 1]\n\n"
        "- `lm`: L=16\n- corpus: 3 files\n\n"
        "| name | value |\n|---|---:|\n| rope | 1.05 |\n\n"
        "![A figure](figures/a.png)\n\nWhat to see.\n"
    )


def test_markdown_escapes_what_running_text_would_read_as_markup():
    text = to_markdown([Paragraph("a * b <tag> & _edge_ snake_case \\ `x * y`")])
    assert text == "a \\* b \\<tag> \\& \\_edge\\_ snake_case \\\\ `x * y`\n"


def test_html_escapes_everything_and_renders_code_spans():
    html = to_html(
        [
            Heading(3, "<b>", anchor="lab"),
            Paragraph("1 < 2 & `a<b>`"),
            Bullets(("x & y",)),
            Image('p"q.png', "t<", "c & `d`"),
        ]
    )
    assert '<h3 id="lab">&lt;b&gt;</h3>' in html
    assert "<p>1 &lt; 2 &amp; <code>a&lt;b&gt;</code></p>" in html
    assert "<ul><li>x &amp; y</li></ul>" in html
    assert '<img src="p&quot;q.png" alt="t&lt;">' in html and "c &amp; <code>d</code>" in html


def test_tables_go_through_the_table_writer_with_the_cell_class():
    table = Table(["encoding", "bounded"], [["alibi", "fails 4.01"], ["rope", "holds 0"]])
    html = to_html([table], cell_class=lambda text: text.split(" ")[0] if " " in text else None)
    assert '<td class="fails">fails 4.01</td>' in html and '<td class="holds">holds 0</td>' in html
    assert "<td>alibi</td>" in html


def test_html_links_a_figure_to_its_file_and_gives_its_size():
    html = to_html([Image("figures/a.png", "A", "c", width=990, height=550)])
    assert html.startswith(
        '<figure><a href="figures/a.png"><img src="figures/a.png" alt="A" width="990" height="550"></a>'
    )


def test_html_puts_every_table_in_a_box_of_its_own_that_scrolls():
    html = to_html([Table(["a"], [["1"]]), Details("More", (Table(["b"], [["2"]]),))])
    assert html.count('<div class="table-scroll" role="region" tabindex="0"><table>') == 2


def test_details_are_collapsed_in_html_and_a_paragraph_then_their_blocks_in_markdown():
    details = Details("Run settings: `lm`", (Bullets(("`lm`: L=16",)),))
    assert to_html([details]) == (
        "<details><summary>Run settings: <code>lm</code></summary><ul><li><code>lm</code>: L=16</li></ul></details>"
    )
    assert to_markdown([details, Paragraph("next")]) == "Run settings: `lm`\n\n- `lm`: L=16\n\nnext\n"


def test_html_links_web_addresses_in_running_text_but_not_the_punctuation_after_them():
    html = to_html(
        [Paragraph("See https://arxiv.org/abs/2104.09864), or https://a.org/b. Then `https://c`.")]
    )
    assert (
        '<a href="https://arxiv.org/abs/2104.09864">https://arxiv.org/abs/2104.09864</a>), or '
        '<a href="https://a.org/b">https://a.org/b</a>. Then <code>https://c</code>.'
    ) in html
