"""The examples users run, run here: a kill -9 mid-turn, a Lambda deadline, a spot reclaim."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import stashpoint

EXAMPLES = Path(__file__).parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))


def agent(url: str, checkpoint_id: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / "agent_kill9.py"), "--url", url, "--id", checkpoint_id, *args],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_agent_killed_mid_turn_resumes_to_the_uninterrupted_transcript(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    reference = agent(url, "reference")
    assert reference.returncode == 0, reference.stderr
    victim = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "agent_kill9.py"), "--url", url, "--id", "victim",
         "--pause-turn", "2"],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert victim.stdout is not None
    assert victim.stdout.readline().strip() == "turn 2 in flight"
    os.kill(victim.pid, signal.SIGKILL)
    assert victim.wait() == -signal.SIGKILL
    refused = agent(url, "victim")  # default policy: reject the ambiguous turn
    assert refused.returncode == 3 and "turn 2" in refused.stderr
    resumed = agent(url, "victim", "--policy", "retry")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout) == json.loads(reference.stdout)


def test_lambda_handler_stops_before_deadline_and_continues(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("STASHPOINT_URL", f"local://{tmp_path / 'stash'}")
    import lambda_agent

    monkeypatch.setattr(lambda_agent, "_stash", None)
    event = {"checkpoint_id": "lambda-run"}
    results: list[dict[str, Any]] = []
    while not results or results[-1]["status"] != "done":
        context = lambda_agent.LocalContext(budget_ms=9_000)  # a fake clock, 2 s per turn
        results.append(lambda_agent.handler(event, context, clock=context.clock))
        assert len(results) < 10
    # 9 s per invocation, 2 s per turn: after two turns 5 s are left, exactly what a third
    # is given (2 x 2 s + 1 s); after three, 3 s are left: stop and come back.
    assert [(r["status"], r["turns"]) for r in results] == [("continue", 3), ("done", 4)]
    reference = _uninterrupted(tmp_path)
    with stashpoint.open() as stash:
        from stashpoint.agent import AgentCheckpoint

        state = AgentCheckpoint.existing("lambda-run", stash.checkpoints).load()[1]
    assert state.transcript == reference.transcript
    assert results[-1]["answer"] == reference.response.message.content


def _uninterrupted(tmp_path: Path) -> Any:
    import fake_model

    from stashpoint.agent import AgentCheckpoint, AgentRunner

    with stashpoint.open(f"local://{tmp_path / 'reference'}") as stash:
        runner = AgentRunner(AgentCheckpoint.new(stash.checkpoints))
        return runner.run(fake_model.turn, agent="researcher", model=fake_model.MODEL,
                          transcript=fake_model.opening())  # fmt: skip


def test_spot_worker_flushes_on_sigterm_and_the_next_one_finishes(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    command = [sys.executable, str(EXAMPLES / "spot_worker.py"), "--url", url, "--id", "batch",
               "--items", "3000", "--every", "500"]  # fmt: skip
    first = subprocess.Popen([*command, "--delay", "0.001"], stdout=subprocess.PIPE, text=True)
    assert first.stdout is not None
    assert first.stdout.readline().startswith("worker starts at item 0")
    assert first.stdout.readline().startswith("checkpoint at item 500")
    first.send_signal(signal.SIGTERM)  # the reclaim notice
    out, _ = first.communicate(timeout=60)
    assert first.returncode == 0
    flushed = int(out.strip().splitlines()[-1].split()[-1])
    assert "SIGTERM: flushed at item" in out and 500 < flushed < 3000
    with stashpoint.open(url) as stash:
        assert _snapshot(stash, "batch")["cursor"] == flushed  # nothing lost
    second = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
    assert second.stdout.startswith(f"worker starts at item {flushed}")
    with stashpoint.open(url) as stash:
        final = _snapshot(stash, "batch")
        run = stash.runs.load_run("batch")
    assert final == {"cursor": 3000, "sums": sum(i * i for i in range(3000)), "workers": 2}
    assert run is not None and run.status is stashpoint.RunStatus.COMPLETED
    assert {a.status.value for a in run.attempts} == {"completed"}  # the first flushed cleanly


def _snapshot(stash: stashpoint.Stash, run_id: str) -> dict[str, Any]:
    run = stash.runs.load_run(run_id)
    assert run is not None
    return dict(run.state_snapshot)


def test_a_frozen_spot_worker_is_fenced_after_another_takes_over(tmp_path: Path) -> None:
    """A reclaimed instance may run on for a while: it must not overwrite its successor."""
    url = f"local://{tmp_path / 'stash'}"
    command = [sys.executable, str(EXAMPLES / "spot_worker.py"), "--url", url, "--id", "batch",
               "--items", "3000", "--every", "500"]  # fmt: skip
    zombie = subprocess.Popen([*command, "--delay", "0.001"], stdout=subprocess.PIPE, text=True)
    assert zombie.stdout is not None
    assert zombie.stdout.readline().startswith("worker starts at item 0")
    assert zombie.stdout.readline().startswith("checkpoint at item 500")
    zombie.send_signal(signal.SIGSTOP)  # frozen, as if reclaimed without a notice
    try:
        second = subprocess.run(command, capture_output=True, text=True, timeout=120, check=True)
        assert second.stdout.startswith("worker starts at item 500")
        with stashpoint.open(url) as stash:
            finished = stash.runs.load_run("batch")
    finally:
        zombie.send_signal(signal.SIGCONT)  # it wakes up and goes on where it was
    out, _ = zombie.communicate(timeout=120)
    assert zombie.returncode == 3 and "fenced: another worker took this run over" in out
    with stashpoint.open(url) as stash:
        after = stash.runs.load_run("batch")
    assert after == finished  # nothing of the zombie was stored
    assert after is not None and after.state_snapshot == {
        "cursor": 3000, "sums": sum(i * i for i in range(3000)), "workers": 2,
    }  # fmt: skip
    statuses = [(a.attempt, a.status.value, a.epoch) for a in after.attempts]
    assert statuses[0] == (0, "completed", 0) and statuses[1] == (500, "failed", 0)
    assert all(status == "completed" and epoch == 1 for _, status, epoch in statuses[2:])


def test_lambda_example_runs_locally_with_a_fake_context(tmp_path: Path) -> None:
    command = [sys.executable, str(EXAMPLES / "lambda_agent.py"), "--local", "--url",
               f"local://{tmp_path / 'stash'}", "--checkpoint-id", "local-run"]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    # 6.5 s per invocation, turns of 2 s: after the first turn of an invocation, 4.5 s are
    # left and a second turn is given 2 x 2 s + 1 s, so each invocation runs one turn.
    assert [(r["status"], r["turns"]) for r in lines] == [
        ("continue", 1), ("continue", 2), ("continue", 3), ("done", 4),
    ]  # fmt: skip
    assert "42" in lines[-1]["answer"]


def test_a_fleet_map_on_an_array_of_children_finishes_every_item_once(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "fleet_batch.py"), "--url", url, "--map", "array",
         "--items", "1500", "--local", "3"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    children = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert sorted(c["child"] for c in children) == [0, 1, 2]
    assert sum(c["batches"] for c in children) == 15  # every batch by one child
    assert done.stdout.splitlines()[-1] == "completed: 1500 ok, 0 failed of 1500"
    with stashpoint.open(url) as stash:
        values = [r.value for r in stash.runs.fleet("array").results()]
    assert values == [n * n for n in range(1500)]


def _approval(url: str, run_id: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "approval_agent.py"), "--url", url, "--id", run_id],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return dict(json.loads(done.stdout))


def test_an_approval_suspends_the_agent_until_a_human_answers_through_the_cli(
    tmp_path: Path,
) -> None:
    from tests.cli.test_cli import cli

    url = f"local://{tmp_path / 'stash'}"
    first = _approval(url, "refund-7")
    assert first["status"] == "waiting" and first["reason"] == "event"
    assert _approval(url, "refund-7") == first  # invoked again early: still waiting, same token
    assert "refund-7" not in cli("runs", "due", url=url).stdout
    cli("runs", "redeem", first["token"], "--payload", '{"approved": true, "by": "ana"}', url=url)
    assert "refund-7" in cli("runs", "due", url=url).stdout  # the approval makes it due
    done = _approval(url, "refund-7")
    assert done == {"status": "done", "answer": "Refund: paid 120 for order A-7 (approved by ana)."}
    with stashpoint.open(url) as stash:
        state = stash.runs.load_run("refund-7")
        assert state is not None and state.status.value == "completed"
        calls = [a.node_id for a in state.attempts if a.node_id.startswith(("model", "pay"))]
        assert calls == ["model-1", "pay", "model-2"]  # nothing ran twice across invocations
    declined = _approval(url, "refund-8")
    cli("runs", "signal", "refund-8", "approval", "--payload", '{"approved": false}', url=url)
    assert _approval(url, "refund-8")["answer"] == ("Refund: not paid: declined by the approver.")
    assert declined["token"] != first["token"]


def test_strands_lambda_handler_answers_every_prompt_once_under_a_double_submit(
    tmp_path: Path,
) -> None:
    pytest.importorskip("strands")
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "strands_lambda.py"), "--local",
         "--url", f"local://{tmp_path / 'stash'}", "--session-id", "s-1"],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    results = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["status"] for r in results] == ["done"] * 5
    assert sorted(r["answer"] for r in results[2:4]) == [
        "You asked: Cancel it.", "You asked: No, keep it.",
    ]  # fmt: skip
    with stashpoint.open(f"local://{tmp_path / 'stash'}") as stash:
        from stashpoint.strands_agents import StashSessionRepository

        repository = StashSessionRepository(stash)
        assert repository.read_session("s-1") is not None
        texts = [
            m.message["content"][0]["text"] for m in repository.list_messages("s-1", "default")
        ]
    prompts = texts[0::2]
    assert texts[1::2] == [f"You asked: {p}" for p in prompts] and len(prompts) == 5


def test_pydantic_ai_spot_worker_killed_resumes_without_billing_twice(tmp_path: Path) -> None:
    pytest.importorskip("pydantic_ai")
    billed = tmp_path / "billed.log"
    command = [sys.executable, str(EXAMPLES / "pydantic_ai_spot.py"), "--url",
               f"local://{tmp_path / 'stash'}", "--id", "b", "--tickets", "6",
               "--billed", str(billed), "--lease", "1"]  # fmt: skip
    first = subprocess.Popen([*command, "--delay", "0.2"], stdout=subprocess.PIPE, text=True)
    assert first.stdout is not None
    assert first.stdout.readline().startswith("b-0 answered")
    assert first.stdout.readline().startswith("b-1 answered")
    import time

    time.sleep(0.3)  # inside ticket 2: its first model request journaled or in flight
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    second = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert second.returncode == 0, second.stderr[-3000:]
    answered = [line.split()[0] for line in second.stdout.splitlines()[:-1]]
    assert answered == ["b-2", "b-3", "b-4", "b-5"]  # 0 and 1 were answered: skipped
    requests = billed.read_text().splitlines()
    assert set(requests) == {f"ticket-{n} request {m}" for n in range(6) for m in (1, 3)}
    # At most the one request cut off by the kill is billed twice; none answered is again.
    assert len(requests) - len(set(requests)) <= 1
