"""Every Python block in README.md runs as shown.

Blocks that start with `# name.py` are files of a small pytest project, run as one. Blocks
naming an `s3://` URL run against SeaweedFS and DynamoDB Local, pointed at through the
standard AWS environment (`AWS_ENDPOINT_URL_S3`, `AWS_ENDPOINT_URL_DYNAMODB`), the way a
user points boto3 at a local server. Every other block runs twice, with `STASHPOINT_URL`
set to a `local://` folder and to `memory://`. Each runs in a fresh interpreter.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
FILES = [b for b in BLOCKS if re.match(r"# [\w.]+\.py\n", b)]
AWS = [b for b in BLOCKS if b not in FILES and "s3://" in b and "open(" in b]
PLAIN = [b for b in BLOCKS if b not in FILES and b not in AWS]


def _run(code: str, cwd: Path, **env: str) -> None:
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env={**os.environ, **env},
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert result.returncode == 0, f"{code}\n---\n{result.stdout}\n{result.stderr}"


def test_the_readme_has_blocks_of_every_kind() -> None:
    assert FILES and AWS and len(PLAIN) >= 2


@pytest.mark.parametrize("code", PLAIN, ids=[f"block{i}" for i in range(len(PLAIN))])
@pytest.mark.parametrize("scheme", ["local", "memory"])
def test_plain_block_runs(code: str, scheme: str, tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}" if scheme == "local" else "memory://readme"
    _run(code, tmp_path, STASHPOINT_URL=url)


@pytest.mark.parametrize("code", AWS, ids=[f"aws{i}" for i in range(len(AWS))])
def test_aws_block_runs_against_local_servers(
    code: str, tmp_path: Path, seaweedfs: Any, dynamodb_local: Any
) -> None:
    from stashpoint._backends.dynamodb import create_table

    bucket = re.search(r"s3://([a-z0-9.-]+)", code)
    table = re.search(r"dynamodb://([A-Za-z0-9_.-]+)", code)
    assert bucket is not None
    s3 = seaweedfs.client()
    existing = {b["Name"] for b in s3.list_buckets()["Buckets"]}
    if bucket.group(1) not in existing:
        s3.create_bucket(Bucket=bucket.group(1))
        s3.put_bucket_versioning(
            Bucket=bucket.group(1), VersioningConfiguration={"Status": "Enabled"}
        )
    if (
        table is not None
        and table.group(1) not in dynamodb_local.client().list_tables()["TableNames"]
    ):
        create_table(dynamodb_local.client(), table.group(1))
    for _ in range(2):  # a second run continues from what the first stored
        _run(
            code, tmp_path, AWS_ENDPOINT_URL_S3=seaweedfs.endpoint,
            AWS_ENDPOINT_URL_DYNAMODB=dynamodb_local.endpoint,
        )  # fmt: skip


def test_file_blocks_run_as_a_pytest_project(tmp_path: Path) -> None:
    """As a user's project: no conftest, pytest-asyncio in its default (strict) mode."""
    assert not [b for b in FILES if b.startswith("# conftest.py")]
    for block in FILES:
        name = block.split("\n", 1)[0].removeprefix("# ").strip()
        (tmp_path / name).write_text(block)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"\b2 passed\b", result.stdout), result.stdout
