"""The OpenAI Agents SDK's `Session` on the stash: a conversation's items as one log.

`StashSession(session_id, stash)` is a session for `Runner.run(..., session=...)` (the
SDK's `Session` protocol: `get_items`, `add_items`, `pop_item`, `clear_session`), kept
where the rest of the stash is (a folder on the embedded default, S3 with no database in
production) and so under its encryption, purge with receipts, Object Lock and packing.

Each session is one log of namespace `openai-agents-sessions` (`stores.layout`), id the
session id. Its records, readable with `zstd -d | jq`:

    {"item": {...}}     an item, as the SDK gave it
    {"pop": true}       `pop_item`: the newest item still there is removed
    {"clear": true}     `clear_session`: a new life starts after this record

and each entry's small state (`start`: the record the current life starts at, `since`:
the version that holds it, `items`: how many items it has) says where the life begins,
so a cold read fetches only the current life's entries (a listing and one round of GETs
for a short one; sealed segments for a long one). Every change is one compare-and-swap
append through the one log-backed state (`logs.state`): `add_items` is one request.

Two writers of one session (two Lambda invocations) never overwrite each other: each
change is appended after the version it was computed on, and a lost race is recomputed
on the winner's version. So concurrent `add_items` calls land as whole batches in the
order they won (never interleaved inside a batch), a `pop_item` removes the newest item
at the moment it wins (never one another writer removed first), and a `clear_session`
removes what was there when it won.

Needs `openai-agents` only to be used by it: the protocol is structural, nothing is
imported from the SDK here (`stashpoint[openai-agents]` installs it).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from stashpoint.errors import (
    CheckpointConflict,
    InvalidArgument,
    InvalidPayload,
    described,
)
from stashpoint.logs.format import check_log_id, entries_records
from stashpoint.logs.log import LogHead
from stashpoint.logs.state import Known, LoggedState
from stashpoint.steps import Steps
from stashpoint.stores.layout import OPENAI_SESSIONS

if TYPE_CHECKING:
    from stashpoint.stash import AsyncStash, Stash

T = TypeVar("T")

KIND = "stashpoint.openai-agents-session"
"""The entries' kind."""
SCHEMA_VERSION = 1
"""The entries' schema version."""


@dataclass(frozen=True, slots=True)
class SessionState:
    """Where a session's current life begins, and how many items it holds."""

    start: int = 0
    """The first record of the current life."""
    since: int = 0
    """The log version holding that record (the first entry a read needs)."""
    items: int = 0
    """How many items the current life holds."""


class _Form:
    """How a `SessionState` is kept in its log's entries (`logs.state.StateForm`)."""

    kind = KIND
    schema_version = SCHEMA_VERSION

    def parse(self, head: LogHead) -> SessionState:
        state = head.state
        if not isinstance(state, Mapping):
            raise InvalidPayload("not a session's state", object_name=head.log_id)
        try:
            start, since, items = state["start"], state["since"], state["items"]
        except KeyError:
            raise InvalidPayload("not a session's state", object_name=head.log_id) from None
        numbers = (start, since, items)
        if not all(type(n) is int and n >= 0 for n in numbers) or since > head.version:
            raise InvalidPayload("not a session's state", object_name=head.log_id)
        return SessionState(start, since, items)

    def document(self, state: SessionState) -> dict[str, int]:
        return {"start": state.start, "since": state.since, "items": state.items}


def _fold(records: list[Any], log_id: str) -> list[Any]:
    """Return the items a life's records leave (pops remove the newest, in order)."""
    items: list[Any] = []
    for record in records:
        if not isinstance(record, Mapping):
            raise InvalidPayload("not a session record", object_name=log_id)
        if "item" in record:
            items.append(record["item"])
        elif record.get("pop") is True:
            if items:
                items.pop()
        elif record.get("clear") is True:
            items = []
        elif isinstance(record.get("suffix"), Mapping):
            suffix = record["suffix"]
            keep, drop, new = suffix.get("keep"), suffix.get("drop", 0), suffix.get("items")
            if (
                type(keep) is not int
                or type(drop) is not int
                or not 0 <= drop <= keep <= len(items)
                or not isinstance(new, list)
            ):
                raise InvalidPayload("not a session record", object_name=log_id)
            items = items[drop:keep] + list(new)
        else:
            raise InvalidPayload("not a session record", object_name=log_id)
    return items


