"""The "Pictures" page draws its diagrams with no network (issue 48, item 6).

The site is built, opened from disk in headless Chromium whose every request beyond the
page goes to a closed port (as offline), and each mermaid block must become an SVG. Before
Mermaid was served with the site, the page showed the diagrams' source.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_cli_report import _browser

ROOT = Path(__file__).resolve().parent.parent
_DRAWN = """
return [...document.querySelectorAll('.mermaid')].filter(
    (el) => el.tagName === 'DIV' && el.getBoundingClientRect().height > 100
).length
"""
"""Diagrams drawn: Material replaces each block's source (a `pre`) by a `div` holding the
drawing in a closed shadow root, so a drawn diagram is a tall `div`."""


def test_the_pictures_page_draws_every_diagram_offline(tmp_path: Path) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    site = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)],
        cwd=ROOT, check=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    blocks = (ROOT / "docs" / "diagrams.md").read_text().count("```mermaid")
    assert blocks >= 3
    browser = _browser()
    try:
        browser.get((site / "diagrams" / "index.html").as_uri())
        drawn = WebDriverWait(browser, 60).until(
            lambda b: n if (n := b.execute_script(_DRAWN)) >= blocks else False
        )
        assert drawn == blocks
        shot = tmp_path / "pictures.png"
        browser.save_screenshot(str(shot))
        assert shot.stat().st_size > 10_000
    finally:
        browser.quit()


@pytest.mark.parametrize("asset", ["mermaid.min.js", "mermaid.LICENSE"])
def test_mermaid_is_served_with_the_site(asset: str) -> None:
    assert (ROOT / "docs" / "assets" / "javascripts" / asset).is_file()
