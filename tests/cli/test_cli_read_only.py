"""Read commands write nothing (issue 25 #4): a typo'd URL creates no folder and no index,
and listings work on a stash this user may only read. On main, `runs list` on a typo'd
`local://` URL created the folder and an SQLite index, and on a read-only stash failed with
"attempt to write a readonly database"."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import stashpoint


def _stashpoint(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stashpoint", *args], capture_output=True, text=True,
        timeout=180, check=False,
    )  # fmt: skip


def test_read_commands_on_a_typod_url_create_nothing_and_say_so(tmp_path: Path) -> None:
    typo = tmp_path / "no-such-stash"
    for command in (["runs", "list"], ["list"], ["runs", "due"], ["threads", "list"]):
        result = _stashpoint(*command, "--url", f"local://{typo}", "--json")
        assert result.returncode == 3, (command, result.stdout, result.stderr)  # not_found
        error = json.loads(result.stdout or result.stderr)["error"]
        assert error["kind"] == "not_found" and str(typo) in error["message"]
        assert not typo.exists(), command
    with stashpoint.open(f"local://{typo}") as stash:
        assert stash.runs.list_runs().items == []
    assert not typo.exists()


def _read_only_mounts() -> bool:
    """Whether this root may bind a folder read-only in a mount namespace of its own."""
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount --bind -o ro /tmp /tmp && ! touch /tmp/.probe"],
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    return probe.returncode == 0


@pytest.fixture
def readable_only(tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    """A stash with one run, and the command prefix of a reader that may only read it.

    As root (which file modes do not stop), the reader runs in a mount namespace where the
    stash is bound read-only; otherwise the stash's modes are made read-only.
    """
    root = tmp_path / "stash"
    with stashpoint.open(f"local://{root}") as stash:
        stash.runs.create_run("etl")
    if os.geteuid() == 0:
        if shutil.which("unshare") is None or not _read_only_mounts():
            pytest.skip("root here cannot make a read-only mount to read through")
        mount = f'mount --bind -o ro {root} {root} && exec "$0" "$@"'
        yield root, ["unshare", "-m", "sh", "-c", mount, sys.executable]
        return
    for path in [root, *root.rglob("*")]:
        os.chmod(path, 0o555 if path.is_dir() else 0o444)
    try:
        yield root, [sys.executable]
    finally:
        for path in [root, *root.rglob("*")]:
            os.chmod(path, 0o755 if path.is_dir() else 0o644)


def test_listings_work_on_a_stash_this_user_may_only_read(
    readable_only: tuple[Path, list[str]],
) -> None:
    root, prefix = readable_only
    url = f"local://{root}"

    def reader(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*prefix, "-m", "stashpoint", *args, "--url", url], capture_output=True,
            text=True, timeout=180, check=False,
        )  # fmt: skip

    listed = reader("runs", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    assert [row["graph_name"] for row in json.loads(listed.stdout)["items"]] == ["etl"]
    checkpoints = reader("list", "--json")
    assert checkpoints.returncode == 0, checkpoints.stderr
    written = reader("runs", "takeover", "nope")
    assert written.returncode != 0 and "Traceback" not in written.stderr
    doctor = reader("doctor", "--json")
    assert doctor.returncode == 1  # it cannot write its probe: a failed check, said so
    checks = {c["name"]: c for c in json.loads(doctor.stdout)["checks"]}
    assert checks["storage"]["status"] == "fail" and "not writable" in checks["storage"]["detail"]
    assert checks["cleanup"]["detail"] == "no probe was written: nothing to remove"
