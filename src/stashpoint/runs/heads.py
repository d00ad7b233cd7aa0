"""A run's head: read it, apply a pure transition and append it (the one loop).

The base of the run operations (`runs.operations`): `RunHeads` reads a run's head or its
whole log, applies transitions (`runs.transitions`) after the version it read, indexes each
change after storage (`runs.index`), and resolves blobs. The checks of arguments every
operation shares live here too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import pydantic

from stashpoint.cache import Lru
from stashpoint.errors import (
    AttemptNotFound,
    CheckpointNotFound,
    ConfigurationError,
    GraphDriftError,
    InvalidArgument,
    Purged,
    RunNotFound,
    StashpointError,
    described,
)
from stashpoint.ids import validate_id
from stashpoint.logs.format import LogKeys
from stashpoint.logs.log import LogHead, LogSteps
from stashpoint.logs.state import Known, LoggedState
from stashpoint.retry import RetryPolicy
from stashpoint.runs import journal, transitions
from stashpoint.runs.index import RunIndex
from stashpoint.runs.journal import parse_head
from stashpoint.runs.models import (
    RUN_LOG_KIND,
    RUN_LOG_SCHEMA_VERSION,
    AttemptRow,
    RunHead,
    RunState,
    RunSummary,
)
from stashpoint.runs.transitions import Change
from stashpoint.status import AttemptStatus, RunStatus
from stashpoint.steps import Now, Steps, ask
from stashpoint.stores.blobs import Blobs

RUN_RETRY = RetryPolicy(max_attempts=400, base_delay=0.005, max_delay=0.25)
"""Retry policy of transition loops: many workers may update one run at once. A worker
that just won appends again from its cached head in one round trip while one that lost
reads first, so on a busy machine a loser can lose many times in a row: 400 tries (about
100 s at the longest delay) before the last conflict is raised."""

CLOCK_SKEW = timedelta(seconds=5)
"""How far apart two workers' clocks may be: a lease counts as run out only this long
after its expiry, read on the lister's clock against the expiry the worker wrote on its
own. Safety never rests on it: a worker that takes over an attempt wrongly judged
abandoned fences the other, which then stores nothing."""

_HELD_RUNS = 65_536
"""Runs whose owner epoch a store remembers (the most recently created or taken over)."""

ATTEMPT_SEPARATOR = "~"
"""Separates the run id from the unique part of an attempt id (`{run_id}~{uuid7}`)."""


def run_of(attempt_id: str) -> str:
    """Return the run id embedded in an attempt id (no scan needed to find the run)."""
    if not isinstance(attempt_id, str):
        raise InvalidArgument(f"attempt id must be a str, not {described(attempt_id)}")
    run_id, sep, _ = attempt_id.rpartition(ATTEMPT_SEPARATOR)
    if not sep or not run_id:
        raise AttemptNotFound("not an attempt id of this library", object_name=attempt_id)
    return run_id


def check_text(value: object, name: str, *, optional: bool = False) -> Any:
    """Return `value` if it is a non-empty str (or None when `optional`), else refuse it."""
    if value is None and optional:
        return None
    if not isinstance(value, str) or not value:
        raise InvalidArgument(f"{name} must be a non-empty str, not {described(value)}")
    return value


def check_type(value: object, kind: type[Any], name: str, *, optional: bool = True) -> Any:
    """Return `value` if it is a `kind` (or None when `optional`), else refuse it."""
    if value is None and optional:
        return None
    if not isinstance(value, kind):
        raise InvalidArgument(f"{name} must be a {kind.__name__}, not {type(value).__name__}")
    return value


def check_status(value: object, kind: type[RunStatus] | type[AttemptStatus]) -> Any:
    """Return `value` as a member of `kind` (None for None); an unknown one is refused."""
    if value is None:
        return None
    try:
        return kind(str(value)) if isinstance(value, str) else kind(value)  # type: ignore[arg-type]
    except ValueError:
        known = ", ".join(m.value for m in kind)
        raise InvalidArgument(f"unknown status {value!r}: use one of {known}") from None


def check_seconds(value: object, name: str) -> float | None:
    """Return a duration (a timedelta, or seconds) as seconds > 0, None for None."""
    if value is None:
        return None
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if type(seconds) not in (int, float) or not 0 < seconds < 10**9:  # type: ignore[operator]
        raise InvalidArgument(f"{name} must be a positive duration, not {described(value)}")
    return float(seconds)  # type: ignore[arg-type]


def check_moment(value: object, name: str) -> datetime | None:
    """Return `value` if it is a timezone-aware datetime (or None), else refuse it."""
    if value is not None and (not isinstance(value, datetime) or value.tzinfo is None):
        raise InvalidArgument(f"{name} must be a timezone-aware datetime, not {described(value)}")
    return value


@dataclass(frozen=True)
class RunRead:
    """A whole run read once (`read_run`)."""

    state: RunState
    """The run with every attempt, blobs resolved."""
    revision: int
    """The run's revision when read."""
    running: list[AttemptRow]
    """Its running attempts, with their leases."""


