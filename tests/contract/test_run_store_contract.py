"""The run-store contract (seed 004, made durable): the same on every backend and driver."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

import stashpoint
from stashpoint import (
    AttemptNotFound,
    AttemptStatus,
    CheckpointMetadata,
    GraphDriftError,
    Interrupt,
    InvalidId,
    RunNotFound,
    RunStatus,
    TerminalStateConflict,
    TraceContext,
)


def test_created_run_is_running_and_empty(runs: Any) -> None:
    run_id = runs.create_run("etl", graph_hash="g1")
    state = runs.load_run(run_id)
    assert state.run_id == run_id and state.graph_name == "etl"
    assert state.status is RunStatus.RUNNING and state.attempts == ()
    assert state.graph_hash == "g1"


def test_attempt_lifecycle_records_input_output_meta_and_times(runs: Any) -> None:
    run_id = runs.create_run("etl")
    ctx = TraceContext(trace_id="t-1", span_id="s-1")
    a1 = runs.record_attempt(run_id, "extract", 1, {"path": "s3://in"}, trace_ctx=ctx)
    a2 = runs.record_attempt(run_id, "transform", 1, [1, 2, 3])
    runs.complete_attempt(a1, {"rows": 10}, {"trace_id": "t-1", "cost": 0.5})
    runs.fail_attempt(a2, "division by zero")
    state = runs.load_run(run_id)
    first, second = state.attempts
    assert (first.attempt_id, first.node_id, first.attempt) == (a1, "extract", 1)
    assert first.status is AttemptStatus.COMPLETED and first.output == {"rows": 10}
    assert first.input == {"path": "s3://in"} and first.meta == {"trace_id": "t-1", "cost": 0.5}
    assert first.trace_ctx == ctx and first.finished_at >= first.started_at
    assert second.status is AttemptStatus.FAILED and second.error == "division by zero"
    summary = runs.summarize_run(run_id)
    assert (summary.total_nodes_executed, summary.total_attempts, summary.failed_attempts) == (
        2, 2, 1,
    )  # fmt: skip
    assert summary.trace_id == "t-1" and summary.trace_ctx == ctx and summary.finished_at is None


def test_interrupt_pauses_run_and_a_new_attempt_resumes_it(runs: Any) -> None:
    run_id = runs.create_run("approve")
    attempt = runs.record_attempt(run_id, "ask_human", 1, {"q": "ship it?"})
    runs.record_interrupt(attempt, Interrupt(node_id="ask_human", reason="approval", value=1))
    state = runs.load_run(run_id)
    assert state.status is RunStatus.INTERRUPTED
    assert state.attempts[0].status is AttemptStatus.INTERRUPTED
    assert state.interrupted.reason == "approval"
    with pytest.raises(TerminalStateConflict):
        runs.complete_run(run_id)  # seed: only from Running
    runs.record_attempt(run_id, "ask_human", 2, {"answer": "yes"})
    state = runs.load_run(run_id)
    assert state.status is RunStatus.RUNNING and state.interrupted is None


def test_run_finishes_only_from_running_and_a_repeated_finish_is_idempotent(runs: Any) -> None:
    done = runs.create_run("g")
    runs.complete_run(done)
    finished = runs.load_run(done)
    assert finished.status is RunStatus.COMPLETED
    assert runs.summarize_run(done).finished_at is not None
    runs.complete_run(done)  # a retried invocation: the same outcome, nothing written
    assert runs.load_run(done).updated_at == finished.updated_at
    with pytest.raises(TerminalStateConflict):
        runs.fail_run(done, "late")
    with pytest.raises(TerminalStateConflict):
        runs.cancel_run(done)
    with pytest.raises(TerminalStateConflict):
        runs.record_attempt(done, "n", 1, None)
    failed = runs.create_run("g")
    runs.fail_run(failed, "out of memory")
    runs.fail_run(failed, "out of memory")
    assert runs.load_run(failed).error == "out of memory"
    with pytest.raises(TerminalStateConflict):
        runs.fail_run(failed, "another reason")
    with pytest.raises(TerminalStateConflict):
        runs.complete_run(failed)
    cancelled = runs.create_run("g")
    runs.cancel_run(cancelled)
    runs.cancel_run(cancelled)
    with pytest.raises(TerminalStateConflict):
        runs.complete_run(cancelled)


def test_cancel_cancels_running_attempts(runs: Any) -> None:
    run_id = runs.create_run("g")
    attempt = runs.record_attempt(run_id, "slow", 1, None)
    runs.cancel_run(run_id)
    state = runs.load_run(run_id)
    assert state.status is RunStatus.CANCELLED
    assert state.attempts[0].status is AttemptStatus.CANCELLED
    with pytest.raises(TerminalStateConflict):
        runs.complete_attempt(attempt, 1)


def test_unknown_ids_are_typed_errors_never_ignored(runs: Any) -> None:
    with pytest.raises(RunNotFound):
        runs.complete_run("no-such-run")
    with pytest.raises(RunNotFound):
        runs.record_attempt("no-such-run", "n", 1, None)
    assert runs.load_run("no-such-run") is None
    assert runs.summarize_run("no-such-run") is None
    run_id = runs.create_run("g")
    with pytest.raises(AttemptNotFound):
        runs.complete_attempt(f"{run_id}~not-an-attempt", 1)
    with pytest.raises(AttemptNotFound):
        runs.fail_attempt("garbage", "x")
    with pytest.raises(InvalidId):
        runs.create_run("g", run_id="bad/id")


def test_completing_an_attempt_twice_is_a_terminal_state_conflict(runs: Any) -> None:
    run_id = runs.create_run("g")
    attempt = runs.record_attempt(run_id, "n", 1, None)
    runs.complete_attempt(attempt, "first")
    with pytest.raises(TerminalStateConflict):
        runs.complete_attempt(attempt, "second")
    assert runs.load_run(run_id).attempts[0].output == "first"


def test_large_values_round_trip_through_blobs(runs: Any) -> None:
    big = {"rows": ["x" * 100 for _ in range(2000)]}  # ~200 KB, over the blob threshold
    run_id = runs.create_run("g")
    attempt = runs.record_attempt(run_id, "n", 1, big)
    runs.complete_attempt(attempt, big)
    runs.save_state_snapshot(run_id, {"big": big, "small": 1})
    state = runs.load_run(run_id)
    assert state.attempts[0].input == big and state.attempts[0].output == big
    assert state.state_snapshot == {"big": big, "small": 1}
    unresolved = runs.load_run(run_id, resolve_blobs=False)
    assert "$stashpoint_blob" in unresolved.attempts[0].input


def test_graph_drift_is_an_error_unless_allowed(runs: Any) -> None:
    run_id = runs.create_run("g", graph_hash="hash-a")
    assert runs.load_run(run_id, graph_hash="hash-a").graph_hash == "hash-a"
    with pytest.raises(GraphDriftError) as info:
        runs.load_run(run_id, graph_hash="hash-b")
    assert info.value.stored_hash == "hash-a" and info.value.current_hash == "hash-b"
    assert runs.load_run(run_id, graph_hash="hash-b", allow_graph_drift=True) is not None
    meta = CheckpointMetadata(graph_hash="hash-c", run_id=run_id, node_id="n", step=3)
    runs.save_state_snapshot(run_id, {"k": "v"}, metadata=meta)
    state = runs.load_run(run_id, graph_hash="hash-c")
    assert state.checkpoint.step == 3 and state.state_snapshot == {"k": "v"}


def test_list_runs_by_graph_status_and_namespace_newest_first(runs: Any, listed: Any) -> None:
    ns = f"ns-{stashpoint.new_id()}"
    etl = [runs.create_run("etl", namespace=ns) for _ in range(3)]
    ml = [runs.create_run("train", namespace=ns) for _ in range(2)]
    runs.complete_run(etl[0])
    runs.fail_run(ml[1], "nan loss")
    assert [r.run_id for r in runs.list_runs(namespace=ns, graph_name="etl").items] == etl[::-1]
    assert [r.run_id for r in runs.list_runs(namespace=ns).items] == (etl + ml)[::-1]
    failed = runs.list_runs(namespace=ns, status=RunStatus.FAILED).items
    assert [(r.run_id, r.error) for r in failed] == [(ml[1], listed("nan loss"))]
    running_etl = runs.list_runs(namespace=ns, graph_name="etl", status=RunStatus.RUNNING)
    assert [r.run_id for r in running_etl.items] == etl[:0:-1]
    assert runs.list_runs(namespace="other-" + ns).items == []
    newest = runs.list_runs(namespace=ns).items[0]
    later = runs.list_runs(namespace=ns, since=newest.created_at + timedelta(seconds=1))
    assert later.items == []


def test_list_runs_pages_without_duplicates_or_gaps(runs: Any) -> None:
    ns = f"ns-{stashpoint.new_id()}"
    created = [runs.create_run("paged", namespace=ns) for _ in range(23)]
    seen: list[str] = []
    cursor = None
    pages = 0
    while True:
        page = runs.list_runs(namespace=ns, graph_name="paged", limit=5, cursor=cursor)
        seen += [r.run_id for r in page.items]
        pages += 1
        cursor = page.cursor
        if cursor is None:
            break
    assert seen == created[::-1]
    assert pages in (5, 6)


def test_running_and_failed_attempts_are_listed_from_the_index(runs: Any, listed: Any) -> None:
    ns = f"ns-{stashpoint.new_id()}"
    run_id = runs.create_run("g", namespace=ns)
    a1 = runs.record_attempt(run_id, "a", 1, None)
    a2 = runs.record_attempt(run_id, "b", 1, None)
    runs.fail_attempt(a1, "boom")
    running = runs.list_attempts(AttemptStatus.RUNNING, namespace=ns).items
    failed = runs.list_attempts(AttemptStatus.FAILED, namespace=ns).items
    assert [a.attempt_id for a in running] == [a2]
    assert [(a.attempt_id, a.error) for a in failed] == [(a1, listed("boom"))]
    row = runs.list_runs(namespace=ns).items[0]
    assert (row.attempts, row.failed_attempts, row.running_attempts) == (2, 1, 1)


def test_bad_cursor_is_an_invalid_argument(runs: Any) -> None:
    """Issue 25 #11: it was a ConfigurationError, whose hint sent users to the AWS setup."""
    with pytest.raises(stashpoint.InvalidArgument, match="cursor"):
        runs.list_runs(cursor="%%%not-a-cursor")


