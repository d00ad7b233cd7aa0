"""Runs are logs: a transition's cost is flat in the run's length, a run is born a log (one
PUT), pre-release whole-envelope runs are not read, hostile run logs give typed errors."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import stashpoint
from stashpoint import (
    CheckpointConflict,
    InvalidPayload,
    UnsupportedFormat,
)
from stashpoint.codec import Codec
from stashpoint.envelope import Envelope
from stashpoint.logs.store import LogStore
from stashpoint.runs.models import (
    RUN_KIND,
    RUN_LOG_KIND,
    RUN_SCHEMA_VERSION,
    AttemptRecord,
    RunState,
)
from stashpoint.stores.layout import RUN_LOGS
from stashpoint.stores.objects import PutObject
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


# --- format v1: runs are logs from their creation ------------------------------------------


def test_create_run_is_one_put_and_its_index_item(target: tuple[str, dict[str, Any]]) -> None:
    url, options = target
    with stashpoint.open(url, **options) as stash:
        meter = Meter(stash)
        stash.runs.create_run("g", run_id="one-put")
        assert dict(meter.requests) == {
            "PutObject": 1,
            **({"PutItems": 1} if meter.index_items else {}),
        }, meter.requests
        assert meter.index_items == 1
        with pytest.raises(CheckpointConflict, match="exists"):
            stash.runs.create_run("g", run_id="one-put")


def test_a_whole_envelope_run_of_a_pre_release_is_not_read(
    target: tuple[str, dict[str, Any]],
) -> None:
    """Format v1 freezes runs as logs: an object of 0.x's whole-envelope runs is not a run."""
    url, options = target
    with stashpoint.open(url, **options) as stash:
        now = stashpoint.envelope.utc_now()
        state = RunState(run_id="old", graph_name="legacy", attempts=(AttemptRecord(
            attempt_id="old~1", run_id="old", node_id="a", attempt=1, started_at=now),
        ))  # fmt: skip
        envelope = Envelope.initial(
            "old", "old", RUN_KIND, RUN_SCHEMA_VERSION, state.model_dump(mode="json")
        )
        stash.driver(PutObject(stash.layout.key("runs", "old"), Codec().encode(envelope), None))
        assert stash.runs.load_run("old") is None
        with pytest.raises(stashpoint.RunNotFound):
            stash.runs.complete_run("old")
        stash.runs.create_run("g", run_id="old")  # a new run: the object is never read
        fresh = stash.runs.load_run("old")
        assert fresh is not None and fresh.attempts == () and fresh.graph_name == "g"


def test_workers_racing_to_create_one_run_make_exactly_one(
    target: tuple[str, dict[str, Any]],
) -> None:
    url, options = target
    barrier = threading.Barrier(8)

    def create(i: int) -> bool:
        with stashpoint.open(url, **options) as worker:
            barrier.wait()
            try:
                worker.runs.create_run(f"g{i}", run_id="raced")
            except CheckpointConflict:
                return False
            return True

    with ThreadPoolExecutor(8) as pool:
        won = list(pool.map(create, range(8)))
    assert won.count(True) == 1
    with stashpoint.open(url, **options) as stash:
        state = stash.runs.load_run("raced")
        assert state is not None and state.graph_name == f"g{won.index(True)}"


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
        logs = LogStore(stash.log_steps(RUN_LOGS), stash.driver)
        logs.append("r", records, after=None, state=head, kind=kind)
        reads = [lambda: stash.runs.load_run("r"), lambda: stash.runs.summarize_run("r")]
        if case in HEAD_LEVEL:
            reads.append(lambda: stash.runs.complete_run("r"))
        for read in reads:
            with pytest.raises(error, match=words) as caught:
                read()
            assert (caught.value.object_name or "").startswith("run-logs/r/")
        assert logs.head("r").version == 0  # nothing was written over it
