"""Packing under stress (issue 26 #4): a crash at every request, `kill -9`, writers and
packers racing on SeaweedFS, the fault proxy. Nothing acknowledged is lost, no read ever
sees a shorter log, and a packing that was cut off finishes when run again."""

from __future__ import annotations

import contextlib
import random
import textwrap
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from botocore.config import Config
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import stashpoint
from stashpoint import CheckpointConflict, StashpointError
from stashpoint.logs.format import PACK_SPAN, SEGMENT_SPAN
from tests import servers
from tests.crashes import Crash, crash_at
from tests.faultproxy import FaultPlan, FaultProxy
from tests.kills import kill_after_lines
from tests.purging import replay, versions

TOP = PACK_SPAN + SEGMENT_SPAN + 12
"""The last version of the logs here: one range to pack, one segment after it."""


def _build(stash: Any, log_id: str = "c") -> list[Any]:
    head = None
    for n in range(TOP + 1):
        head = stash.logs.append(log_id, [n], after=head, state={"n": n})
    return list(range(TOP + 1))


def _packed(stash: Any, log_id: str = "c") -> None:
    """The log is packed for good: one pack, no segment under it, every sealed entry a
    marker (packing again does nothing)."""
    sealed = sorted(
        v.key.rsplit("/", 1)[1]
        for v in versions(stash, f"sealed/logs/{log_id}/")
        if v.is_latest and not v.is_delete_marker
    )
    assert sealed == [
        f"{0:020d}-{PACK_SPAN - 1:020d}",
        f"{PACK_SPAN:020d}-{PACK_SPAN + SEGMENT_SPAN - 1:020d}",
    ]
    again = stash.logs.pack(log_id)
    assert (again.packed, again.vacated, again.segments_deleted) == (0, 0, 0)


def _pack_requests(url: str) -> list[str]:
    """The requests of one whole packing of a fresh log, as `type key-tail`."""
    calls: list[str] = []
    with stashpoint.open(url) as stash:
        _build(stash)

        def hook(request: Any, proceed: Any) -> Any:
            calls.append(f"{type(request).__name__} {getattr(request, 'key', '')}")
            return proceed()

        with stash.intercept(hook):
            stash.logs.pack("c")
    return calls


_CALLS = _pack_requests(f"memory://pack-plan-{uuid.uuid4().hex}")
_PACK_PUT = next(
    i for i, c in enumerate(_CALLS) if c.startswith("PutObject") and c.endswith(f"-{1023:020d}")
)
_FIRST_DELETE = next(i for i, c in enumerate(_CALLS) if c.startswith("DeleteObject"))