# --- leases, heartbeats and fencing (issue 13) ---------------------------------------------------


def _store(runs: Any) -> Any:
    """The store behind the blocking facade of the async driver (for its settings)."""
    return getattr(runs, "_target", runs)


def _abandoned(runs: Any, **options: Any) -> list[str]:
    return [row.attempt_id for row in runs.list_attempts(abandoned=True, **options).items]


def test_an_attempt_whose_lease_runs_out_is_listed_abandoned_until_it_ends(runs: Any) -> None:
    namespace = f"ns-{stashpoint.new_id()}"
    run_id = runs.create_run("spot", namespace=namespace)
    short = runs.record_attempt(run_id, "a", 1, lease=timedelta(seconds=10))
    long = runs.record_attempt(run_id, "b", 1, lease=30, worker={"instance_id": "i-0abc"})
    runs.record_attempt(run_id, "c", 1)  # no lease: never judged abandoned
    assert _abandoned(runs, namespace=namespace) == []  # leases are fresh
    store = _store(runs)
    store.clock_skew = timedelta(seconds=-20)  # judge as if 20 s had passed
    assert _abandoned(runs, namespace=namespace) == [short]
    store.clock_skew = timedelta(seconds=-3600)
    assert _abandoned(runs, namespace=namespace) == [long, short]  # latest expiry first
    first = runs.list_attempts(abandoned=True, namespace=namespace, limit=1)
    second = runs.list_attempts(abandoned=True, namespace=namespace, limit=1, cursor=first.cursor)
    assert [r.attempt_id for r in first.items + second.items] == [long, short]
    assert first.items[0].lease_expires_at is not None
    before = first.items[0].lease_expires_at
    runs.heartbeat(short)  # alive again: its lease starts from now
    runs.heartbeat(long)
    store.clock_skew = timedelta(seconds=-5)
    assert _abandoned(runs, namespace=namespace) == []
    store.clock_skew = timedelta(seconds=-20)
    assert _abandoned(runs, namespace=namespace) == [short]
    runs.complete_attempt(short, 1)
    store.clock_skew = timedelta(seconds=-3600)
    assert _abandoned(runs, namespace=namespace) == [long]  # an ended attempt leaves the list
    rows = {r.attempt_id: r for r in runs.list_attempts(namespace=namespace, limit=10).items}
    assert rows[long].lease_expires_at is not None and rows[long].lease_expires_at > before
    state = runs.load_run(run_id)
    assert state.attempt(long).worker == {"instance_id": "i-0abc"}
    assert state.attempt(long).lease_seconds == 30.0
    with pytest.raises(TerminalStateConflict):
        runs.heartbeat(short)
    with pytest.raises(stashpoint.InvalidArgument):
        runs.record_attempt(run_id, "d", 1, lease=0)
    with pytest.raises(stashpoint.InvalidArgument):
        runs.list_attempts(AttemptStatus.FAILED, abandoned=True)


