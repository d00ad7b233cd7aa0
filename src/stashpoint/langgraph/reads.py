"""The saver's reads of a thread: its latest checkpoint in one round, or its whole log.

A read plan (`_ReadPlan`) says which versions and list snapshots a head names; a thread
this process knows is read at the head it knows, with no listing (`LogSteps.read_at_top`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stashpoint.errors import (
    CheckpointNotFound,
    InvalidArgument,
    InvalidPayload,
    Purged,
    described,
    whole,
)
from stashpoint.ids import thread_key
from stashpoint.langgraph.run_threads import RunThreads
from stashpoint.langgraph.thread import (
    LATEST_MARKER,
    THREAD_KIND,
    THREAD_SCHEMA,
    Serializer,
    StoredCheckpoint,
    ThreadModel,
    ThreadState,
    check_config,
    check_state,
    fold,
    snapshots_for_latest,
    versions_for_latest,
)
from stashpoint.langgraph.values import (
    ThreadValues,
    Whole,
    channel_value,
    listed_version,
    load,
    refs_in_values,
    unpacks_msgpack,
)
from stashpoint.logs.format import LogEntry
from stashpoint.logs.listing import LogListing, ReadAhead
from stashpoint.logs.log import LogHead, LogSteps, ended_error
from stashpoint.logs.state import Known, LoggedState
from stashpoint.steps import PARALLEL_WIDTH, Steps
from stashpoint.stores.objects import GetObject, KeyPage, ListKeys, ObjectInfo

Config = dict[str, Any]
"""LangGraph's `RunnableConfig`."""


@dataclass(frozen=True, slots=True)
class LoggedThread:
    """A thread's state as its log's head stores it."""

    state: ThreadState
    """The checked thread state (`thread.check_state`)."""


class ThreadForm:
    """How a thread's state is kept in its log (`logs.state.StateForm`)."""

    kind = THREAD_KIND
    schema_version = THREAD_SCHEMA

    def parse(self, head: LogHead) -> LoggedThread:
        """Return the checked state of a thread log's head."""
        return LoggedThread(check_state(head.state, head.log_id))

    def document(self, state: LoggedThread) -> dict[str, Any]:
        """Return the state an entry stores."""
        return state.state.document()


class _ReadPlan:
    """What one read of a thread wants of the head it finds: versions and list snapshots.

    The latest checkpoint of a namespace the head names whole (`versions_for_latest`) is
    read from the versions and snapshots it names; anything else from the thread's base.
    """

    def __init__(self, key: str, ns: str | None, checkpoint_id: str | None) -> None:
        self.key = key
        self.ns = ns
        self.checkpoint_id = checkpoint_id
        self.snapshots: list[str] = []
        """The snapshots asked for beside the versions (`_read_latest`)."""
        self.fetched: dict[str, ObjectInfo | None] = {}
        """Objects a cold read fetched with the newest entry, by key (`_read_ahead`)."""
        self._checked: dict[int, ThreadState] = {}  # by version: a state is checked once

    def state_of(self, head: LogHead) -> ThreadState:
        """Return the head's checked state."""
        state = self._checked.get(head.version)
        if state is None:
            state = self._checked[head.version] = check_state(head.state, self.key)
        return state

    def _quick(self, head: LogHead) -> list[int] | None:
        if head.ended or self.ns is None:
            return None
        state = self.state_of(head)
        slot = state.ns.get(self.ns)
        if state.deleted or slot is None or self.checkpoint_id not in (None, slot.latest):
            return None
        return versions_for_latest(state, self.ns)

    def wanted(self, head: LogHead) -> list[int]:
        """Return the versions to read at `head`."""
        if head.ended:
            return []  # ended by a purge (or a log-level deletion): nothing to read
        state = self.state_of(head)
        if state.deleted:
            return []
        quick = self._quick(head)
        return quick if quick is not None else list(range(state.base, head.version + 1))

    def snapshot_names(self, head: LogHead) -> list[str]:
        """Return the list snapshots to read at `head` (with its versions)."""
        if self._quick(head) is None or self.ns is None:
            return []
        return snapshots_for_latest(self.state_of(head), self.ns)

    def covered(self, head: LogHead, found: Mapping[int, LogEntry]) -> bool:
        """Whether `found` and the snapshots asked for hold everything `head` needs."""
        return (
            all(v in found for v in self.wanted(head))
            and self.snapshot_names(head) == self.snapshots
        )


