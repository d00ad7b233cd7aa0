"""The saver's operations, written once as steps over a thread's log (see `thread`).

`StashpointSaver` runs them with the blocking driver, `AsyncStashpointSaver` with asyncio.
The serializer is an argument of every operation, never state: `with_allowlist` clones a
saver with another serializer. Reads are `reads`' and the objects beside a log `values'`;
this module holds the writes: a put, a task's writes, and the whole-thread operations.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from stashpoint.cache import Lru
from stashpoint.codec import Codec
from stashpoint.errors import (
    CheckpointConflict,
    ConfigurationError,
    InvalidPayload,
    Purged,
)
from stashpoint.ids import thread_key
from stashpoint.langgraph.reads import (
    Config,
    LoggedThread,
    ThreadForm,
    ThreadReads,
    TupleParts,
)
from stashpoint.langgraph.run_threads import RunThreads
from stashpoint.langgraph.thread import (
    LATEST_MARKER,
    Serializer,
    Slot,
    StoredCheckpoint,
    ThreadModel,
    ThreadState,
    ValueLocation,
    check_config,
    check_put,
    empty_state,
    item_key,
    list_digests,
    pack,
    snapshots_for_latest,
    state_after_put,
    state_after_writes,
    state_of_model,
)
from stashpoint.langgraph.values import ThreadValues, dumped, load, packed
from stashpoint.logs.log import LogSteps
from stashpoint.logs.state import Known, LoggedState
from stashpoint.steps import Now, Steps, ask
from stashpoint.stores.layout import LANGGRAPH_VALUES, Layout
from stashpoint.stores.objects import (
    Create,
    GetObject,
    PutObject,
    WriteOutcome,
    delete_keys,
)

__all__ = ["KNOWN_THREADS", "RUN_INDEX_MARK", "SaverSteps", "TupleParts"]

RUN_INDEX_MARK = "~run-index"
"""Name (beside the threads' values, no thread's) of the object saying the stash's index
holds every thread's (run, thread) items: a saver opened without the index refuses puts
that carry a run id once it is there, since `delete_for_runs` would never find them."""
_MARK_RECHECK = timedelta(minutes=1)
"""How long a saver without an index trusts that the mark was absent."""
KNOWN_THREADS = 256
"""Threads whose heads a saver remembers (a write after a read or a write of the thread is
one PUT); the least recently used are forgotten first, so a server's memory stays bounded
however many threads."""
_APPEND_ATTEMPTS = 64
_STALE_OBJECTS = 4096
"""Replaced list snapshots a saver remembers to delete after the puts that replaced them."""
_WALK_PAGE = 100
"""Threads a walk of every thread (`index_runs`) reads between two records of its progress."""


def _life_state(known: Known[LoggedThread]) -> tuple[ThreadState, int]:
    """Return the state a plan starts from and the version its append takes.

    A thread whose log ended (deleted, or purged for reuse) starts its next life right
    after that version: its state's base names it, so no read looks below it.
    """
    state, version = known.state.state, known.next_version
    if known.log is None and version:
        state = state.model_copy(update={"base": version})
    return state, version


class SaverSteps:
    """LangGraph checkpoint operations over one stash, as steps."""

    def __init__(
        self, logs: LogSteps, layout: Layout, codec: Codec, *, indexed: bool = False
    ) -> None:
        self.logs = logs
        """The threads' logs (whole state with every version)."""
        self.run_threads = RunThreads(layout.prefix) if indexed else None
        """Which threads may hold which runs (`run_threads`); None: the stash has no index,
        and `delete_for_runs` walks every thread."""
        self.layout = layout
        """Where large values live."""
        self.codec = codec
        """Encodes large values' objects."""
        self.values = ThreadValues(layout, codec, logs.retry)
        """The objects beside the threads' logs (large values, list snapshots and tails)."""
        self.threads = LoggedState(
            logs, ThreadForm(), max_attempts=_APPEND_ATTEMPTS, cache_size=KNOWN_THREADS
        )
        """The threads' states: the one log-backed state, with its cached heads."""
        self.reads = ThreadReads(logs, self.threads, self.values, self.run_threads)
        """The reads of threads."""
        # Seals are not made on a caller's path: the append that completes a range notes
        # it, and `background` seals it after the call returned (or `gc` does).
        logs.seal_on_append = False
        self._stale: Lru[str, bool] = Lru(_STALE_OBJECTS)  # replaced snapshots to delete
        self._announced = False  # the run-index mark is known to be in the bucket
        self._unmarked_at: datetime | None = None  # no mark was there then (no index)

    def _run_index_mark(self) -> str:
        return self.layout.key(LANGGRAPH_VALUES, RUN_INDEX_MARK)

    def _announce_run_index(self) -> Steps[None]:
        """Leave the mark that the index holds every thread's runs (once per saver)."""
        if self._announced:
            return
        key = self._run_index_mark()
        body = yield from self.codec.document_encoding(
            {"format": "stashpoint.langgraph-run-index/1"}, name=key
        )
        result = yield from ask(PutObject(key, body, Create()))
        # Stored, or there already (a create that found it): either way it is there.
        self._announced = result.outcome in (WriteOutcome.STORED, WriteOutcome.PRECONDITION_FAILED)

    def _refuse_unindexed(self, run: str) -> Steps[None]:
        """Refuse a put carrying a run id from a saver without the stash's index.

        Its thread would get no (run, thread) item, so `delete_for_runs` through the index
        would never find its checkpoints. One GET per minute while the mark is absent.
        """
        now = yield from ask(Now())
        if self._unmarked_at is not None and now - self._unmarked_at < _MARK_RECHECK:
            return
        mark = yield from ask(GetObject(self._run_index_mark()))
        if mark is None:
            self._unmarked_at = now
            return
        raise ConfigurationError(
            f"this stash indexes LangGraph runs, but this saver was opened without its index: "
            f"a checkpoint of run {run!r} written here would be missed by delete_for_runs; "
            "open the stash with its index (?index=dynamodb://TABLE, or the default SQLite "
            "index of a local folder)",
            object_name=run,
        )

    # -- after the caller's call -----------------------------------------------------------

    @property
    def has_background_work(self) -> bool:
        """Whether a put left work for after its call: a range to seal, snapshots to delete."""
        return bool(len(self.logs.due_seals) or len(self._stale))

    def background(self) -> Steps[None]:
        """Do what puts left for after their calls: seal ranges, delete replaced snapshots.

        Best effort: what fails (or never runs: the process ended) is sealed by the next
        seal or by `gc`, and no reader depends on it.
        """
        yield from self.logs.seal_due()
        stale = [object_key for object_key, _ in self._stale.take_all()]
        yield from delete_keys(stale, best_effort=True)

    # -- reading (`reads`) -------------------------------------------------------------------

    def get_tuple(self, config: Config, serde: Serializer) -> Steps[TupleParts | None]:
        """Return the checkpoint `config` names (its latest without `checkpoint_id`)."""
        return (yield from self.reads.get_tuple(config, serde))

    def list(
        self,
        config: Config | None,
        serde: Serializer,
        *,
        filter: Mapping[str, Any] | None = None,
        before: Config | None = None,
        limit: int | None = None,
    ) -> Steps[list[TupleParts]]:
        """Return matching checkpoints, newest first per namespace; filters before `limit`."""
        return (
            yield from self.reads.list(config, serde, filter=filter, before=before, limit=limit)
        )

    def delta_history(
        self, config: Config, channels: Sequence[str], serde: Serializer
    ) -> Steps[dict[str, dict[str, Any]]]:
        """Walk the parent chain of a checkpoint for `channels`, in one read of the thread."""
        return (yield from self.reads.delta_history(config, channels, serde))

    # -- writing ---------------------------------------------------------------------------

    def put(
        self,
        config: Config,
        checkpoint: Mapping[str, Any],
        metadata: Mapping[str, Any],
        new_versions: Mapping[str, Any],
        serde: Serializer,
    ) -> Steps[Config]:
        """Store a checkpoint: one conditional PUT, plus one per new large value."""
        from langgraph.checkpoint.base import get_checkpoint_metadata

        check_config(config)
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "")
        parent_id = configurable.get("checkpoint_id")
        extends_latest = bool(configurable.get(LATEST_MARKER))
        key = thread_key(thread_id)
        skeleton = dict(checkpoint)
        channel_values = skeleton.pop("channel_values", {})
        packed_checkpoint = pack(*dumped(serde, skeleton, "checkpoint", key))
        merged_metadata = get_checkpoint_metadata(config, dict(metadata))  # type: ignore[arg-type]
        packed_metadata = pack(*dumped(serde, merged_metadata, "metadata", key))
        run = _run_of(merged_metadata) if self.run_threads is not None else None
        if self.run_threads is None and (unindexed := _run_of(merged_metadata)) is not None:
            yield from self._refuse_unindexed(unindexed)
        # Serialize once; which list values may be stored as extensions depends on the head.
        serialized: dict[str, Any] = {}
        for channel in new_versions:
            if channel not in channel_values:
                continue
            value = channel_values[channel]
            if type(value) is list:
                serialized[channel] = [dumped(serde, item, "a value", key) for item in value]
            else:
                serialized[channel] = dumped(serde, value, "a value", key)
        large: dict[str, tuple[str, bytes]] = {}
        values_sent: set[str] = set()
        replaced: list[str] = []

        fresh_start = metadata.get("source") == "input" and metadata.get("step") == -1

        def plan(known: Known[LoggedThread]) -> Steps[tuple[dict[str, Any], LoggedThread]]:
            state, version = _life_state(known)
            latest: str | None = None
            if (
                (extends_latest or fresh_start)
                and state.evicted
                and (state.ns[ns].latest if ns in state.ns else None) is None
                and not state.deleted
            ):
                # The thread has had more namespaces than its state names: this one's
                # latest checkpoint is found in the thread itself.
                read = yield from self.reads.read(key)
                stored = None if read is None else read[1].latest(ns)
                latest = None if stored is None else stored.checkpoint_id
            check_put(
                state,
                ns=ns,
                parent_id=parent_id,
                extends_latest=extends_latest,
                fresh_start=fresh_start,
                thread_id=thread_id,
                version=version,
                latest=latest,
            )
            replaced.clear()
            large.clear()
            base = version if state.deleted else state.base
            slot = state.ns.get(ns) or Slot()
            values: dict[str, Any] = {}
            locations: dict[str, ValueLocation] = {}
            snapshots: dict[str, bytes] = {}
            for channel, channel_version in new_versions.items():
                if channel not in serialized:
                    values[channel] = {"version": channel_version, "empty": True}
                    locations[channel] = ValueLocation(channel_version, version, [version], None)
                    continue
                ser = serialized[channel]
                if isinstance(ser, list):
                    # The list the parent checkpoint stored, as the head says (any process
                    # wrote it): when ours starts with it, only the new items are stored.
                    # None at all where the list is unchanged and only its version moved
                    # (a node that wrote `{"messages": []}`): the whole list again would
                    # cost the thread's size for a step that added nothing.
                    parent_list = slot.values.get(channel) if slot.latest == parent_id else None
                    at = -1 if parent_list is None else (parent_list.items or -1)
                    prefix, digest = list_digests([item_key(t, d) for t, d in ser], at)
                    extends = parent_list is not None and prefix == parent_list.digest
                    if parent_list is not None and extends and len(ser) >= at >= 0:
                        doc: dict[str, Any] = {
                            "list_after": parent_list.channel_version,
                            "items": [packed(t, d, large) for t, d in ser[at:]],
                        }
                        location = parent_list.changed(
                            channel_version=channel_version,
                            links=[*parent_list.links, version],
                            items=len(ser),
                            digest=digest,
                            since=parent_list.since + 1,
                        )
                        location = yield from self.values.list_objects(
                            ser, doc, location, version, base, large, snapshots, replaced
                        )
                    else:
                        doc = {"list": [packed(t, d, large) for t, d in ser]}
                        location = ValueLocation(
                            channel_version, version, [version], None, len(ser), digest
                        )
                    locations[channel] = location
                else:
                    doc = packed(ser[0], ser[1], large)
                    locations[channel] = ValueLocation(channel_version, version, [version], None)
                values[channel] = {"version": channel_version, "value": doc}
            if run is not None and self.run_threads is not None and state.run != run:
                # Ahead of the append: the index never misses a thread that holds the run.
                yield from self.run_threads.note([run], key, version)
            yield from self.values.store_large(key, large, base, values_sent)
            yield from self.values.store_snapshots(key, snapshots)
            record = {
                "op": "put",
                "ns": ns,
                "id": checkpoint["id"],
                "parent": parent_id,
                "checkpoint": packed_checkpoint,
                "metadata": packed_metadata,
                "values": values,
            }
            new_state = state_after_put(
                state,
                ns=ns,
                checkpoint_id=str(checkpoint["id"]),
                parent_id=parent_id,
                channel_versions=checkpoint.get("channel_versions", {}),
                value_versions=locations,
                version=version,
            )
            new_state = new_state.model_copy(update={"thread_id": thread_id, "run": run})
            return record, LoggedThread(new_state)

        yield from self._place(key, thread_id, plan)
        for name in replaced:
            # Deleted after this call returns (`background`): readers of older heads that
            # miss it fall back to reading the whole chain.
            self.values.bodies.pop(self.values.key(key, name))
            self._stale.put(self.values.key(key, name), True)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _place(
        self,
        key: str,
        thread_id: str,
        plan: Callable[[Known[LoggedThread]], Steps[tuple[Any, LoggedThread]]],
    ) -> Steps[Known[LoggedThread]]:
        """Append the record `plan(known)` makes after the thread's head; return the new head.

        The one update loop of log-backed state (`logs.state`): the head this saver last
        wrote is tried first; when another writer got there first, or `plan` refuses what
        may be an old head, the head is read again and the record planned again.
        """

        def write(
            known: Known[LoggedThread], planned: tuple[Any, LoggedThread]
        ) -> Steps[Known[LoggedThread]]:
            record, thread = planned
            # After a deletion or a purge for reuse, right after the version that ended it.
            after = known.log or known.ended
            return (yield from self.threads.append(key, after, [record], thread))

        try:
            return (
                yield from self.threads.update(
                    key, lambda known, fresh: plan(known), write, initial=self._empty(thread_id)
                )
            )
        except Purged:
            # The large values this put stored before its append was refused would survive
            # under an erased thread: they go at once (`gc` takes what a crash leaves).
            yield from self.values.erase(key)
            raise

    def _empty(self, thread_id: str) -> Callable[[], LoggedThread]:
        return lambda: LoggedThread(empty_state(thread_id))

    def put_writes(
        self,
        config: Config,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str,
        serde: Serializer,
    ) -> Steps[None]:
        """Store a task's pending writes: one conditional PUT whatever their number."""
        from langgraph.checkpoint.base import WRITES_IDX_MAP

        check_config(config, need_id=True)
        configurable = config["configurable"]
        thread_id = str(configurable["thread_id"])
        ns = configurable.get("checkpoint_ns", "")
        checkpoint_id = configurable["checkpoint_id"]
        key = thread_key(thread_id)
        large: dict[str, tuple[str, bytes]] = {}
        items = []
        for index, (channel, value) in enumerate(writes):
            type_, data = dumped(serde, value, "a pending write", key)
            items.append([WRITES_IDX_MAP.get(channel, index), channel, packed(type_, data, large)])

        stored: set[str] = set()
        record = {
            "op": "writes",
            "ns": ns,
            "id": checkpoint_id,
            "task": task_id,
            "path": task_path,
            "items": items,
        }

        def plan(known: Known[LoggedThread]) -> Steps[tuple[dict[str, Any], LoggedThread]]:
            state, version = _life_state(known)
            if state.deleted:
                raise CheckpointConflict(
                    thread_id,
                    expected_revision=None,
                    actual_revision=version - 1,
                    message=f"thread {thread_id!r} was deleted; writes after its deletion are "
                    "refused",
                )
            yield from self.values.store_large(key, large, state.base, stored)
            new_state = state_after_writes(
                state, ns=ns, checkpoint_id=checkpoint_id, version=version
            )
            return record, LoggedThread(new_state.model_copy(update={"thread_id": thread_id}))

        yield from self._place(key, thread_id, plan)

    # -- whole-thread operations -------------------------------------------------------------

    def delete_thread(self, thread_id: str) -> Steps[None]:
        """Delete a thread, leaving a tombstone: a late write cannot bring it back.

        One PUT after the head (this saver's own when it knows one: a head that is not the
        latest loses the race and is read again), then the large values of the lives it
        ended. The entries below stay whole (readers never read below the tombstone's life,
        and their keys stay occupied) until `gc` vacates them (`LogSteps.tidy`): one PUT
        each there, not here.
        """
        key = thread_key(thread_id)
        ended_lists: list[str] = []

        def tombstone(known: Known[LoggedThread], fresh: bool) -> Steps[LoggedThread | None]:
            if known.log is None:
                return None  # no thread: nothing to delete
            state = known.state.state
            ended_lists[:] = [n for ns in state.ns for n in snapshots_for_latest(state, ns)]
            return LoggedThread(empty_state(thread_id, known.next_version, deleted=True))
            yield  # a generator, like every change

        def write(
            known: Known[LoggedThread], deleted: LoggedThread | None
        ) -> Steps[Known[LoggedThread] | None]:
            if deleted is None:
                return None
            return (yield from self.threads.append(key, known.log, [{"op": "delete"}], deleted))

        try:
            head = yield from self.threads.update(
                key, tombstone, write, initial=self._empty(thread_id)
            )
        except Purged:
            return  # erased already, more thoroughly than a deletion would
        if head is not None:
            yield from self.values.drop(key, head.state.state.base, frozenset(ended_lists))
        self.threads.forget(key)

    def _rewrite(
        self, thread_id: str, change: Any, serde: Serializer, *, source: str | None = None
    ) -> Steps[bool]:
        """Rewrite a thread as `change(model)` leaves it, in one append (a rebase).

        `change` returns False to leave the thread alone. `source`: read that thread's
        model instead (copy; refused once the target has checkpoints). The rebase is
        appended right after the version its model was folded at, so a put that lands
        meanwhile is a lost race (folded again), never dropped. Older objects are deleted
        once the rebase is stored.
        """
        key = thread_key(thread_id)
        source_key = thread_key(source or thread_id)
        Planned = tuple[Known[LoggedThread], dict[str, Any], LoggedThread]
        # The entries below the rebase stay whole until `gc` vacates them (`LogSteps.tidy`).

        def rebase(known: Known[LoggedThread], fresh: bool) -> Steps[Planned | None]:
            after = known
            if source is not None and _has_checkpoints(known.state.state):
                raise CheckpointConflict(
                    thread_id,
                    expected_revision=None,
                    message=f"thread {thread_id!r} already has checkpoints; copy to a new thread",
                )
            read = yield from self.reads.read(source_key)
            if source is None and read is not None:
                after = self.threads.known_of(read[2])
            model = ThreadModel() if read is None or read[0].deleted else read[1]
            if not change(model):
                return None
            if source is not None and self.run_threads is not None:
                # A copy brings the source's runs into this thread: their items go first.
                yield from self.run_threads.note(
                    _runs_in(model, serde, key), key, after.next_version
                )
            state = state_of_model(model, thread_id, after.next_version)
            return after, {"op": "rebase", "records": model.records()}, LoggedThread(state)

        def write(
            known: Known[LoggedThread], planned: Planned | None
        ) -> Steps[Known[LoggedThread] | None]:
            if planned is None:
                return None
            after, record, thread = planned
            return (yield from self.threads.append(key, after.log, [record], thread))

        self.threads.forget(key)
        head = yield from self.threads.update(
            key, rebase, write, initial=self._empty(thread_id), trust_cached=False
        )
        if head is None:
            return False
        self.threads.forget(key)
        return True

    def prune(self, thread_ids: Sequence[str], strategy: str, serde: Serializer) -> Steps[None]:
        """Keep only each namespace's latest checkpoint (`keep_latest`), or nothing."""
        if strategy not in ("keep_latest", "delete"):
            raise InvalidPayload(f"unknown prune strategy {strategy!r}")
        for thread_id in thread_ids:
            if strategy == "delete":
                yield from self.delete_thread(thread_id)
                continue

            def keep_latest(model: ThreadModel) -> bool:
                latest = {ns: model.latest(ns) for ns in model.checkpoints}
                return model.keep(lambda c: latest[c.ns] is c)

            yield from self._rewrite(thread_id, keep_latest, serde)

    def delete_for_runs(self, run_ids: Sequence[str], serde: Serializer) -> Steps[None]:
        """Delete, in every thread, the checkpoints (and writes) of the given runs.

        With an index whose (run, thread) items cover every thread (`run_threads`), only
        the threads the items name are read: one request for the marker and one per run,
        then each named thread. With an index whose items are not complete yet, every
        thread is walked once to write them (`index_runs`, as `setup()` does), then the
        index is read. Without an index, every thread is walked.
        """
        doomed = {str(run_id) for run_id in run_ids}
        if not doomed:
            return
        named = yield from self._threads_of_runs(doomed, serde)
        keys = sorted(named) if named is not None else (yield from self.logs.list_ids())
        for key in keys:
            read = yield from self.reads.listed(key)
            if read is not None and not read[0].deleted:
                yield from self._drop_runs(key, read[0], read[1], doomed, serde)
            if named is not None and read is not None:
                yield from self._forget_items(key, named[key], read[2].version)

    def _threads_of_runs(
        self, doomed: set[str], serde: Serializer
    ) -> Steps[dict[str, dict[str, int]] | None]:
        """Return the threads the index names for runs `doomed` (None: no index).

        An index whose items are not complete yet is completed first (`index_runs`).
        """
        if self.run_threads is None:
            return None
        named = yield from self.run_threads.threads_of(sorted(doomed))
        if named is None:
            yield from self.index_runs(serde)
            named = yield from self.run_threads.threads_of(sorted(doomed))
        return named

    def _drop_runs(
        self, key: str, state: ThreadState, model: ThreadModel, doomed: set[str], serde: Serializer
    ) -> Steps[None]:
        """Rewrite a thread without the checkpoints of runs `doomed`, if it holds any.

        Read again inside the rewrite: a put landing meanwhile is folded, not lost.
        """
        if not _runs_in(model, serde, key) & doomed:
            return

        def without_runs(model: ThreadModel) -> bool:
            return model.keep(lambda c: _run_of(load(serde, c.metadata, key, {})) not in doomed)

        yield from self._rewrite(str(state.thread_id or key), without_runs, serde)

    def index_runs(self, serde: Serializer) -> Steps[int]:
        """Write every thread's (run, thread) items once, then the marker; say how many threads.

        Nothing to do without an index, or when the marker says it was done: the saver's
        puts keep the items from then on. Safe beside running puts (theirs go ahead of
        their appends) and resumable: the walk records in the index how far it got after
        every page of `_WALK_PAGE` threads, so a call cut short (a Lambda's deadline) is
        taken on by the next one. Returns the threads walked by this call.
        """
        if self.run_threads is None:
            return 0
        if (yield from self.run_threads.is_complete()):
            yield from self._announce_run_index()
            return 0
        cursor, total = yield from self.run_threads.walked()
        walked = 0
        while True:
            keys, cursor = yield from self.logs.list_page("", _WALK_PAGE, cursor)
            for key in keys:
                read = yield from self.reads.listed(key)
                if read is not None and not read[0].deleted:
                    yield from self.run_threads.note(_runs_in(read[1], serde, key), key, 0)
                walked += 1
            if cursor is None:
                break
            yield from self.run_threads.walking(cursor, total + walked)
        yield from self.run_threads.complete()
        yield from self._announce_run_index()
        return walked

    def _forget_items(self, key: str, runs: Mapping[str, int], read_at: int) -> Steps[None]:
        """Remove a thread's items of runs just deleted from it (or that it no longer holds).

        Only items written at or below the version the thread was read at: a put of the run
        planned later wrote a higher revision (it is in flight, or landed after the rewrite)
        and its item stays. A put that planned at or below that version cannot append there
        (the version is taken): it plans again and writes its item again, higher.
        """
        assert self.run_threads is not None
        for run_id, revision in sorted(runs.items()):
            if revision <= read_at:
                yield from self.run_threads.forget(run_id, key, revision)

    def copy_thread(self, source_id: str, target_id: str, serde: Serializer) -> Steps[None]:
        """Copy every checkpoint and write of a thread to another (refused if it has any)."""
        target = yield from self.reads.read(thread_key(target_id))
        if target is not None and not target[0].deleted and target[1].checkpoints:
            raise CheckpointConflict(
                target_id,
                expected_revision=None,
                message=f"thread {target_id!r} already has checkpoints; copy to a new thread",
            )
        yield from self._rewrite(
            target_id, lambda model: bool(model.checkpoints), serde, source=source_id
        )


def _every_checkpoint(model: ThreadModel) -> Iterator[StoredCheckpoint]:
    for checkpoints in model.checkpoints.values():
        yield from checkpoints.values()


def _has_checkpoints(state: ThreadState) -> bool:
    """Whether a thread state has (or may have: more namespaces than it names) checkpoints."""
    if state.deleted:
        return False
    return state.evicted or any(slot.latest is not None for slot in state.ns.values())


def _runs_in(model: ThreadModel, serde: Serializer, key: str) -> set[str]:
    """Return the runs a thread's checkpoints name."""
    return {
        run
        for stored in _every_checkpoint(model)
        if (run := _run_of(load(serde, stored.metadata, key, {}))) is not None
    }


def _run_of(metadata: Mapping[str, Any]) -> str | None:
    """Return the run a checkpoint's metadata names (`run_id`, set by LangGraph's server)."""
    run_id = metadata.get("run_id")
    return None if run_id is None else str(run_id)
