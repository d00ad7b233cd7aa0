"""Garbage collection of blobs against writers that reuse them, and against skewed clocks."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import stashpoint
from stashpoint.maintenance import garbage
from stashpoint.stores.objects import DeleteObject

BIG = {"document": "x" * 4096}
"""A value over the test stashes' blob threshold: stored as a blob."""


@pytest.fixture(params=["memory", "local", "s3"])
def blob_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "memory":
        return f"memory://gc-{uuid.uuid4().hex}?blob_threshold=1024"
    if request.param == "local":
        return f"local://{tmp_path / 'stash'}?blob_threshold=1024"
    url, _ = request.getfixturevalue("s3_dynamo_url")
    index = url.split("&index=")[1]
    endpoint = request.getfixturevalue("dynamodb_local").endpoint
    return (
        url.split("&index=")[0]
        + f"&blob_threshold=1024&index={index}&index_endpoint_url={endpoint}"
    )


def test_a_blob_reused_while_gc_runs_is_never_deleted_under_its_new_reference(
    blob_url: str,
) -> None:
    with stashpoint.open(blob_url) as stash:
        # The blob is stored by a save whose run was then lost, so nothing references it.
        first = stash.runs.create_run("g")
        stash.runs.record_attempt(first, "n", 1, BIG)
        _forget_run(stash, first)
        reused: list[str] = []

        def hook(request: Any, proceed: Callable[[], Any]) -> Any:
            # gc has scanned every reference and judged the blob old and unreferenced: a
            # save reuses the value just before gc's delete reaches storage.
            if isinstance(request, DeleteObject) and "blobs/" in request.key and not reused:
                reused.append(stash.runs.create_run("g2"))
                stash.runs.record_attempt(reused[0], "n", 1, BIG)
            return proceed()

        with stash.intercept(hook):
            report = stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
        assert reused, "the save ran inside the collection"
        assert report.unreferenced and report.deleted == 0
        # The save that reused the blob reads it back: nothing it referenced was deleted.
        state = stash.runs.load_run(reused[0])
        assert state.attempts[0].input == BIG


def _forget_run(stash: stashpoint.Stash, run_id: str) -> None:
    """Delete a run's log objects outright, as if it had never been indexed or kept."""
    from stashpoint.steps import run_sync
    from stashpoint.stores.layout import RUN_LOGS

    logs = stash.log_steps(RUN_LOGS)
    listing = run_sync(logs.listing(run_id, ordered=True), stash.driver)
    for key in [*listing.entries.values(), *listing.segments.values()]:
        stash.driver(DeleteObject(key))


def test_a_collector_whose_clock_runs_ahead_keeps_a_blob_written_a_moment_ago(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with stashpoint.open(f"memory://gc-{uuid.uuid4().hex}?blob_threshold=1024") as stash:
        run_id = stash.runs.create_run("g")
        stash.runs.record_attempt(run_id, "n", 1, BIG)
        _forget_run(stash, run_id)  # a writer about to reference it, as far as gc can tell

        class Ahead(datetime):
            @classmethod
            def now(cls, tz: Any = None) -> Any:
                return datetime.now(UTC) + timedelta(hours=3)

        monkeypatch.setattr(garbage, "datetime", Ahead)
        report = stash.admin.collect_garbage(dry_run=False, min_age=timedelta(hours=1))
        assert report.deleted == 0 and report.too_young == 1


def test_gc_and_reindex_report_progress_with_counts() -> None:
    from stashpoint.progress import Progress

    with stashpoint.open(f"memory://progress-{uuid.uuid4().hex}?blob_threshold=1024") as stash:
        for n in range(3):
            env = stashpoint.Envelope.initial(f"c{n}", None, "k", 1, {"n": n})
            stash.checkpoints.compare_and_swap(env, None)
        for n in range(4):
            stash.runs.record_attempt(stash.runs.create_run("g"), "n", 1, {**BIG, "n": n})
        heard: list[Progress] = []
        report = stash.admin.collect_garbage(
            dry_run=True, min_age=timedelta(0), on_progress=heard.append
        )
        phases = {p.phase for p in heard}
        assert {"heads", "logs", "blobs"} <= phases
        heads = [p for p in heard if p.phase == "heads"]
        assert [p.done for p in heads] == [0, 1, 2, 3] and {p.total for p in heads} == {3}
        blobs = [p.done for p in heard if p.phase == "blobs"]
        assert blobs == list(range(report.blobs + 1)) and report.blobs == 4
        logs = [p.done for p in heard if p.phase == "logs"]
        assert logs == [0, 1, 2, 3, 4] and report.logs == 4
        runs: list[Progress] = []
        assert stash.runs.reindex(on_progress=runs.append).indexed >= 0
        assert [p.done for p in runs] == [1, 2, 3, 4] and {p.phase for p in runs} == {"runs"}