@dataclass(frozen=True, slots=True)
class TupleParts:
    """A checkpoint tuple before the LangGraph types are built around it."""

    config: Config
    checkpoint: dict[str, Any]
    metadata: dict[str, Any]
    parent_config: Config | None
    pending_writes: list[tuple[str, str, Any]]


class ThreadReads:
    """The saver's reads of threads: the latest checkpoint in one round, or the whole log."""

    def __init__(
        self,
        logs: LogSteps,
        threads: LoggedState[LoggedThread],
        values: ThreadValues,
        run_threads: RunThreads | None,
    ) -> None:
        self.logs = logs
        """The threads' logs."""
        self.threads = threads
        """The threads' states, with the heads this process knows."""
        self.values = values
        """The objects beside the logs."""
        self.run_threads = run_threads
        """Which threads may hold which runs (None: the stash has no index)."""

    def listed(self, key: str) -> Steps[tuple[ThreadState, ThreadModel, LogHead] | None]:
        """Read a thread met in a listing of every thread: a purged one is passed over."""
        try:
            return (yield from self.read(key))
        except Purged:
            return None

    def read(self, key: str) -> Steps[tuple[ThreadState, ThreadModel, LogHead] | None]:
        """Read the whole thread (from its base); None: no thread.

        Returns the head's state, the model folded and the head it was folded at.
        """
        plan = _ReadPlan(key, None, None)
        read = yield from self._read_for(plan)
        return None if read is None else self._folded(plan, read[0], read[1])

    def _read_for(
        self, plan: _ReadPlan, beside: Callable[[LogHead], list[GetObject]] | None = None
    ) -> Steps[tuple[LogHead, dict[int, LogEntry], list[ObjectInfo | None]] | None]:
        """Read the versions `plan` wants, and `beside`'s objects; None: no thread.

        A thread whose head this process knows (it read or wrote it) is read in one round
        with no listing: the head, the key after it (absent: still the head), the versions
        and objects that head names, less what this process wrote (entries, segments it
        sealed). Otherwise, or when the thread went on: a listing, the newest entry, then
        the rest in one round.
        """
        key = plan.key
        known = self.threads.cached(key)
        if known is not None and known.log is not None and not known.log.ended:
            guess = known.log
            extra = [] if beside is None else beside(guess)
            read = yield from self.logs.read_at_top(key, guess.version, plan.wanted(guess), extra)
            if read is not None and plan.covered(read[0], read[1]):
                return read
            # else the head names what the one we knew did not: read with a listing
        ahead = None if plan.ns is None else self._read_ahead(key, plan.fetched)
        try:
            return (yield from self.logs.head_with(key, plan.wanted, beside, ahead))
        except CheckpointNotFound:
            return None

    def _read_ahead(self, key: str, fetched: dict[str, ObjectInfo | None]) -> ReadAhead:
        """Return the guess a cold read of thread `key`'s latest checkpoint makes.

        The thread's list snapshots and tails are listed with its log (they are named by
        the version of the put that names them): the newest snapshot, the newest tail after
        it, and the versions from the newer of the two to the top are fetched with the
        newest entry. Those are what a head names for a thread whose latest checkpoint
        extended its lists in the last few versions (a chat), as many as one round of the
        driver's width holds (`PARALLEL_WIDTH`, the nearest first). A thread with no list
        object reads as before, as does any other shape: what the guess missed is read in
        the next round. The objects fetched go to `fetched`.
        """
        prefix = self.values.key(key, "")
        # Large values are named by a hex digest, which sorts before `s-` and `t-` (where
        # listings seek: not on directory buckets, where the page is taken whole).
        listed = ListKeys(prefix, start_after=prefix + "s" if self.logs.seeks else None)
        limit = self.values.codec.limits.max_compressed_bytes

        def guess(listing: LogListing) -> tuple[range, list[GetObject]]:
            top = listing.top
            if top is None:
                return range(0), []
            newest = _newest_list_objects(listing.beside, prefix, top)
            if not newest:
                return range(0), []  # which versions the head names is unknown
            objects = [GetObject(object_key, None, limit) for _, object_key in newest]
            # One round: the newest entry, the objects and the nearest versions below it.
            budget = PARALLEL_WIDTH - 1 - len(objects)
            return range(max(newest[-1][0], top - budget), top), objects

        return ReadAhead(listed, guess, fetched)

    def _read_latest(
        self, key: str, ns: str, checkpoint_id: str | None, fast: bool
    ) -> Steps[tuple[ThreadState, ThreadModel, dict[str, Whole] | None] | None]:
        """Read `ns`'s checkpoint (its latest when no id) with the list snapshots it needs.

        Returns what `_read` does, with the snapshots by name instead of the head (None:
        one was replaced since the head named it). A thread this process read or wrote is
        read in one round: the head it knows, the key after it (absent: still the head),
        the versions and snapshots that head names. Otherwise, or when the thread went on:
        a listing, the newest entry, then versions and snapshots in one round. `fast`: the
        serializer unpacks msgpack as LangGraph's does (`Whole.msgpack` serves it).
        """
        plan = _ReadPlan(key, ns, checkpoint_id)
        limit = self.values.codec.limits.max_compressed_bytes

        held: dict[str, bytes] = {}  # snapshot bodies this saver keeps, by name
        kept: dict[str, tuple[int, bytes, Any]] = {}  # or their msgpack (`_msgpack`)

        def beside(head: LogHead) -> list[GetObject]:
            plan.snapshots = plan.snapshot_names(head)
            held.clear()
            kept.clear()
            for name in plan.snapshots:
                object_key = self.values.key(key, name)
                msgpack = self.values.msgpack.get(object_key) if fast else None
                body = self.values.bodies.get(object_key)
                if body is None and (ahead := plan.fetched.get(object_key)) is not None:
                    body = ahead.body  # fetched with the newest entry (`_read_ahead`)
                if msgpack is not None:
                    kept[name] = msgpack  # nothing to fetch or decode
                elif body is not None:
                    held[name] = body
            return [
                GetObject(self.values.key(key, n), None, limit)
                for n in plan.snapshots
                if n not in held and n not in kept
            ]

        read = yield from self._read_for(plan, beside)
        if read is None:
            return None
        head, found, infos = read
        folded = self._folded(plan, head, found)
        if folded is None:
            return None
        state, model, _ = folded
        snapshots: dict[str, Whole] | None = {}
        if model.partial:
            fetched = iter(infos)
            bodies = [
                held.get(n) if n in held or n in kept else _body(next(fetched, None))
                for n in plan.snapshots
            ]
            snapshots = yield from self.values.decoded_snapshots(
                key, plan.snapshots, bodies, kept if fast else None
            )
        return state, model, snapshots

    def _folded(
        self, plan: _ReadPlan, head: LogHead, found: Mapping[int, LogEntry]
    ) -> tuple[ThreadState, ThreadModel, LogHead] | None:
        """Fold what `plan` read at `head`; None: the thread was deleted."""
        key = plan.key
        if head.ended:
            ended = ended_error(key, head)
            if isinstance(ended, Purged):
                raise ended
            return None
        state = plan.state_of(head)
        # A put after this read (LangGraph reads before it writes) starts from this head:
        # one PUT, however long ago this process last wrote the thread.
        self.threads.remember(key, Known(LoggedThread(state), head))
        versions = _to_fold(plan, head, state, found)
        model = fold(((v, found[v].records) for v in versions), key)
        model.thread_id = state.thread_id
        model.partial = not state.deleted and versions != list(range(state.base, head.version + 1))
        return state, model, head

    def get_tuple(self, config: Config, serde: Serializer) -> Steps[TupleParts | None]:
        """Return the checkpoint `config` names (its latest without `checkpoint_id`)."""
        thread_id, ns, checkpoint_id = config_target(config)
        key = thread_key(thread_id)
        latest = yield from self._read_latest(key, ns, checkpoint_id, unpacks_msgpack(serde))
        if latest is None:
            return None
        state, model, snapshots = latest
        if state.deleted:
            return None
        if snapshots is None:  # replaced under us: read the whole thread instead
            read = yield from self.read(key)
            if read is None:
                return None
            state, model, _ = read
            snapshots = {}
        if checkpoint_id is None:
            stored = model.latest(ns)
        else:
            stored = model.checkpoints.get(ns, {}).get(checkpoint_id)
        if stored is None:
            return None
        parts = yield from self._tuple(key, thread_id, model, stored, serde, snapshots)
        if checkpoint_id is None:
            parts.config["configurable"][LATEST_MARKER] = True
        return parts

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
        _check_list(config, filter, before, limit)
        thread_ids: list[str] = []
        keys: Sequence[str]
        if config is not None:
            thread_ids = [str(config["configurable"]["thread_id"])]
            keys = [thread_key(thread_ids[0])]
        else:
            keys = yield from self._listed_keys(filter)
        want_ns = _configured(config, "checkpoint_ns")
        want_id = _configured(config, "checkpoint_id")
        before_id = _configured(before, "checkpoint_id")
        out: list[TupleParts] = []
        for index, key in enumerate(keys):
            found = yield from self._thread(key, thread_ids[index] if thread_ids else None)
            if found is None:
                continue
            thread_id, model = found
            for stored in _newest_first(model, want_ns, want_id, before_id):
                if filter and not _metadata_meets(serde, stored, key, filter):
                    continue
                if limit is not None and len(out) >= limit:
                    return out
                out.append((yield from self._tuple(key, thread_id, model, stored, serde)))
        return out

    def _thread(self, key: str, thread_id: str | None) -> Steps[tuple[str, ThreadModel] | None]:
        """Return a thread's id and model for `list` (None: gone or deleted).

        `thread_id`: the one the caller named (read whole), else None (a thread found in a
        listing, read as `listed` does, its id from its state).
        """
        read = yield from (self.read(key) if thread_id is not None else self.listed(key))
        if read is None or read[0].deleted:
            return None
        state, model, _ = read
        return (thread_id if thread_id is not None else str(state.thread_id or key)), model

    def _listed_keys(self, filter: Mapping[str, Any] | None) -> Steps[Sequence[str]]:
        """Return the keys of the threads a `list` without a config looks at."""
        if self.run_threads is not None and filter and filter.get("run_id") is not None:
            # Only the threads that may hold the run (`run_threads`), when that is known.
            named = yield from self.run_threads.threads_of([str(filter["run_id"])])
            if named is not None:
                return sorted(named)
        return (yield from self.logs.list_ids())

    def delta_history(
        self, config: Config, channels: Sequence[str], serde: Serializer
    ) -> Steps[dict[str, dict[str, Any]]]:
        """Walk the parent chain of a checkpoint for `channels`, in one read of the thread.

        Per channel: the writes stored at each ancestor (oldest first) down to the nearest
        ancestor holding a value, which is the `seed` (LangGraph's `DeltaChannel` contract).
        """
        thread_id, ns, checkpoint_id = config_target(config)
        key = thread_key(thread_id)
        result: dict[str, dict[str, Any]] = {c: {"writes": []} for c in channels}
        read = yield from self.read(key)
        if read is None or read[0].deleted:
            return result
        model = read[1]
        collected, seeds = _ancestors(
            model, ns, _parent_of(model, ns, checkpoint_id), channels, serde, key
        )
        packed = [w.value for ws in collected.values() for w in ws]
        objects = yield from self.values.fetch_large(
            key, [*packed, *refs_in_values(model, ns, {c: d for c, (_, d) in seeds.items()})]
        )
        for channel in channels:
            result[channel]["writes"] = [
                (w.task_id, w.channel, load(serde, w.value, key, objects))
                for w in reversed(collected[channel])
            ]
        for channel, (version, _) in seeds.items():
            result[channel]["seed"] = channel_value(
                serde, model, ns, channel, version, key, objects
            )
        return result

    def _tuple(
        self,
        key: str,
        thread_id: str,
        model: ThreadModel,
        stored: StoredCheckpoint,
        serde: Serializer,
        snapshots: Mapping[str, Whole] | None = None,
    ) -> Steps[TupleParts]:
        snapshots = snapshots or {}
        checkpoint = load(serde, stored.checkpoint, key, {})
        versions = checkpoint.get("channel_versions", {})
        docs: dict[str, dict[str, Any]] = {}
        for channel, version in versions.items():
            doc = model.values.get((stored.ns, channel, version))
            if doc is not None:
                docs[channel] = doc
        writes = model.pending(stored.ns, stored.checkpoint_id)
        objects = yield from self.values.fetch_large(
            key,
            [*refs_in_values(model, stored.ns, docs, snapshots), *(w.value for w in writes)],
        )
        values = {
            channel: channel_value(
                serde, model, stored.ns, channel, versions[channel], key, objects, snapshots
            )
            for channel in docs
        }
        ns = stored.ns
        config = {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": stored.checkpoint_id,
            }
        }
        parent = None
        if stored.parent_id is not None:
            parent = {
                "configurable": {
                    "thread_id": thread_id,
                    "checkpoint_ns": ns,
                    "checkpoint_id": stored.parent_id,
                }
            }
        return TupleParts(
            config=config,
            checkpoint={**checkpoint, "channel_values": values},
            metadata=load(serde, stored.metadata, key, objects),
            parent_config=parent,
            pending_writes=[
                (w.task_id, w.channel, load(serde, w.value, key, objects)) for w in writes
            ],
        )


