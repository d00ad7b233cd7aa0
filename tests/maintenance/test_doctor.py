"""`stashpoint doctor` says true things: on SQLite, on a read-only folder, and leaves nothing."""

from __future__ import annotations

import errno
import os
from pathlib import Path
from typing import Any

import stashpoint
from stashpoint import Envelope
from stashpoint.maintenance.doctor import Status


def _tree(root: Path) -> set[str]:
    # SQLite's write-ahead files come and go with connections: not the doctor's doing.
    return {
        str(p.relative_to(root)) for p in root.rglob("*") if not p.name.endswith(("-wal", "-shm"))
    }


def test_doctor_on_the_local_default_leaves_nothing_behind(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with stashpoint.open(f"local://{root}") as stash:
        stash.checkpoints.compare_and_swap(Envelope.initial("a", None, "k", 1, {}), None)
        stash.runs.create_run("g")
        before = _tree(root)
        checks = stash.admin.doctor()
    assert all(c.status is not Status.FAIL for c in checks), checks
    assert _tree(root) == before


def test_doctor_does_not_claim_gsis_or_ttl_for_sqlite(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path / 's'}") as stash:
        checks = {c.name: c for c in stash.admin.doctor()}
    assert "index GSIs" not in checks and "index TTL" not in checks
    assert "SQLite" in checks["index"].detail


def test_doctor_on_a_read_only_folder_says_so_in_words(tmp_path: Path) -> None:
    from stashpoint._backends import local

    root = tmp_path / "s"
    with stashpoint.open(f"local://{root}") as stash:
        stash.checkpoints.compare_and_swap(Envelope.initial("a", None, "k", 1, {}), None)
    real_open = os.open

    def refusing(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *args, **kwargs)

    local.os.open = refusing  # type: ignore[assignment]
    try:
        with stashpoint.open(f"local://{root}?index=none") as stash:
            checks = stash.admin.doctor()
    finally:
        local.os.open = real_open  # type: ignore[assignment]
    storage = [c for c in checks if c.status is Status.FAIL]
    assert storage and "not writable" in storage[0].detail
    assert all("WriteResult(" not in c.detail for c in checks)


def test_doctor_names_missing_gsis_and_what_to_do() -> None:
    from stashpoint.index.requests import IndexDescription
    from stashpoint.index.schema import SECONDARY_INDEXES
    from stashpoint.maintenance.doctor import _index
    from stashpoint.steps import run_sync

    def described(names: tuple[str, ...]) -> dict[str, Any]:
        answer = IndexDescription(True, names, "expires_at")
        return {c.name: c for c in run_sync(_index(), lambda request: answer)}

    old = described(("by_graph", "by_status", "by_namespace"))  # a pre-release layout
    assert old["index GSIs"].status is Status.FAIL
    detail = old["index GSIs"].detail
    assert "runs_by_status" in detail and "infra/" in detail and "reindex" in detail
    new = described(tuple(g.name for g in SECONDARY_INDEXES))
    assert new["index GSIs"].status is Status.PASS
