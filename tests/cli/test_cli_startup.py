"""`stashpoint --help` and `--version` load typer alone: no models, no boto3, no rich.

Counted in modules, not seconds, so it holds on a busy machine; the seconds are in
`bench/cli_startup_bench.py`.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

HEAVY = ("boto3", "botocore", "aiobotocore", "pydantic", "rich", "zstandard", "deepdiff")


def _imported(*args: str) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "stashpoint", *args], capture_output=True,
        text=True, timeout=120, check=True, env={**os.environ, "COLUMNS": "80"},
    )  # fmt: skip
    lines = [line.split("|")[-1].strip() for line in result.stderr.splitlines()]
    return {line for line in lines if line and not line.startswith("imported package")}


@pytest.mark.parametrize("args", [("--help",), ("-h",)])
def test_help_loads_no_library_models_nor_boto3(args: tuple[str, ...]) -> None:
    modules = _imported(*args)
    assert "typer" in modules
    assert not {m for m in modules if m.split(".")[0] in HEAVY}
    assert not {m for m in modules if m.startswith(("stashpoint.runs", "stashpoint.stash"))}


def test_version_loads_not_even_typer() -> None:
    modules = _imported("--version")
    assert not {m for m in modules if m.split(".")[0] in (*HEAVY, "typer", "click")}


def test_help_names_the_exit_statuses_and_shows_flags_as_flags() -> None:
    help_text = subprocess.run(
        [sys.executable, "-m", "stashpoint", "--help"], capture_output=True, text=True,
        timeout=120, check=True,
    ).stdout  # fmt: skip
    assert "3 not found" in help_text and "6 configuration" in help_text
    listing = subprocess.run(
        [sys.executable, "-m", "stashpoint", "list", "--help"], capture_output=True,
        text=True, timeout=120, check=True,
    ).stdout  # fmt: skip
    assert "<bool>" not in listing and "--json " in listing and "--wide " in listing
