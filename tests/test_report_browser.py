"""The report in a real browser: headless Chromium opens index.html, every image loads, the console stays clean."""

from __future__ import annotations

import os
import shutil

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


@pytest.mark.skipif(CHROMIUM is None, reason="Chromium is not installed (Debian: apt-get install chromium)")
def test_report_opens_in_headless_chromium_with_every_image_loaded(report_dir):
    sync_api = pytest.importorskip(
        "playwright.sync_api", reason="playwright is not installed (extra: browser)"
    )
    problems: list[str] = []
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.on(
            "console", lambda m: problems.append(f"console {m.type}: {m.text}") if m.type == "error" else None
        )
        page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
        page.on("requestfailed", lambda request: problems.append(f"failed to load {request.url}"))
        page.goto((report_dir / "index.html").as_uri(), wait_until="load")
        images = page.evaluate(
            "Array.from(document.images).map(i => ({src: i.getAttribute('src'), ok: i.complete && i.naturalWidth > 0}))"
        )
        title = page.title()
        tables = page.locator("table").count()
        shot = report_dir / "screenshot.png"
        page.screenshot(path=str(shot), full_page=True)
        browser.close()
    assert title == "posenc report"
    assert tables >= 2  # the verification table and the reasons
    assert len(images) == len(list((report_dir / "figures").glob("*.png")))
    assert images and all(image["ok"] for image in images), [i["src"] for i in images if not i["ok"]]
    assert problems == []
    assert shot.stat().st_size > 10_000
