"""Agent transcripts on SeaweedFS: the log (each save O(delta)) against whole-envelope saves.

A coding-agent conversation: each turn appends an assistant message with a tool call and a
tool result of 1-3 KB of real source text (slices of the standard library's own files).
Both paths run in the same process on the same server:

- baseline: what every save did before logs, a whole-envelope compare-and-swap of the
  full state (in-flight marker, then commit), through `stash.checkpoints`;
- log: `AgentRunner` as users run it (an append of the phase, then of the new messages).

Printed: bytes sent in PUT bodies / zstd size of the final transcript; PUTs per turn;
turn p50 late / early; requests and round trips to resume (whole transcript, and state plus
the last 20 messages).

    .venv/bin/python -m bench.log_bench [--turns 1000] [--baseline-turns 200]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sysconfig
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import zstandard

import stashpoint
from stashpoint import Envelope
from stashpoint.agent import (
    AGENT_KIND,
    AgentCheckpoint,
    AgentCheckpointState,
    AgentRunner,
    Message,
    ModelRef,
    ModelResponse,
    ReadyForTurn,
    ToolCall,
    TurnInFlight,
    TurnResult,
)
from stashpoint.stores.objects import PutObject
from tests import servers

MODEL = ModelRef(provider="anthropic", name="claude")


def _sources(seed: int = 11) -> Callable[[], str]:
    """Return a function giving 1-3 KB slices of real source text."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = sorted(root.rglob("*.py"))
    rng = random.Random(seed)
    # A coding agent reads many files, some more than once: 400 files of over 4 KB.
    texts = [t for f in rng.sample(files, 1200) if len(t := f.read_text(errors="replace")) > 4000]
    texts = texts[:400]

    def slice_() -> str:
        text = rng.choice(texts)
        size = rng.randint(1000, 3000)
        start = rng.randint(0, len(text) - size)
        return text[start : start + size]

    return slice_


def _turn_messages(number: int, source: Callable[[], str]) -> list[Message]:
    call = ToolCall(id=f"call_{number}", name="read_file", arguments={"path": f"src/m{number}.py"})
    return [
        Message(role="assistant", content=f"Reading module {number}.", tool_calls=[call]),
        Message(role="tool", content=source(), tool_call_id=f"call_{number}"),
    ]


class _Meter:
    """Counts object requests and PUT body bytes; records each request's interval."""

    def __init__(self, stash: stashpoint.Stash) -> None:
        self.bytes = 0
        self.sealed_bytes = 0
        self.requests: Counter[str] = Counter()
        self.intervals: list[tuple[float, float]] = []
        self._lock = threading.Lock()

        def hook(request: Any, proceed: Callable[[], Any]) -> Any:
            if request.for_index:
                return proceed()
            start = time.perf_counter()
            try:
                return proceed()
            finally:
                with self._lock:
                    self.requests[type(request).__name__] += 1
                    if isinstance(request, PutObject):
                        self.bytes += len(request.body)
                        if "/sealed/" in request.key:
                            self.sealed_bytes += len(request.body)
                    self.intervals.append((start, time.perf_counter()))

        stash.intercept(hook)

    def reset(self) -> None:
        self.bytes = 0
        self.sealed_bytes = 0
        self.requests.clear()
        self.intervals.clear()

    def rounds(self) -> int:
        """Sequential round trips: requests that overlap in time count once."""
        count, end = 0, float("-inf")
        for start, stop in sorted(self.intervals):
            if start > end:
                count += 1
                end = stop
            else:
                end = max(end, stop)
        return count


def _final_size(transcript: list[Message]) -> int:
    raw = json.dumps([m.model_dump(mode="json") for m in transcript]).encode()
    return len(zstandard.ZstdCompressor(level=3).compress(raw))


def _log_path(
    stash: stashpoint.Stash, turns: int, source: Callable[[], str], *, one_at_a_time: bool
) -> dict[str, Any]:
    """`AgentRunner.run` (a commit also marks the next turn) or `run_turn` turn by turn."""
    meter = _Meter(stash)
    handle = AgentCheckpoint.new(stash.checkpoints)
    runner = AgentRunner(handle)
    opening = [Message(role="user", content="Refactor the storage layer.")]
    cursor, state = runner.start(agent="coder", model=MODEL, transcript=opening)
    times: list[float] = []
    if one_at_a_time:
        for number in range(1, turns + 1):
            messages = _turn_messages(number, source)
            start = time.perf_counter()
            state = runner.run_turn(cursor, state, lambda s, n, m=messages: TurnResult(messages=m))
            times.append(time.perf_counter() - start)
    else:
        ticks = [time.perf_counter()]
        final = Message(role="assistant", content="Done.")

        def turn(state: AgentCheckpointState, number: int) -> TurnResult:
            # The time between two model calls is the turn's storage cost.
            now = time.perf_counter()
            times.append(now - ticks[-1])
            messages = _turn_messages(number, source)
            ticks.append(time.perf_counter())
            if number == turns:
                return TurnResult(messages=[final], response=ModelResponse(message=final))
            return TurnResult(messages=messages)

        outcome = runner.run(turn, agent="coder", model=MODEL, max_turns=turns + 1)
        state = handle.load()[1]
        assert outcome.transcript == state.transcript
    sent, puts = meter.bytes, meter.requests["PutObject"]
    sealed = meter.sealed_bytes
    print(
        f"  log, {turns} turns: entries {(sent - sealed) / 1024:.0f} KB, "
        f"sealed segments {sealed / 1024:.0f} KB"
    )
    meter.reset()
    loaded = handle.load()[1]
    assert loaded.transcript == state.transcript
    resume = (sum(meter.requests.values()), meter.rounds())
    meter.reset()
    tail = handle.load_tail(20)
    assert tail.state.transcript == state.transcript[-20:]
    tail_cost = (sum(meter.requests.values()), meter.rounds())
    return _figures(turns, sent, puts, times, state.transcript, resume, tail_cost)


