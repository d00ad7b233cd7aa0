"""Two invocations resume the same latest checkpoint at once: exactly one proceeds.

Each worker's saver waits at a barrier right after reading the thread's latest checkpoint,
so both have read the same head before either stores anything: the race the peers lose
(both accepted, a silent fork). Threads and processes on SeaweedFS, and through the fault
proxy.
"""

from __future__ import annotations

import multiprocessing
import operator
import threading
import uuid
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph.graph")

from botocore.config import Config
from langgraph.graph import END, START, StateGraph

import stashpoint
from stashpoint import CheckpointConflict
from stashpoint.langgraph import StashpointSaver
from tests import servers
from tests.faultproxy import FaultPlan, FaultProxy


class Chat(TypedDict):
    messages: Annotated[list[str], operator.add]


def _graph(saver: Any) -> Any:
    def reply(state: Chat) -> dict[str, Any]:
        return {"messages": [f"reply to {state['messages'][-1]}"]}

    builder = StateGraph(Chat)
    builder.add_node("reply", reply)
    builder.add_edge(START, "reply")
    builder.add_edge("reply", END)
    return builder.compile(checkpointer=saver)


class _MeetAfterReading(StashpointSaver):
    """A saver whose latest-checkpoint reads wait for the other worker's (test hook)."""

    barrier: Any = None

    def get_tuple(self, config: Any) -> Any:
        found = super().get_tuple(config)
        if self.barrier is not None and "checkpoint_id" not in config["configurable"]:
            self.barrier.wait(timeout=60)
            self.barrier = None  # only the invocation's first read meets
        return found


def _worker(url: str, options: dict[str, Any], thread_id: str, name: str, barrier: Any) -> str:
    """Resume the thread with one message; return "won" or "conflict"."""
    with stashpoint.open(url, **options) as stash:
        saver = _MeetAfterReading(stash)
        saver.barrier = barrier
        try:
            _graph(saver).invoke({"messages": [name]}, {"configurable": {"thread_id": thread_id}})
        except CheckpointConflict:
            return "conflict"
        return "won"


def _process_worker(args: tuple[Any, ...]) -> str:
    import os

    os.environ.update(
        AWS_ACCESS_KEY_ID=servers.ACCESS_KEY,
        AWS_SECRET_ACCESS_KEY=servers.SECRET_KEY,
        AWS_DEFAULT_REGION="us-east-1",
    )
    return _worker(*args)


def _start(url: str, options: dict[str, Any]) -> str:
    thread_id = f"race-{uuid.uuid4().hex[:8]}"
    with stashpoint.open(url, **options) as stash:
        _graph(StashpointSaver(stash)).invoke(
            {"messages": ["hello"]}, {"configurable": {"thread_id": thread_id}}
        )
    return thread_id


def _check(url: str, options: dict[str, Any], thread_id: str, outcomes: dict[str, str]) -> None:
    assert sorted(outcomes.values()) == ["conflict", "won"], outcomes
    winner = next(name for name, outcome in outcomes.items() if outcome == "won")
    loser = next(name for name, outcome in outcomes.items() if outcome == "conflict")
    with stashpoint.open(url, **options) as stash:
        graph = _graph(StashpointSaver(stash))
        config = {"configurable": {"thread_id": thread_id}}
        latest = graph.get_state(config).values["messages"]
        history = [s.values.get("messages", []) for s in graph.get_state_history(config)]
    assert latest == ["hello", "reply to hello", winner, f"reply to {winner}"]
    # Nothing the loser did is any checkpoint of the thread, let alone its latest.
    assert not any(loser in messages for messages in history), history


@pytest.mark.parametrize("round_", range(3))
def test_threads_resuming_the_same_head(seaweedfs: servers.S3Server, round_: int) -> None:
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}")
    thread_id = _start(url, {})
    barrier = threading.Barrier(2)
    outcomes: dict[str, str] = {}

    def run(name: str) -> None:
        outcomes[name] = _worker(url, {}, thread_id, name, barrier)

    workers = [threading.Thread(target=run, args=(f"worker-{i}",)) for i in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    _check(url, {}, thread_id, outcomes)


def test_processes_resuming_the_same_head(seaweedfs: servers.S3Server) -> None:
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}")
    thread_id = _start(url, {})
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        barrier = manager.Barrier(2)
        names = ["process-a", "process-b"]
        with context.Pool(2) as pool:
            results = pool.map(
                _process_worker, [(url, {}, thread_id, name, barrier) for name in names]
            )
    _check(url, {}, thread_id, dict(zip(names, results, strict=True)))


def test_resuming_the_same_head_through_the_fault_proxy(seaweedfs: servers.S3Server) -> None:
    plan = FaultPlan({"drop_response": 0.1, "drop_request": 0.05, "conflict": 0.05})
    options = {
        "client_config": Config(
            read_timeout=2, connect_timeout=2, retries={"mode": "standard", "max_attempts": 3}
        )
    }
    prefix = f"t-{uuid.uuid4().hex}"
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        rounds = []
        for _ in range(6):
            thread_id = _start(url, options)
            barrier = threading.Barrier(2)
            outcomes: dict[str, str] = {}

            def run(
                name: str,
                thread_id: str = thread_id,
                barrier: Any = barrier,
                outcomes: dict[str, str] = outcomes,
            ) -> None:
                outcomes[name] = _worker(url, options, thread_id, name, barrier)

            workers = [threading.Thread(target=run, args=(f"w{i}",)) for i in range(2)]
            for w in workers:
                w.start()
            for w in workers:
                w.join(timeout=120)
            rounds.append((thread_id, outcomes))
    for thread_id, outcomes in rounds:
        _check(seaweedfs.url(prefix), {}, thread_id, outcomes)
    assert plan.injected["drop_response"] > 0 and plan.injected["conflict"] > 0