def _newest_list_objects(page: KeyPage | None, prefix: str, top: int) -> list[tuple[int, str]]:
    """Return the newest list snapshot under `prefix` and the newest tail after it.

    As (the version their name carries, object key), oldest first; none when the page is
    missing or not the whole listing (its newest names may be on the next page).
    """
    if page is None or page.next_token is not None:
        return []
    newest: dict[str, tuple[int, str]] = {}
    for object_key in page.keys:
        name = object_key[len(prefix) :]
        version = listed_version(name)
        if version is not None and version <= top and version >= newest.get(name[:2], (-1,))[0]:
            newest[name[:2]] = (version, object_key)
    snapshot, tail = newest.get("s-"), newest.get("t-")
    if snapshot is None:
        return []
    return [snapshot] if tail is None or tail[0] <= snapshot[0] else [snapshot, tail]


def config_target(config: Config) -> tuple[str, str, str | None]:
    """Return the thread, namespace and checkpoint id (None: the latest) `config` names."""
    check_config(config)
    configurable = config["configurable"]
    return (
        str(configurable["thread_id"]),
        configurable.get("checkpoint_ns", ""),
        configurable.get("checkpoint_id") or None,
    )


def _body(info: ObjectInfo | None) -> bytes | None:
    return None if info is None else info.body


