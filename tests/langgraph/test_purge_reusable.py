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
from tests.purging import holding

OLD = "oldthread-91ce"
BIG = "z" * (300 * 1024)  # above the saver's large-value bound: stored as an object


def _put(saver: StashpointSaver, config: Any, value: str, step: int) -> Any:
    checkpoint = create_checkpoint(empty_checkpoint(), None, step)
    checkpoint["channel_values"] = {"note": value}
    checkpoint["channel_versions"] = {"note": f"{step + 1:032}"}
    return saver.put(
        config, checkpoint, {"source": "loop", "step": step}, {"note": f"{step + 1:032}"}
    )


def test_a_put_after_a_reusable_purge_reads_back_from_any_process(erasure_url: str) -> None:
    url = erasure_url
    base = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    with stashpoint.open(url) as stash, stashpoint.open(url) as other:
        saver = StashpointSaver(stash)
        first = _put(saver, base, OLD + " 1", 0)
        stale = _put(saver, first, OLD + " 2" + BIG, 1)
        other.admin.purge(thread="t1", reusable=True)
        # The saver still holds the purged life's head and the caller its config.
        new = _put(saver, stale, "new life" + BIG, 2)
        assert saver.get_tuple(base).checkpoint["channel_values"]["note"] == "new life" + BIG
        assert (
            saver.get_tuple(new).config["configurable"]["checkpoint_id"]
            == (new["configurable"]["checkpoint_id"])
        )
    with stashpoint.open(url) as cold:
        saver = StashpointSaver(cold)
        assert saver.get_tuple(base).checkpoint["channel_values"]["note"] == "new life" + BIG
        cold.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
        cold.admin.resume_purges()
        assert holding(cold, OLD) == []
    with stashpoint.open(url) as cold:
        tuples = list(StashpointSaver(cold).list(base))
        assert [t.checkpoint["channel_values"]["note"] for t in tuples] == ["new life" + BIG]


@pytest.mark.parametrize("after", [False, True])
def test_a_reusable_thread_purge_crashed_at_any_request_leaves_the_next_put_readable(
    tmp_path: Path, after: bool
) -> None:
    from tests.crashes import Crash, crash_at

    base = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    for step in range(200):  # bounded: the purge makes fewer requests than this
        url = f"local://{tmp_path / f's{step}-{after}'}"
        with stashpoint.open(url) as stash:
            saver = StashpointSaver(stash)
            stale = _put(saver, _put(saver, base, OLD + " 1", 0), OLD + " 2" + BIG, 1)
            with crash_at(stash, step, after) as calls:
                try:
                    stash.admin.purge(thread="t1", reusable=True)
                    crashed = False
                except Crash:
                    crashed = True
        with stashpoint.open(url) as look:  # did the tombstone land before the crash?
            ended = StashpointSaver(look).get_tuple(base) is None
            opened = bool(look.logs_in("purges").list_ids())
        with stashpoint.open(url) as stash:
            _put(StashpointSaver(stash), stale, "new life" + BIG, 2)  # a stale config
        with stashpoint.open(url) as cold:
            cold.admin.resume_purges()
            cold.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
            latest = StashpointSaver(cold).get_tuple(base)
            if ended or not opened:
                # A new life after the tombstone, or no purge at all: the put is there.
                assert latest is not None, (step, after)
                assert latest.checkpoint["channel_values"]["note"] == "new life" + BIG
            else:
                # Before the tombstone the put joined the life the purge then erased.
                assert latest is None, (step, after)
            if opened:
                assert holding(cold, OLD) == [], (step, after)
        if not crashed:
            assert step >= len(calls)
            break
    else:
        pytest.fail("the purge never finished")


def test_a_reusable_thread_purge_and_the_next_put_through_the_fault_proxy(
    seaweedfs: Any,
) -> None:
    from tests.faultproxy import FaultProxy, everyday_faults

    prefix = f"t-{uuid.uuid4().hex}"
    base = {"configurable": {"thread_id": "t1", "checkpoint_ns": ""}}
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        saver = StashpointSaver(clean)
        stale = _put(saver, _put(saver, base, OLD + " 1", 0), OLD + " 2" + BIG, 1)
    plan, config = everyday_faults()
    failures: list[str] = []
    stored = False
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        with stashpoint.open(url, client_config=config) as stash:
            saver = StashpointSaver(stash)
            for _ in range(20):  # bounded: each try gets further
                try:
                    if not stash.admin.resume_purges():
                        stash.admin.purge(thread="t1", reusable=True)
                    break
                except stashpoint.StashpointError as exc:
                    failures.append(exc.kind.value)
            for _ in range(20):
                try:
                    _put(saver, stale, "new life" + BIG, 2)
                    stored = True
                    break
                except stashpoint.StashpointError as exc:
                    failures.append(exc.kind.value)
            for _ in range(20):
                try:
                    stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
                    break
                except stashpoint.StashpointError as exc:
                    failures.append(exc.kind.value)
    assert set(failures) <= {"storage_unavailable", "conflict"}, failures
    assert stored and sum(plan.injected.values()) > 0
    with stashpoint.open(seaweedfs.url(prefix)) as cold:
        latest = StashpointSaver(cold).get_tuple(base)
        assert latest is not None
        assert latest.checkpoint["channel_values"]["note"] == "new life" + BIG
        assert holding(cold, OLD) == []
