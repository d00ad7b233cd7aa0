"""A LangGraph thread purged with `reusable=True` lives again (issue 47, item 2).

The next put after the purge starts a new life right after the tombstone: its checkpoint
names the version it is stored at, so every read (this saver, a new process) finds it, and
its large values carry the new life, so neither the purge's resumption nor `gc` takes them.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langgraph.checkpoint.base import create_checkpoint, empty_checkpoint

import stashpoint
from stashpoint.langgraph import StashpointSaver
from tests import servers
from tests.purging import holding

OLD = "oldthread-91ce"
BIG = "z" * (300 * 1024)  # above the saver's large-value bound: stored as an object


@pytest.fixture(params=["local", "seaweed-versioned", "seaweed-unversioned"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "local":
        return f"local://{tmp_path / 'stash'}"
    seaweedfs = request.getfixturevalue("seaweedfs")
    bucket = (
        servers.VERSIONED_BUCKET
        if request.param == "seaweed-versioned"
        else servers.UNVERSIONED_BUCKET
    )
    return str(seaweedfs.url(f"t-{uuid.uuid4().hex}", bucket))


def _put(saver: StashpointSaver, config: Any, value: str, step: int) -> Any:
    checkpoint = create_checkpoint(empty_checkpoint(), None, step)
    checkpoint["channel_values"] = {"note": value}
    checkpoint["channel_versions"] = {"note": f"{step + 1:032}"}
    return saver.put(
        config, checkpoint, {"source": "loop", "step": step}, {"note": f"{step + 1:032}"}
    )


def test_a_put_after_a_reusable_purge_reads_back_from_any_process(url: str) -> None:
    base = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    with stashpoint.open(url) as stash, stashpoint.open(url) as other:
        saver = StashpointSaver(stash)
        first = _put(saver, base, OLD + " 1", 0)
        stale = _put(saver, first, OLD + " 2" + BIG, 1)
        other.purge(thread="t1", reusable=True)
        # The saver still holds the purged life's head and the caller its config.
        new = _put(saver, stale, "new life" + BIG, 2)
        assert saver.get_tuple(base).checkpoint["channel_values"]["note"] == "new life" + BIG
        assert saver.get_tuple(new).config["configurable"]["checkpoint_id"] == (
            new["configurable"]["checkpoint_id"]
        )
    with stashpoint.open(url) as cold:
        saver = StashpointSaver(cold)
        assert saver.get_tuple(base).checkpoint["channel_values"]["note"] == "new life" + BIG
        cold.collect_garbage(dry_run=False, min_age=timedelta(0))
        cold.resume_purges()
        assert holding(cold, OLD) == []
    with stashpoint.open(url) as cold:
        tuples = list(StashpointSaver(cold).list(base))
        assert [t.checkpoint["channel_values"]["note"] for t in tuples] == ["new life" + BIG]
