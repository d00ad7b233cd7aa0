"""A pytest plugin for the OpenAI Agents SDK's own session tests: `SQLiteSession` is ours.

Loaded with `-p tests.openai_agents.sdk_plugin` into a pytest run of the SDK's test files
(from its published sdist, `test_sdk_suite.py`): before the SDK's test modules import
`SQLiteSession`, the name is replaced with a `StashSession` on a stash of its own, made
from the same arguments (the SQLite file's path names a local stash folder beside it;
`:memory:` an in-process stash of its own). `STASHPOINT_SDK_URL`, when set, puts every
session on that stash instead (SeaweedFS in the suite), under a prefix of its own.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import agents
import agents.memory

import stashpoint
from stashpoint.openai_agents import StashSession


class StashSQLiteSession(StashSession):
    """`SQLiteSession(session_id, db_path, ...)`'s signature, kept in a stash."""

    def __init__(
        self, session_id: str, db_path: str | Path = ":memory:", *args: Any, **kwargs: Any
    ) -> None:
        shared = os.environ.get("STASHPOINT_SDK_URL")
        if shared:
            base, _, query = shared.partition("?")
            place = str(db_path) if str(db_path) != ":memory:" else uuid.uuid4().hex
            digest = uuid.uuid5(uuid.NAMESPACE_URL, place).hex[:12]
            url = f"{base}-{digest}" + (f"?{query}" if query else "")
        elif str(db_path) == ":memory:":
            url = f"memory://{uuid.uuid4().hex}"
        else:
            url = f"local://{db_path}.stash?fsync=false"
        self._own = stashpoint.open(url)
        super().__init__(session_id, self._own, session_settings=kwargs.get("session_settings"))

    def close(self) -> None:
        """Close the stash this session opened."""
        self._own.close()


agents.SQLiteSession = StashSQLiteSession  # type: ignore[misc,assignment]
agents.memory.SQLiteSession = StashSQLiteSession  # type: ignore[misc,assignment]
