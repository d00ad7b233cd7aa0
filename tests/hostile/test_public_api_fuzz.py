"""Random calls with random arguments: only `StashpointError`s, and no head left unreadable.

The rule (README "Errors"): every failure of a call made with arguments of the documented
shape is a `StashpointError` with a kind, and so is every argument of the wrong type or
out of range (`InvalidArgument`, `InvalidId`, `InvalidPayload`). Only Python's own
`TypeError` for a call that does not match the signature at all (a missing or unknown
parameter) escapes, as for any function; hypothesis never makes those here.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

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


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_public_calls_raise_only_stashpoint_errors(data: st.DataObject) -> None:
    with stashpoint.open("memory://") as stash:
        seed = Envelope.initial("a", None, "k", 1, {"n": 0})
        stash.checkpoints.compare_and_swap(seed, None)
        run_id = stash.runs.create_run("g", run_id="r")
        stash.runs.record_attempt(run_id, "n", 1, {"x": 1})
        calls = _calls(stash)
        for _ in range(data.draw(st.integers(1, 6))):
            name = data.draw(st.sampled_from(sorted(calls)))
            function, strategies = calls[name]
            args = [data.draw(s) for s in strategies]
            try:
                function(*args)
            except StashpointError as exc:
                untyped = exc.kind.value == "other"
                if untyped:  # pragma: no cover - the failure this test looks for
                    raise AssertionError(f"{name}{tuple(args)!r}: untyped {exc!r}") from exc
            except Exception as exc:  # pragma: no cover - the failure this test looks for
                raise AssertionError(f"{name}{tuple(args)!r} raised {exc!r}") from exc
        # Whatever was acknowledged reads back: no head is left unreadable.
        for checkpoint_id in stash.checkpoints.list_ids():
            stash.checkpoints.load(checkpoint_id)
        for key in stash.runs.list_runs(limit=100).items:
            assert stash.runs.load_run(key.run_id) is not None


def test_nan_is_not_json() -> None:
    assert math.isnan(float("nan"))  # the fuzz relies on st.floats() drawing NaN/inf
