"""A LangGraph thread as a stashpoint log: its records, its small state, and their fold.

One log per thread (namespace `langgraph`, id `thread_key(thread_id)`); every version holds
one record:

- `put`: a checkpoint of one checkpoint namespace (`ns`): its id, parent id, the checkpoint
  without its channel values (`checkpoint`), its metadata, and the values of the channels
  `new_versions` names (`values`: channel -> `{"version", "value"}`; `"empty": true` for a
  channel with no value). Unchanged channels are not stored again: a checkpoint's values are
  found by `(ns, channel, version)` among earlier puts, as in LangGraph's own savers.
- `writes`: pending writes of one task against one checkpoint.
- `delete`: the thread's tombstone (a late write after it cannot bring the thread back).
- `rebase`: a rewrite of the surviving checkpoints after `prune`/`delete_for_runs`/
  `copy_thread`; readers start at the latest rebase (`state["base"]`).

Values go through the saver's serializer (`dumps_typed`) and are stored as `Packed`
documents: readable JSON when the serialized bytes are plain msgpack that round-trips byte
for byte, base64 otherwise (an encrypted serializer's output stays opaque), or a reference
to an immutable object of its own when large. A list value (a messages channel) is stored
item by item, and a list that extends the one stored at the parent checkpoint stores only
its new items (`{"after": version, "items": [...]}`), so a growing conversation costs
O(delta) per step.

The state (stored whole with every version, it stays small) names, for the most recently
written checkpoint namespaces, the latest checkpoint and the versions a reader needs to
rebuild it: its put, its pending writes, and the puts holding its channel values. A reader of
the latest checkpoint therefore reads the newest entry and then those versions, in one
parallel round, whatever the thread's length.

Everything here is free of I/O.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from stashpoint.codec import CheckedJson, check_json
from stashpoint.errors import (
    CheckpointConflict,
    InvalidArgument,
    InvalidPayload,
    StashpointError,
    described,
)
from stashpoint.logs.format import SEGMENT_SPAN

THREAD_KIND = "stashpoint.langgraph-thread"
"""Kind of a thread's log."""
THREAD_SCHEMA = 1
"""Schema version of its records and state."""
LATEST_MARKER = "__stashpoint_latest__"
"""Config key `get_tuple` adds when it returns a thread's latest checkpoint.

LangGraph carries it into every `put` of the invocation that read it: such a put must
extend the thread's latest checkpoint, so two invocations resuming the same head cannot
both proceed (no silent fork). A config without it (an explicit `checkpoint_id`, a config
from `get_state_history`) may branch from any checkpoint: time travel. Keys starting with
`__` are kept out of checkpoint metadata by LangGraph.
"""
LARGE_VALUE = 256 * 1024
"""Serialized values larger than this are immutable objects of their own."""
SNAPSHOT_EVERY = 32
"""A list that grew by this many extensions is also written whole, as an object of its own
that replaces the previous one: a reader of the latest checkpoint fetches it and the few
extensions after it, not the whole chain."""
TAIL_EVERY = 8
"""Every this many extensions between snapshots, the items after the snapshot are written
as an object of their own (a tail, replacing the previous one); a list's first snapshot is
taken at this many extensions. A reader fetches at most two objects and `TAIL_EVERY - 1`
extensions; the tails cost about `SNAPSHOT_EVERY / (2 * TAIL_EVERY)` items written per
item added."""
STATE_NAMESPACES = 16
"""Checkpoint namespaces the state tracks (the most recently written ones); a thread that
has had more (a `Send` fan-out to many subgraphs) is marked `evicted`, and a put that must
extend the latest checkpoint of a namespace the state no longer names reads the thread."""
EARLY_CHECKPOINTS = 8
"""Checkpoints per namespace whose pending writes the state holds before their put lands
(LangGraph's default `durability="async"` does not order a checkpoint's writes after it)."""
_READABLE_DEPTH = 24

Serializer = Any
"""LangGraph's `SerializerProtocol` (`dumps_typed`, `loads_typed`)."""


