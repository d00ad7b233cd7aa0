"""The saver's operations, written once as steps over a thread's log (see `thread`).

`StashpointSaver` runs them with the blocking driver, `AsyncStashpointSaver` with asyncio.
The serializer is an argument of every operation, never state: `with_allowlist` clones a
saver with another serializer.
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterator, Mapping, MutableSequence, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from stashpoint.cache import Lru
from stashpoint.codec import Codec
from stashpoint.errors import (
    CheckpointConflict,
    CheckpointNotFound,
    ConfigurationError,
    InvalidArgument,
    InvalidPayload,
    Purged,
    StashpointError,
    described,
    whole,
)
from stashpoint.ids import thread_key
from stashpoint.langgraph.run_threads import RunThreads
from stashpoint.langgraph.thread import (
    LARGE_VALUE,
    LATEST_MARKER,
    SNAPSHOT_EVERY,
    TAIL_EVERY,
    THREAD_KIND,
    THREAD_SCHEMA,
    Serializer,
    Slot,
    StoredCheckpoint,
    ThreadModel,
    ThreadState,
    ValueLocation,
    check_config,
    check_put,
    check_state,
    empty_state,
    fold,
    item_key,
    large_value_name,
    list_digests,
    msgpack_array,
    msgpack_elements,
    pack,
    snapshots_for_latest,
    state_after_put,
    state_after_writes,
    state_of_model,
    unpack_bytes,
    versions_for_latest,
)
from stashpoint.logs.format import LogEntry
from stashpoint.logs.log import LogHead, LogSteps, ended_error
from stashpoint.logs.state import Known, LoggedState
from stashpoint.steps import Now, Parallel, Steps, ask
from stashpoint.stores.layout import LANGGRAPH_VALUES, Layout
from stashpoint.stores.objects import (
    MAX_DELETE_BATCH,
    Create,
    DeleteObject,
    DeleteVersions,
    GetObject,
    ListKeys,
    ObjectInfo,
    PutObject,
    WriteOutcome,
    delete_keys,
    every_version,
)
from stashpoint.stores.writes import (
    Found,
    Judge,
    ReadBack,
    delete_all,
    judged_read_back,
    named_read_back,
    put_all,
)

VALUE_FORMAT = "stashpoint.langgraph-value"
"""Format name of a large value's object."""
RUN_INDEX_MARK = "~run-index"
"""Name (beside the threads' values, no thread's) of the object saying the stash's index
holds every thread's (run, thread) items: a saver opened without the index refuses puts
that carry a run id once it is there, since `delete_for_runs` would never find them."""
_MARK_RECHECK = timedelta(minutes=1)
"""How long a saver without an index trusts that the mark was absent."""
SNAPSHOT_FORMAT = "stashpoint.langgraph-list"
"""Format name of a list snapshot's object (`{"items": [packed item, ...]}`)."""
KNOWN_THREADS = 256
"""Threads whose heads a saver remembers (a write after a read or a write of the thread is
one PUT); the least recently used are forgotten first, so a server's memory stays bounded
however many threads."""
KNOWN_LIST_BYTES = 32 * 1024 * 1024
"""Stored bytes of list snapshots and tails a saver keeps in memory (they are decoded on
each read, so memory is what S3 holds, not the decoded lists)."""
KNOWN_LIST_MSGPACK = 32 * 1024 * 1024
"""Bytes of msgpack a saver with LangGraph's serializer keeps for the snapshots and tails it
read (their items as `loads_typed` takes them): a read of the latest checkpoint then
unpacks a list of any length in one call, with no decoding of the stored JSON."""
_APPEND_ATTEMPTS = 64
_WALK_PAGE = 100
"""Threads a walk of every thread (`index_runs`) reads between two records of its progress."""
_FETCH_BATCH = 16

Config = dict[str, Any]
"""LangGraph's `RunnableConfig`."""


@dataclass(frozen=True, slots=True)
class _Whole:
    """A whole list as a snapshot (or a snapshot and its tail) holds it."""

    count: int
    """How many items."""
    items: list[Any] | None
    """The packed items (None: only `msgpack` is kept)."""
    msgpack: bytes | None
    """The items' msgpack back to back (`thread.msgpack_elements`); None: not all msgpack,
    or the serializer is not LangGraph's own."""

    def joined(self, after: _Whole) -> _Whole:
        """Return this list followed by `after`'s items."""
        items = None
        if self.items is not None and after.items is not None:
            items = [*self.items, *after.items]
        both = None
        if self.msgpack is not None and after.msgpack is not None:
            both = self.msgpack + after.msgpack
        return _Whole(self.count + after.count, items, both)


def _life_state(known: Known[_Thread]) -> tuple[ThreadState, int]:
    """Return the state a plan starts from and the version its append takes.

    A thread whose log ended (deleted, or purged for reuse) starts its next life right
    after that version: its state's base names it, so no read looks below it.
    """
    state, version = known.state.state, known.next_version
    if known.log is None and version:
        state = state.model_copy(update={"base": version})
    return state, version


@dataclass(frozen=True, slots=True)
class _Thread:
    """A thread's state as its log's head stores it."""

    state: ThreadState
    """The checked thread state (`thread.check_state`)."""


