"""The moto fixtures users enable: a whole stack, sync in-process and async on the server."""

from __future__ import annotations

from typing import Any

import stashpoint
from stashpoint import Envelope, RunStatus


def test_sync_fixture_gives_a_working_stack(stashpoint_moto: Any) -> None:
    run_id = stashpoint_moto.runs.create_run("g")
    stashpoint_moto.runs.complete_run(run_id)
    assert [r.status for r in stashpoint_moto.runs.list_runs().items] == [RunStatus.COMPLETED]
    env = Envelope.initial("c1", run_id, "k", 1, {"n": 1})
    stashpoint_moto.checkpoints.compare_and_swap(env, None)
    stashpoint_moto.checkpoints.compare_and_swap(env.next({"n": 2}), 0)
    assert [h.revision for h in stashpoint_moto.checkpoints.history("c1")] == [0]


async def test_async_fixture_gives_a_working_stack(stashpoint_moto_async: Any) -> None:
    run_id = await stashpoint_moto_async.runs.create_run("g")
    attempt = await stashpoint_moto_async.runs.record_attempt(run_id, "n", 1, {"x": 1})
    await stashpoint_moto_async.runs.complete_attempt(attempt, {"y": 2})
    state = await stashpoint_moto_async.runs.load_run(run_id)
    assert state.attempts[0].output == {"y": 2}
    page = await stashpoint_moto_async.runs.list_runs()
    assert [r.run_id for r in page.items] == [run_id]


def test_doctor_passes_on_moto(stashpoint_moto: Any) -> None:
    checks = stashpoint_moto.admin.doctor()
    assert [c.name for c in checks if c.status == "fail"] == []
    assert {c.name for c in checks} >= {"stale ETag refused (412)", "index GSIs", "cleanup"}


def test_url_fixture_serves_separate_processes(stashpoint_moto_url: str) -> None:
    with stashpoint.open(stashpoint_moto_url) as stash:
        stash.runs.create_run("g")
        assert len(stash.runs.list_runs().items) == 1
