"""Runs are logs: a transition's cost is flat in the run's length, whole-envelope runs of
earlier versions migrate on their next transition, hostile run logs give typed errors."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import stashpoint
from stashpoint import (
    AttemptStatus,
    CheckpointConflict,
    InvalidPayload,
    RunStatus,
    UnsupportedFormat,
)
from stashpoint.envelope import Envelope
from stashpoint.logs.store import LogStore
from stashpoint.runs.models import (
    RUN_KIND,
    RUN_LOG_KIND,
    RUN_SCHEMA_VERSION,
    AttemptRecord,
    RunState,
)
from stashpoint.steps import run_sync
from stashpoint.stores.layout import RUN_LOGS
from tests.meter import Meter

INDEXED = ["memory_url", "local_url", "s3_dynamo_url"]


@pytest.fixture(params=INDEXED, ids=lambda n: n.removesuffix("_url"))
def target(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return request.getfixturevalue(request.param)


def _transitions(stash: stashpoint.Stash, run_id: str, meter: Meter, n: int) -> dict[str, Any]:
    """Record and complete `n` attempts; return the mean cost of a transition."""
    meter.reset()
    for i in range(n):
        attempt = stash.runs.record_attempt(run_id, f"item-{i}", 1, {"item": i})
        stash.runs.complete_attempt(attempt, {"rows": i})
    count = 2 * n
    return {
        "requests": sum(meter.requests.values()) / count,
        "puts": meter.requests["PutObject"] / count,
        "bytes": meter.put_bytes / count,
        "index_items": meter.index_items / count,
        "reads": (meter.requests["GetObject"] + meter.requests["ListKeys"]) / count,
    }


def test_a_transition_costs_the_same_at_attempt_256_as_at_attempt_10(
    target: tuple[str, dict[str, Any]],
) -> None:
    url, options = target
    with stashpoint.open(url, **options) as stash:
        meter = Meter(stash)
        run_id = stash.runs.create_run("batch")
        early = _transitions(stash, run_id, meter, 64)  # a whole sealing period each
        _transitions(stash, run_id, meter, 128)
        late = _transitions(stash, run_id, meter, 64)
        assert late["bytes"] <= 1.2 * early["bytes"], (early, late)
        assert late["requests"] <= early["requests"] + 0.05, (early, late)
        # One PUT per transition (+ a sealed segment every 64 versions), no read.
        assert late["puts"] <= 1 + 1 / 32 and late["reads"] <= 2, late
        assert late["index_items"] == 2, "the run's item and the attempt's, no more"
        state = stash.runs.load_run(run_id)
        assert state is not None and len(state.attempts) == 256
        assert [a.output for a in state.attempts[-3:]] == [{"rows": i} for i in (61, 62, 63)]
        row = stash.runs.list_runs().items[0]
        assert (row.attempts, row.running_attempts, row.failed_attempts) == (256, 0, 0)


def test_every_transition_writes_at_most_two_index_items(
    target: tuple[str, dict[str, Any]],
) -> None:
    url, options = target
    with stashpoint.open(url, **options) as stash:
        meter = Meter(stash)
        run_id = stash.runs.create_run("g")
        assert meter.index_items == 1
        calls = [
            lambda: stash.runs.record_attempt(run_id, "a", 1),
            lambda: stash.runs.save_state_snapshot(run_id, {"k": 1}),
        ]
        for call in calls:
            meter.reset()
            call()
            assert meter.index_items <= 2
        first = stash.runs.record_attempt(run_id, "b", 1)
        for end in (
            lambda: stash.runs.complete_attempt(first, 1),
            lambda: stash.runs.fail_attempt(stash.runs.record_attempt(run_id, "c", 1), "e"),
            lambda: stash.runs.complete_run(run_id),
        ):
            meter.reset()
            end()
            assert meter.index_items <= 2 + (meter.requests["PutObject"] > 1) * 2


# --- whole-envelope runs of earlier versions ------------------------------------------------


def _legacy_run(stash: stashpoint.Stash, run_id: str, namespace: str) -> RunState:
    """Store a run as stashpoint 0.x did: one whole envelope, revision 3."""
    now = stashpoint.envelope.utc_now()
    attempts = (
        AttemptRecord(
            attempt_id=f"{run_id}~old-1", run_id=run_id, node_id="a", attempt=1,
            status=AttemptStatus.COMPLETED, output={"x": 1}, started_at=now, finished_at=now,
        ),
        AttemptRecord(attempt_id=f"{run_id}~old-2", run_id=run_id, node_id="b", attempt=1,
                      started_at=now),
    )  # fmt: skip
    state = RunState(run_id=run_id, graph_name="legacy", namespace=namespace, attempts=attempts)
    cas = stash.runs._cas
    envelope = Envelope.initial(
        run_id, run_id, RUN_KIND, RUN_SCHEMA_VERSION, state.model_dump(mode="json")
    )
    for _ in range(3):
        run_sync(cas.compare_and_swap(envelope, envelope.revision - 1 if envelope.revision else None), stash.driver)  # fmt: skip
        envelope = envelope.next(envelope.payload)
    return state


def test_a_whole_envelope_run_is_read_in_place_and_migrated_on_its_next_transition(
    target: tuple[str, dict[str, Any]],
) -> None:
    url, options = target
    namespace = f"ns-{stashpoint.new_id()}"
    with stashpoint.open(url, **options) as stash:
        _legacy_run(stash, "old", namespace)
        state = stash.runs.load_run("old")  # read in place (and indexed)
        assert state is not None and [a.status for a in state.attempts] == [
            AttemptStatus.COMPLETED,
            AttemptStatus.RUNNING,
        ]
        assert stash.runs.list_runs(namespace=namespace).items[0].revision == 2
        with pytest.raises(CheckpointConflict):
            stash.runs.create_run("g", run_id="old")
        with pytest.raises(stashpoint.TerminalStateConflict):
            stash.runs.complete_attempt("old~old-1", 2)  # ended before the migration
        stash.runs.complete_attempt("old~old-2", {"y": 2})  # migrates: log version 0
        new = stash.runs.record_attempt("old", "c", 1)
        stash.runs.complete_run("old")
        migrated = stash.runs.load_run("old")
        assert migrated is not None and migrated.status is RunStatus.COMPLETED
        assert [(a.attempt_id, a.status, a.output) for a in migrated.attempts] == [
            ("old~old-1", AttemptStatus.COMPLETED, {"x": 1}),
            ("old~old-2", AttemptStatus.COMPLETED, {"y": 2}),
            (new, AttemptStatus.RUNNING, None),
        ]
        row = stash.runs.list_runs(namespace=namespace).items[0]
        assert row.revision == 3 + 2  # revisions go on growing past the envelope's
        assert (row.status, row.attempts, row.running_attempts) == (RunStatus.COMPLETED, 3, 1)
        assert stash.runs._cas.describe("old") is not None  # the envelope stays, as history
        assert stash.runs.reindex(resume=False).indexed == 1  # the run once, as a log


def test_workers_racing_to_migrate_one_run_lose_nothing(
    target: tuple[str, dict[str, Any]],
) -> None:
    url, options = target
    with stashpoint.open(url, **options) as stash:
        _legacy_run(stash, "old", "default")
    barrier = threading.Barrier(8)

    def record(i: int) -> str:
        with stashpoint.open(url, **options) as worker:
            barrier.wait()
            return worker.runs.record_attempt("old", f"w{i}", 1)

    with ThreadPoolExecutor(8) as pool:
        ids = list(pool.map(record, range(8)))
    with stashpoint.open(url, **options) as stash:
        state = stash.runs.load_run("old")
        assert state is not None
        assert sorted(a.attempt_id for a in state.attempts[2:]) == sorted(ids)
        assert len(state.attempts) == 10


# --- hostile run logs ---------------------------------------------------------------------------


def _head(run_id: str, **changes: Any) -> dict[str, Any]:
    now = "2026-01-01T00:00:00Z"
    return {"run_id": run_id, "graph_name": "g", "created_at": now, "updated_at": now, **changes}


def _attempt(log_id: str, n: int, **changes: Any) -> dict[str, Any]:
    return {
        "op": "attempt", "attempt_id": f"{log_id}~{n}", "run_id": log_id, "node_id": "a",
        "attempt": 1, "started_at": "2026-01-01T00:00:00Z", **changes,
    }  # fmt: skip


HOSTILE: dict[str, tuple[list[Any], dict[str, Any], str, type[Exception], str]] = {
    "a record lost": (
        [_attempt("r", 1)], _head("r", attempt_count=2), RUN_LOG_KIND, InvalidPayload,
        "records are missing",
    ),
    "an end of an attempt never recorded": (
        [{"op": "end", "attempt_id": "r~9", "status": "completed",
          "finished_at": "2026-01-01T00:00:00Z"}],
        _head("r"), RUN_LOG_KIND, InvalidPayload, "not running",
    ),
    "an attempt of another run": (
        [_attempt("r", 1, run_id="other")], _head("r", attempt_count=1), RUN_LOG_KIND,
        InvalidPayload, "another run",
    ),
    "an attempt twice": (
        [_attempt("r", 1), _attempt("r", 1)], _head("r", attempt_count=2), RUN_LOG_KIND,
        InvalidPayload, "twice",
    ),
    "a record from the future": (
        [{"op": "lease"}], _head("r"), RUN_LOG_KIND, UnsupportedFormat, "newer stashpoint",
    ),
    "the head of another run": ([], _head("q"), RUN_LOG_KIND, InvalidPayload, "belongs to run"),
    "a log of another kind": ([], _head("r"), "stashpoint.agent", InvalidPayload, "not a run log"),
    "an invalid head": ([], {"run_id": "r"}, RUN_LOG_KIND, InvalidPayload, "run head is invalid"),
}  # fmt: skip


HEAD_LEVEL = {"the head of another run", "a log of another kind", "an invalid head"}
"""Corruptions a transition sees too (it reads the head); the others only whole reads see."""


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_run_logs_give_typed_errors_naming_the_log(
    case: str, local_url: tuple[str, dict[str, Any]]
) -> None:
    records, head, kind, error, words = HOSTILE[case]
    url, _ = local_url
    with stashpoint.open(url) as stash:
        logs = LogStore(stash._parts.logs(RUN_LOGS), stash.driver)
        logs.append("r", records, after=None, state=head, kind=kind)
        reads = [lambda: stash.runs.load_run("r"), lambda: stash.runs.summarize_run("r")]
        if case in HEAD_LEVEL:
            reads.append(lambda: stash.runs.complete_run("r"))
        for read in reads:
            with pytest.raises(error, match=words) as caught:
                read()
            assert (caught.value.object_name or "").startswith("run-logs/r/")
        assert logs.head("r").version == 0  # nothing was written over it
