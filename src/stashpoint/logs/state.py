"""One log-backed state: a typed state kept in a log, one cached head, one update loop.

Runs, LangGraph threads and durable conversations are each a `LoggedState`: a log whose
every entry stores the whole (small) state beside the entry's records, so the newest
entry alone says where things stand. This module keeps, for all of them:

- the typed form of the state (`StateForm`: parse a head, make the document an entry
  stores; the document is made for that append alone, so the log keeps it uncopied);
- one cached head per log (`cached`), with one trust rule: a write may start from the
  head this process last wrote or read, since a stale head costs one conflict and a
  fresh read, never a lost write (a log never frees a version); a read never trusts it;
- one optimistic update loop (`update`, over `stores.cas.optimistic_update`): a pure
  change is computed on the cached head, judged again on a fresh read when it refuses a
  cached one, and recomputed after a lost race, with back-off and a cap;
- one bounded, thread-safe cache of heads (`cache.Lru`), where the newer version wins.

Free of I/O, like every step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from stashpoint.cache import Lru
from stashpoint.errors import CheckpointConflict, CheckpointNotFound, Purged
from stashpoint.logs.format import entries_records
from stashpoint.logs.log import LogHead, LogSteps, ended_error
from stashpoint.retry import RetryPolicy
from stashpoint.steps import Steps
from stashpoint.stores.cas import optimistic_update

_WHOLE_LIFE = 2**62  # a tail "of at least this many records": the whole current life

S = TypeVar("S")
C = TypeVar("C")
R = TypeVar("R")

DEFAULT_ATTEMPTS = 64
"""Most appends one update tries before its last lost race is raised."""


@dataclass(frozen=True, slots=True)
class Known(Generic[S]):
    """A log's latest state as this process knows it."""

    state: S
    """The typed state (for a log not created yet: the state it starts from)."""
    log: LogHead | None
    """The log version it was read from or written at; None: no log yet."""
    ended: LogHead | None = None
    """With no `log`: the version that ended the log's last life (a deletion, a purge that
    let the id be reused), after which a create starts the next life."""

    @property
    def version(self) -> int:
        """The log version of this state (-1: no log yet)."""
        return -1 if self.log is None else self.log.version

    @property
    def next_version(self) -> int:
        """The version an append after this state takes (a new life: after its end)."""
        if self.log is None and self.ended is not None:
            return self.ended.version + 1
        return self.version + 1


class StateForm(Protocol[S]):
    """How one kind of state is kept in its log's entries."""

    kind: str
    """The entries' kind."""
    schema_version: int
    """The entries' schema version."""

    def parse(self, head: LogHead) -> S:
        """Return the typed state a head stores, or raise a typed error."""
        ...

    def document(self, state: S) -> Any:
        """Return what an entry stores of `state` (a document made for one append)."""
        ...


