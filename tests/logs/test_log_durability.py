"""Logs under stress on real parts: racing threads, tasks and processes on SeaweedFS and the
local folder, a fault proxy on the wire, a crash at every request of append and sealing,
and `kill -9`."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from botocore.config import Config
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stashpoint
from stashpoint import CheckpointConflict, CheckpointNotFound, StorageUnavailable
from stashpoint.logs import SEGMENT_SPAN
from tests import servers
from tests.crashes import Crash, crash_at
from tests.faultproxy import FaultPlan, FaultProxy
from tests.kills import kill_after_lines
from tests.together import READY_THEN_WAIT, start_together


class _Outcomes:
    """What each writer was told: acknowledged records, and records of unknown outcome."""

    def __init__(self) -> None:
        self.acknowledged: list[str] = []
        self.unknown: list[str] = []
        self.conflicts = 0
        self.lock = threading.Lock()

    def check(self, records: list[Any]) -> None:
        """Every acknowledged record exactly once, an unknown one at most once, no other."""
        counts = Counter(records)
        assert all(counts[r] == 1 for r in self.acknowledged), "lost or duplicated"
        assert all(counts[r] <= 1 for r in self.unknown), "duplicated"
        assert set(counts) <= {"seed", *self.acknowledged, *self.unknown}, "invented"


def _writer(logs: Any, log_id: str, who: str, times: int, outcomes: _Outcomes) -> None:
    head = None
    for n in range(times):
        record = f"{who}-{n}"
        while True:
            if head is None:
                head = logs.head(log_id)
            try:
                head = logs.append(log_id, [record], after=head, state={"last": record})
            except CheckpointConflict:
                with outcomes.lock:
                    outcomes.conflicts += 1
                head = None
                continue
            except StorageUnavailable:
                with outcomes.lock:
                    outcomes.unknown.append(record)  # never resent: it may have landed
                head = None
                break
            with outcomes.lock:
                outcomes.acknowledged.append(record)
            break


def _race(stash: Any, threads: int, times: int) -> _Outcomes:
    """Seed log "race", let `threads` threads append `times` records each; their outcomes."""
    stash.logs.append("race", ["seed"], after=None)
    outcomes = _Outcomes()
    workers = [
        threading.Thread(target=_writer, args=(stash.logs, "race", f"t{i}", times, outcomes))
        for i in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return outcomes


def _check_log(stash: Any, log_id: str, outcomes: _Outcomes) -> list[Any]:
    records = stash.logs.records(log_id)
    outcomes.check(records)
    entries = stash.logs.entries(log_id)
    assert [e.version for e in entries] == list(range(len(entries)))  # no gap, one order
    assert entries[-1].state == {"last": records[-1]} or records[-1] == "seed"
    return records


def test_threads_racing_on_one_log_lose_and_duplicate_nothing(
    seaweedfs: servers.S3Server,
) -> None:
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}")
    with stashpoint.open(url) as stash:  # one client shared by every thread
        outcomes = _race(stash, threads=8, times=15)
        records = _check_log(stash, "race", outcomes)
    assert len(outcomes.acknowledged) == 120 and len(records) == 121
    assert outcomes.conflicts > 0  # they really raced
    # Each writer's records are in its own order within the one total order.
    for i in range(8):
        mine = [r for r in records if r.startswith(f"t{i}-")]
        assert mine == [f"t{i}-{n}" for n in range(15)]


def test_async_tasks_racing_on_one_log_lose_and_duplicate_nothing(
    seaweedfs: servers.S3Server,
) -> None:
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}")
    outcomes = _Outcomes()

    async def writer(logs: Any, who: str) -> None:
        head = None
        for n in range(20):
            while True:
                head = head or await logs.head("race")
                try:
                    head = await logs.append("race", [f"{who}-{n}"], after=head, state=None)
                except CheckpointConflict:
                    outcomes.conflicts += 1
                    head = None
                    continue
                outcomes.acknowledged.append(f"{who}-{n}")
                break

    async def main() -> list[Any]:
        async with stashpoint.open_async(url) as stash:
            await stash.logs.append("race", ["seed"], after=None)
            await asyncio.gather(*(writer(stash.logs, f"a{i}") for i in range(8)))
            return await stash.logs.records("race")

    records = asyncio.run(main())
    outcomes.check(records)
    assert len(records) == 161 and outcomes.conflicts > 0


PROCESS_WRITER = textwrap.dedent(
    """
    import sys, stashpoint
    url, who, times = sys.argv[1], sys.argv[2], int(sys.argv[3])
    conflicts = 0
    with stashpoint.open(url) as stash:
        READY_THEN_WAIT
        head = None
        for n in range(times):
            while True:
                head = head or stash.logs.head("race")
                try:
                    head = stash.logs.append("race", [f"{who}-{n}"], after=head)
                    break
                except stashpoint.CheckpointConflict:
                    conflicts += 1
                    head = None
    print(conflicts)
    """
).replace("READY_THEN_WAIT", READY_THEN_WAIT)  # ready, then wait for the word


@pytest.mark.parametrize("where", ["local", "seaweedfs"])
def test_processes_racing_on_one_log_lose_and_duplicate_nothing(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if where == "local":
        url = f"local://{tmp_path / 'stash'}"
    else:
        url = request.getfixturevalue("seaweedfs").url(f"t-{uuid.uuid4().hex}")
    with stashpoint.open(url) as stash:
        stash.logs.append("race", ["seed"], after=None)
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", PROCESS_WRITER, url, f"p{i}", "20"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for i in range(4)
    ]
    start_together(workers)  # they really race, however slowly each one starts
    conflicts = [int(w.communicate(timeout=180)[0]) for w in workers]
    assert all(w.returncode == 0 for w in workers)
    outcomes = _Outcomes()
    outcomes.acknowledged = [f"p{i}-{n}" for i in range(4) for n in range(20)]
    with stashpoint.open(url) as stash:
        records = stash.logs.records("race")
    outcomes.check(records)
    assert len(records) == 81 and sum(conflicts) > 0


def test_fault_proxy_loses_and_duplicates_no_record(seaweedfs: servers.S3Server) -> None:
    plan = FaultPlan(
        {"drop_response": 0.08, "drop_request": 0.05, "slowdown": 0.05, "conflict": 0.05}
    )
    config = Config(
        read_timeout=2, connect_timeout=2, retries={"mode": "standard", "max_attempts": 3}
    )
    prefix = f"t-{uuid.uuid4().hex}"
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        with stashpoint.open(url, client_config=config) as stash:
            outcomes = _race(stash, threads=6, times=20)
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        _check_log(clean, "race", outcomes)
    assert len(outcomes.acknowledged) + len(outcomes.unknown) == 120
    assert all(
        plan.injected[f] > 0 for f in ("drop_response", "drop_request", "slowdown", "conflict")
    )


# --- a crash at every request of append and sealing ------------------------------------------


def _verify(url: str, acknowledged: list[int]) -> list[int]:
    with stashpoint.open(url, log_delete_after=timedelta(0)) as stash:
        try:
            records = stash.logs.records("c")
        except CheckpointNotFound:
            assert not acknowledged
            return []
    assert records[: len(acknowledged)] == acknowledged  # every acknowledged record, in order
    assert records == list(range(len(records)))  # no gap, nothing twice
    assert len(records) <= len(acknowledged) + 1  # at most the one in flight is added
    return records


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    plan=st.lists(
        st.tuples(st.integers(0, 8), st.integers(0, 140), st.booleans()), min_size=1, max_size=4
    )
)
def test_crash_at_any_request_of_append_or_sealing_keeps_every_acknowledged_record(
    plan: list[tuple[int, int, bool]], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Appends of one record each, sealing every 64: crash after `n` appends, at request
    `step` of the next (which may be a sealing append: entry PUT, listings, 64 GETs,
    segment PUT, clean-up deletes), before or after the request."""
    # The crash is at the request level, so the file system need not sync.
    url = f"local://{tmp_path_factory.mktemp('crashes')}?fsync=false"
    acknowledged: list[int] = []
    for appends, step, after in plan:
        records = _verify(url, acknowledged)
        acknowledged = list(records)  # what a new process sees is what it builds on
        with stashpoint.open(url, log_delete_after=timedelta(0)) as stash:
            head = None if not records else stash.logs.head("c")
            if step % 2:  # now and then, make the crashing append the one that seals
                appends += -(len(records) + appends) % SEGMENT_SPAN
            for _ in range(appends):
                head = stash.logs.append("c", [len(acknowledged)], after=head)
                acknowledged.append(len(acknowledged))
            with crash_at(stash, step, after):
                try:
                    stash.logs.append("c", [len(acknowledged)], after=head)
                except Crash:
                    pass
                else:
                    acknowledged.append(len(acknowledged))
    final = _verify(url, acknowledged)
    with stashpoint.open(url, log_delete_after=timedelta(0)) as stash:
        head = stash.logs.head("c") if final else None
        stash.logs.append("c", [len(final)], after=head)  # the log goes on after any crash
        assert stash.logs.records("c") == list(range(len(final) + 1))