def check_config(config: object, *, optional: bool = False, need_id: bool = False) -> None:
    """Refuse a config LangGraph would not pass: `InvalidArgument`, never a `KeyError`.

    `{"configurable": {"thread_id": ..., "checkpoint_ns": str, "checkpoint_id": str}}`,
    the thread id a str or an int (LangGraph takes either), the others optional.
    `optional`: None stands for every thread (`list`); `need_id`: the checkpoint id must
    be there (pending writes belong to one checkpoint).
    """
    if config is None and optional:
        return
    configurable = _configurable(config)
    thread_id = configurable.get("thread_id")
    if isinstance(thread_id, bool) or not isinstance(thread_id, str | int):
        raise InvalidArgument(
            f"config's thread_id must be a str or an int, not {described(thread_id)}"
        )
    for name in ("checkpoint_ns", "checkpoint_id"):
        value = configurable.get(name)
        if value is not None and not isinstance(value, str):
            raise InvalidArgument(f"config's {name} must be a str, not {described(value)}")
    if need_id and not configurable.get("checkpoint_id"):
        raise InvalidArgument("config names no checkpoint_id: pending writes belong to one")


def _configurable(config: object) -> Mapping[str, Any]:
    """Return a config's `configurable` mapping; `InvalidArgument` if there is none."""
    configurable = config.get("configurable") if isinstance(config, Mapping) else None
    if not isinstance(configurable, Mapping):
        raise InvalidArgument(
            f"config must be a mapping with a 'configurable' mapping, not {described(config)}"
        )
    return configurable


# -- values ------------------------------------------------------------------------------------


def pack(type_: str, data: bytes) -> dict[str, Any]:
    """Return the stored form of one serialized value (`dumps_typed`'s pair).

    Readable msgpack is a `CheckedJson`: checked here once, so the entry that holds it
    counts it without walking it again.
    """
    if type_ == "msgpack":
        readable = _readable_msgpack(data)
        if readable is not _UNREADABLE:
            return readable  # type: ignore[no-any-return]
    return {"type": type_, "base64": base64.b64encode(data).decode()}


def unpack_bytes(packed: Mapping[str, Any], name: str) -> tuple[str, bytes]:
    """Return the `(type, bytes)` pair a packed value stores inline."""
    try:
        type_ = packed["type"]
        if "msgpack" in packed:
            import ormsgpack

            return type_, ormsgpack.packb(_from_readable(packed["msgpack"]))
        return type_, base64.b64decode(packed["base64"], validate=True)
    except (KeyError, TypeError, ValueError) as exc:
        raise InvalidPayload(f"malformed stored value: {exc}", object_name=name) from exc


_UNREADABLE: Any = object()
EXT = "__msgpack_ext__"
"""Key of a msgpack extension (a LangChain message, a dataclass...) in readable form:
`{"__msgpack_ext__": code, "data": <its payload, itself readable>}`."""


class _Tagged(dict[str, Any]):
    """An extension in readable form, as unpacked: packed back as the extension it was."""

    __slots__ = ()


def _tagged(code: int, payload: bytes) -> _Tagged:
    import ormsgpack

    return _Tagged({EXT: code, "data": ormsgpack.unpackb(payload, ext_hook=_tagged)})


def _untagged(value: Any) -> Any:
    import ormsgpack

    if type(value) is _Tagged:
        data = ormsgpack.packb(
            value["data"], default=_untagged, option=ormsgpack.OPT_PASSTHROUGH_SUBCLASS
        )
        return ormsgpack.Ext(value[EXT], data)
    raise TypeError(f"not msgpack: {type(value).__name__}")