class _ThreadForm:
    """How a thread's state is kept in its log (`logs.state.StateForm`)."""

    kind = THREAD_KIND
    schema_version = THREAD_SCHEMA

    def parse(self, head: LogHead) -> _Thread:
        """Return the checked state of a thread log's head."""
        return _Thread(check_state(head.state, head.log_id))

    def document(self, state: _Thread) -> dict[str, Any]:
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
        self._lists: Lru[str, bytes] = Lru(
            KNOWN_THREADS * 4, max_weight=KNOWN_LIST_BYTES, weigh=len
        )
        self._msgpack: Lru[str, tuple[int, bytes, Any]] = Lru(
            KNOWN_THREADS * 4, max_weight=KNOWN_LIST_MSGPACK, weigh=lambda held: len(held[1])
        )
        # The same snapshots' and tails' own items as msgpack (`_Whole.msgpack`), with their
        # count and (a tail) the snapshot they follow, by object key, for a serializer that
        # unpacks msgpack as LangGraph's does: neither fetched nor decoded again.
        # The bodies of list snapshots and tails this saver wrote or read, by object key:
        # named by their hash, they never change, so the latest read does not fetch them
        # again (bounded by their stored bytes).
        self.threads = LoggedState(
            logs, _ThreadForm(), max_attempts=_APPEND_ATTEMPTS, cache_size=KNOWN_THREADS
        )
        """The threads' states: the one log-backed state, with its cached heads."""
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

    # -- reading ---------------------------------------------------------------------------

    def _listed(self, key: str) -> Steps[tuple[ThreadState, ThreadModel, LogHead] | None]:
        """Read a thread met in a listing of every thread: a purged one is passed over."""
        try:
            return (yield from self._read(key))
        except Purged:
            return None

    def _read(self, key: str) -> Steps[tuple[ThreadState, ThreadModel, LogHead] | None]:
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
        try:
            return (yield from self.logs.head_with(key, plan.wanted, beside))
        except CheckpointNotFound:
            return None

    def _read_latest(
        self, key: str, ns: str, checkpoint_id: str | None, fast: bool
    ) -> Steps[tuple[ThreadState, ThreadModel, dict[str, _Whole] | None] | None]:
        """Read `ns`'s checkpoint (its latest when no id) with the list snapshots it needs.

        Returns what `_read` does, with the snapshots by name instead of the head (None:
        one was replaced since the head named it). A thread this process read or wrote is
        read in one round: the head it knows, the key after it (absent: still the head),
        the versions and snapshots that head names. Otherwise, or when the thread went on:
        a listing, the newest entry, then versions and snapshots in one round. `fast`: the
        serializer unpacks msgpack as LangGraph's does (`_Whole.msgpack` serves it).
        """
        plan = _ReadPlan(key, ns, checkpoint_id)
        limit = self.codec.limits.max_compressed_bytes

        held: dict[str, bytes] = {}  # snapshot bodies this saver keeps, by name
        kept: dict[str, tuple[int, bytes, Any]] = {}  # or their msgpack (`_msgpack`)

        def beside(head: LogHead) -> list[GetObject]:
            plan.snapshots = plan.snapshot_names(head)
            held.clear()
            kept.clear()
            for name in plan.snapshots:
                object_key = self._value_key(key, name)
                msgpack = self._msgpack.get(object_key) if fast else None
                body = self._lists.get(object_key)
                if msgpack is not None:
                    kept[name] = msgpack  # nothing to fetch or decode
                elif body is not None:
                    held[name] = body
            return [
                GetObject(self._value_key(key, n), None, limit)
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
        snapshots: dict[str, _Whole] | None = {}
        if model.partial:
            fetched = iter(infos)
            bodies = [
                held.get(n) if n in held or n in kept else _body(next(fetched, None))
                for n in plan.snapshots
            ]
            snapshots = yield from self._decoded_snapshots(
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
        self.threads.remember(key, Known(_Thread(state), head))
        versions = sorted(v for v in found if v >= state.base)
        if not state.deleted:
            needed = plan.wanted(head)
            missing = [v for v in needed if v not in found]
            if missing:
                raise InvalidPayload(
                    f"thread log lacks versions {missing[:5]} it names", object_name=key
                )
            versions = needed
        model = fold(((v, found[v].records) for v in versions), key)
        model.thread_id = state.thread_id
        model.partial = not state.deleted and versions != list(range(state.base, head.version + 1))
        return state, model, head

    def get_tuple(self, config: Config, serde: Serializer) -> Steps[TupleParts | None]:
        """Return the checkpoint `config` names (its latest without `checkpoint_id`)."""
        thread_id, ns, checkpoint_id = _target(config)
        key = thread_key(thread_id)
        latest = yield from self._read_latest(key, ns, checkpoint_id, _unpacks_msgpack(serde))
        if latest is None:
            return None
        state, model, snapshots = latest
        if state.deleted:
            return None
        if snapshots is None:  # replaced under us: read the whole thread instead
            read = yield from self._read(key)
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
        if limit is not None:
            whole(limit, "limit")
        check_config(config, optional=True)
        if before is not None:
            check_config(before)
        if filter is not None and not isinstance(filter, Mapping):
            raise InvalidArgument(f"filter must be a mapping, not {described(filter)}")
        if config is not None:
            thread_ids: list[str] = [str(config["configurable"]["thread_id"])]
            keys = [thread_key(thread_ids[0])]
        else:
            named = None
            if self.run_threads is not None and filter and filter.get("run_id") is not None:
                # Only the threads that may hold the run (`run_threads`), when that is known.
                named = yield from self.run_threads.threads_of([str(filter["run_id"])])
            keys = sorted(named) if named is not None else (yield from self.logs.list_ids())
            thread_ids = []
        want_ns = None if config is None else config["configurable"].get("checkpoint_ns")
        want_id = None if config is None else config["configurable"].get("checkpoint_id")
        before_id = None if before is None else before["configurable"].get("checkpoint_id")
        out: list[TupleParts] = []
        for index, key in enumerate(keys):
            read = yield from (self._read(key) if thread_ids else self._listed(key))
            if read is None or read[0].deleted:
                continue
            state, model, _ = read
            thread_id = thread_ids[index] if thread_ids else str(state.thread_id or key)
            for ns, checkpoints in model.checkpoints.items():
                if want_ns is not None and ns != want_ns:
                    continue
                for stored in sorted(
                    checkpoints.values(), key=lambda c: c.checkpoint_id, reverse=True
                ):
                    if want_id and stored.checkpoint_id != want_id:
                        continue
                    if before_id and stored.checkpoint_id >= before_id:
                        continue
                    if filter:
                        metadata = _load(serde, stored.metadata, key, {})
                        if not all(metadata.get(k) == v for k, v in filter.items()):
                            continue
                    if limit is not None and len(out) >= limit:
                        return out
                    out.append((yield from self._tuple(key, thread_id, model, stored, serde)))
        return out

    def delta_history(
        self, config: Config, channels: Sequence[str], serde: Serializer
    ) -> Steps[dict[str, dict[str, Any]]]:
        """Walk the parent chain of a checkpoint for `channels`, in one read of the thread.

        Per channel: the writes stored at each ancestor (oldest first) down to the nearest
        ancestor holding a value, which is the `seed` (LangGraph's `DeltaChannel` contract).
        """
        thread_id, ns, checkpoint_id = _target(config)
        key = thread_key(thread_id)
        result: dict[str, dict[str, Any]] = {c: {"writes": []} for c in channels}
        read = yield from self._read(key)
        if read is None or read[0].deleted:
            return result
        model = read[1]
        checkpoints = model.checkpoints.get(ns, {})
        target = checkpoints.get(checkpoint_id) if checkpoint_id else model.latest(ns)
        collected: dict[str, list[Any]] = {c: [] for c in channels}
        seeds: dict[str, tuple[Any, dict[str, Any]]] = {}
        remaining = set(channels)
        cursor = None if target is None else checkpoints.get(target.parent_id or "")
        while cursor is not None and remaining:
            for write in reversed(model.pending(ns, cursor.checkpoint_id)):
                if write.channel in remaining:
                    collected[write.channel].append(write)
            versions = _load(serde, cursor.checkpoint, key, {}).get("channel_versions", {})
            for channel in list(remaining):
                version = versions.get(channel)
                doc = None if version is None else model.values.get((ns, channel, version))
                if doc is not None:
                    seeds[channel] = (version, doc)
                    remaining.discard(channel)
            cursor = checkpoints.get(cursor.parent_id or "")
        packed = [w.value for ws in collected.values() for w in ws]
        objects = yield from self._fetch_large(
            key, [*packed, *_refs_in_values(model, ns, {c: d for c, (_, d) in seeds.items()})]
        )
        for channel in channels:
            result[channel]["writes"] = [
                (w.task_id, w.channel, _load(serde, w.value, key, objects))
                for w in reversed(collected[channel])
            ]
            if channel in seeds:
                version = seeds[channel][0]
                result[channel]["seed"] = _value(serde, model, ns, channel, version, key, objects)
        return result

    def _tuple(
        self,
        key: str,
        thread_id: str,
        model: ThreadModel,
        stored: StoredCheckpoint,
        serde: Serializer,
        snapshots: Mapping[str, _Whole] | None = None,
    ) -> Steps[TupleParts]:
        snapshots = snapshots or {}
        checkpoint = _load(serde, stored.checkpoint, key, {})
        versions = checkpoint.get("channel_versions", {})
        docs: dict[str, dict[str, Any]] = {}
        for channel, version in versions.items():
            doc = model.values.get((stored.ns, channel, version))
            if doc is not None:
                docs[channel] = doc
        writes = model.pending(stored.ns, stored.checkpoint_id)
        objects = yield from self._fetch_large(
            key,
            [*_refs_in_values(model, stored.ns, docs, snapshots), *(w.value for w in writes)],
        )
        values = {
            channel: _value(
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
            metadata=_load(serde, stored.metadata, key, objects),
            parent_config=parent,
            pending_writes=[
                (w.task_id, w.channel, _load(serde, w.value, key, objects)) for w in writes
            ],
        )

    def _fetch_large(self, key: str, packed: Sequence[Mapping[str, Any]]) -> Steps[dict[str, Any]]:
        names = sorted({p["object"] for p in packed if isinstance(p, Mapping) and "object" in p})
        found: dict[str, Any] = {}
        for start in range(0, len(names), _FETCH_BATCH):
            batch = names[start : start + _FETCH_BATCH]
            object_keys = [self._value_key(key, name) for name in batch]
            infos = yield from ask(
                Parallel(
                    tuple(
                        GetObject(k, None, self.codec.limits.max_compressed_bytes)
                        for k in object_keys
                    )
                )
            )
            for name, object_key, info in zip(batch, object_keys, infos, strict=True):
                if info is None or info.body is None:
                    raise InvalidPayload(
                        "a checkpoint names a large value whose object is missing",
                        object_name=object_key,
                    )
                document = yield from self.codec.document_decoding(
                    info.body, name=object_key, format_name=VALUE_FORMAT, format_version=1
                )
                type_, data = unpack_bytes(document, object_key)
                if large_value_name(data) != name:
                    raise InvalidPayload(
                        "large value object does not hold the value its name says",
                        object_name=object_key,
                    )
                found[name] = (type_, data)
        return found

    def _value_key(self, key: str, name: str) -> str:
        return self.layout.key(LANGGRAPH_VALUES, f"{key}/{name}")

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
        packed_checkpoint = pack(*_dumped(serde, skeleton, "checkpoint", key))
        merged_metadata = get_checkpoint_metadata(config, dict(metadata))  # type: ignore[arg-type]
        packed_metadata = pack(*_dumped(serde, merged_metadata, "metadata", key))
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
                serialized[channel] = [_dumped(serde, item, "a value", key) for item in value]
            else:
                serialized[channel] = _dumped(serde, value, "a value", key)
        large: dict[str, tuple[str, bytes]] = {}
        values_sent: set[str] = set()
        replaced: list[str] = []

        fresh_start = metadata.get("source") == "input" and metadata.get("step") == -1

        def plan(known: Known[_Thread]) -> Steps[tuple[dict[str, Any], _Thread]]:
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
                read = yield from self._read(key)
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
                    parent_list = slot.values.get(channel) if slot.latest == parent_id else None
                    at = -1 if parent_list is None else (parent_list.items or -1)
                    prefix, digest = list_digests([item_key(t, d) for t, d in ser], at)
                    extends = parent_list is not None and prefix == parent_list.digest
                    if parent_list is not None and extends and len(ser) > at >= 0:
                        doc: dict[str, Any] = {
                            "list_after": parent_list.channel_version,
                            "items": [_packed(t, d, large) for t, d in ser[at:]],
                        }
                        location = parent_list.changed(
                            channel_version=channel_version,
                            links=[*parent_list.links, version],
                            items=len(ser),
                            digest=digest,
                            since=parent_list.since + 1,
                        )
                        location = yield from self._list_objects(
                            ser, doc, location, version, base, large, snapshots, replaced
                        )
                    else:
                        doc = {"list": [_packed(t, d, large) for t, d in ser]}
                        location = ValueLocation(
                            channel_version, version, [version], None, len(ser), digest
                        )
                    locations[channel] = location
                else:
                    doc = _packed(ser[0], ser[1], large)
                    locations[channel] = ValueLocation(channel_version, version, [version], None)
                values[channel] = {"version": channel_version, "value": doc}
            if run is not None and self.run_threads is not None and state.run != run:
                # Ahead of the append: the index never misses a thread that holds the run.
                yield from self.run_threads.note([run], key, version)
            yield from self._store_large(key, large, base, values_sent)
            yield from self._store_snapshots(key, snapshots)
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
            return record, _Thread(new_state)

        yield from self._place(key, thread_id, plan)
        if replaced:
            # Readers of older heads that miss it fall back to reading the whole chain.
            for name in replaced:
                self._lists.pop(self._value_key(key, name))
            yield from delete_keys([self._value_key(key, n) for n in replaced], best_effort=True)
        return {
            "configurable": {
                "thread_id": thread_id,
                "checkpoint_ns": ns,
                "checkpoint_id": checkpoint["id"],
            }
        }

    def _list_objects(
        self,
        ser: Sequence[tuple[str, bytes]],
        doc: dict[str, Any],
        location: ValueLocation,
        version: int,
        life: int,
        large: dict[str, tuple[str, bytes]],
        objects: dict[str, bytes],
        replaced: MutableSequence[str],
    ) -> Steps[ValueLocation]:
        """Take a list extension's snapshot or tail when one is due; return its location.

        The object is added to `objects` (written before the extension that names it, in
        `doc`); the one it supersedes to `replaced` (deleted once the extension landed).
        Both are named by the sha256 of their bytes: a reader checks them.
        """
        snapshot, tail = location.snapshot, location.tail
        if location.since >= SNAPSHOT_EVERY or (snapshot is None and location.since >= TAIL_EVERY):
            name = yield from self._list_object("s-", life, None, ser, large, objects)
            doc["snapshot"] = name
            replaced.extend(
                old[0] for old in (snapshot, tail) if old is not None and old[0] != name
            )
            return location.changed(
                snapshot=(name, version), since=0, tail=None, snapshot_items=len(ser)
            )
        if (
            snapshot is not None
            and location.snapshot_items is not None
            and location.since % TAIL_EVERY == 0
        ):
            items = ser[location.snapshot_items :]
            name = yield from self._list_object("t-", life, snapshot[0], items, large, objects)
            doc["tail"] = name
            if tail is not None and tail[0] != name:
                replaced.append(tail[0])
            return location.changed(tail=(name, version))
        return location

    def _list_object(
        self,
        prefix: str,
        life: int,
        after: str | None,
        items: Sequence[tuple[str, bytes]],
        large: dict[str, tuple[str, bytes]],
        objects: dict[str, bytes],
    ) -> Steps[str]:
        """Encode a snapshot (`s-`) or a tail after snapshot `after` (`t-`) into `objects`.

        Returns its name: the prefix and the sha256 of its bytes, which a reader checks.
        """
        document: dict[str, Any] = {"format": f"{SNAPSHOT_FORMAT}/1", "life": life}
        if after is not None:
            document["after"] = after
        document["items"] = [_packed(t, d, large) for t, d in items]
        body = yield from self.codec.document_encoding(document, name=f"a list {prefix}object")
        name = prefix + hashlib.sha256(body).hexdigest()
        objects[name] = body
        return name

    def _place(
        self,
        key: str,
        thread_id: str,
        plan: Callable[[Known[_Thread]], Steps[tuple[Any, _Thread]]],
    ) -> Steps[Known[_Thread]]:
        """Append the record `plan(known)` makes after the thread's head; return the new head.

        The one update loop of log-backed state (`logs.state`): the head this saver last
        wrote is tried first; when another writer got there first, or `plan` refuses what
        may be an old head, the head is read again and the record planned again.
        """

        def write(known: Known[_Thread], planned: tuple[Any, _Thread]) -> Steps[Known[_Thread]]:
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
            yield from self._erase_values(key)
            raise

    def _erase_values(self, key: str) -> Steps[None]:
        """Delete every stored version under a purged thread's values prefix."""
        found = yield from every_version(self._value_key(key, ""))
        doomed = [(v.key, v.version_id) for v in found]
        for start in range(0, len(doomed), MAX_DELETE_BATCH):
            yield from ask(DeleteVersions(tuple(doomed[start : start + MAX_DELETE_BATCH])))

    def _empty(self, thread_id: str) -> Callable[[], _Thread]:
        return lambda: _Thread(empty_state(thread_id))

    def _store_large(
        self, key: str, large: Mapping[str, tuple[str, bytes]], life: int, done: set[str]
    ) -> Steps[None]:
        """Write each large value (named by its hash) for the thread life starting at `life`.

        An object already under a value's name is judged by what it holds: another value,
        a damaged copy, or a copy of a life before `life` (which `delete_thread` may be
        freeing) is written over with ours. `done`: names this operation already stored
        for this life (a retried plan sends them again only after a new life began).
        """
        sends: list[tuple[PutObject, ReadBack]] = []
        for name, (type_, data) in large.items():
            if f"{life}/{name}" in done:
                continue
            object_key = self._value_key(key, name)
            document = {"format": f"{VALUE_FORMAT}/1", "life": life, **pack(type_, data)}
            body = yield from self.codec.document_encoding(document, name=object_key)
            judge = self._value_judge(object_key, name, life)
            sends.append((PutObject(object_key, body, Create()), self._named(object_key, judge)))
        yield from put_all(sends, self.logs.retry, what="large value")
        done.update(f"{life}/{name}" for name in large)

    def _named(self, object_key: str, judge: Judge) -> ReadBack:
        limit = self.codec.limits.max_compressed_bytes
        return named_read_back(object_key, judge, limit=limit, refresh=False)

    def _value_judge(self, object_key: str, name: str, life: int) -> Judge:
        def judge(info: ObjectInfo) -> Steps[Found]:
            document = yield from self._value_document(info, object_key, VALUE_FORMAT)
            if document is None or _life(document) < life:
                return Found.OTHER
            try:
                _, data = unpack_bytes(document, object_key)
            except InvalidPayload:
                return Found.OTHER
            return Found.SAME if large_value_name(data) == name else Found.OTHER

        return judge

    def _value_document(
        self, info: ObjectInfo, object_key: str, format_name: str
    ) -> Steps[dict[str, Any] | None]:
        """Return a value object's document; None if it does not decode as one."""
        try:
            return (
                yield from self.codec.document_decoding(
                    info.body or b"", name=object_key, format_name=format_name, format_version=1
                )
            )
        except StashpointError:
            return None

    def _store_snapshots(self, key: str, snapshots: Mapping[str, bytes]) -> Steps[None]:
        """Write each whole list snapshot (its name is its bytes' hash, its life inside)."""

        def judge(info: ObjectInfo, name: str) -> Steps[Found]:
            held = name[:2] + hashlib.sha256(info.body or b"").hexdigest()
            return Found.SAME if held == name else Found.OTHER
            yield  # a generator, like every judge

        sends: list[tuple[PutObject, ReadBack]] = []
        for name, body in snapshots.items():
            object_key = self._value_key(key, name)
            read_back = self._named(object_key, functools.partial(judge, name=name))
            sends.append((PutObject(object_key, body, Create()), read_back))
        yield from put_all(sends, self.logs.retry, what="list snapshot")
        for name, body in snapshots.items():
            self._lists.put(self._value_key(key, name), body)

    def _decoded_snapshots(
        self,
        key: str,
        names: Sequence[str],
        bodies: Sequence[bytes | None],
        kept: Mapping[str, tuple[int, bytes, Any]] | None,
    ) -> Steps[dict[str, _Whole] | None]:
        """Return the named list snapshots; None when one is gone (a newer one replaced it).

        `kept`: the serializer unpacks msgpack as LangGraph's does (`_unpacks_msgpack`), and
        these snapshots' items are kept as msgpack (`_msgpack`): used as they are, and the
        others' kept so from now on, instead of decoding a body on every read. A body read
        and not kept so is kept as it is (`_lists`): named by its hash, it never changes.
        """
        object_keys = [self._value_key(key, name) for name in names]
        found: dict[str, _Whole] = {}
        tails: dict[str, tuple[Any, _Whole, str]] = {}
        fast = kept is not None
        for name, object_key, body in zip(names, object_keys, bodies, strict=True):
            msgpack = None if kept is None else kept.get(name)
            if msgpack is not None:
                own = _Whole(msgpack[0], None, msgpack[1])
                if name.startswith("t-"):
                    tails[name] = (msgpack[2], own, object_key)
                else:
                    found[name] = own
                continue
            if body is None:
                return None
            if name[:2] + hashlib.sha256(body).hexdigest() != name:
                raise InvalidPayload(
                    "list snapshot does not hold what its name says", object_name=object_key
                )
            document = yield from self.codec.document_decoding(
                body, name=object_key, format_name=SNAPSHOT_FORMAT, format_version=1
            )
            items = document.get("items")
            if not isinstance(items, list):
                raise InvalidPayload("list snapshot without items", object_name=object_key)
            own = _Whole(len(items), items, msgpack_elements(items, object_key) if fast else None)
            after = document.get("after") if name.startswith("t-") else None
            if own.msgpack is not None:
                self._msgpack.put(object_key, (own.count, own.msgpack, after))
                self._lists.pop(object_key)  # kept as msgpack instead
            else:
                self._lists.put(object_key, body)
            if name.startswith("t-"):
                tails[name] = (after, own, object_key)
            else:
                found[name] = own
        for name, (after, own, object_key) in tails.items():
            # A tail is the items after one snapshot: the whole list with it.
            if not isinstance(after, str) or not after.startswith("s-"):
                raise InvalidPayload("list tail names no snapshot", object_name=object_key)
            if after not in found:
                return None  # its snapshot was replaced: read the chain
            whole = found[after].joined(own)
            if whole.items is None and whole.msgpack is None:
                return None  # a snapshot kept as msgpack, a tail that is not: read the chain
            found[name] = whole
        return found

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
            type_, data = _dumped(serde, value, "a pending write", key)
            items.append([WRITES_IDX_MAP.get(channel, index), channel, _packed(type_, data, large)])

        stored: set[str] = set()
        record = {
            "op": "writes",
            "ns": ns,
            "id": checkpoint_id,
            "task": task_id,
            "path": task_path,
            "items": items,
        }

        def plan(known: Known[_Thread]) -> Steps[tuple[dict[str, Any], _Thread]]:
            state, version = _life_state(known)
            if state.deleted:
                raise CheckpointConflict(
                    thread_id,
                    expected_revision=None,
                    actual_revision=version - 1,
                    message=f"thread {thread_id!r} was deleted; writes after its deletion are "
                    "refused",
                )
            yield from self._store_large(key, large, state.base, stored)
            new_state = state_after_writes(
                state, ns=ns, checkpoint_id=checkpoint_id, version=version
            )
            return record, _Thread(new_state.model_copy(update={"thread_id": thread_id}))

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

        def tombstone(known: Known[_Thread], fresh: bool) -> Steps[_Thread | None]:
            if known.log is None:
                return None  # no thread: nothing to delete
            state = known.state.state
            ended_lists[:] = [n for ns in state.ns for n in snapshots_for_latest(state, ns)]
            return _Thread(empty_state(thread_id, known.next_version, deleted=True))
            yield  # a generator, like every change

        def write(known: Known[_Thread], deleted: _Thread | None) -> Steps[Known[_Thread] | None]:
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
            yield from self._drop_values(key, head.state.state.base, frozenset(ended_lists))
        self.threads.forget(key)

    def _drop_values(self, key: str, below: int, ended_lists: frozenset[str]) -> Steps[None]:
        """Delete the thread's value objects written for lives before `below` (deleted).

        Each is judged by what it holds and deleted only if it is still the object judged
        (conditional on its ETag): a put of the new life that reuses a value writes it
        over with its own life first, so this never frees a key a new checkpoint names.
        `ended_lists`: the list snapshots and tails the ended life's last state names,
        deleted without a read. Their names are the hash of bytes that hold their life, so
        no later life writes an object of that name.
        """
        prefix = self._value_key(key, "")
        limit = self.codec.limits.max_compressed_bytes
        token: str | None = None
        while True:
            page = yield from ask(ListKeys(prefix, token))
            ended = [k for k in page.keys if k[len(prefix) :] in ended_lists]
            rest = [k for k in page.keys if k[len(prefix) :] not in ended_lists]
            yield from delete_keys(ended)  # one request for all of them
            doomed: list[tuple[DeleteObject, ReadBack]] = []
            for start in range(0, len(rest), _FETCH_BATCH):
                batch = rest[start : start + _FETCH_BATCH]
                infos = yield from ask(Parallel(tuple(GetObject(k, None, limit) for k in batch)))
                for object_key, info in zip(batch, infos, strict=True):
                    if info is None:
                        continue
                    listed = object_key[len(prefix) :]
                    # Snapshots and tails alike (a tail read as a value would not decode,
                    # and be taken for another life's).
                    is_list = listed.startswith(("s-", "t-"))
                    format_name = SNAPSHOT_FORMAT if is_list else VALUE_FORMAT
                    document = yield from self._value_document(info, object_key, format_name)
                    if document is None or _life(document) < below:
                        doomed.append(
                            (
                                DeleteObject(object_key, info.etag),
                                judged_read_back(object_key, info.etag),
                            )
                        )
            yield from delete_all(doomed, self.logs.retry, what="large value delete")
            token = page.next_token
            if token is None:
                return

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
        Planned = tuple[Known[_Thread], dict[str, Any], _Thread]
        # The entries below the rebase stay whole until `gc` vacates them (`LogSteps.tidy`).

        def rebase(known: Known[_Thread], fresh: bool) -> Steps[Planned | None]:
            after = known
            if source is not None and _has_checkpoints(known.state.state):
                raise CheckpointConflict(
                    thread_id,
                    expected_revision=None,
                    message=f"thread {thread_id!r} already has checkpoints; copy to a new thread",
                )
            read = yield from self._read(source_key)
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
            return after, {"op": "rebase", "records": model.records()}, _Thread(state)

        def write(known: Known[_Thread], planned: Planned | None) -> Steps[Known[_Thread] | None]:
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
        named = None
        if self.run_threads is not None:
            named = yield from self.run_threads.threads_of(sorted(doomed))
            if named is None:
                yield from self.index_runs(serde)
                named = yield from self.run_threads.threads_of(sorted(doomed))

        keys = sorted(named) if named is not None else (yield from self.logs.list_ids())
        for key in keys:
            read = yield from self._listed(key)
            if read is None or read[0].deleted:
                if named is not None and read is not None:
                    yield from self._forget_items(key, named[key], read[2].version)
                continue
            thread_id = str(read[0].thread_id or key)

            def without_runs(model: ThreadModel, key: str = key) -> bool:
                return model.keep(
                    lambda c: _run_of(_load(serde, c.metadata, key, {})) not in doomed
                )

            if _runs_in(read[1], serde, key) & doomed:
                # Read again inside the rewrite: a put landing meanwhile is folded, not lost.
                yield from self._rewrite(thread_id, without_runs, serde)
            if named is not None:
                yield from self._forget_items(key, named[key], read[2].version)

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
                read = yield from self._listed(key)
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
        target = yield from self._read(thread_key(target_id))
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


def _target(config: Config) -> tuple[str, str, str | None]:
    check_config(config)
    configurable = config["configurable"]
    return (
        str(configurable["thread_id"]),
        configurable.get("checkpoint_ns", ""),
        configurable.get("checkpoint_id") or None,
    )


def _runs_in(model: ThreadModel, serde: Serializer, key: str) -> set[str]:
    """Return the runs a thread's checkpoints name."""
    return {
        run
        for stored in _every_checkpoint(model)
        if (run := _run_of(_load(serde, stored.metadata, key, {}))) is not None
    }


def _run_of(metadata: Mapping[str, Any]) -> str | None:
    """Return the run a checkpoint's metadata names (`run_id`, set by LangGraph's server)."""
    run_id = metadata.get("run_id")
    return None if run_id is None else str(run_id)


def _life(document: Mapping[str, Any]) -> int:
    """Return the thread life a value object was written for (0: before lives were named)."""
    life = document.get("life")
    return life if type(life) is int else 0


def _packed(type_: str, data: bytes, large: dict[str, tuple[str, bytes]]) -> dict[str, Any]:
    """Pack a serialized value, setting it aside as an object of its own when large."""
    if len(data) > LARGE_VALUE:
        name = large_value_name(data)
        large[name] = (type_, data)
        return {"type": type_, "object": name, "bytes": len(data)}
    return pack(type_, data)


def _load(serde: Serializer, packed: Any, name: str, objects: Mapping[str, Any]) -> Any:
    if not isinstance(packed, Mapping):
        raise InvalidPayload("a stored value must be an object", object_name=name)
    if "object" in packed:
        return serde.loads_typed(objects[packed["object"]])
    return serde.loads_typed(unpack_bytes(packed, name))


def _body(info: ObjectInfo | None) -> bytes | None:
    return None if info is None else info.body


def _whole_at(part: Mapping[str, Any], snapshots: Mapping[str, _Whole]) -> str | None:
    """Return the fetched snapshot or tail holding the whole list at this part, if any."""
    for field in ("tail", "snapshot"):
        name = part.get(field)
        if isinstance(name, str) and name in snapshots:
            return name
    return None


def _refs_in_values(
    model: ThreadModel,
    ns: str,
    docs: Mapping[str, dict[str, Any]],
    snapshots: Mapping[str, _Whole] | None = None,
) -> Iterator[Mapping[str, Any]]:
    """Yield every packed item of the given channel values, following list chains.

    A snapshot kept only as msgpack has no large values to fetch (each item is msgpack).
    """
    snapshots = snapshots or {}
    for channel, doc in docs.items():
        current: dict[str, Any] | None = doc
        while current is not None:
            held = _whole_at(current, snapshots)
            if held is not None:
                yield from snapshots[held].items or ()
                break
            if "list" in current:
                yield from current["list"]
                break
            if "list_after" in current:
                yield from current["items"]
                current = model.values.get((ns, channel, current["list_after"]))
                continue
            yield current
            break


def _value(
    serde: Serializer,
    model: ThreadModel,
    ns: str,
    channel: str,
    version: Any,
    name: str,
    objects: Mapping[str, Any],
    snapshots: Mapping[str, _Whole] | None = None,
) -> Any:
    """Return a channel's value at `version`, joining a list's chain of extensions.

    A list extension that names a snapshot the caller fetched is the whole list there.
    """
    snapshots = snapshots or {}
    parts: list[list[Any]] = []  # packed items of each extension, newest first
    current = model.values.get((ns, channel, version))
    while current is not None and "list_after" in current:
        held = _whole_at(current, snapshots)
        if held is not None:
            return _joined(serde, snapshots[held], parts, name, objects)
        parts.append(current["items"])
        previous = current["list_after"]
        current = model.values.get((ns, channel, previous))
        if current is None:
            raise InvalidPayload(
                f"channel {channel!r} extends a list stored at version {previous!r}, which "
                "the thread does not hold",
                object_name=name,
            )
    if current is None:
        raise InvalidPayload(f"channel {channel!r} has no stored value", object_name=name)
    if "list" in current:
        items = current["list"]
        base = _Whole(len(items), items, None)
        if _unpacks_msgpack(serde):
            base = _Whole(base.count, items, msgpack_elements(items, name))
        return _joined(serde, base, parts, name, objects)
    return _load(serde, current, name, objects)


def _joined(
    serde: Serializer,
    base: _Whole,
    parts: Sequence[Sequence[Any]],
    name: str,
    objects: Mapping[str, Any],
) -> list[Any]:
    """Return `base`'s items followed by the extensions' (`parts`, newest first), unpacked.

    When every item is msgpack and the serializer unpacks it as LangGraph's does, the
    whole list is one msgpack array and one `loads_typed` (the same values, item for item).
    """
    after = [item for part in reversed(parts) for item in part]
    if base.msgpack is not None and _unpacks_msgpack(serde):
        extra = msgpack_elements(after, name)
        if extra is not None:
            return _loaded_array(serde, base.count + len(after), base.msgpack + extra)
        whole = _loaded_array(serde, base.count, base.msgpack)
    else:
        assert base.items is not None  # kept without items only as msgpack
        whole = [_load(serde, item, name, objects) for item in base.items]
    whole.extend(_load(serde, item, name, objects) for item in after)
    return whole


def _loaded_array(serde: Serializer, count: int, elements: bytes) -> list[Any]:
    loaded = serde.loads_typed(("msgpack", msgpack_array(count, elements)))
    if not isinstance(loaded, list) or len(loaded) != count:  # never, for msgpack: say so
        raise InvalidPayload("a stored list did not unpack to its items")
    return loaded


@functools.cache
def _jsonplus_loads() -> Any:
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    return JsonPlusSerializer.loads_typed


def _unpacks_msgpack(serde: Serializer) -> bool:
    """Whether `serde` unpacks msgpack as LangGraph's own serializer does.

    Any subclass that keeps its `loads_typed`, whatever its allow-lists: an array unpacks
    item by item, as each item alone would.
    """
    return getattr(type(serde), "loads_typed", None) is _jsonplus_loads()


def _dumped(serde: Serializer, value: Any, what: str, key: str) -> tuple[str, bytes]:
    """Return `serde.dumps_typed(value)`; what the serializer cannot carry is `InvalidPayload`.

    msgpack refuses an int beyond 64 bits, a lone surrogate, a type it does not know; the
    error names the thread and the value's type, never the value.
    """
    try:
        return serde.dumps_typed(value)  # type: ignore[no-any-return]
    except StashpointError:
        raise
    except Exception as exc:  # the serializer's own errors, whatever their class
        raise InvalidPayload(
            f"{what} of type {type(value).__name__} cannot be serialized ({type(exc).__name__})",
            object_name=key,
        ) from exc
