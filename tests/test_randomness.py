"""Randomness as an input: a stash's ids come from its source, a seeded one in tests."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from examples import fake_model
from stashpoint import Envelope
from stashpoint.agent import AgentCheckpoint, AgentRunner, Message
from stashpoint.clock import FakeClock
from stashpoint.randomness import SYSTEM, Randomness, SeededRandomness
from stashpoint.steps import NewId, NewWriteId
from tests.crashes import crash_at


def _session(folder: Path, randomness: Randomness) -> list[str]:
    """A run, two attempts, a log, a purge, an update and an agent: every id made."""
    with stashpoint.open(f"local://{folder}", clock=FakeClock(), randomness=randomness) as stash:
        run_id = stash.runs.create_run("graph")
        first = stash.runs.record_attempt(run_id, "node", 0)
        second = stash.runs.record_attempt(run_id, "node", 1)
        head = stash.logs.append("L", [{"text": "one"}], after=None)
        head = stash.logs.append("L", [{"text": "two"}], after=head)
        writes = [entry.write_id for entry in stash.logs.entries("L")]
        receipt = stash.admin.purge(log="L")
        created = Envelope.initial("c", None, "k", 1, {"n": 0}, write_id="w" * 22)
        stash.checkpoints.compare_and_swap(created, None)
        updated = stash.checkpoints.update("c", lambda head: {"n": head.payload["n"] + 1})
        runner = AgentRunner(AgentCheckpoint.existing("agent", stash.checkpoints))
        _, state = runner.start(
            agent="a", model=fake_model.MODEL, transcript=[Message(role="user", content="hi")]
        )
        return [
            run_id, first, second, *writes, receipt.purge_id, updated.write_id,
            state.execution_id,
        ]  # fmt: skip


def test_one_seed_gives_the_same_ids_on_every_run_and_another_seed_others(
    tmp_path: Path,
) -> None:
    one = _session(tmp_path / "a", SeededRandomness(7))
    again = _session(tmp_path / "b", SeededRandomness(7))
    other = _session(tmp_path / "c", SeededRandomness(8))
    system = _session(tmp_path / "d", SYSTEM)
    assert one == again
    assert len(set(one)) == len(one)
    assert not set(one) & set(other)
    assert not set(one) & set(system)


def test_a_shared_seeded_source_never_repeats_and_keeps_ids_in_order() -> None:
    shared = SeededRandomness("test")
    clock = FakeClock()
    made: list[list[str]] = [[] for _ in range(4)]

    def draw(mine: list[str]) -> None:
        for _ in range(500):  # bounded
            mine.append(shared.answer(NewId(), clock))
            mine.append(shared.answer(NewWriteId(), clock))

    threads = [threading.Thread(target=draw, args=(m,)) for m in made]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [value for mine in made for value in mine]
    assert len(set(every)) == len(every) == 4000
    for mine in made:
        ids = mine[::2]
        assert ids == sorted(ids)  # one fake millisecond: the sequence keeps them in order
    assert all(len(value) == 22 for mine in made for value in mine[1::2])


def test_a_seeded_id_is_dated_by_the_stashs_clock() -> None:
    clock = FakeClock()
    earlier = SeededRandomness(1).answer(NewId(), clock)
    clock.advance(86400)
    later = SeededRandomness(1).answer(NewId(), clock)
    assert earlier < later and earlier[:8] != later[:8]  # the timestamp leads a UUIDv7


def test_id_requests_are_not_storage_requests(tmp_path: Path) -> None:
    """A stash's hooks (and so crash tests and request counts) never see id requests."""
    with stashpoint.open(f"local://{tmp_path}", randomness=SeededRandomness(3)) as stash:
        with crash_at(stash, 10**6, False) as calls:
            stash.logs.append("L", [{"text": "one"}], after=None)
        assert calls and not {"NewId", "NewWriteId"} & set(calls)


@pytest.mark.parametrize("bad", ["seed", 7, None, object()])
def test_a_stash_refuses_anything_but_a_randomness(tmp_path: Path, bad: Any) -> None:
    with pytest.raises(stashpoint.ConfigurationError, match="randomness"):
        stashpoint.open(f"local://{tmp_path}", randomness=bad)


def test_an_envelope_takes_a_given_write_id_and_refuses_a_malformed_one() -> None:
    first = Envelope.initial("c", None, "k", 1, {}, write_id="a" * 22)
    assert first.write_id == "a" * 22
    assert first.next({}, write_id="b" * 22).write_id == "b" * 22
    assert first.next({}).write_id not in ("a" * 22, "b" * 22)
    with pytest.raises(stashpoint.InvalidPayload):
        first.next({}, write_id="not/a write id")
    with pytest.raises(stashpoint.InvalidPayload):
        Envelope.initial("c", None, "k", 1, {}, write_id="not/a write id")