@dataclass(frozen=True)
class TakenOver:
    """The outcome of `take_over_read`."""

    epoch: int
    """The new owner epoch."""
    at: datetime
    """When the takeover was written (when the attempts it ended, ended)."""
    unchanged: bool
    """Whether nothing was written to the run between the read and the takeover."""


class _RunForm:
    """How a run's head is kept in its log (`logs.state.StateForm`)."""

    kind = RUN_LOG_KIND
    schema_version = RUN_LOG_SCHEMA_VERSION

    def __init__(self, keys: LogKeys) -> None:
        self.keys = keys

    def parse(self, head: LogHead) -> RunHead:
        """Return the typed run head a log's latest version stores."""
        name = self.keys.entries_prefix(head.log_id)
        return parse_head(head.state, head.kind, head.schema_version, head.log_id, name)

    def document(self, state: RunHead) -> dict[str, Any]:
        """Return what an entry stores of the head."""
        return journal.head_document(state)


def revision_of(known: Known[RunHead]) -> int:
    """Return the run's revision (what the index items of this head carry)."""
    return known.state.revision_base + known.version


def no_run(run_id: str) -> Callable[[], RunHead]:
    """Return the start of a run's state that has no log: `RunNotFound`."""

    def missing() -> RunHead:
        raise RunNotFound("no run with this id", object_name=run_id)

    return missing


