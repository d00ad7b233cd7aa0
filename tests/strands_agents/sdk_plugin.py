"""A pytest plugin for Strands Agents' own session and storage tests: the backends are ours.

Loaded with `-p sdk_plugin` into a pytest run of Strands' test files (from its published
sdist, `test_sdk_suite.py`). Before Strands' test modules import them, it puts:

- `StashSessionRepository` (on an in-process stash of its own) in the place of the
  `MockedSessionRepository` its session-manager tests drive `RepositorySessionManager` with;
- `StashSessionManager` in the place of `FileSessionManager` (the storage folder names a
  local stash folder in it);
- `StashStorage` in the place of `LocalFileStorage` (its folder names a local stash in
  it), which `SnapshotSessionManager`'s tests keep their snapshots in.

`STASHPOINT_SDK_URL`, when set, puts every one of them on that stash instead (SeaweedFS in
the suite), under a prefix of its own.
"""

from __future__ import annotations

import atexit
import os
import uuid
from pathlib import Path
from typing import Any

import strands.session
import strands.session.file_session_manager
import strands.session.snapshot_session_manager
import strands.storage
import strands.storage.local_file_storage

import stashpoint
from stashpoint.strands_agents import StashSessionManager, StashSessionRepository, StashStorage

_OPENED: list[Any] = []


def _stash(place: str | None) -> Any:
    """Open a stash for `place` (a folder; None: one of its own), closed at exit."""
    shared = os.environ.get("STASHPOINT_SDK_URL")
    if shared:
        base, _, query = shared.partition("?")
        digest = uuid.uuid5(uuid.NAMESPACE_URL, place or uuid.uuid4().hex).hex[:12]
        url = f"{base}-{digest}" + (f"?{query}" if query else "")
    elif place is None:
        url = f"memory://{uuid.uuid4().hex}"
    else:
        url = f"local://{place}/.stash?fsync=false"
    stash = stashpoint.open(url)
    _OPENED.append(stash)
    return stash


@atexit.register
def _close() -> None:
    for stash in _OPENED:
        stash.close()


class StashMockedRepository(StashSessionRepository):
    """`MockedSessionRepository()`'s signature, kept in a stash."""

    def __init__(self) -> None:
        super().__init__(_stash(None))


class StashFileSessionManager(StashSessionManager):
    """`FileSessionManager(session_id, storage_dir)`'s signature, kept in a stash."""

    def __init__(self, session_id: str, storage_dir: str | None = None, **kwargs: Any) -> None:
        self.storage_dir = storage_dir or str(Path.home() / ".strands" / "sessions")
        super().__init__(session_id, _stash(str(Path(self.storage_dir).resolve())), **kwargs)


class StashLocalFileStorage(StashStorage):
    """`LocalFileStorage(directory)`'s signature, kept in a stash."""

    def __init__(self, base_dir: str | Path = "./.strands/", *args: Any, **kwargs: Any) -> None:
        super().__init__(_stash(str(Path(base_dir).resolve())))


try:
    import tests.fixtures.mock_session_repository as mocked

    mocked.MockedSessionRepository = StashMockedRepository  # type: ignore[misc,assignment]
except ImportError:  # not run from the sdist's folder
    pass
strands.session.file_session_manager.FileSessionManager = StashFileSessionManager  # type: ignore[misc]
strands.session.FileSessionManager = StashFileSessionManager  # type: ignore[misc]
strands.storage.LocalFileStorage = StashLocalFileStorage  # type: ignore[misc,assignment]
strands.storage.local_file_storage.LocalFileStorage = StashLocalFileStorage  # type: ignore[misc]
strands.session.snapshot_session_manager.LocalFileStorage = StashLocalFileStorage  # type: ignore[misc,attr-defined]