def _readable_msgpack(data: bytes) -> Any:
    """Return the checked JSON form of msgpack whose re-encoding is identical, else _UNREADABLE.

    Extension types (how LangGraph's serializer stores LangChain messages, pydantic models
    and dataclasses) become `{"__msgpack_ext__": code, "data": ...}`, their payload itself
    readable: a message reads as its module, class and fields in `zstd -d | jq`, and
    compresses as text. Unpacking and packing back run in ormsgpack (Python sees only the
    extensions); anything that would not re-encode to the very same bytes, or that JSON
    cannot carry (bytes, NaN, nesting past `_READABLE_DEPTH`), is stored as base64 instead,
    so every value round-trips exactly.
    """
    import ormsgpack

    try:
        value = ormsgpack.unpackb(data, ext_hook=_tagged)
        same = (
            ormsgpack.packb(value, default=_untagged, option=ormsgpack.OPT_PASSTHROUGH_SUBCLASS)
            == data
        )
    except (ormsgpack.MsgpackDecodeError, ormsgpack.MsgpackEncodeError, ValueError, TypeError,
            RecursionError):  # fmt: skip
        return _UNREADABLE
    if not same:
        return _UNREADABLE
    document = {"type": "msgpack", "msgpack": value}
    try:
        nodes = check_json(document, _READABLE_DEPTH)
    except StashpointError:  # bytes, NaN or too deep: JSON cannot carry it as it is
        return _UNREADABLE
    return CheckedJson(document, nodes, _READABLE_DEPTH)


_LEAVES = frozenset((str, int, float, bool, type(None)))
"""JSON's scalar types: kept as they are, without a call (most of a message's nodes)."""


def _from_readable(value: Any) -> Any:
    from ormsgpack import Ext, packb

    def convert(value: Any) -> Any:
        # A cold read converts every message of a list snapshot: a call per container.
        if isinstance(value, list):
            return [v if type(v) in _LEAVES or not v else convert(v) for v in value]
        if isinstance(value, dict):
            if len(value) == 2 and EXT in value and "data" in value:
                return Ext(value[EXT], packb(convert(value["data"])))
            return {k: v if type(v) in _LEAVES or not v else convert(v) for k, v in value.items()}
        return value

    return convert(value)


def msgpack_elements(items: Sequence[Any], name: str) -> bytes | None:
    """Return the msgpack of each packed item, back to back; None when one is not msgpack.

    msgpack is compositional: an array header followed by these bytes is the msgpack of the
    list, so a list of N items is unpacked by one `loads_typed` instead of N (the items of
    a snapshot are converted from their readable form once, `msgpack_array`).
    """
    out: list[bytes] = []
    for item in items:
        if not isinstance(item, Mapping) or item.get("type") != "msgpack" or "object" in item:
            return None
        out.append(unpack_bytes(item, name)[1])
    return b"".join(out)


def msgpack_array(count: int, elements: bytes) -> bytes:
    """Return the msgpack array of `count` elements already encoded back to back."""
    if count < 16:
        header = bytes([0x90 | count])  # fixarray
    elif count < 1 << 16:
        header = b"\xdc" + count.to_bytes(2, "big")  # array 16
    else:
        header = b"\xdd" + count.to_bytes(4, "big")  # array 32
    return header + elements


def large_value_name(data: bytes) -> str:
    """Return the content address of a large value's object."""
    return hashlib.sha256(data).hexdigest()


# -- records and state ---------------------------------------------------------------------


@dataclass(slots=True)
class StoredCheckpoint:
    """One checkpoint as its put record stores it (values apart)."""

    ns: str
    """Its checkpoint namespace."""
    checkpoint_id: str
    """Its id."""
    parent_id: str | None
    """Its parent's id in the same namespace."""
    checkpoint: dict[str, Any]
    """The packed checkpoint without channel values."""
    metadata: dict[str, Any]
    """The packed metadata."""
    version: int
    """The log version of its put."""


@dataclass(slots=True)
class PendingWrite:
    """One pending write as stored."""

    task_id: str
    """The task that wrote it."""
    channel: str
    """The channel written."""
    value: dict[str, Any]
    """The packed value."""
    task_path: str
    """The task's path."""