def _configured(config: Config | None, name: str) -> Any:
    """Return a value of a config's `configurable` (None: no config, or not set)."""
    return None if config is None else config["configurable"].get(name)


def _check_list(
    config: Config | None,
    filter: Mapping[str, Any] | None,
    before: Config | None,
    limit: int | None,
) -> None:
    """Check `list`'s arguments: `InvalidArgument` before any request."""
    if limit is not None:
        whole(limit, "limit")
    check_config(config, optional=True)
    if before is not None:
        check_config(before)
    if filter is not None and not isinstance(filter, Mapping):
        raise InvalidArgument(f"filter must be a mapping, not {described(filter)}")


def _newest_first(
    model: ThreadModel, want_ns: str | None, want_id: str | None, before_id: str | None
) -> Iterator[StoredCheckpoint]:
    """Yield a thread's checkpoints in `want_ns` (None: every namespace), newest first.

    Only `want_id` if given, only those before `before_id` if given.
    """
    for ns, checkpoints in model.checkpoints.items():
        if want_ns is not None and ns != want_ns:
            continue
        for stored in sorted(checkpoints.values(), key=lambda c: c.checkpoint_id, reverse=True):
            if want_id and stored.checkpoint_id != want_id:
                continue
            if before_id and stored.checkpoint_id >= before_id:
                continue
            yield stored


