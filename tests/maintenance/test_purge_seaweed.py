"""Purge on a real server (SeaweedFS, versioned): writers racing a purge, and a 1,000-turn
transcript erased with every version accounted for in its receipt."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import pytest

import stashpoint
from examples import fake_model
from stashpoint.agent import AgentCheckpoint, AgentRunner, Message, TurnResult
from tests.purging import bodies, holding, pairs, plain, replay, versions

pytestmark = pytest.mark.timeout(600)


def test_writers_racing_a_purge_are_told_purged_and_nothing_they_wrote_survives(
    s3_seaweed_url: tuple[str, dict[str, Any]],
) -> None:
    url, options = s3_seaweed_url
    with stashpoint.open(url, **options) as stash:
        head = None
        for turn in range(20):
            head = stash.logs.append("t1", [{"text": f"wsecret base {turn}"}], after=head)
        stash.logs.append("t2", [{"text": "kept"}], after=None)
        started = threading.Event()
        acked: list[int] = []
        endings: dict[int, str] = {}
        lock = threading.Lock()

        def writer(number: int) -> None:
            known = stash.logs.head("t1")
            for turn in range(200):  # bounded: the purge ends every writer long before
                try:
                    known = stash.logs.append(
                        "t1", [{"text": f"wsecret w{number} {turn}"}], after=known
                    )
                except stashpoint.CheckpointConflict:
                    try:
                        known = stash.logs.head("t1")
                    except stashpoint.Purged:
                        endings[number] = "purged"
                        return
                    continue
                except stashpoint.Purged:
                    endings[number] = "purged"
                    return
                with lock:
                    acked.append(known.version)
                    if len(acked) >= 12:
                        started.set()
            endings[number] = "ran out"

        threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        assert started.wait(120)
        receipt = stash.admin.purge(log="t1")
        for thread in threads:
            thread.join(120)
        assert endings == dict.fromkeys(range(4), "purged")
        assert receipt.verified and receipt.status == "complete"
        # Every acknowledged append was below the tombstone (kept: a marker per version
        # below it, and itself): what a writer was told it saved was purged with the rest.
        tombstone = receipt.kept - 1
        assert acked and max(acked) < tombstone
        assert holding(stash, "wsecret") == []
        assert [r for e in stash.logs.entries("t2") for r in e.records] == [{"text": "kept"}]
        with pytest.raises(stashpoint.Purged):
            stash.logs.head("t1")


def _transcript(stash: Any, agent_id: str, turns: int, text: str) -> list[Message]:
    runner = AgentRunner(AgentCheckpoint.existing(agent_id, stash.checkpoints))
    cursor, state = runner.start(
        agent="a",
        model=fake_model.MODEL,
        transcript=[Message(role="user", content=f"{text} hello")],
    )
    for _ in range(turns):
        state = runner.run_turn(
            cursor,
            state,
            lambda s, n: TurnResult(messages=[Message(role="assistant", content=f"{text} {n}")]),
        )
    return state.transcript


def test_a_1000_turn_transcript_is_erased_version_by_version_and_others_load(
    s3_seaweed_url: tuple[str, dict[str, Any]],
) -> None:
    url, options = s3_seaweed_url
    with stashpoint.open(f"memory://thousand-{uuid.uuid4().hex}") as written:
        # Written turn by turn, then stored on SeaweedFS version by version, oldest first.
        _transcript(written, "gone", 1000, "erase-me")
        kept = {name: _transcript(written, name, 5, f"keep-{name}") for name in ("a", "b")}
        with stashpoint.open(url, **options) as stash:
            replay(written, stash)
    with stashpoint.open(url, **options) as stash:
        mine = ("agents/gone/", "sealed/agents/gone/")
        before = {v for prefix in mine for v in pairs(versions(stash, prefix))}
        assert len(before) > 1000

        receipt = stash.admin.purge(agent="gone")

        assert receipt.status == "complete" and receipt.verified
        after = [v for prefix in mine for v in versions(stash, prefix)]
        assert {(v.key, v.version_id) for v in receipt.removed} == before - pairs(after)
        # No version in the bucket holds a word of it; what stays under its keys is one
        # payload-free marker per version and the tombstone, nothing else (one read of all).
        logs = stash.log_steps("agents")
        from stashpoint.steps import run_sync

        mine_after = pairs(after)
        for version, info in bodies(stash, versions(stash)):
            assert info is not None and b"erase-me" not in plain(info.body), version.key
            if (version.key, version.version_id) not in mine_after:
                continue
            number = int(version.key.rsplit("/", 1)[1])
            assert version.is_latest and info is not None
            assert number == receipt.kept - 1 or run_sync(
                logs.holds_marker("gone", number, info), stash.driver
            )
        with pytest.raises(stashpoint.Purged):
            AgentCheckpoint.existing("gone", stash.checkpoints).load()
        for name, transcript in kept.items():
            _, state = AgentCheckpoint.existing(name, stash.checkpoints).load()
            assert state.transcript == transcript


def test_a_purge_through_the_fault_proxy_finishes_on_resume_and_loses_nothing_else(
    seaweedfs: Any,
) -> None:
    from botocore.config import Config

    from tests.faultproxy import FaultPlan, FaultProxy

    prefix = f"t-{uuid.uuid4().hex}"
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        head = None
        for turn in range(150):
            head = clean.logs.append("t1", [{"text": f"fsecret {turn}"}], after=head)
        clean.logs.append("t2", [{"text": "kept"}], after=None)
    plan = FaultPlan(
        {"drop_response": 0.06, "drop_request": 0.04, "slowdown": 0.04, "conflict": 0.04}
    )
    config = Config(
        read_timeout=2, connect_timeout=2, retries={"mode": "standard", "max_attempts": 3}
    )
    receipt = None
    failures: list[str] = []
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        mine = ("logs/t1/", "sealed/logs/t1/")
        before = {v for p in mine for v in pairs(versions(clean, p))}
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        with stashpoint.open(url, client_config=config) as stash:
            for _ in range(20):  # bounded: each try gets further
                try:
                    done = stash.admin.resume_purges()
                    receipt = done[0] if done else stash.admin.purge(log="t1")
                    break
                except stashpoint.Purged:
                    [receipt] = [
                        stash.admin.purge_receipt(p) for p in stash.logs_in("purges").list_ids()
                    ]
                    break
                except stashpoint.StashpointError as exc:
                    failures.append(exc.kind.value)
    assert set(failures) <= {"storage_unavailable", "conflict"}, failures
    assert receipt is not None
    assert receipt.verified
    assert sum(plan.injected.values()) > 0
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        after = {v for p in mine for v in pairs(versions(clean, p))}
        # Every version removed is in the receipt, whichever try removed it.
        assert {(v.key, v.version_id) for v in receipt.removed} >= before - after
        assert holding(clean, "fsecret") == []
        assert [r for e in clean.logs.entries("t2") for r in e.records] == [{"text": "kept"}]
        with pytest.raises(stashpoint.Purged):
            clean.logs.head("t1")