@dataclass(slots=True)
class ThreadModel:
    """A thread folded from its records (all of them, or the ones a read needed)."""

    thread_id: str | None = None
    """The thread's id as LangGraph gave it."""
    checkpoints: dict[str, dict[str, StoredCheckpoint]] = field(default_factory=dict)
    """Checkpoints by namespace then id, in the order they were put."""
    values: dict[tuple[str, str, Any], dict[str, Any] | None] = field(default_factory=dict)
    """Packed channel values by (namespace, channel, version); None: the channel was empty."""
    writes: dict[tuple[str, str], dict[tuple[str, int], PendingWrite]] = field(default_factory=dict)
    """Pending writes by (namespace, checkpoint id), then (task id, index)."""
    deleted: bool = False
    """Whether the last record read is the thread's tombstone."""
    partial: bool = False
    """Whether only the records rebuilding one latest checkpoint were read."""

    def apply(self, version: int, record: Any, name: str) -> None:
        """Fold one record (of log version `version`) into the model."""
        if not isinstance(record, dict) or not isinstance(record.get("op"), str):
            raise InvalidPayload("a thread record must be an object with an op", object_name=name)
        try:
            op = record["op"]
            if op == "put":
                self._put(version, record)
            elif op == "writes":
                self._writes(record)
            elif op == "delete":
                self.__init__(thread_id=self.thread_id, deleted=True, partial=self.partial)  # type: ignore[misc]
            elif op == "rebase":
                self.__init__(thread_id=self.thread_id, partial=self.partial)  # type: ignore[misc]
                for inner in record["records"]:
                    self.apply(version, inner, name)
            elif op == "value":
                self.values[(record["ns"], record["channel"], record["version"])] = record["value"]
            else:
                raise InvalidPayload(f"unknown thread record op {op!r}", object_name=name)
        except (KeyError, TypeError, ValueError) as exc:
            raise InvalidPayload(f"malformed thread record: {exc!r}", object_name=name) from exc

    def _put(self, version: int, record: dict[str, Any]) -> None:
        self.deleted = False
        ns = record["ns"]
        checkpoint_id = record["id"]
        if not isinstance(ns, str) or not isinstance(checkpoint_id, str):
            raise TypeError("ns and id must be strings")
        parent = record.get("parent")
        stored = StoredCheckpoint(
            ns, checkpoint_id, parent, record["checkpoint"], record["metadata"], version
        )
        checkpoints = self.checkpoints.setdefault(ns, {})
        checkpoints.pop(checkpoint_id, None)
        checkpoints[checkpoint_id] = stored
        for channel, slot in record.get("values", {}).items():
            self.values[(ns, channel, slot["version"])] = (
                None if slot.get("empty") else slot["value"]
            )

    def _writes(self, record: dict[str, Any]) -> None:
        key = (record["ns"], record["id"])
        task_id, task_path = record["task"], record.get("path", "")
        stored = self.writes.setdefault(key, {})
        for index, channel, value in record["items"]:
            slot = (task_id, int(index))
            if slot[1] >= 0 and slot in stored:
                continue  # regular writes: the first one wins (a retried task)
            stored[slot] = PendingWrite(task_id, channel, value, task_path)

    def latest(self, ns: str) -> StoredCheckpoint | None:
        """Return the most recently put checkpoint of `ns`."""
        checkpoints = self.checkpoints.get(ns)
        if not checkpoints:
            return None
        return next(reversed(checkpoints.values()))

    def pending(self, ns: str, checkpoint_id: str) -> list[PendingWrite]:
        """Return a checkpoint's pending writes in (task path, task id, index) order."""
        stored = self.writes.get((ns, checkpoint_id), {})
        ordered = sorted(stored.items(), key=lambda kv: (kv[1].task_path, kv[0][0], kv[0][1]))
        return [write for _, write in ordered]

    def records(self) -> list[dict[str, Any]]:
        """Return records that rebuild this model (a rebase's content), values first."""
        out: list[dict[str, Any]] = [
            {"op": "value", "ns": ns, "channel": ch, "version": ver, "value": value}
            for (ns, ch, ver), value in self.values.items()
            if value is not None
        ]
        empty = {key for key, value in self.values.items() if value is None}
        for ns, checkpoints in self.checkpoints.items():
            out += _put_records(ns, checkpoints.values(), empty)
        for (ns, checkpoint_id), stored_writes in self.writes.items():
            if checkpoint_id in self.checkpoints.get(ns, {}):
                out += _write_records(ns, checkpoint_id, stored_writes)
        return out

    def keep(self, survives: Callable[[StoredCheckpoint], bool]) -> bool:
        """Drop the checkpoints `survives` refuses (and their writes); say if any went."""
        dropped = False
        for ns in list(self.checkpoints):
            kept = {k: c for k, c in self.checkpoints[ns].items() if survives(c)}
            if len(kept) != len(self.checkpoints[ns]):
                dropped = True
                self.checkpoints[ns] = kept
            if not kept:
                del self.checkpoints[ns]
        if dropped:
            for key in list(self.writes):
                if key[1] not in self.checkpoints.get(key[0], {}):
                    del self.writes[key]
        return dropped