def _metadata_meets(
    serde: Serializer, stored: StoredCheckpoint, key: str, filter: Mapping[str, Any]
) -> bool:
    """Whether a checkpoint's metadata has every value `filter` asks for."""
    metadata = load(serde, stored.metadata, key, {})
    return all(metadata.get(k) == v for k, v in filter.items())


def _to_fold(
    plan: _ReadPlan, head: LogHead, state: ThreadState, found: Mapping[int, LogEntry]
) -> list[int]:
    """Return the versions a read folds.

    Those the plan wants (all found, or `InvalidPayload`); of a deleted thread, whatever
    was found of its life.
    """
    if state.deleted:
        return sorted(v for v in found if v >= state.base)
    needed = plan.wanted(head)
    missing = [v for v in needed if v not in found]
    if missing:
        raise InvalidPayload(
            f"thread log lacks versions {missing[:5]} it names", object_name=plan.key
        )
    return needed


def _parent_of(model: ThreadModel, ns: str, checkpoint_id: str | None) -> StoredCheckpoint | None:
    """Return the parent of `checkpoint_id` (None: of the namespace's latest checkpoint)."""
    checkpoints = model.checkpoints.get(ns, {})
    target = checkpoints.get(checkpoint_id) if checkpoint_id else model.latest(ns)
    return None if target is None else checkpoints.get(target.parent_id or "")


