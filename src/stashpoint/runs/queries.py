"""The run store's reads and listings, and `reindex`: what reads a run or the index.

Built on `runs.heads`; `runs.operations` adds the commands that change runs.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from stashpoint.errors import (
    CheckpointNotFound,
    InvalidArgument,
    RunNotFound,
    StashpointError,
)
from stashpoint.ids import validate_id
from stashpoint.progress import OnProgress, Progress, silent
from stashpoint.runs import journal
from stashpoint.runs.heads import (
    RunHeads,
    RunRead,
    check_moment,
    check_seconds,
    check_status,
    check_text,
    revision_of,
    summary_of,
)
from stashpoint.runs.models import (
    AttemptRow,
    Page,
    ReindexReport,
    RunRow,
    RunSummary,
)
from stashpoint.status import AttemptStatus, RunStatus
from stashpoint.steps import Now, Steps, ask
from stashpoint.twins import operation

log = logging.getLogger("stashpoint")


class RunQueries(RunHeads):
    """Reads of runs and listings of the index, and its rebuild; see `RunOperations`."""

    @operation
    def list_due(
        self,
        now: datetime | None = None,
        *,
        namespace: str = "default",
        limit: int = 50,
        cursor: str | None = None,
    ) -> Steps[Page[RunRow]]:
        """Return waiting runs whose wake time has come (<= `now`, default this clock's).

        Only due runs are read from the index, the latest wake time first; wake each by
        running it again (a durable run resumes itself) or with `resume_run`.
        """
        moment = check_moment(now, "now")
        index = self._require_index()
        namespace = validate_id(namespace, what="namespace")
        cursor = check_text(cursor, "cursor", optional=True)
        if moment is None:
            moment = yield from ask(Now())
        return (
            yield from index.list_due(namespace=namespace, now=moment, limit=limit, cursor=cursor)
        )

    @operation
    def claim_wake(
        self, run_id: str, wake_at: datetime, *, every: timedelta = timedelta(minutes=15)
    ) -> Steps[int | None]:
        """Claim the right to send a due run on now (`stashpoint.wake`): once per `every`.

        For a scheduler that polls `list_due` and hands each due run to a queue or a
        function: of pollers racing (or one polling every minute), one gets the number of
        the current `every` window for a run's wake time, the others None, so a run is
        sent once, and again only if it is still due a window later (the send, or the
        worker, was lost). One conditional index write; needs an index.
        """
        validate_id(run_id, what="run id")
        moment = check_moment(wake_at, "wake_at")
        seconds = check_seconds(every, "every")
        if moment is None or seconds is None:
            raise InvalidArgument("claim_wake needs a wake_at and an every")
        index = self._require_index()
        now = yield from ask(Now())
        return (yield from index.claim_wake(run_id, moment, now, seconds))

    @operation
    def running_attempts(self, run_id: str) -> Steps[list[AttemptRow]]:
        """Return the run's running attempts with their leases (one read: its head)."""
        known = yield from self._read(run_id)
        return [
            journal.lease_row(known.state, attempt_id, held)
            for attempt_id, held in known.state.running.items()
        ]

    @operation
    def read_run(self, run_id: str) -> Steps[RunRead | None]:
        """Read the whole run once: its state (blobs resolved), revision and leases.

        None if unknown. Unlike `load_run` it leaves the index alone: a worker opening the
        run writes the run's items with its next transition anyway.
        """
        read = yield from self._read_all(run_id)
        if read is None:
            return None
        known, state = read
        running = [
            journal.lease_row(known.state, attempt_id, held)
            for attempt_id, held in known.state.running.items()
        ]
        return RunRead((yield from self._resolve(state)), revision_of(known), running)

    @operation
    def summarize_run(self, run_id: str) -> Steps[RunSummary | None]:
        """Return the run's summary, None if unknown (reads every attempt of the run)."""
        state = yield from self._load_run(run_id, None, True, False)
        return None if state is None else summary_of(state)

    # -- listings (index only) -------------------------------------------------------------

    @operation
    def list_runs(
        self,
        *,
        graph_name: str | None = None,
        status: RunStatus | None = None,
        since: datetime | None = None,
        namespace: str = "default",
        limit: int = 50,
        cursor: str | None = None,
    ) -> Steps[Page[RunRow]]:
        """Return one page of runs, newest first, from the index only."""
        return self._require_index().list_runs(
            namespace=validate_id(namespace, what="namespace"),
            graph_name=check_text(graph_name, "graph_name", optional=True),
            status=check_status(status, RunStatus),
            since=check_moment(since, "since"),
            limit=limit,
            cursor=check_text(cursor, "cursor", optional=True),
        )

    @operation
    def list_attempts(
        self,
        status: AttemptStatus = AttemptStatus.RUNNING,
        *,
        namespace: str = "default",
        since: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
        abandoned: bool = False,
    ) -> Steps[Page[AttemptRow]]:
        """Return one page of attempts in `status` (running by default), from the index.

        With `abandoned`, only running attempts whose lease ran out (more than `clock_skew`
        ago, on this machine's clock), the latest expiry first; only those are read.
        """
        if abandoned:
            if (
                check_status(status, AttemptStatus) is not AttemptStatus.RUNNING
                or since is not None
            ):
                raise InvalidArgument("abandoned attempts are running ones, listed without since")
            index = self._require_index()
            namespace = validate_id(namespace, what="namespace")
            cursor = check_text(cursor, "cursor", optional=True)
            now = yield from ask(Now())
            return (
                yield from index.list_abandoned(
                    namespace=namespace, before=now - self.clock_skew, limit=limit, cursor=cursor
                )
            )
        return (
            yield from self._require_index().list_attempts(
                namespace=validate_id(namespace, what="namespace"),
                status=check_status(status, AttemptStatus),
                since=check_moment(since, "since"),
                limit=limit,
                cursor=check_text(cursor, "cursor", optional=True),
            )
        )

    @operation
    def reindex(
        self, *, resume: bool = True, on_progress: OnProgress = silent
    ) -> Steps[ReindexReport]:
        """Make the index equal to storage (idempotent, resumable); say what it did.

        Every run's items are compared with its head: stale, wrong (a status that storage
        does not say, a revision from the future) and missing items are rewritten, items
        storage does not know are deleted. Progress is kept in the index after every page,
        and a new call continues after it unless `resume=False`. A run that cannot be read
        is skipped and reported (`ReindexReport.unreadable`), never an end to the rebuild.
        `on_progress` hears the count of runs looked at (`runs`; the total is not known).
        """
        index = self._require_index()
        where = self._logs.keys.layout.prefix or "-"
        indexed = seen = 0
        unreadable: list[str] = []
        marker = f"run-logs:{where}"
        cursor = (yield from index.read_marker(marker)) if resume else None
        while True:
            ids, cursor = yield from self._logs.list_page("", 100, cursor)
            for run_id in ids:
                indexed += yield from self._reindex_skipping(run_id, unreadable)
                seen += 1
                on_progress(Progress("runs", seen))
            if cursor is None:
                break
            yield from index.write_marker(marker, cursor)
        yield from index.clear_marker(marker)
        return ReindexReport(indexed, unreadable)

    # -- durable steps -----------------------------------------------------------------------

    def _reindex_skipping(self, run_id: str, unreadable: list[str]) -> Steps[int]:
        """Repair one run's items; a run that cannot be read is noted and skipped."""
        try:
            return (yield from self._reindex_one(run_id))
        except (RunNotFound, CheckpointNotFound):
            return 0  # deleted since it was listed
        except StashpointError as exc:
            log.warning("reindex: run %s cannot be read (%s); skipped", run_id, exc.kind.value)
            unreadable.append(f"{run_id}: {exc.kind.value}")
            return 0

    def _reindex_one(self, run_id: str) -> Steps[int]:
        """Repair one run's items; return 1 if it was indexed (0: gone since listed)."""
        index = self._require_index()
        read = yield from self._read_all(run_id)
        if read is None:
            return 0
        known, state = read
        rows = journal.rows_of(known.state, state)
        yield from index.repair(known.state, rows, revision_of(known), self._revision_now(run_id))
        return 1