def fold(entries: Iterable[tuple[int, list[Any]]], name: str) -> ThreadModel:
    """Fold `(version, records)` pairs, oldest first, into a model."""
    model = ThreadModel()
    for version, records in entries:
        for record in records:
            model.apply(version, record, name)
    return model


# -- the state: what a reader of the latest checkpoint needs ---------------------------------


ChannelVersion = str | int | float
"""A LangGraph channel version (the saver's are strings; others use numbers)."""


class ValueLocation(NamedTuple):
    """Where one channel's value of a namespace's latest checkpoint lives."""

    channel_version: ChannelVersion
    """The channel version the value is at."""
    first: int
    """The log version of the value's first part."""
    links: list[int]
    """The versions of the parts a reader fetches one by one (not yet sealed)."""
    snapshot: tuple[str, int] | None
    """The latest whole list snapshot: its name and the version it was taken at."""
    items: int | None = None
    """How many items the value holds when it is a list stored by item (else None)."""
    digest: str | None = None
    """`list_digest` of those items: a put in any process extends the list by comparing
    its own list's prefix with it, without reading or remembering the stored items."""
    since: int = 0
    """Extensions since the list was last written whole (a snapshot is due at
    `SNAPSHOT_EVERY`, a tail every `TAIL_EVERY`)."""
    tail: tuple[str, int] | None = None
    """The latest tail: the items after the snapshot, as an object of its own (its name and
    the version it was written at), so a reader fetches the snapshot, the tail and at most
    `TAIL_EVERY - 1` extensions after it."""
    snapshot_items: int | None = None
    """How many items the snapshot holds (where a tail starts); None: no tail is written
    until the next snapshot (a head written before tails)."""

    def changed(self, **changes: Any) -> ValueLocation:
        """Return this location with the fields `changes` names set."""
        return self._replace(**changes)


class Slot(BaseModel):
    """What a thread's state says of one checkpoint namespace."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    latest: str | None = None
    """Its latest checkpoint's id (None: only writes that came before their checkpoint)."""
    at: int = 0
    """The log version of that checkpoint's put."""
    pending: tuple[int, ...] = ()
    """The log versions of its pending writes."""
    values: dict[str, ValueLocation] = Field(default_factory=dict)
    """Where each channel value lives (`complete`: every channel of the checkpoint)."""
    complete: bool = False
    """Whether `values` names every channel: the latest checkpoint reads without a fold."""
    touched: int = 0
    """The log version that last changed this namespace (the least recent are evicted)."""
    early: dict[str, tuple[int, ...]] = Field(default_factory=dict)
    """Writes that landed before their checkpoint's put, by checkpoint id."""


class ThreadState(BaseModel):
    """A LangGraph thread log's state: what a reader of the latest checkpoint needs.

    Every entry stores it whole (small: at most `STATE_NAMESPACES` namespaces).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    thread_id: str | None = None
    """The thread's id (its key escapes it)."""
    base: int = Field(ge=0)
    """The first version of the thread's current life (a deletion or rebase starts one)."""
    deleted: bool = False
    """Whether the latest version is the tombstone of `delete_thread`."""
    evicted: bool = False
    """Whether the thread has had more namespaces than the state names."""
    ns: dict[str, Slot] = Field(default_factory=dict)
    """The most recently written namespaces."""
    run: str | None = None
    """The run of the latest put, when the stash's index already has its (run, thread)
    item (`run_threads`): the next put of that run writes no item. None without an index."""

    def document(self) -> dict[str, Any]:
        """Return the JSON an entry stores (defaults left out)."""
        return self.model_dump(mode="json", exclude_defaults=True) | {"base": self.base}