class SessionSteps:
    """A session's operations as steps (free of I/O; `StashSession` drives them)."""

    def __init__(self, session_id: str, state: LoggedState[SessionState]) -> None:
        self.log_id = check_log_id(session_id)
        """The session's log."""
        self.state = state
        """The sessions' one log-backed state."""

    def items(self) -> Steps[list[Any]]:
        """Return the current life's items, oldest first (a fresh read, never the cache)."""
        _, items = yield from self.snapshot()
        return items

    def snapshot(self) -> Steps[tuple[Known[SessionState], list[Any]]]:
        """Return the newest version and its items, oldest first (a fresh read)."""
        found = yield from self.state.read_life(self.log_id, lambda state: state.start)
        if found is None:
            return Known(SessionState(), None), []  # never written, or deleted
        known, records = found
        return known, self._checked(known.state, records)

    def _checked(self, found: SessionState, records: list[Any]) -> list[Any]:
        items = _fold(records, self.log_id)
        if len(items) != found.items:
            raise InvalidPayload(
                "the session's records do not match its state", object_name=self.log_id
            )
        return items

    def _records_at(self, known: Known[SessionState]) -> Steps[list[Any]]:
        """Return the current life's records as of exactly `known`'s version."""
        if known.log is None or known.state.items == 0:
            return []
        entries = yield from self.state.logs.entries(
            self.log_id, known.state.since, known.log.version
        )
        return entries_records(entries, known.state.start)

    def add(self, items: list[Any]) -> Steps[None]:
        """Append the items (one request when this process holds the newest version)."""
        records = [{"item": item} for item in items]

        def change(known: Known[SessionState], fresh: bool) -> Steps[SessionState]:
            return replace_items(known.state, known.state.items + len(records))
            yield  # a generator: a change is steps

        yield from self._write(change, lambda _: records)

    def pop(self) -> Steps[Any]:
        """Remove the newest item and return it (None when there is none)."""
        popped: list[Any] = []

        def change(known: Known[SessionState], fresh: bool) -> Steps[SessionState | None]:
            popped.clear()
            if known.log is None or known.state.items == 0:
                return None
            records = yield from self._records_at(known)
            items = self._checked(known.state, records)
            popped.append(items[-1])
            return replace_items(known.state, known.state.items - 1)

        written = yield from self._write(change, lambda _: [{"pop": True}])
        return popped[0] if written and popped else None

    def replace_suffix(
        self, known: Known[SessionState], keep: int, drop: int, output: list[Any]
    ) -> Steps[bool]:
        """Replace the items after the first `keep` with `output`, if still at `known`.

        The first `drop` items go too. False if another writer changed the session since.
        """
        if known.log is None:
            return False
        state = SessionState(known.state.start, known.state.since, keep - drop + len(output))
        record = {"suffix": {"keep": keep, "drop": drop, "items": output}}
        try:
            yield from self.state.append(self.log_id, known.log, [record], state)
        except CheckpointConflict:
            return False
        return True

    def clear(self) -> Steps[None]:
        """Start a new life: every item so far is gone from the session.

        The items stay in the log (its history) until it is purged.
        """

        def change(known: Known[SessionState], fresh: bool) -> Steps[SessionState | None]:
            if known.log is None or known.state.items == 0:
                return None
            assert known.log is not None
            return SessionState(start=known.log.next_record + 1, since=known.next_version, items=0)
            yield  # a generator: a change is steps

        yield from self._write(change, lambda _: [{"clear": True}])

    def _write(
        self,
        change: Any,
        records_of: Any,
    ) -> Steps[bool]:
        def write(known: Known[SessionState], new: SessionState | None) -> Steps[bool]:
            if new is None:
                return False
            yield from self.state.append(self.log_id, known.log, records_of(new), new)
            return True

        return (yield from self.state.update(self.log_id, change, write, initial=SessionState))


def replace_items(state: SessionState, items: int) -> SessionState:
    """Return `state` holding `items` items."""
    return SessionState(state.start, state.since, items)