class RunHeads:
    """A run store's heads and the one transition loop; see `RunOperations`."""

    def __init__(
        self,
        logs: LogSteps,
        blobs: Blobs,
        index: RunIndex | None,
        execute: Callable[[Any], Any],
        *,
        retry: RetryPolicy = RUN_RETRY,
        cache_size: int = 1024,
        fleet_logs: LogSteps | None = None,
    ) -> None:
        self._logs = logs
        self._fleet_logs = fleet_logs
        self._blobs = blobs
        self._index = index
        self.driver = execute
        """Runs this object's requests: what its operations' steps are driven with."""
        self._retry = retry
        # The one log-backed state: the last head this process wrote or read per run lets
        # a single writer append with one PUT and no read (a stale one costs a conflict).
        self._runs = LoggedState(
            logs,
            _RunForm(logs.keys),
            retry=retry,
            max_attempts=retry.max_attempts,
            cache_size=cache_size,
        )
        # The owner epoch this store holds per run (from create_run or takeover): its writes
        # to that run are refused with `Fenced` once another store takes the run over.
        self._epochs: Lru[str, int] = Lru(_HELD_RUNS)
        self.clock_skew = CLOCK_SKEW
        """How long after its expiry a lease counts as run out (`CLOCK_SKEW`)."""

    def _revision_now(self, run_id: str) -> Callable[[], Steps[int | None]]:
        """Return steps that read the run's current revision afresh."""

        def read() -> Steps[int | None]:
            try:
                known = yield from self._read(run_id)
            except RunNotFound:
                return None
            return revision_of(known)

        return read

    def _require_index(self) -> RunIndex:
        if self._index is None:
            raise ConfigurationError(
                "this stash has no index: open it with ?index=dynamodb://TABLE (S3) or use the "
                "local default, which keeps one in SQLite"
            )
        return self._index

    def _name(self, run_id: str) -> str:
        return self._logs.keys.entries_prefix(run_id)

    def _read(self, run_id: str) -> Steps[Known[RunHead]]:
        """Read the run's latest head (its log's); `RunNotFound` if there is none."""
        validate_id(run_id, what="run id")
        return (yield from self._runs.read(run_id, no_run(run_id)))

    def _read_all(self, run_id: str) -> Steps[tuple[Known[RunHead], RunState] | None]:
        """Read the whole run (every attempt): its log folded (None: no such run)."""
        validate_id(run_id, what="run id")
        try:
            entries = yield from self._logs.entries(run_id)
        except Purged:
            raise  # erased on purpose: said so, not passed off as never having existed
        except CheckpointNotFound:
            return None
        known = self._runs.known_of(LogHead.of(entries[-1]))
        state = journal.fold(
            known.state, (r for e in entries for r in e.records), self._name(run_id)
        )
        self._runs.remember(run_id, known)
        return known, state

    def _load_run(
        self, run_id: str, graph_hash: str | None, allow_graph_drift: bool, resolve_blobs: bool
    ) -> Steps[RunState | None]:
        read = yield from self._read_all(run_id)
        if read is None:
            return None
        known, state = read
        if (
            graph_hash is not None
            and state.graph_hash is not None
            and state.graph_hash != graph_hash
            and not allow_graph_drift
        ):
            raise GraphDriftError(run_id, stored_hash=state.graph_hash, current_hash=graph_hash)
        if self._index is not None:
            # The index is derived: a failed repair must not fail a read.
            rows = journal.rows_of(known.state, state)
            with contextlib.suppress(StashpointError):
                yield from self._index.repair(
                    known.state, rows, revision_of(known), self._revision_now(run_id)
                )
        if resolve_blobs:
            state = yield from self._resolve(state)
        return state

    def _finish_run(self, run_id: str, status: RunStatus, error: str | None) -> Steps[None]:
        yield from self._apply(
            run_id, lambda head, now: transitions.finish_run(head, status, error=error, now=now)
        )

    def _hold(self, run_id: str, epoch: int) -> None:
        self._epochs.put(run_id, epoch)

    def _apply(
        self,
        run_id: str,
        transition: Callable[[RunHead, datetime], Change],
        *,
        claim: bool = False,
        seen: list[int] | None = None,
    ) -> Steps[RunHead]:
        """Apply a pure transition to the latest head and append it; retry a lost race.

        A cached head is tried first (no read); if the transition refuses it, it is judged
        again on a fresh read, since a stale copy may be what it objected to. Ending an
        attempt the fresh head does not have running reads the whole run to say why. A
        store holding an owner epoch for the run (`create_run`, `takeover`) is refused with
        `Fenced` once the run's epoch moved past it; `claim` (a takeover) is not. `seen`
        gets the revision of each head the transition was applied to (the last one won).
        """
        epoch = None if claim else self._epochs.get(run_id)

        def change(known: Known[RunHead], fresh: bool) -> Steps[Change]:
            if seen is not None:
                seen.append(revision_of(known))
            transitions.check_owner(known.state, epoch)
            now = yield from ask(Now())
            try:
                return transition(known.state, now)
            except AttemptNotFound as exc:
                read = (yield from self._read_all(run_id)) if fresh else None
                if read is None:
                    raise
                raise journal.not_running(read[1], exc.object_name or "") from None
            except pydantic.ValidationError as exc:
                raise InvalidArgument(f"invalid run data: {exc}", object_name=run_id) from None

        def write(known: Known[RunHead], change: Change) -> Steps[RunHead]:
            if change.unchanged:
                return change.head  # already so: nothing to write
            yield from self._append(known, change)
            if claim:
                self._hold(run_id, change.head.epoch)
            return change.head

        validate_id(run_id, what="run id")
        return (yield from self._runs.update(run_id, change, write, initial=no_run(run_id)))

    def _append(self, known: Known[RunHead], change: Change) -> Steps[None]:
        """Append a change after `known` (no log: create the run's), then index it."""
        run_id = change.head.run_id
        saved = yield from self._runs.append(run_id, known.log, list(change.records), change.head)
        if self._index is not None:
            yield from self._index.record(
                change.head, change.touched, revision_of(saved), before=known.state
            )

    def _resolve(self, state: RunState) -> Steps[RunState]:
        attempts = []
        for record in state.attempts:
            resolved_input = yield from self._blobs.resolve(record.input)
            resolved_output = yield from self._blobs.resolve(record.output)
            attempts.append(
                record.model_copy(update={"input": resolved_input, "output": resolved_output})
            )
        snapshot = {}
        for key, value in state.state_snapshot.items():
            snapshot[key] = yield from self._blobs.resolve(value)
        signals = {}
        for name, signal in state.signals.items():
            payload = yield from self._blobs.resolve(signal.payload)
            signals[name] = signal.model_copy(update={"payload": payload})
        return state.model_copy(
            update={"attempts": tuple(attempts), "state_snapshot": snapshot, "signals": signals}
        )


def summary_of(state: RunState) -> RunSummary:
    """Return the summary of a whole run: what ran, how often, how it ended."""
    trace_id = next(
        (a.meta["trace_id"] for a in state.attempts if isinstance(a.meta.get("trace_id"), str)),
        None,
    )
    trace_ctx = next((a.trace_ctx for a in state.attempts if a.trace_ctx), state.trace_ctx)
    return RunSummary(
        run_id=state.run_id,
        graph_name=state.graph_name,
        status=state.status,
        total_nodes_executed=len({a.node_id for a in state.attempts}),
        total_attempts=len(state.attempts),
        failed_attempts=sum(1 for a in state.attempts if a.status is AttemptStatus.FAILED),
        trace_id=trace_id,
        trace_ctx=trace_ctx,
        started_at=state.created_at,
        finished_at=None if state.status is RunStatus.RUNNING else state.updated_at,
    )
