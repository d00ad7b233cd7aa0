"""Random calls with random arguments: only `StashpointError`s, and no head left unreadable.

The rule (README "Errors"): every failure of a call made with arguments of the documented
shape is a `StashpointError` with a kind, and so is every argument of the wrong type or
out of range (`InvalidArgument`, `InvalidId`, `InvalidPayload`). Only Python's own
`TypeError` for a call that does not match the signature at all (a missing or unknown
parameter) escapes, as for any function; hypothesis never makes those here.
"""

from __future__ import annotations

import contextlib
import math
import os
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stashpoint
from stashpoint import Envelope, StashpointError

IDS = st.one_of(
    st.sampled_from(["a", "job-1", "run.2", "x" * 255, "x" * 256, "", ".", "..", "a/b", "ü"]),
    st.text(max_size=12),
    st.integers(),
    st.none(),
)
SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8), st.binary(max_size=4)
)
JSONISH = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.one_of(st.text(max_size=4), st.integers()), inner, max_size=4),
        st.tuples(inner, inner),
        st.frozensets(st.integers(), max_size=3),
    ),
    max_leaves=12,
)
LIMITS = st.one_of(st.integers(min_value=-5, max_value=2000), st.floats(), st.text(max_size=3))
STATUSES = st.one_of(st.sampled_from(["running", "failed", "Running", "bogus"]), st.integers())
WHEN = st.one_of(st.none(), st.just(datetime(2026, 1, 1)), st.just(datetime.now(UTC)), IDS)


def _calls(stash: stashpoint.Stash) -> dict[str, tuple[Callable[..., Any], list[Any]]]:
    store, runs = stash.checkpoints, stash.runs
    return {
        "load": (store.load, [IDS, st.one_of(st.none(), st.integers(-2, 5))]),
        "create": (
            lambda i, p: store.compare_and_swap(Envelope.initial(i, None, "k", 1, p), None),
            [IDS, JSONISH],
        ),
        "update": (lambda i, p: store.update(i, lambda head: p), [IDS, JSONISH]),
        "delete": (store.delete, [IDS, st.one_of(st.none(), st.integers(-1, 3))]),
        "history": (store.history, [IDS, st.one_of(st.none(), st.integers(0, 3))]),
        "describe": (store.describe, [IDS]),
        "list_ids": (store.list_ids, [st.one_of(st.text(max_size=3), st.just(""))]),
        "create_run": (
            lambda g, r: runs.create_run(g, run_id=r),
            [st.one_of(st.text(max_size=5), st.integers(), st.none()), IDS],
        ),
        "record_attempt": (
            lambda r, n, a, i: runs.record_attempt(r, n, a, i),
            [IDS, st.one_of(st.text(max_size=5), st.integers()), LIMITS, JSONISH],
        ),
        "complete_attempt": (
            lambda a, o, m: runs.complete_attempt(a, o, m),
            [st.one_of(IDS, st.just("a~b")), JSONISH, st.one_of(st.none(), JSONISH)],
        ),
        "fail_attempt": (runs.fail_attempt, [st.one_of(IDS, st.just("a~b")), SCALARS]),
        "snapshot": (runs.save_state_snapshot, [IDS, JSONISH]),
        "load_run": (runs.load_run, [IDS]),
        "complete_run": (runs.complete_run, [IDS]),
        "fail_run": (runs.fail_run, [IDS, SCALARS]),
        "list_runs": (
            lambda limit, status, since: runs.list_runs(limit=limit, status=status, since=since),
            [LIMITS, st.one_of(st.none(), STATUSES), WHEN],
        ),
        "list_attempts": (
            lambda limit, status: runs.list_attempts(status, limit=limit),
            [LIMITS, STATUSES],
        ),
    }


EXAMPLES = int(os.environ.get("STASHPOINT_FUZZ_EXAMPLES", "120"))
"""Examples per fuzz test: a small profile in CI; `STASHPOINT_FUZZ_EXAMPLES=2000` locally."""

# Values that have broken typed errors before (issue 23 #23): a lone surrogate, 300-deep
# nesting, an int past 64 bits, and values of the wrong type where a number is wanted.
NASTY = st.one_of(
    st.just("\ud800"),
    st.just(2**70),
    st.just(-(2**64)),
    st.just(float("nan")),
    st.just(300).map(lambda n: _nested(n)),
    st.just(""),
    st.just(b"\xff"),
    st.just(object()),
)
ANY = st.one_of(JSONISH, NASTY)
SOME_IDS = st.one_of(st.sampled_from(["l", "r", "t", "c"]), IDS)
"""Ids of the objects the test made half the time, so calls reach storage too."""
NUMBERS = st.one_of(LIMITS, NASTY, st.none(), st.booleans(), st.just(372276706769))


