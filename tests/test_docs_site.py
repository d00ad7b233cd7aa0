"""Every Python block of the docs site (`docs/`) runs as shown, as the README's do."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
BLOCKS = [
    (page.relative_to(DOCS).as_posix(), block)
    for page in sorted(DOCS.rglob("*.md"))
    for block in re.findall(r"```python\n(.*?)```", page.read_text(), flags=re.S)
]


def test_the_site_has_blocks_on_its_getting_started_pages() -> None:
    pages = {page for page, _ in BLOCKS}
    assert {"start/lambda-agent.md", "start/spot-batch.md", "start/archive.md"} <= pages
    assert "index.md" in pages


@pytest.mark.parametrize(
    ("page", "code"), BLOCKS, ids=[f"{p}#{i}" for i, (p, _) in enumerate(BLOCKS)]
)
def test_block_runs(page: str, code: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=dict(os.environ),
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"{page}\n{code}\n---\n{result.stdout}\n{result.stderr}"


def test_every_page_is_in_the_nav_and_every_command_in_the_reference() -> None:
    config = (DOCS.parent / "mkdocs.yml").read_text()
    for page in DOCS.rglob("*.md"):
        assert page.relative_to(DOCS).as_posix() in config, page
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "cli_reference", DOCS / "hooks" / "cli_reference.py"
    )
    assert spec is not None and spec.loader is not None
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    reference = hook.on_page_markdown(f"x {hook.MARKER}")
    for command in ("stashpoint runs list", "stashpoint threads show", "stashpoint gc"):
        assert f"## `{command}`" in reference