def empty_state(thread_id: str, base: int = 0, *, deleted: bool = False) -> ThreadState:
    """Return the state of a thread with no checkpoint (a tombstone with `deleted`)."""
    return ThreadState(thread_id=thread_id, base=base, deleted=deleted)


def check_state(state: Any, name: str) -> ThreadState:
    """Return a thread log's typed state, or refuse one that is not."""
    if isinstance(state, ThreadState):
        return state
    try:
        return ThreadState.model_validate(state)
    except pydantic.ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in error['loc']) or 'state'}: {error['type']}"
            for error in exc.errors(include_input=False)[:3]
        )
        raise InvalidPayload(
            f"not a LangGraph thread log state ({problems})", object_name=name
        ) from None


def _touched(state: ThreadState, ns: str, slot: Slot) -> ThreadState:
    """Return `state` with `ns`'s slot replaced, keeping the most recent namespaces only."""
    namespaces = {k: v for k, v in state.ns.items() if k != ns}
    namespaces[ns] = slot
    evicted = state.evicted
    if len(namespaces) > STATE_NAMESPACES:
        order = sorted((v.touched, k) for k, v in namespaces.items() if k not in ("", ns))
        for _, k in order[: len(namespaces) - STATE_NAMESPACES]:
            del namespaces[k]
        evicted = True
    return state.model_copy(update={"deleted": False, "ns": namespaces, "evicted": evicted})


def check_put(
    state: ThreadState,
    *,
    ns: str,
    parent_id: str | None,
    extends_latest: bool,
    fresh_start: bool,
    thread_id: str,
    version: int,
    latest: str | None = None,
) -> None:
    """Refuse a put that would silently fork the thread (see `LATEST_MARKER`).

    A put whose invocation read the latest checkpoint must still extend it. A
    `fresh_start` (LangGraph's first checkpoint of a thread: no parent, source `input`,
    step -1) must find its namespace empty: else another invocation started the thread
    first. Raises `CheckpointConflict` naming the thread. `latest`: the namespace's latest
    checkpoint when the state no longer names it (read from the thread).
    """
    slot = state.ns.get(ns)
    if latest is None and slot is not None:
        latest = slot.latest
    if state.deleted:
        if parent_id is not None:
            raise CheckpointConflict(
                thread_id,
                expected_revision=None,
                actual_revision=version,
                message=f"thread {thread_id!r} was deleted; this write comes after its "
                "deletion and is refused (start the thread again without a checkpoint_id)",
            )
        return
    if fresh_start and parent_id is None and latest is not None:
        raise CheckpointConflict(
            thread_id,
            expected_revision=None,
            actual_revision=version,
            message=f"thread {thread_id!r} (namespace {ns!r}) already has checkpoint "
            f"{latest}: another invocation started it first",
        )
    if extends_latest and parent_id != latest:
        raise _moved_on(thread_id, ns, parent_id, latest, version)


def _moved_on(
    thread_id: str, ns: str, parent_id: str | None, latest: str | None, version: int
) -> CheckpointConflict:
    """Return the conflict of a put whose invocation read a checkpoint no longer latest."""
    return CheckpointConflict(
        thread_id,
        expected_revision=None,
        actual_revision=version,
        message=f"thread {thread_id!r} (namespace {ns!r}) moved on: this invocation "
        f"resumed checkpoint {parent_id} but another one has since stored {latest}; "
        "nothing of this invocation became the thread's latest. Load the thread again "
        "(graph.get_state) and retry; to fork on purpose, pass a config that names "
        f"the checkpoint to branch from, without {LATEST_MARKER!r}: "
        f"{{'configurable': {{'thread_id': {thread_id!r}, 'checkpoint_ns': {ns!r}, "
        f"'checkpoint_id': {parent_id!r}}}}} (docs/langgraph.md, No silent forks)",
    )


