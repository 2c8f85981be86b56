"""The report in a real browser: headless Chromium opens index.html at a phone's, a laptop's and a wide
screen's width. The page never scrolls sideways, every image loads and opens at full size on a click,
figures are shown at the size they are drawn where the window allows, no Markdown shows as text, a
table of contents leads the page, and the lab's wide tables scroll inside their boxes with the run
settings collapsed."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

pytestmark = pytest.mark.browser

CHROMIUM = os.environ.get("POSENC_CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
#: The flags a root user in a sandbox without network needs (no sandbox, no GPU, no background traffic).
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WIDTHS = (420, 1280, 1700)
RECORDS = Path(__file__).parents[1] / "docs" / "lab" / "cpu-records.sqlite"

#: What the page reports about itself once loaded.
LOOK = """() => ({
  scrollWidth: document.documentElement.scrollWidth,
  text: document.body.innerText,
  contents: document.querySelectorAll('nav.toc a[href^="#"]').length,
  images: Array.from(document.images).map(i => ({
    src: i.getAttribute('src'),
    ok: i.complete && i.naturalWidth > 0,
    natural: i.naturalWidth,
    shown: i.getBoundingClientRect().width,
    link: i.parentElement.tagName === 'A' ? i.parentElement.getAttribute('href') : null,
  })),
  details: document.querySelectorAll('details').length,
  open: document.querySelectorAll('details[open]').length,
  boxes: Array.from(document.querySelectorAll('.table-scroll')).map(b => b.scrollWidth > b.clientWidth),
})"""
#: Markdown that a reader would see as characters: code ticks, emphasis, escapes, headings, and links
#: ``[text](target)`` to an address or a file (not the notation ``[sin, cos](a + b)`` of a reason).
MARKDOWN = re.compile(
    r"`|\*\*|\\[_*<&|\\]|^#{1,6} |\[[^\]\n]+\]\((?:[a-z]+:|#|[^)\s]*[/.])[^)\s]*\)", re.MULTILINE
)


@pytest.fixture(scope="module")
def browser():
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium)")
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (extra: browser)"
    )
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


@pytest.fixture(scope="module")
def lab_page(tmp_path_factory) -> Path:
    """The report's lab section alone, from the committed cpu records (its tables, not its figures)."""
    from posenc.document import Heading
    from posenc.lab.report import TITLE, comparison_blocks
    from posenc.report import _header, render_html

    page = tmp_path_factory.mktemp("lab-page") / "index.html"
    blocks = [Heading(2, TITLE, "lab"), *comparison_blocks(RECORDS, preset="cpu")]
    page.write_text(render_html(_header(), blocks), encoding="utf-8")
    return page


def _look(browser, page: Path, width: int) -> dict:
    """Open ``page`` in a window ``width`` px wide; what it shows, and what went wrong loading it."""
    problems: list[str] = []
    tab = browser.new_page(viewport={"width": width, "height": 900})
    tab.on("console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    tab.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    tab.on("requestfailed", lambda request: problems.append(f"failed to load {request.url}"))
    tab.goto(page.as_uri(), wait_until="load")
    look = tab.evaluate(LOOK) | {"title": tab.title(), "problems": problems}
    tab.close()
    return look


@pytest.mark.parametrize("width", WIDTHS)
def test_the_report_reads_at_every_width(report_dir, browser, width):
    look = _look(browser, report_dir / "index.html", width)
    assert look["title"] == "posenc report" and look["problems"] == []
    # the row of section links and the wide tables widened the page to ~1600 px, even on a phone
    assert look["scrollWidth"] <= width
    assert look["contents"] >= 4 + len(list((report_dir / "figures").glob("*.png"))) // 10
    images = look["images"]
    assert len(images) == len(list((report_dir / "figures").glob("*.png")))
    assert [i["src"] for i in images if not i["ok"]] == []
    assert [i["src"] for i in images if i["link"] != i["src"]] == []  # a click opens it at full size
    assert MARKDOWN.findall(look["text"]) == []
    if width >= 1280:  # drawn at ~990 px, the figures were shown at ~560 px: labels of ~5 px
        smallest = 1.0 if width >= 1700 else 0.9
        assert [i["src"] for i in images if i["shown"] < smallest * i["natural"] - 0.5] == []


@pytest.mark.parametrize("width", (420, 1280))
def test_the_lab_tables_scroll_in_their_boxes_with_the_settings_collapsed(lab_page, browser, width):
    look = _look(browser, lab_page, width)
    assert look["problems"] == [] and look["scrollWidth"] <= width
    if width == 420:  # tables wider than the window scroll inside their box, not the page
        assert any(look["boxes"])
    assert look["details"] >= 1 and look["open"] == 0
    assert "warm-up steps" not in look["text"] and "Run settings" in look["text"]
    assert MARKDOWN.findall(look["text"]) == []