KILLED_APPENDER = textwrap.dedent(
    """
    import sys, datetime, stashpoint
    url = sys.argv[1]
    with stashpoint.open(url, log_delete_after=datetime.timedelta(0)) as stash:
        try:
            head = stash.logs.head("victim")
        except stashpoint.CheckpointNotFound:
            head = None
        n = 0 if head is None else head.next_record
        while True:
            head = stash.logs.append("victim", [n, "x" * 2000], after=head)
            print(n, flush=True)
            n += 2
    """
)


@pytest.mark.parametrize("where", ["local", "seaweedfs"])
def test_sigkill_mid_append_or_seal_loses_no_acknowledged_record(
    where: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if where == "local":
        url = f"local://{tmp_path / 'stash'}"
    else:
        url = request.getfixturevalue("seaweedfs").url(f"t-{uuid.uuid4().hex}")
    acknowledged = -1
    for round_ in range(6):
        before, after = kill_after_lines(
            KILLED_APPENDER, [url], 25 + 5 * round_, pause=0.003 * round_
        )
        printed = [int(line) for line in [*before, *after]]
        acknowledged = printed[-1]
        with stashpoint.open(url) as stash:
            records = stash.logs.records("victim")
        numbers = records[0::2]
        assert numbers == list(range(0, 2 * len(numbers), 2))  # no gap, nothing twice
        assert acknowledged in numbers and numbers[-1] <= acknowledged + 2
    with stashpoint.open(url) as stash:
        # The kills fell across several sealed segments.
        assert stash.logs.head("victim").version >= SEGMENT_SPAN + 1