def state_after_put(
    state: ThreadState,
    *,
    ns: str,
    checkpoint_id: str,
    parent_id: str | None,
    channel_versions: Mapping[str, Any],
    value_versions: Mapping[str, ValueLocation],
    version: int,
) -> ThreadState:
    """Return the state after a put at `version`.

    `value_versions`: for each channel this put stored, where its value lives: the version
    of the value's first part, the versions of every part (a list extension's chain), its
    latest whole snapshot (`(sha256, version)`, or None), and for a list its length and
    digest. Channels it did not store keep the locations the previous latest checkpoint
    had, when that is its parent at the same channel version.

    A location is stored as `[channel version, first, recent links, snapshot, items,
    digest, since]`: a reader
    fetches the snapshot and the versions after it (or, without one, every version from
    `first`): sealed ones as whole segments, one GET per 64 versions, the listed recent
    links one by one. The state stays small however long a list's chain grows.
    """
    if state.deleted:
        state = empty_state(state.thread_id or "", version)
    slot = state.ns.get(ns)
    early = dict(slot.early) if slot is not None else {}
    pending = early.pop(checkpoint_id, ())  # its writes that landed before it
    known: dict[str, ValueLocation] = {}
    if slot is not None and slot.latest == parent_id and parent_id is not None:
        known = slot.values
    values: dict[str, ValueLocation] = {}
    complete = True
    for channel, channel_version in channel_versions.items():
        located = _location(channel, channel_version, value_versions, known, version)
        if located is None:
            complete = False
        else:
            values[channel] = located
    new_slot = Slot(
        latest=checkpoint_id,
        at=version,
        pending=tuple(pending),
        values=values,
        complete=complete,
        touched=version,
        early=early,
    )
    return _touched(state, ns, new_slot)


def _location(
    channel: str,
    channel_version: Any,
    value_versions: Mapping[str, ValueLocation],
    known: Mapping[str, ValueLocation],
    version: int,
) -> ValueLocation | None:
    """Return where a channel's value lives after a put at `version` (None: not known).

    Stored by this put, or kept from the parent at the same channel version.
    """
    if isinstance(channel_version, bool) or not isinstance(channel_version, str | int | float):
        raise InvalidArgument(
            f"channel {described(channel)}'s version must be a str, an int or a float, "
            f"not {described(channel_version)}"
        )
    if channel in value_versions:
        stored = value_versions[channel]
        return stored.changed(channel_version=channel_version, links=_recent(stored.links, version))
    kept = known.get(channel)
    if kept is not None and kept.channel_version == channel_version:
        return kept.changed(links=_recent(kept.links, version))
    return None


def _recent(links: Iterable[int], version: int) -> list[int]:
    """Return the links a reader must fetch one by one: those not yet sealed at `version`."""
    cut = version - version % SEGMENT_SPAN
    return [link for link in links if link >= cut]


def state_after_writes(
    state: ThreadState, *, ns: str, checkpoint_id: str, version: int
) -> ThreadState:
    """Return the state after pending writes against `checkpoint_id` at `version`.

    Writes against the latest checkpoint join its pending writes. Writes against another
    one are kept aside (`early`) for a checkpoint whose put has not landed yet: when it
    does, they become its pending writes (writes against an older checkpoint are never
    needed there, and the full fold reads them anyway).
    """
    slot = state.ns.get(ns)
    if slot is not None and slot.latest == checkpoint_id:
        return _touched(state, ns, slot.model_copy(update={"pending": (*slot.pending, version)}))
    early = dict(slot.early) if slot is not None else {}
    early[checkpoint_id] = (*early.get(checkpoint_id, ()), version)
    while len(early) > EARLY_CHECKPOINTS:
        del early[min(early, key=lambda k: early[k][0])]  # the longest waiting
    if slot is None:
        # A namespace whose first checkpoint has not landed: it has no latest yet.
        return _touched(state, ns, Slot(early=early, touched=version))
    return _touched(state, ns, slot.model_copy(update={"early": early, "touched": version}))


def state_of_model(model: ThreadModel, thread_id: str, version: int) -> ThreadState:
    """Return the state of a thread rewritten whole at `version` (a rebase)."""
    namespaces = {}
    for ns in model.checkpoints:
        latest = model.latest(ns)
        assert latest is not None
        # Not `complete`: the whole rebase entry is read anyway.
        namespaces[ns] = Slot(latest=latest.checkpoint_id, at=version, touched=version)
    return ThreadState(thread_id=thread_id, base=version, ns=namespaces)


def versions_for_latest(state: ThreadState, ns: str) -> list[int] | None:
    """Return the log versions that rebuild `ns`'s latest checkpoint; None: read all."""
    slot = state.ns.get(ns)
    if slot is None or not slot.complete:
        return None
    wanted = {slot.at, *slot.pending}
    cut = slot.at - slot.at % SEGMENT_SPAN
    for location in slot.values.values():
        snapshot, tail = location.snapshot, location.tail
        start = location.first if snapshot is None else snapshot[1]
        if snapshot is not None and tail is not None:
            start = tail[1]
        wanted.update(range(start, cut))  # sealed: whole segments, read once each
        wanted.add(start)
        wanted.update(link for link in location.links if link >= start)
    return sorted(wanted)


def snapshots_for_latest(state: ThreadState, ns: str) -> list[str]:
    """Return the list snapshots and tails a reader of `ns`'s latest fetches (by name)."""
    slot = state.ns.get(ns)
    if slot is None:
        return []
    names = set()
    for location in slot.values.values():
        if location.snapshot is not None:
            names.add(location.snapshot[0])
            if location.tail is not None:
                names.add(location.tail[0])
    return sorted(names)


# -- lists stored by item --------------------------------------------------------------------


def item_key(type_: str, data: bytes) -> bytes:
    """Return the identity of one serialized item (to compare lists)."""
    return type_.encode() + b"\0" + data


def list_digests(items: Sequence[bytes], at: int) -> tuple[str, str]:
    """Return the digests of `items[:at]` and of all `items` (item keys, in order).

    SHA-256 over each item key with its length: a list that extends a stored one has the
    stored list's digest at the stored length, whichever process wrote it.
    """
    running = hashlib.sha256(b"stashpoint.langgraph-list/1")
    prefix = running.hexdigest() if at == 0 else ""
    for position, item in enumerate(items, 1):
        running.update(len(item).to_bytes(8, "big"))
        running.update(item)
        if position == at:
            prefix = running.hexdigest()
    return prefix, running.hexdigest()


def _put_records(
    ns: str, checkpoints: Iterable[StoredCheckpoint], empty: set[tuple[str, str, Any]]
) -> list[dict[str, Any]]:
    """Return the records of a namespace's checkpoints (`empty`: channels without values)."""
    values = {ch: {"version": ver, "empty": True} for (n, ch, ver) in empty if n == ns}
    return [
        {
            "op": "put",
            "ns": ns,
            "id": stored.checkpoint_id,
            "parent": stored.parent_id,
            "checkpoint": stored.checkpoint,
            "metadata": stored.metadata,
            "values": dict(values),
        }
        for stored in checkpoints
    ]


def _write_records(
    ns: str, checkpoint_id: str, stored_writes: Mapping[tuple[str, int], Any]
) -> list[dict[str, Any]]:
    """Return the records of a checkpoint's pending writes, one per task."""
    by_task: dict[tuple[str, str], list[list[Any]]] = {}
    for (task_id, index), write in stored_writes.items():
        by_task.setdefault((task_id, write.task_path), []).append(
            [index, write.channel, write.value]
        )
    return [
        {"op": "writes", "ns": ns, "id": checkpoint_id, "task": task_id, "path": task_path,
         "items": items}
        for (task_id, task_path), items in by_task.items()
    ]  # fmt: skip
