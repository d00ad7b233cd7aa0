"""`stashpoint repair` loses nothing: a crash at every request, the fault proxy on SeaweedFS,
and `kill -9` of a real process mid-repair. Whatever happens, every object above the gap
is either still at its key or, byte for byte, in quarantine; every acknowledged entry
below the gap stays; a repair run again finishes the job, and writers go on after it."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from botocore.config import Config

import stashpoint
from stashpoint import StorageUnavailable
from stashpoint.stores.objects import GetObject, ListKeys, PutObject
from tests import servers
from tests.crashes import Crash, crash_at
from tests.faultproxy import FaultPlan, FaultProxy
from tests.kills import kill_after_lines

GENUINE = 11
"""Versions 0-10 were acknowledged; objects are planted above version 11 (the gap)."""


def _wedge(stash: Any, planted: int = 3) -> dict[str, bytes]:
    """Append the genuine versions, plant `planted` objects above the gap; their bytes."""
    head = None
    for v in range(GENUINE):
        head = stash.logs.append("job", [f"r{v}"], after=head, state={"v": v})
    source = stash.layout.key("logs", f"job/{3:020d}")
    body = stash.driver(GetObject(source)).body
    found: dict[str, bytes] = {}
    for n in range(planted):
        key = stash.layout.key("logs", f"job/{50 + n:020d}")
        marked = body + b" " * (n + 1)  # each planted object holds other bytes
        stash.driver(PutObject(key, marked, None))
        found[key] = marked
    return found


def _quarantined(stash: Any) -> list[bytes]:
    prefix = stash.layout.namespace_prefix("quarantine")
    keys: list[str] = []
    token = None
    while True:
        page = stash.driver(ListKeys(prefix, token))
        keys += page.keys
        token = page.next_token
        if token is None:
            break
    return [stash.driver(GetObject(key)).body for key in keys]


def _nothing_lost(stash: Any, planted: dict[str, bytes]) -> None:
    """Each planted object at its key or in quarantine; the genuine entries all there."""
    quarantined = _quarantined(stash)
    for key, body in planted.items():
        at_key = stash.driver(GetObject(key))
        assert (at_key is not None and at_key.body == body) or body in quarantined, key
    listing = [k for k in stash.driver(ListKeys(stash.layout.key("logs", "job/"))).keys]
    for v in range(GENUINE):
        assert stash.layout.key("logs", f"job/{v:020d}") in listing


def _finish(stash: Any, planted: dict[str, bytes]) -> None:
    """Repair again until done; then the log reads and goes on."""
    report = stash.admin.repair_log("logs", "job", dry_run=False)
    assert report.kept == ()
    _nothing_lost(stash, planted)
    for key, body in planted.items():
        assert stash.driver(GetObject(key)) is None  # moved aside, all of them
        assert body in _quarantined(stash)
    assert stash.logs.records("job") == [f"r{v}" for v in range(GENUINE)]
    head = stash.logs.append("job", ["next"], after=stash.logs.head("job"), state={"v": 11})
    assert head.version == GENUINE


def _requests_of_one_repair() -> int:
    with stashpoint.open(f"memory://count-{uuid.uuid4().hex}") as stash:
        _wedge(stash)
        calls: list[str] = []

        def count(request: Any, proceed: Any) -> Any:
            calls.append(type(request).__name__)
            return proceed()

        with stash.intercept(count):
            stash.admin.repair_log("logs", "job", dry_run=False)
    return len(calls)


@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
def test_a_crash_at_every_request_of_a_repair_loses_nothing(after: bool) -> None:
    total = _requests_of_one_repair()
    assert total >= 10  # a listing, then a GET, a copy and a delete per planted object
    for step in range(total):
        with stashpoint.open(f"memory://crash-{uuid.uuid4().hex}") as stash:
            planted = _wedge(stash)
            with crash_at(stash, step, after), pytest.raises(Crash):
                stash.admin.repair_log("logs", "job", dry_run=False)
            _nothing_lost(stash, planted)
            _finish(stash, planted)


def test_a_repair_through_the_fault_proxy_loses_nothing(seaweedfs: servers.S3Server) -> None:
    plan = FaultPlan(
        {"drop_response": 0.15, "drop_request": 0.1, "slowdown": 0.05, "conflict": 0.05}
    )
    config = Config(
        read_timeout=2, connect_timeout=2, retries={"mode": "standard", "max_attempts": 2}
    )
    prefix = f"t-{uuid.uuid4().hex}"
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        planted = _wedge(clean, planted=12)
    failures = 0
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        with stashpoint.open(url, client_config=config) as faulty:
            for _ in range(6):  # bounded: each repair goes on from where the last stopped
                try:
                    faulty.admin.repair_log("logs", "job", dry_run=False)
                except StorageUnavailable:
                    failures += 1
                with stashpoint.open(seaweedfs.url(prefix)) as clean:
                    _nothing_lost(clean, planted)
    assert sum(plan.injected.values()) > 0
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        _finish(clean, planted)


KILLED_REPAIR = textwrap.dedent(
    """
    import sys, stashpoint
    with stashpoint.open(sys.argv[1]) as stash:
        def told(request, proceed):
            result = proceed()
            print(type(request).__name__, flush=True)
            return result
        with stash.intercept(told):
            stash.admin.repair_log("logs", "job", dry_run=False)
    print("done", flush=True)
    """
)


def test_sigkill_mid_repair_loses_nothing(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        planted = _wedge(stash, planted=20)
    for cut in (2, 7, 10, 12, 8):  # requests answered before each kill: about half the moves
        lines, _ = kill_after_lines(KILLED_REPAIR, [url], cut)
        assert "done" not in lines
        with stashpoint.open(url) as stash:
            _nothing_lost(stash, planted)
    with stashpoint.open(url) as stash:
        _finish(stash, planted)
