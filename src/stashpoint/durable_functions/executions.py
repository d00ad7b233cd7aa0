"""Durable executions kept in logs: one log per execution, one append per change.

Each entry's records are the operations it changed and the events it added
(`operations.Change`); its state is the execution's small `ExecutionState` (status, the
invocation holding it, when it is due). The newest entry alone says where an execution
stands, so a worker looking for due work reads one object per execution; the operations
and the history are the fold of every entry's records.

Every change goes through the log engine's compare-and-swap: of two writers that append
after the same version exactly one wins, so a checkpoint token (which names the version
its invocation last wrote) cannot overwrite what another invocation wrote. The views this
process read or wrote are cached (the one `cache.Lru`), so an invocation's checkpoints
cost one request each, not a read and a write. Free of I/O, like every step.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from stashpoint.cache import Lru
from stashpoint.durable_functions.operations import Change, ExecutionState, ExecutionView
from stashpoint.errors import (
    CheckpointConflict,
    CheckpointNotFound,
    DurableExecutionNotFound,
    InvalidDurableUpdate,
)
from stashpoint.logs.log import LogHead, LogSteps
from stashpoint.steps import Sleep, Steps, ask

KIND = "stashpoint.durable-execution"
"""The entries' kind."""
SCHEMA_VERSION = 1
"""The entries' schema version."""
MAX_ATTEMPTS = 32
"""Most appends one update tries before its last lost race is raised."""


@dataclass(slots=True)
class Held:
    """An execution as this process last read or wrote it: its log head and view."""

    head: LogHead
    """The log version the view stands at."""
    view: ExecutionView
    """The operations, history and state at that version."""


class Executions:
    """The durable executions of one stash: read, create and change them, as steps."""

    def __init__(self, logs: LogSteps, *, cache_size: int = 256) -> None:
        self.logs = logs
        """The log namespace executions live in."""
        self._held: Lru[str, Held] = Lru(cache_size)
        self._locks: Lru[str, threading.RLock] = Lru(4096)
        self._locks_lock = threading.Lock()

    def lock(self, execution_id: str) -> threading.RLock:
        """Return the lock this process's changes to one execution take turns under."""
        with self._locks_lock:
            lock = self._locks.get(execution_id)
            if lock is None:
                lock = threading.RLock()
                self._locks.put(execution_id, lock)
            return lock

    def cached(self, execution_id: str) -> Held | None:
        """Return the execution as this process last read or wrote it, if remembered."""
        return self._held.get(execution_id)

    def read(self, execution_id: str) -> Steps[Held]:
        """Read the execution's newest version (never trusting the cache) and remember it.

        Only the entries after the version this process holds are read.
        `DurableExecutionNotFound` if there is no such execution.
        """
        found = yield from self.read_if(execution_id, lambda _: True)
        assert isinstance(found, Held)
        return found

    def read_if(
        self, execution_id: str, wanted_if: Callable[[ExecutionState], bool]
    ) -> Steps[Held | tuple[LogHead, ExecutionState]]:
        """Read the newest version as `read` does if `wanted_if(its state)`; else only its head.

        A worker that looks at an execution another took a moment ago reads one object,
        not the entries it has not seen (the newest entry's state says it is not due).
        Returns the head and its state when not wanted (nothing remembered).
        """
        held = self._held.get(execution_id)
        skipped: list[ExecutionState] = []

        def wanted(top: LogHead) -> range:
            if not top.ended:
                state = ExecutionState.parse(top.state)
                if not wanted_if(state):
                    skipped.append(state)
                    return range(0)
            first = (
                top.base if held is None or held.head.base != top.base else held.head.version + 1
            )
            return range(first, top.version + 1)

        try:
            head, found, _ = yield from self.logs.head_with(execution_id, wanted)
        except CheckpointNotFound:
            raise DurableExecutionNotFound(
                "no such durable execution", object_name=execution_id
            ) from None
        if head.ended:
            raise DurableExecutionNotFound(
                "the durable execution was deleted", object_name=execution_id
            )
        if skipped:
            return head, skipped[0]
        if held is not None and head.version <= held.head.version and head.base == held.head.base:
            return held  # nothing newer than what this process holds
        state = ExecutionState.parse(head.state)
        versions = wanted(head)
        view = (
            held.view if held is not None and versions.start > head.base else ExecutionView(state)
        )
        for version in versions:
            entry = found.get(version)
            if entry is None:
                raise InvalidDurableUpdate(
                    f"version {version} of the execution is missing", object_name=execution_id
                )
            view.apply(entry.records, state)
        fresh = Held(head, view)
        self._held.put(execution_id, fresh)
        return fresh

    def create(self, execution_id: str, change: Change) -> Steps[Held]:
        """Create the execution with its first change; `CheckpointConflict` if it exists."""
        head = yield from self.logs.append(
            execution_id,
            change.records(),
            after=None,
            state=change.state.document(),
            kind=KIND,
            schema_version=SCHEMA_VERSION,
            handed_over=True,
        )
        view = ExecutionView(change.state)
        view.apply(change.records(), change.state)
        held = Held(head, view)
        self._held.put(execution_id, held)
        return held

    def write(self, execution_id: str, held: Held, change: Change) -> Steps[Held]:
        """Append `change` after `held`; `CheckpointConflict` if another writer was first.

        The view is folded forward in place: the caller holds the execution's lock.
        """
        try:
            head = yield from self.logs.append(
                execution_id,
                change.records(),
                after=held.head,
                state=change.state.document(),
                kind=KIND,
                schema_version=SCHEMA_VERSION,
                handed_over=True,
                retried=True,
            )
        except CheckpointConflict:
            self._held.pop(execution_id)  # the view is behind: the next read starts over
            raise
        held.view.apply(change.records(), change.state)
        new = Held(head, held.view)
        self._held.put(execution_id, new)
        return new

    def update(
        self,
        execution_id: str,
        plan: Callable[[Held], Change | None],
        *,
        trust_cached: bool = True,
    ) -> Steps[Held]:
        """Compute `plan(held)` on the newest version and append it; retry a lost race.

        `plan` returns None to write nothing (the held version is returned), or raises a
        typed error to refuse. The cached version is tried first (unless `trust_cached`
        is False): a stale one costs one conflict and a fresh read, never a lost write.
        """
        held = self._held.get(execution_id) if trust_cached else None
        for attempt in range(MAX_ATTEMPTS):
            if held is None:
                held = yield from self.read(execution_id)
            change = plan(held)
            if change is None:
                return held
            try:
                return (yield from self.write(execution_id, held, change))
            except CheckpointConflict:
                held = None
                if attempt:
                    yield from ask(Sleep(min(0.05 * attempt, 1.0)))
        raise InvalidDurableUpdate(
            f"gave up after {MAX_ATTEMPTS} lost races", object_name=execution_id
        )

    def forget(self, execution_id: str) -> None:
        """Forget the held version (after a refusal that may mean it is behind)."""
        self._held.pop(execution_id)

    def list_ids(self, prefix: str = "") -> Steps[list[str]]:
        """Return the ids of the executions whose id starts with `prefix`."""
        return (yield from self.logs.list_ids(prefix))