class StashSession:
    """An OpenAI Agents SDK session kept in a stash (the SDK's `Session` protocol).

    Pass a `Stash` (its calls run on a worker thread) or an `AsyncStash` (awaited on the
    loop). `session_settings` is the SDK's `SessionSettings` (its `limit`).
    """

    def __init__(
        self,
        session_id: str,
        stash: Stash | AsyncStash,
        *,
        session_settings: Any = None,
    ) -> None:
        from stashpoint.stash import AsyncStash, Stash

        if not isinstance(stash, Stash | AsyncStash):
            raise InvalidArgument(f"stash must be an opened stash, not {described(stash)}")
        self.session_id = session_id
        """The session's id (its log id: letters, digits and `-_.:@=+,`)."""
        self.session_settings = _settings(session_settings)
        """The SDK's `SessionSettings` (a dict is coerced as the SDK does; its `limit` is
        what `get_items()` returns by default)."""
        self.stash = stash
        """Where the session is kept."""
        logs = stash.log_steps(OPENAI_SESSIONS)
        self._steps = SessionSteps(session_id, LoggedState(logs, _Form()))
        # The append that completes a range of 64 seals it after the call, not in it.
        self._sealer = stash.seal_later(logs)

    async def _run(self, steps: Steps[T]) -> T:
        from stashpoint.stash import awaited

        try:
            return await awaited(self.stash, steps)
        finally:
            self._sealer.poke()

    async def get_items(self, limit: int | None = None) -> list[Any]:
        """Return the session's items, oldest first; with `limit`, the newest `limit`."""
        if limit is not None and (type(limit) is not int or limit < 0):
            raise InvalidArgument(f"limit must be an int >= 0 or None, not {described(limit)}")
        if limit is None:
            limit = getattr(self.session_settings, "limit", None)
        items = await self._run(self._steps.items())
        if limit is None:
            return items
        return items[-limit:] if limit else []

    async def add_items(self, items: list[Any]) -> None:
        """Append items (as one batch, in one request)."""
        if not isinstance(items, list) or not all(isinstance(i, Mapping) for i in items):
            raise InvalidArgument(f"items must be a list of dicts, not {described(items)}")
        if items:
            await _settled(self._run(self._steps.add([dict(i) for i in items])))

    async def pop_item(self) -> Any:
        """Remove the newest item and return it (None if the session has none)."""
        return await _settled(self._run(self._steps.pop()))

    async def clear_session(self) -> None:
        """Remove every item (a new life of the session's log)."""
        await _settled(self._run(self._steps.clear()))

    async def _get_compaction_snapshot(
        self, limit: int, *, prune_prefix: Callable[[Any], bool] | None = None
    ) -> Any:
        """Return the newest `limit` items and an atomic suffix swap (the SDK's hook).

        `OpenAIResponsesCompactionSession` replaces the items it compacted with the
        compacted ones through `replace_suffix(start, output)`: one append, made only if the
        session is still at the version read here (another writer's change since makes it
        return False, and the SDK reads again). `prune_prefix` drops the leading items it
        approves in the same append.
        """
        from agents.memory.session import _CompactionSnapshot

        known, items = await self._run(self._steps.snapshot())
        window = items[-limit:] if limit > 0 else []
        offset = len(items) - len(window)

        async def replace_suffix(start: int, output: list[Any]) -> bool:
            if not window[start:]:
                return False
            keep = offset + start
            drop = 0
            if prune_prefix is not None:
                while drop < keep and prune_prefix(items[drop]):
                    drop += 1
            swap = self._steps.replace_suffix(known, keep, drop, [dict(i) for i in output])
            return await _settled(self._run(swap))

        return _CompactionSnapshot(list(window), offset == 0, replace_suffix)

    def close(self) -> None:
        """Release nothing: the stash is the caller's to close (the SDK's sessions' shape)."""


def _settings(given: Any) -> Any:
    """Return the SDK's `SessionSettings` for `given` (None: the defaults), as it makes it."""
    try:
        from agents.memory.session_settings import SessionSettings, coerce_session_settings
    except ImportError:  # the SDK is not installed: keep what was given
        return given
    return SessionSettings() if given is None else coerce_session_settings(given)


async def _settled(change: Awaitable[T]) -> T:
    """Await a change to its outcome even when the caller is cancelled meanwhile.

    The append may have landed when the cancellation comes: the caller's cancellation is
    raised only once the change has ended, so nothing is left running behind it and a
    retry never races the write it retries.
    """
    task = asyncio.ensure_future(change)
    try:
        return await asyncio.shield(task)
    except asyncio.CancelledError:
        while not task.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({task})
        raise


__all__ = ["SessionState", "SessionSteps", "StashSession"]
