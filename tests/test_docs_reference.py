"""The API reference lists every public method (issue 48, item 6).

`Store`, `RunStore` and `LogStore` define their operations on private bases (`_StoreApi`,
...): without inherited members the reference showed none of them. The site is built here
and each public method of each public class it documents is looked for by name.
"""

from __future__ import annotations

import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    site = tmp_path_factory.mktemp("site")
    subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "-d", str(site)],
        cwd=ROOT, check=True, timeout=300, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )  # fmt: skip
    return (site / "api" / "index.html").read_text()


@pytest.mark.parametrize(
    "path",
    [
        "stashpoint.stores.store.Store",
        "stashpoint.logs.store.LogStore",
        "stashpoint.runs.store.RunStore",
        "stashpoint.stash.Stash",
        "stashpoint.admin.Admin",
    ],
)
def test_every_public_method_of_a_documented_class_is_in_the_reference(
    reference: str, path: str
) -> None:
    import importlib

    module, _, name = path.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    assert f'id="{path}"' in reference, f"{path} is not in the reference"
    methods = [
        member
        for member, value in inspect.getmembers(cls)
        if not member.startswith("_") and callable(value) and getattr(value, "__doc__", None)
    ]
    assert methods
    missing = [m for m in methods if f'id="{path}.{m}"' not in reference]
    assert missing == [], missing