def _baseline(stash: stashpoint.Stash, turns: int, source: Callable[[], str]) -> dict[str, Any]:
    """Whole-envelope saves, as before logs: every save sends the whole state."""
    meter = _Meter(stash)
    store = stash.checkpoints
    state = AgentCheckpointState(
        execution_id="e", agent="coder", model=MODEL,
        transcript=[Message(role="user", content="Refactor the storage layer.")],
    )  # fmt: skip
    envelope = Envelope.initial(f"b-{uuid.uuid4().hex}", None, AGENT_KIND, 1, state.to_payload())
    store.compare_and_swap(envelope, None)
    times = []
    for number in range(1, turns + 1):
        messages = _turn_messages(number, source)
        start = time.perf_counter()
        flight = state.model_copy(update={"phase": TurnInFlight(turn=number)})
        following = envelope.next(flight.to_payload())
        store.compare_and_swap(following, envelope.revision)
        envelope = following
        state = state.model_copy(
            update={"transcript": [*state.transcript, *messages], "turns": number,
                    "phase": ReadyForTurn()}
        )  # fmt: skip
        following = envelope.next(state.to_payload())
        store.compare_and_swap(following, envelope.revision)
        envelope = following
        times.append(time.perf_counter() - start)
    sent, puts = meter.bytes, meter.requests["PutObject"]
    meter.reset()
    store.load(envelope.id)
    resume = (sum(meter.requests.values()), meter.rounds())
    return _figures(turns, sent, puts, times, state.transcript, resume, resume)


def _figures(
    turns: int,
    sent: int,
    puts: int,
    times: list[float],
    transcript: list[Message],
    resume: tuple[int, int],
    tail: tuple[int, int],
) -> dict[str, Any]:
    early = statistics.median(times[9:30]) if turns >= 30 else statistics.median(times)
    late = statistics.median(times[-21:])
    final = _final_size(transcript)
    return {
        "turns": turns,
        "sent/final": sent / final,
        "final KB": final / 1024,
        "PUTs/turn": puts / turns,
        "p50 late/early": late / early,
        "p50 early ms": early * 1000,
        "resume req/rt": f"{resume[0]}/{resume[1]}",
        "tail-20 req/rt": f"{tail[0]}/{tail[1]}",
    }


def run(server: servers.S3Server, turns: int, baseline_turns: int, turn_by_turn: bool) -> None:
    source = _sources()
    rows = []
    with stashpoint.open(server.url(f"bench-{uuid.uuid4().hex}")) as stash:
        rows.append(("whole envelope", _baseline(stash, baseline_turns, source)))
    for count in sorted({baseline_turns, turns}):
        paths = [("log, run()", False)] + ([("log, run_turn()", True)] if turn_by_turn else [])
        for label, one_at_a_time in paths:
            with stashpoint.open(server.url(f"bench-{uuid.uuid4().hex}")) as stash:
                figures = _log_path(stash, count, source, one_at_a_time=one_at_a_time)
                rows.append((label, figures))
    columns = list(rows[0][1])
    print("agent transcript on SeaweedFS: whole-envelope saves vs the log, same run")
    print(f"{'path':18}" + "".join(f"{c:>16}" for c in columns))
    for name, figures in rows:
        cells = "".join(
            f"{v:>16.2f}" if isinstance(v, float) else f"{v!s:>16}" for v in figures.values()
        )
        print(f"{name:18}{cells}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--baseline-turns", type=int, default=200)
    parser.add_argument(
        "--no-run-turn", action="store_true", help="Skip the turn-by-turn (run_turn) path."
    )
    args = parser.parse_args()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", servers.ACCESS_KEY)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", servers.SECRET_KEY)
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with tempfile.TemporaryDirectory() as data:
        server = servers.start_seaweedfs(Path(data))
        try:
            run(server, args.turns, args.baseline_turns, not args.no_run_turn)
        finally:
            servers.stop(server)


if __name__ == "__main__":
    main()