@settings(
    max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(step=st.integers(0, len(_CALLS) - 1), after=st.booleans())
@example(step=_PACK_PUT, after=False)
@example(step=_PACK_PUT, after=True)
@example(step=_PACK_PUT + 2, after=True)  # among the first markers
@example(step=_FIRST_DELETE - 1, after=True)  # every marker written, no segment deleted
@example(step=_FIRST_DELETE + 3, after=True)  # some segments deleted
@example(step=len(_CALLS) - 1, after=False)
def test_a_crash_at_any_request_of_packing_loses_nothing_and_packing_again_finishes(
    step: int, after: bool
) -> None:
    url = f"memory://pack-crash-{uuid.uuid4().hex}"
    with stashpoint.open(url) as stash:
        records = _build(stash)
        with crash_at(stash, step, after), contextlib.suppress(Crash):
            stash.logs.pack("c")
    with stashpoint.open(url) as stash:  # a new process
        assert stash.logs.records("c") == records  # whole, however far packing came
        with pytest.raises(CheckpointConflict):
            stash.logs.append("c", ["stale"], after=_head_at(stash, 10))
        stash.logs.pack("c")
        assert stash.logs.records("c") == records
        _packed(stash)
        head = stash.logs.append("c", [TOP + 1], after=stash.logs.head("c"))
        assert head.version == TOP + 1 and stash.logs.records("c") == [*records, TOP + 1]


def _head_at(stash: Any, version: int) -> Any:
    """A head of an old version, as a zombie writer would hold it."""
    import dataclasses

    head = stash.logs.head("c")
    entry = stash.logs.entries("c", version, version)[0]
    return dataclasses.replace(head, version=version, write_id=entry.write_id)


KILLED_PACKER = textwrap.dedent(
    """
    import sys, stashpoint
    with stashpoint.open(sys.argv[1]) as stash:
        print("packing", flush=True)
        while True:
            stash.logs.pack("c")
    """
)


@pytest.mark.parametrize("where", ["local", "seaweedfs"])
def test_sigkill_mid_packing_loses_nothing_and_packing_again_finishes(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    source = f"memory://pack-kill-{uuid.uuid4().hex}"
    if where == "local":
        url = f"local://{tmp_path / 'stash'}?fsync=false"
    else:
        url = request.getfixturevalue("seaweedfs").url(f"t-{uuid.uuid4().hex}")
    with stashpoint.open(source) as built, stashpoint.open(url) as stash:
        records = _build(built)
        replay(built, stash)  # the same objects, written in a few parallel rounds
        assert stash.logs.records("c") == records
    rng = random.Random(26)
    for _ in range(3 if where == "local" else 2):
        said, _ = kill_after_lines(KILLED_PACKER, [url], 1, pause=rng.uniform(0.05, 1.2))
        assert said == ["packing"]
        with stashpoint.open(url) as stash:
            assert stash.logs.records("c") == records
    with stashpoint.open(url) as stash:
        stash.logs.pack("c")
        assert stash.logs.records("c") == records
        _packed(stash)


def _writer(stash: Any, head: Any, times: int, acknowledged: list[int]) -> None:
    for _ in range(times):
        n = head.next_record
        try:
            head = stash.logs.append("c", [n], after=head)
        except StashpointError:
            for _ in range(10):  # an unknown outcome or a conflict: read what landed
                try:
                    head = stash.logs.head("c")
                    break
                except StashpointError:
                    continue
            continue
        acknowledged.append(n)


def test_packers_racing_a_writer_through_the_fault_proxy_lose_nothing(
    seaweedfs: servers.S3Server,
) -> None:
    """Two packers and a writer that seals as it goes, on one log on SeaweedFS, through
    the fault proxy (requests and answers dropped, answers late): every acknowledged
    record stays, in order, once; a packer's failure is typed. The log's sealed entries
    are markers already (`vacate_sealed_entries`), so the race is over the pack, the
    segments' deletion and the writer's seals (vacating under a crash and `kill -9` is
    tested above)."""
    prefix = f"t-{uuid.uuid4().hex}"
    with (
        stashpoint.open(f"memory://{prefix}", vacate_sealed_entries=True) as built,
        stashpoint.open(seaweedfs.url(prefix)) as stash,
    ):
        _build(built)
        replay(built, stash)
    plan = FaultPlan({"drop_response": 0.05, "drop_request": 0.05, "slowdown": 0.03})
    config = Config(
        read_timeout=2, connect_timeout=2, retries={"mode": "standard", "max_attempts": 3}
    )
    acknowledged: list[int] = []
    failures: list[BaseException] = []

    def packer(url: str) -> None:
        with stashpoint.open(url, client_config=config) as stash:
            try:
                stash.logs.pack("c")
            except Exception as exc:  # a fault it could not settle must be said, typed
                failures.append(exc)

    def run(url: str) -> None:
        with stashpoint.open(url, client_config=config) as stash:
            threads = [
                threading.Thread(target=packer, args=(url,)),
                threading.Thread(target=packer, args=(url,)),
                threading.Thread(
                    target=_writer, args=(stash, stash.logs.head("c"), 40, acknowledged)
                ),
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=600)
            assert not any(thread.is_alive() for thread in threads)

    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        run(seaweedfs.url(prefix, endpoint=proxy.endpoint))
    assert plan.injected["drop_response"] > 0 and plan.injected["drop_request"] > 0
    assert all(isinstance(failure, StashpointError) for failure in failures), failures
    with stashpoint.open(seaweedfs.url(prefix)) as stash:
        records = stash.logs.records("c")
        assert records[: TOP + 1] == list(range(TOP + 1))
        tail = records[TOP + 1 :]
        assert tail == list(range(TOP + 1, TOP + 1 + len(tail)))  # in order, once each
        assert set(acknowledged) <= set(tail)
        assert len(acknowledged) >= 20
        stash.logs.pack("c")
        assert stash.logs.records("c") == records