class LoggedState(Generic[S]):
    """The latest states of one kind of log-backed state, with its one update loop."""

    def __init__(
        self,
        logs: LogSteps,
        form: StateForm[S],
        *,
        retry: RetryPolicy | None = None,
        max_attempts: int = DEFAULT_ATTEMPTS,
        cache_size: int = 1024,
    ) -> None:
        self.logs = logs
        """The logs the states live in."""
        self.form = form
        """How a state is kept in its entries."""
        self.retry = retry or logs.retry
        """Spaces out the retries of a lost race."""
        self.max_attempts = max_attempts
        """Most appends one update tries."""
        self._heads: Lru[str, Known[S]] = Lru(cache_size)

    def __len__(self) -> int:
        """Return how many heads this state remembers (at most its cache size)."""
        return len(self._heads)

    def known_of(self, head: LogHead) -> Known[S]:
        """Return the typed state of a log head."""
        return Known(self.form.parse(head), head)

    def cached(self, log_id: str) -> Known[S] | None:
        """Return the head this process last wrote or read, if it still remembers it."""
        return self._heads.get(log_id)

    def remember(self, log_id: str, known: Known[S]) -> None:
        """Remember `known` as the log's head unless a newer one is remembered already."""

        def newer(current: Known[S] | None) -> Known[S]:
            if current is not None and current.version > known.version:
                return current  # a concurrent write of this process got further
            return known

        self._heads.update(log_id, newer)

    def forget(self, log_id: str) -> None:
        """Forget the log's head (after a lost race, a deletion, a rewrite)."""
        self._heads.pop(log_id)

    def read(self, log_id: str, initial: Callable[[], S]) -> Steps[Known[S]]:
        """Read the log's head (never the cached one) and remember it.

        A log that does not exist (or was deleted) is `Known(initial(), None)`; `initial`
        may raise instead (a run that must exist). A purged log raises `Purged`.
        """
        try:
            head = yield from self.logs.top(log_id)
        except Purged:
            raise  # erased: neither read as absent nor written again
        except CheckpointNotFound:
            return Known(initial(), None)
        if head.ended:
            if head.refuses_writes:
                raise ended_error(log_id, head)  # `Purged`: never written again
            # Deleted, or purged for reuse: the next life starts after this version, so a
            # plan that names its own version (a LangGraph thread's) names the right one.
            return Known(initial(), None, ended=head)
        known = self.known_of(head)
        self.remember(log_id, known)
        return known

    def read_life(
        self, log_id: str, start: Callable[[S], int]
    ) -> Steps[tuple[Known[S], list[Any]] | None]:
        """Read the log's newest state and the records of its current life; remember it.

        `start(state)` is the record position the state says its life begins at: nothing
        before it is read (sealed segments and a round of GETs for the rest). None: the log
        was never written (or was deleted); a purged log raises `Purged`, never reads empty.
        """
        try:
            head, entries = yield from self.logs.tail(
                log_id, _WHOLE_LIFE, since=lambda h: start(self.form.parse(h))
            )
        except Purged:
            raise  # erased: not read as empty
        except CheckpointNotFound:
            return None
        known = self.known_of(head)
        self.remember(log_id, known)
        return known, entries_records(entries, start(known.state))

    def append(
        self,
        log_id: str,
        after: LogHead | None,
        records: list[Any],
        state: S,
        *,
        extra: dict[str, Any] | None = None,
        names_winner: bool = False,
    ) -> Steps[Known[S]]:
        """Append `records` and the new `state` after the head `after` (None: create the log).

        One create-only PUT; `CheckpointConflict` if another writer appended first. The new
        head is remembered. The conflict does not name the winner: `update`, whose `write`
        this usually is, reads the head again after a lost race, which names it (and finds
        a purge), so no listing is spent on it (a round trip less per lost race).
        `names_winner`: a caller outside `update` that hands the conflict on gets the
        listing that says which version won.
        """
        head = yield from self.logs.append(
            log_id,
            records,
            after=after,
            state=self.form.document(state),
            kind=self.form.kind,
            schema_version=self.form.schema_version,
            extra=extra,
            handed_over=True,  # a document made for this append alone
            retried=not names_winner,
        )
        known = Known(state, head)
        self.remember(log_id, known)
        return known

    def update(
        self,
        log_id: str,
        change: Callable[[Known[S], bool], Steps[C]],
        write: Callable[[Known[S], C], Steps[R]],
        *,
        initial: Callable[[], S],
        trust_cached: bool = True,
    ) -> Steps[R]:
        """Compute `change(known, fresh)` on the latest state and `write` it; retry a lost race.

        The cached head is tried first (unless `trust_cached` is False); a change that
        refuses it (a `StashpointError`) is judged again on a fresh read. `write` raises
        `CheckpointConflict` when another writer got there first: the head is forgotten,
        read again, and the change computed again, with back-off, `max_attempts` times.
        The read after a lost race first tries the version after the head it lost on, in
        one round (`LogSteps.read_after`): the winner is usually one version ahead, and a
        loser that needed a listing and a GET before planning again kept losing to writers
        that knew their head (issue 27's fairness measurement).
        """
        lost_on: list[LogHead] = []
        crowded: list[bool] = []  # a one-round read missed: the rest of this update lists

        def write_noting(known: Known[S], what: C) -> Steps[R]:
            try:
                return (yield from write(known, what))
            except CheckpointConflict:
                lost_on[:] = [] if known.log is None or crowded else [known.log]
                raise

        def read() -> Steps[Known[S]]:
            if lost_on:
                head = yield from self.logs.read_after(lost_on.pop())
                if head is not None and not head.ended:
                    known = self.known_of(head)
                    self.remember(log_id, known)
                    return known
                crowded.append(True)  # many writers at once: their winners run ahead
            return (yield from self.read(log_id, initial))

        return (
            yield from optimistic_update(
                read,
                change,
                write_noting,
                retry=self.retry,
                max_attempts=self.max_attempts,
                known=self.cached(log_id) if trust_cached else None,
                forget=lambda: self.forget(log_id),
            )
        )