def _ancestors(
    model: ThreadModel,
    ns: str,
    cursor: StoredCheckpoint | None,
    channels: Sequence[str],
    serde: Serializer,
    key: str,
) -> tuple[dict[str, list[Any]], dict[str, tuple[Any, dict[str, Any]]]]:
    """Walk up from `cursor` for `channels`; return their writes and seeds.

    The writes stored at each ancestor (newest first), and each channel's seed (its
    version and stored value) at the nearest ancestor holding one.
    """
    checkpoints = model.checkpoints.get(ns, {})
    collected: dict[str, list[Any]] = {c: [] for c in channels}
    seeds: dict[str, tuple[Any, dict[str, Any]]] = {}
    remaining = set(channels)
    while cursor is not None and remaining:
        for write in reversed(model.pending(ns, cursor.checkpoint_id)):
            if write.channel in remaining:
                collected[write.channel].append(write)
        versions = load(serde, cursor.checkpoint, key, {}).get("channel_versions", {})
        for channel in list(remaining):
            version = versions.get(channel)
            doc = None if version is None else model.values.get((ns, channel, version))
            if doc is not None:
                seeds[channel] = (version, doc)
                remaining.discard(channel)
        cursor = checkpoints.get(cursor.parent_id or "")
    return collected, seeds
