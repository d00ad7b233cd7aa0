"""What an install brings: extras, the pytest plugin, classifiers; no pytest at runtime."""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_the_test_extra_registers_the_moto_fixtures_as_a_pytest_plugin() -> None:
    assert {"pytest", "pytest-asyncio", "moto"} <= {
        dep.split(">")[0].split("[")[0] for dep in PROJECT["optional-dependencies"]["test"]
    }
    # Named after the module: a conftest that lists it as well loads it once.
    assert PROJECT["entry-points"]["pytest11"] == {"moto_fixtures.plugin": "moto_fixtures.plugin"}


def test_a_sync_install_needs_no_aiohttp_and_the_async_extra_brings_it() -> None:
    core = {dep.split(">")[0] for dep in PROJECT["dependencies"]}
    assert core == {"boto3", "pydantic", "zstandard"}
    assert any(d.startswith("aiobotocore") for d in PROJECT["optional-dependencies"]["async"])


def test_the_local_backend_is_classified_posix() -> None:
    assert "Operating System :: POSIX" in PROJECT["classifiers"]
    assert "Typing :: Typed" in PROJECT["classifiers"]
    assert (ROOT / "src" / "stashpoint" / "py.typed").exists()


def test_nothing_the_library_imports_at_runtime_imports_pytest() -> None:
    offenders = []
    for path in [*(ROOT / "src").rglob("*.py"), ROOT / "moto_fixtures" / "__init__.py"]:
        for node in ast.walk(ast.parse(path.read_text())):
            names = (
                [a.name for a in node.names] if isinstance(node, ast.Import)
                else [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            )  # fmt: skip
            if any(n.split(".")[0] in ("pytest", "moto", "_pytest") for n in names):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []
