"""A fleet map's worker: claims under leases, takeovers, results recorded once, the end.

`work(fn)` takes free batches until none is left (`docs/fleet.md` has the arithmetic).
Free of I/O: every operation is steps.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import inspect
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from stashpoint.errors import (
    CheckpointConflict,
    Fenced,
    InvalidArgument,
    RunClaimed,
    RunNotFound,
    StashpointError,
    TerminalStateConflict,
    described,
)
from stashpoint.logs.log import LogHead
from stashpoint.logs.state import Known
from stashpoint.runs import batches
from stashpoint.runs.batches import (
    DONE_KIND,
    END_KIND,
    FLEET_SCHEMA,
    BatchHead,
    BatchStatus,
)
from stashpoint.runs.fleet_models import (
    FleetEnd,
    FleetPlan,
    WorkReport,
)
from stashpoint.runs.fleet_reading import (
    FleetReader,
    FleetView,
    absent_batch,
    mark_tag,
    positive,
)
from stashpoint.steps import Call, Now, Sleep, Steps, ask, stopped
from stashpoint.twins import operation


def run_items(fn: Callable[[Any], Any], items: Sequence[Any], concurrency: int) -> Any:
    """Call `fn` on each item: `[(True, result) | (False, "Type: message")]`, in order.

    Stops early (what ran is returned) once the batch was taken over (`steps.stopped`):
    nothing of it would be recorded.
    """
    if inspect.iscoroutinefunction(fn):
        return arun_items(fn, items, concurrency)  # refused by the blocking driver: typed

    def one(item: Any) -> tuple[bool, Any]:
        try:
            return True, fn(item)
        except Exception as exc:
            return False, f"{type(exc).__name__}: {exc}"

    if concurrency == 1:
        out: list[tuple[bool, Any]] = []
        for item in items:
            if stopped():
                break
            out.append(one(item))
        return out
    from concurrent.futures import ThreadPoolExecutor  # here: most maps run items in turn

    with ThreadPoolExecutor(concurrency, thread_name_prefix="fleet-item") as pool:
        return list(pool.map(one, items))


async def arun_items(fn: Callable[[Any], Any], items: Sequence[Any], concurrency: int) -> Any:
    """Run the items on asyncio: await coroutine functions, run plain ones on threads."""
    import asyncio

    gate = asyncio.Semaphore(concurrency)
    coroutine = inspect.iscoroutinefunction(fn)

    async def one(item: Any) -> tuple[bool, Any]:
        async with gate:
            try:
                if coroutine:
                    return True, await fn(item)
                return True, await asyncio.to_thread(fn, item)
            except Exception as exc:
                return False, f"{type(exc).__name__}: {exc}"

    return list(await asyncio.gather(*(one(item) for item in items)))


def _choose(free: Sequence[int], cursor: int | None, rng: random.Random) -> int:
    """Choose the free batch to claim: the next one of this worker's sweep, else a jump.

    A worker sweeps forward from where it last claimed, so workers keep to regions of
    their own; one whose next batch is taken (it met another sweep) jumps into a run of
    free batches chosen by its length, past its first batch (another sweep's next). Of
    workers listing at the same moment, few then pick the same batch: a claim seldom
    loses (`docs/fleet.md`, the arithmetic).
    """
    if cursor is not None:
        at = bisect.bisect_left(free, cursor)
        if at < len(free) and free[at] == cursor:
            return cursor
    runs: list[tuple[int, int]] = []  # (first, last) of each run of consecutive free batches
    for batch in free:
        if runs and runs[-1][1] == batch - 1:
            runs[-1] = (runs[-1][0], batch)
        else:
            runs.append((batch, batch))
    first, last = rng.choices(runs, [max(1, last - first) for first, last in runs])[0]
    return rng.randint(first + 1, last) if last > first else first


class FleetWorker(FleetReader):
    """A map's work, defined once: claim, run, renew, record, conclude, end."""

    _runner: Callable[..., Any] = staticmethod(run_items)

    def _wait_for_plan(self, seconds: float) -> Steps[FleetPlan]:
        """Return the plan, polling (on the stash's clock) up to `seconds` for it."""
        waited = 0.0
        delay = 0.05
        while True:
            plan = yield from self._read_plan()
            if plan is not None:
                return plan
            if waited >= seconds:
                raise RunNotFound(
                    f"no fleet map with this id after waiting {seconds:g} s for its plan "
                    "(start it first)",
                    object_name=self.map_id,
                )
            delay = min(delay * 2, 2.0, seconds - waited) or 0.05
            yield from ask(Sleep(delay))
            waited += delay

    # -- working ---------------------------------------------------------------------------

    @operation
    def work(
        self,
        fn: Callable[[Any], Any],
        *,
        max_concurrency: int = 1,
        max_batches: int | None = None,
        wait_for_plan: float = 300.0,
        stop: Callable[[], bool] | None = None,
    ) -> Steps[WorkReport]:
        """Take batches and run `fn(item)` on their items until the map has ended.

        Call it on every worker; each batch is taken by one worker at a time, under a
        lease renewed while it runs. An exception from `fn` fails that item (recorded
        with its type and message; counted against the tolerance), never the batch.
        Once no batch is free, the worker waits for the batches others hold and takes
        over any whose lease runs out, so a map ends even when workers die. Returns when
        the map has ended (or after `max_batches` batches). `max_concurrency` items of a
        batch run at once (threads; tasks for coroutine functions on the asyncio twin).
        Waits up to `wait_for_plan` seconds for `start`. `stop` is asked before each
        batch is taken: once it says True (`watcher.stopping.is_set` on a spot instance
        about to go), the worker returns with the batch in hand finished.
        """
        _check_work(fn, max_concurrency, max_batches, wait_for_plan, stop)
        plan = yield from self._wait_for_plan(wait_for_plan)
        report = WorkReport(self.worker_id)
        turn = _Turn(fn, max_concurrency, random.Random(f"{self.worker_id}:{self.map_id}"))
        while _go_on(report, max_batches, stop):
            just_finished, turn.finished_last = turn.finished_last, False
            view = yield from self._view()
            if view.ended:
                break
            if plan.over_tolerance(view.failed) and (yield from self._confirmed(plan, view)):
                yield from self._end(plan, view)
                continue
            if (yield from self._take_one(plan, view, report, turn)):
                continue
            if view.open() or not (yield from self._concluded(plan, view, just_finished, turn)):
                yield from self._idle(plan, turn.read)
        report.status = (yield from self._progress()).status
        yield from self._settle_run()
        return report

    def _concluded(
        self, plan: FleetPlan, view: FleetView, just_finished: bool, turn: _Turn
    ) -> Steps[bool]:
        """Every batch is marked: end the map, or give another worker one poll to.

        The worker that marked the last one ends it (one check of every batch); the
        others give it one poll first, then do it. False: this one waits a poll.
        """
        if just_finished or turn.waited_for_end:
            yield from self._conclude(plan, view)
            return True
        turn.waited_for_end = True
        return False

    def _take_one(
        self, plan: FleetPlan, view: FleetView, report: WorkReport, turn: _Turn
    ) -> Steps[bool]:
        """Take a batch and run it; False: none could be taken (look again later).

        A held batch not written for longer than a lease (its holder's clock may be off:
        the head decides) is taken before any free one, so a dead worker's batch runs
        again within about a lease, not at the end of the map; then a free one; then any
        held batch whose lease ran out.
        """
        now = yield from ask(Now())
        late = now - timedelta(seconds=plan.lease_seconds) - self.clock_skew
        silent = [b for b in view.open() if b in view.written and view.written[b] <= late]
        if silent:
            taken = yield from self._take_expired(plan, view, turn.read, report, silent)
            if (yield from self._ran(plan, taken, report, turn)):
                return True
        free = view.free(plan.batches)
        if free:
            yield from self._take_free(plan, view, free, report, turn)
            return True
        taken = yield from self._take_expired(plan, view, turn.read, report)
        return (yield from self._ran(plan, taken, report, turn))

    def _ran(
        self,
        plan: FleetPlan,
        taken: Known[BatchHead] | bool | None,
        report: WorkReport,
        turn: _Turn,
    ) -> Steps[bool]:
        """Run a batch taken over; return whether the worker should look again at once."""
        if isinstance(taken, Known):
            yield from self._run(plan, taken, turn.fn, turn.max_concurrency, report)
            turn.finished_last = True
            return True
        return bool(taken)

    def _take_free(
        self, plan: FleetPlan, view: FleetView, free: list[int], report: WorkReport, turn: _Turn
    ) -> Steps[None]:
        """Claim one of the `free` batches and run it (or back off, or lose the claim)."""
        held = len(view.open())
        if len(free) < held and turn.rng.random() > len(free) / held:
            # Fewer free batches than workers holding one: most who try now would
            # collide. Look again in a moment (a LIST is cheaper than a lost claim).
            yield from ask(Sleep(turn.rng.uniform(0.05, min(1.0, plan.lease_seconds / 10))))
            return
        batch = _choose(free, turn.cursor, turn.rng)
        known = yield from self._claim(plan, batch, report)
        if known is None:
            turn.cursor = None  # another worker's sweep reached it: jump elsewhere
            return
        turn.cursor = batch + 1
        yield from self._run(plan, known, turn.fn, turn.max_concurrency, report)
        turn.finished_last = True

    def _claim(
        self, plan: FleetPlan, batch: int, report: WorkReport
    ) -> Steps[Known[BatchHead] | None]:
        """Claim a free batch (create its log); None if another worker got it first."""
        now = yield from ask(Now())
        head = batches.claim(self.map_id, batch, self.worker_id, plan.lease_seconds, now)
        try:
            known = yield from self._batches.append(self._batch_log(batch), None, [], head)
        except CheckpointConflict:
            report.conflicts += 1
            return None
        report.claims += 1
        return known

    def _take_expired(
        self,
        plan: FleetPlan,
        view: FleetView,
        read: dict[int, tuple[int, BatchHead]],
        report: WorkReport,
        among: Sequence[int] | None = None,
    ) -> Steps[Known[BatchHead] | bool | None]:
        """Take over a held batch whose lease ran out: its state; True: look again; None.

        The newest version of each held batch is read once (again when it changes: a
        heartbeat); its lease is judged on this worker's clock, `clock_skew` late; `among`:
        only these held batches (default: every one). A held
        batch found done lacks only its mark (its finisher died first): it is marked. A
        batch given up (claimed `max_claims` times) is recorded failed here.
        """
        held = view.open() if among is None else list(among)
        yield from self._refresh(view, read, held)
        unmarked = [read[b][1] for b in held if read[b][1].status is BatchStatus.DONE]
        if unmarked:
            for head in unmarked:  # its finisher died before its mark: mark it for it
                yield from self._mark(head)
            return True
        now = yield from ask(Now())
        expired = [b for b in held if read[b][1].lease_over(now, self.clock_skew)]
        if not expired:
            return None
        return (yield from self._take_over(plan, expired[0], read, report))

    def _take_over(
        self,
        plan: FleetPlan,
        batch: int,
        read: dict[int, tuple[int, BatchHead]],
        report: WorkReport,
    ) -> Steps[Known[BatchHead] | bool]:
        """Take over `batch`, whose lease ran out: its state; True: look again.

        A batch claimed `max_claims` times is given up instead: recorded failed, marked.
        """
        name = self._batch_log(batch)

        def change(known: Known[BatchHead], fresh: bool) -> Steps[tuple[BatchHead, list[Any]]]:
            moment = yield from ask(Now())
            if known.state.claims >= plan.max_claims:
                size = plan.size_of(batch)
                first = plan.first_item(batch)
                error = f"abandoned: claimed {known.state.claims} times without finishing"
                head = batches.abandon(known.state, self.worker_id, size, name)
                return head, [batches.result_record(first + i, False, error) for i in range(size)]
            return batches.take_over(known.state, self.worker_id, moment, self.clock_skew, name), []

        def write(
            known: Known[BatchHead], planned: tuple[BatchHead, list[Any]]
        ) -> Steps[Known[BatchHead]]:
            return (yield from self._batches.append(name, known.log, planned[1], planned[0]))

        try:
            taken = yield from self._batches.update(name, change, write, initial=absent_batch)
        except (TerminalStateConflict, RunClaimed, CheckpointConflict):
            read.pop(batch, None)
            return True  # finished or renewed meanwhile: look again
        read.pop(batch, None)
        if taken.state.status is BatchStatus.DONE:
            report.abandoned += 1
            report.failed += taken.state.failed
            yield from self._mark(taken.state, None if taken.log is None else taken.log.etag)
            return True
        report.takeovers += 1
        return taken

    def _refresh(
        self, view: FleetView, read: dict[int, tuple[int, BatchHead]], held: list[int]
    ) -> Steps[None]:
        """Read the held batches whose newest version is not the one in `read`."""
        stale = [b for b in held if b not in read or read[b][0] != view.tops[b]]
        for batch, found in zip(stale, (yield from self._heads(view, stale)), strict=True):
            if found is None:
                known = yield from self._batches.read(self._batch_log(batch), absent_batch)
                read[batch] = (known.version, known.state)
            else:
                head, entry = found
                read[batch] = (entry.version, head)
                self._batches.remember(
                    self._batch_log(batch), Known(head, LogHead.of(entry, handed_over=True))
                )

    def _idle(self, plan: FleetPlan, read: Mapping[int, tuple[int, BatchHead]]) -> Steps[None]:
        """Wait a while: until the first lease read runs out, at most a quarter lease."""
        now = yield from ask(Now())
        wait = min(plan.lease_seconds / 4, 2.0)
        for _, head in read.values():
            if head.status is BatchStatus.LEASED:
                left = (head.lease_until + self.clock_skew - now).total_seconds()
                wait = min(wait, max(left, 0.0) + 0.05)
        yield from ask(Sleep(max(0.05, wait)))

    def _run(
        self,
        plan: FleetPlan,
        known: Known[BatchHead],
        fn: Callable[[Any], Any],
        concurrency: int,
        report: WorkReport,
    ) -> Steps[None]:
        """Run a batch this worker holds and record its results (unless it is fenced)."""
        head = known.state
        batch, epoch, name = head.batch, head.epoch, self._batch_log(head.batch)
        items = yield from self._items(plan, batch)
        beat = functools.partial(self._renew, name, epoch)
        call = Call(
            self._runner, (fn, items, concurrency),
            beat=beat, every=plan.lease_seconds / 3, fatal=(Fenced,),
        )  # fmt: skip
        try:
            outcomes = yield from ask(call)
        except Fenced:
            report.fenced += 1  # taken over while it ran: the new holder's to record
            return
        first = plan.first_item(batch)
        records = []
        ok = 0
        for offset, (good, value) in enumerate(outcomes):
            index = first + offset
            if good:
                try:
                    value = yield from self._blobs.offload(
                        value, f"result of item {index}", owner=self.map_id
                    )
                except StashpointError as exc:
                    good, value = False, f"{type(exc).__name__}: {exc}"
            ok += good
            records.append(batches.result_record(index, good, value))
        failed = len(records) - ok

        def change(known: Known[BatchHead], fresh: bool) -> Steps[BatchHead]:
            return batches.finish(known.state, epoch, ok, failed, name)
            yield  # a generator: finishing needs no request

        def write(known: Known[BatchHead], head: BatchHead) -> Steps[Known[BatchHead]]:
            return (yield from self._batches.append(name, known.log, records, head))

        try:
            done = yield from self._batches.update(name, change, write, initial=absent_batch)
        except Fenced:
            report.fenced += 1
            return
        report.batches += 1
        report.ok += ok
        report.failed += failed
        yield from self._mark(done.state, None if done.log is None else done.log.etag)

    def _renew(self, name: str, epoch: int) -> Steps[None]:
        """Renew the lease of a batch this worker holds (a heartbeat); `Fenced` if lost."""

        def change(known: Known[BatchHead], fresh: bool) -> Steps[BatchHead]:
            now = yield from ask(Now())
            return batches.renew(known.state, epoch, now, name)

        def write(known: Known[BatchHead], head: BatchHead) -> Steps[None]:
            yield from self._batches.append(name, known.log, [], head)

        yield from self._batches.update(name, change, write, initial=absent_batch)

    def _mark(self, head: BatchHead, etag: str | None = None) -> Steps[None]:
        """Create the batch's done mark; one there already stays.

        Its name says the counts and, when known, the done version's ETag: a listing that
        shows the same ETag for the batch's newest version shows the done version itself,
        so the map's end checks the batch without reading it.
        """
        name = f"d{head.batch:08d}.{head.ok}.{head.failed}"
        if etag:
            name += f".{mark_tag(etag)}"
        log_id = self._log(name)
        state = {"map_id": self.map_id, "batch": head.batch, "ok": head.ok, "failed": head.failed}
        # Marked already (by the worker that finished it, or a repair): the same mark.
        with contextlib.suppress(CheckpointConflict):
            yield from self._logs.append(
                log_id, [], after=None, state=state, kind=DONE_KIND,
                schema_version=FLEET_SCHEMA, handed_over=True,
            )  # fmt: skip

    def _confirmed(self, plan: FleetPlan, view: FleetView) -> Steps[bool]:
        """Whether the failures the marks count are real: more than tolerated, by the logs.

        Only the marks that count failures are checked (their batches' newest versions,
        read at once); a mark its batch's log does not bear out is dropped from `view`.
        """
        suspects = {b for b, (_, failed) in view.marks.items() if failed} | view.marked_twice
        for batch in suspects - set(view.tops):
            view.marks.pop(batch, None)  # a mark of a batch nobody claimed: not a real one
        claimed = sorted(suspects & set(view.tops))
        for batch, found in zip(claimed, (yield from self._heads(view, claimed)), strict=True):
            head = found[0] if found is not None else None
            if head is None or head.status is not BatchStatus.DONE:
                view.marks.pop(batch, None)
            else:
                view.marks[batch] = (head.ok, head.failed)
        view.marked_twice.clear()
        return plan.over_tolerance(view.failed)

    def _conclude(self, plan: FleetPlan, view: FleetView) -> Steps[None]:
        """Every batch is marked done: check each against its log, then end the map.

        The marks are a listing's shorthand; the batches' logs are the truth. A mark
        whose batch is not done (planted, or left by a bug) is ignored, and that batch is
        worked like any held one: its holder's lease runs out and it is taken over.
        """
        every = list(range(plan.batches))
        shown = {b for b in every if _mark_is_current(view, b)}
        unread = [b for b in every if b not in shown]
        found = dict(zip(unread, (yield from self._heads(view, unread)), strict=True))
        ok = failed = 0
        for batch in every:
            if batch in shown:
                ok += view.marks[batch][0]
                failed += view.marks[batch][1]
                continue
            head = yield from self._head_of(batch, found[batch])
            if head.status is not BatchStatus.DONE:
                view.marks.pop(batch, None)
                return  # not done after all: the work loop goes on
            ok += head.ok
            failed += head.failed
        view.marks = {b: (0, 0) for b in every}
        yield from self._end(plan, view, counts=(ok, failed))

    def _head_of(self, batch: int, found: tuple[BatchHead, Any] | None) -> Steps[BatchHead]:
        """Return a batch's state: as its newest entry was found, else read from its log."""
        if found is not None:
            return found[0]
        return (yield from self._batches.read(self._batch_log(batch), absent_batch)).state

    def _end(
        self, plan: FleetPlan, view: FleetView, counts: tuple[int, int] | None = None
    ) -> Steps[None]:
        """End the map once (the end log's create decides), then its run."""
        ok, failed = counts if counts is not None else (view.ok, view.failed)
        over = plan.over_tolerance(failed)
        reason = None
        if over:
            bounds = [
                f"{plan.tolerated_failure_count} items"
                if plan.tolerated_failure_count is not None
                else None,
                f"{plan.tolerated_failure_percentage:g}%"
                if plan.tolerated_failure_percentage is not None
                else None,
            ]
            reason = (
                f"{failed} of {plan.items} items failed, more than tolerated "
                f"({' or '.join(b for b in bounds if b)})"
            )
        end = FleetEnd(
            map_id=self.map_id,
            status="failed" if over else "completed",
            ok=ok,
            failed=failed,
            reason=reason,
            ended_at=(yield from ask(Now())),
        )
        try:
            yield from self._logs.append(
                self._log("end"), [], after=None, state=end.model_dump(mode="json"),
                kind=END_KIND, schema_version=FLEET_SCHEMA, handed_over=True,
            )  # fmt: skip
        except CheckpointConflict:
            return  # another worker ended it first: its end is the map's
        yield from self._settle_run(end)

    def _settle_run(self, end: FleetEnd | None = None) -> Steps[None]:
        """Bring the map's run to its end (after a crash between the two, too)."""
        if end is None:
            end = yield from self._read_end()
            if end is None:
                return
        try:
            if end.status == "completed":
                yield from self._ops.complete_run(self.map_id)
            else:
                yield from self._ops.fail_run(self.map_id, end.reason or "fleet map failed")
        except (TerminalStateConflict, RunNotFound):
            pass  # ended already (by another worker), or its run was deleted

    # -- progress and results --------------------------------------------------------------


def _go_on(report: WorkReport, max_batches: int | None, stop: Callable[[], bool] | None) -> bool:
    """Whether a worker takes another batch: fewer than `max_batches`, and `stop` says no."""
    if max_batches is not None and report.batches + report.abandoned >= max_batches:
        return False
    return stop is None or not stop()


def _mark_is_current(view: FleetView, batch: int) -> bool:
    """Whether a batch's mark is its newest version's own (trusted as it is).

    A mark naming the ETag the listing shows for its batch's newest version is; a batch
    marked twice, or whose mark names another ETag, is read.
    """
    return (
        batch not in view.marked_twice
        and batch in view.tags
        and view.tags[batch] == view.etags.get(batch)
    )


@dataclass
class _Turn:
    """What one worker's `work` carries from one look at the map to the next."""

    fn: Callable[[Any], Any]
    """The function run on each item."""
    max_concurrency: int
    """Items of a batch run at once."""
    rng: random.Random
    """Chooses batches and back-off times (seeded by worker and map: reproducible)."""
    read: dict[int, tuple[int, BatchHead]] = field(default_factory=dict)
    """Held batches read: batch -> (version read, its state)."""
    finished_last: bool = False
    """Whether the last look ended by finishing a batch."""
    waited_for_end: bool = False
    """Whether the worker already gave another one poll to end the map."""
    cursor: int | None = None
    """The batch after the last one this worker claimed."""


def _check_work(
    fn: Any, max_concurrency: Any, max_batches: Any, wait_for_plan: Any, stop: Any
) -> None:
    """Check `work`'s arguments: `InvalidArgument` before any request."""
    if not callable(fn):
        raise InvalidArgument(f"fn must be callable, not {described(fn)}")
    positive(max_concurrency, "max_concurrency", whole=True, upper=256)
    if max_batches is not None:
        positive(max_batches, "max_batches", whole=True)
    positive(wait_for_plan, "wait_for_plan", upper=86_400)
    if stop is not None and not callable(stop):
        raise InvalidArgument(f"stop must be callable, not {described(stop)}")