def test_a_takeover_fences_the_earlier_owner_which_then_stores_nothing(
    run_backend: tuple[str, dict[str, Any], str], runs: Any
) -> None:
    from tests.contract.conftest import _open

    run_id = runs.create_run("spot")  # this store owns epoch 0
    held = runs.record_attempt(run_id, "item-1", 1, lease=60)
    done = runs.record_attempt(run_id, "item-0", 1)
    runs.complete_attempt(done, "ok")
    second = _open(*run_backend)
    other = next(second).runs
    try:
        assert other.takeover(run_id) == 1
        before = other.load_run(run_id)
        for zombie_write in (
            lambda: runs.record_attempt(run_id, "item-2", 1),
            lambda: runs.complete_attempt(held, "late result"),
            lambda: runs.heartbeat(held),
            lambda: runs.save_state_snapshot(run_id, {"cursor": 99}),
            lambda: runs.complete_run(run_id),
        ):
            with pytest.raises(stashpoint.Fenced) as fenced:
                zombie_write()
            assert (fenced.value.epoch, fenced.value.current_epoch) == (0, 1)
            assert fenced.value.kind is stashpoint.ErrorKind.FENCED
        after = other.load_run(run_id)
        assert after == before  # nothing of the zombie was stored
        [ended] = [a for a in after.attempts if a.attempt_id == held]
        assert ended.status is AttemptStatus.FAILED and "taken over" in (ended.error or "")
        retry = other.record_attempt(run_id, "item-1", 2)  # the new owner goes on
        other.complete_attempt(retry, "ok")
        assert runs.takeover(run_id) == 2  # and can be taken over in turn
        with pytest.raises(stashpoint.Fenced):
            other.complete_run(run_id)
        runs.complete_run(run_id)
        assert runs.load_run(run_id).status is RunStatus.COMPLETED
    finally:
        second.close()