def _nested(depth: int) -> Any:
    value: Any = "x"
    for _ in range(depth):
        value = [value]
    return value


def _more_calls(stash: stashpoint.Stash) -> dict[str, tuple[Callable[..., Any], list[Any]]]:
    """Logs, durable steps, conversations and the LangGraph saver."""
    from stashpoint.agent import ConversationStore, Message
    from stashpoint.langgraph import StashpointSaver

    logs, runs = stash.logs, stash.runs
    conversations = ConversationStore(stash.checkpoints)
    saver = StashpointSaver(stash)
    durable = runs.durable("r")
    messages = st.lists(
        st.one_of(
            st.builds(Message, role=st.sampled_from(["user", "tool"]), content=ANY),
            ANY,
        ),
        max_size=3,
    )
    configs = st.one_of(
        st.builds(
            lambda t, ns, c: {
                "configurable": {"thread_id": t, "checkpoint_ns": ns, "checkpoint_id": c}
            },
            SOME_IDS,
            st.one_of(st.just(""), SOME_IDS),
            st.one_of(st.none(), SOME_IDS),
        ),
        st.just({}),
        st.just({"configurable": {}}),
        ANY,
    )

    def put(config: Any, value: Any, version: Any) -> Any:
        from langgraph.checkpoint.base import empty_checkpoint

        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"c": value}
        checkpoint["channel_versions"] = {"c": version}
        metadata = {"source": "loop", "step": 0, "parents": {}}
        return saver.put(config, checkpoint, metadata, {"c": version})  # type: ignore[arg-type]

    return {
        "logs.append": (
            lambda i, r, s: logs.append(i, r, after=None, state=s),
            [SOME_IDS, st.lists(ANY, max_size=2), ANY],
        ),
        "logs.append_after": (
            lambda r, s: logs.append("l", r, after=logs.head("l"), state=s),
            [st.lists(ANY, max_size=2), ANY],
        ),
        "logs.head": (logs.head, [SOME_IDS]),
        "logs.entries": (logs.entries, [SOME_IDS, NUMBERS, st.one_of(st.none(), NUMBERS)]),
        "logs.records": (logs.records, [SOME_IDS, NUMBERS]),
        "logs.tail": (logs.tail, [SOME_IDS, NUMBERS]),
        "logs.list_page": (logs.list_page, [st.one_of(st.text(max_size=3), SOME_IDS), NUMBERS]),
        "logs.delete": (logs.delete, [SOME_IDS]),
        "durable.step": (lambda n, v: durable.step(n, lambda: v), [SOME_IDS, ANY]),
        "durable.map": (
            lambda n, items, f: durable.map(n, items, f),
            [
                SOME_IDS,
                st.one_of(st.lists(ANY, max_size=3), ANY),
                st.sampled_from([lambda x: x, 5, None]),
            ],
        ),
        "durable.wait": (lambda n, sec: durable.wait(n, seconds=sec), [SOME_IDS, NUMBERS]),
        "conversation.commit": (
            conversations.commit,
            [SOME_IDS, SOME_IDS, NUMBERS, st.one_of(messages, ANY)],
        ),
        "conversation.load": (conversations.load, [SOME_IDS, SOME_IDS]),
        "saver.put": (put, [configs, ANY, st.one_of(st.integers(1, 3), ANY)]),
        "saver.put_writes": (
            lambda c, v, t: saver.put_writes(c, [("c", v)], t),  # type: ignore[arg-type]
            [configs, ANY, SOME_IDS],
        ),
        "saver.get_tuple": (saver.get_tuple, [configs]),
        "saver.list": (lambda c, limit: [*saver.list(c, limit=limit)], [configs, NUMBERS]),
        "saver.delete_thread": (saver.delete_thread, [SOME_IDS]),
    }


def _call_randomly(
    data: st.DataObject, calls: dict[str, tuple[Callable[..., Any], list[Any]]]
) -> None:
    for _ in range(data.draw(st.integers(1, 6))):
        name = data.draw(st.sampled_from(sorted(calls)))
        function, strategies = calls[name]
        args = [data.draw(s) for s in strategies]
        try:
            function(*args)
        except StashpointError as exc:
            untyped = exc.kind.value == "other"
            if untyped:  # pragma: no cover - the failure this test looks for
                raise AssertionError(f"{name}: untyped {exc!r}") from exc
        except Exception as exc:  # pragma: no cover - the failure this test looks for
            raise AssertionError(
                f"{name}({', '.join(type(a).__name__ for a in args)}) raised {exc!r}"
            ) from exc


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_logs_durable_conversation_and_saver_calls_raise_only_stashpoint_errors(
    data: st.DataObject,
) -> None:
    with stashpoint.open("memory://") as stash:
        stash.runs.create_run("g", run_id="r")
        stash.logs.append("l", ["a"], after=None, state={"n": 0})
        _call_randomly(data, _more_calls(stash))
        # Whatever was acknowledged reads back.
        for log_id in stash.logs.list_ids():
            with contextlib.suppress(stashpoint.CheckpointNotFound):  # deleted
                stash.logs.records(log_id)


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_public_calls_raise_only_stashpoint_errors(data: st.DataObject) -> None:
    with stashpoint.open("memory://") as stash:
        seed = Envelope.initial("a", None, "k", 1, {"n": 0})
        stash.checkpoints.compare_and_swap(seed, None)
        run_id = stash.runs.create_run("g", run_id="r")
        stash.runs.record_attempt(run_id, "n", 1, {"x": 1})
        _call_randomly(data, _calls(stash))
        # Whatever was acknowledged reads back: no head is left unreadable.
        for checkpoint_id in stash.checkpoints.list_ids():
            stash.checkpoints.load(checkpoint_id)
        for key in stash.runs.list_runs(limit=100).items:
            assert stash.runs.load_run(key.run_id) is not None


def test_nan_is_not_json() -> None:
    assert math.isnan(float("nan"))  # the fuzz relies on st.floats() drawing NaN/inf


def test_the_calls_the_audit_found_untyped_raise_typed_errors() -> None:
    """Issue 23 #23, each signature the audit reported, with a Message nested 300 deep."""
    from langgraph.checkpoint.base import empty_checkpoint

    from stashpoint.agent import ConversationStore, Message
    from stashpoint.langgraph import StashpointSaver

    with stashpoint.open("memory://") as stash:
        stash.logs.append("l", ["a"], after=None, state={})
        run_id = stash.runs.create_run("g")
        durable = stash.runs.durable(run_id)
        conversations = ConversationStore(stash.checkpoints)
        saver = StashpointSaver(stash)
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"c": 2**70}
        checkpoint["channel_versions"] = {"c": 1}
        bytes_version = empty_checkpoint()
        bytes_version["channel_values"] = {"c": "v"}
        bytes_version["channel_versions"] = {"c": b"\xff"}  # type: ignore[dict-item]
        calls: dict[str, Callable[[], Any]] = {
            "a LangGraph channel version of bytes (found by the fuzz above)": lambda: saver.put(
                config,  # type: ignore[arg-type]
                bytes_version,
                {"source": "loop", "step": 0, "parents": {}},
                {"c": b"\xff"},  # type: ignore[dict-item]
            ),
            "logs.list_page('', 0)": lambda: stash.logs.list_page("", 0),
            "durable.wait(seconds=372276706769)": lambda: durable.wait("w", seconds=372276706769),
            "a lone surrogate in a run input": lambda: stash.runs.record_attempt(
                run_id, "n", 1, {"x": "\ud800"}
            ),
            "a lone surrogate in a step result": lambda: durable.step("s", lambda: "\ud800"),
            "a conversation message nested 300 deep": lambda: conversations.commit(
                "ns", "c", 0, [Message(role="user", content=_nested(300))]
            ),
            "a LangGraph value above 2**64": lambda: saver.put(
                config,  # type: ignore[arg-type]
                checkpoint,
                {"source": "loop", "step": 0, "parents": {}},
                {"c": 1},
            ),
            "logs.entries(id, '', '')": lambda: stash.logs.entries("l", "", ""),  # type: ignore[arg-type]
            "logs.tail(id, '')": lambda: stash.logs.tail("l", ""),  # type: ignore[arg-type]
            "durable.map(name, 5, fn)": lambda: durable.map("m", 5, lambda x: x),
            "durable.wait(name, seconds='')": lambda: durable.wait("w2", seconds=""),  # type: ignore[arg-type]
            "saver.list(cfg, limit='')": lambda: [*saver.list(config, limit="")],  # type: ignore[arg-type]
            "commit(ns, id, None, [])": lambda: conversations.commit("ns", "c", None, []),  # type: ignore[arg-type]
            "logs.records(id, [])": lambda: stash.logs.records("l", []),  # type: ignore[arg-type]
            "saver.get_tuple({})": lambda: saver.get_tuple({}),  # type: ignore[typeddict-item]
        }
        for name, call in calls.items():
            with pytest.raises(StashpointError) as info:
                call()
            assert info.value.kind.value != "other", name
