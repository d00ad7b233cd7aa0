"""The objects beside a thread's log: large values, list snapshots and tails.

A value larger than `thread.LARGE_VALUE` is an object of its own, named by its hash; a long
list's snapshot (`s-`) and tail (`t-`) are objects named by the version of the put that
names them and the hash of their bytes (`list_object_name`; the version lets a reader that
lists them guess, in the listing's round, which ones the thread's head names). This
module writes, judges, reads and deletes them (`ThreadValues`), and turns the packed values
a thread's records hold back into LangGraph's (`load`, `channel_value`).
"""

from __future__ import annotations

import functools
import hashlib
from collections.abc import Iterator, Mapping, MutableSequence, Sequence
from dataclasses import dataclass
from typing import Any

from stashpoint.cache import Lru
from stashpoint.codec import Codec
from stashpoint.errors import InvalidPayload, StashpointError
from stashpoint.langgraph.thread import (
    LARGE_VALUE,
    SNAPSHOT_EVERY,
    TAIL_EVERY,
    Serializer,
    ThreadModel,
    ValueLocation,
    large_value_name,
    msgpack_array,
    msgpack_elements,
    pack,
    unpack_bytes,
)
from stashpoint.retry import RetryPolicy
from stashpoint.steps import Parallel, Steps, ask
from stashpoint.stores.layout import LANGGRAPH_VALUES, Layout
from stashpoint.stores.objects import (
    Create,
    DeleteObject,
    GetObject,
    ListKeys,
    ObjectInfo,
    PutObject,
    delete_every_version,
    delete_keys,
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
SNAPSHOT_FORMAT = "stashpoint.langgraph-list"
"""Format name of a list snapshot's object (`{"items": [packed item, ...]}`)."""
KNOWN_OBJECTS = 256 * 4
"""List snapshots and tails whose bodies a saver keeps (four per remembered thread)."""
KNOWN_LIST_BYTES = 32 * 1024 * 1024
"""Stored bytes of list snapshots and tails a saver keeps in memory (they are decoded on
each read, so memory is what S3 holds, not the decoded lists)."""
KNOWN_LIST_MSGPACK = 32 * 1024 * 1024
"""Bytes of msgpack a saver with LangGraph's serializer keeps for the snapshots and tails it
read (their items as `loads_typed` takes them): a read of the latest checkpoint then
unpacks a list of any length in one call, with no decoding of the stored JSON."""
_FETCH_BATCH = 16


@dataclass(frozen=True, slots=True)
class Whole:
    """A whole list as a snapshot (or a snapshot and its tail) holds it."""

    count: int
    """How many items."""
    items: list[Any] | None
    """The packed items (None: only `msgpack` is kept)."""
    msgpack: bytes | None
    """The items' msgpack back to back (`thread.msgpack_elements`); None: not all msgpack,
    or the serializer is not LangGraph's own."""

    def joined(self, after: Whole) -> Whole:
        """Return this list followed by `after`'s items."""
        items = None
        if self.items is not None and after.items is not None:
            items = [*self.items, *after.items]
        both = None
        if self.msgpack is not None and after.msgpack is not None:
            both = self.msgpack + after.msgpack
        return Whole(self.count + after.count, items, both)


class ThreadValues:
    """The objects beside a thread's log: large values, list snapshots and tails.

    Each is named by the hash of what it holds and judged by its content; the bodies
    this process wrote or read are kept (bounded), since a name never changes content.
    """

    def __init__(self, layout: Layout, codec: Codec, retry: RetryPolicy) -> None:
        self.layout = layout
        """Where the objects live."""
        self.codec = codec
        """Encodes and decodes them."""
        self.retry = retry
        """How a conditional write's retries are paced."""
        self.bodies: Lru[str, bytes] = Lru(KNOWN_OBJECTS, max_weight=KNOWN_LIST_BYTES, weigh=len)
        """The bodies of list snapshots and tails this saver wrote or read, by object key:
        named by their hash, they never change, so the latest read does not fetch them
        again (bounded by their stored bytes)."""
        self.msgpack: Lru[str, tuple[int, bytes, Any]] = Lru(
            KNOWN_OBJECTS, max_weight=KNOWN_LIST_MSGPACK, weigh=lambda held: len(held[1])
        )
        """The same snapshots' and tails' own items as msgpack (`Whole.msgpack`), with
        their count and (a tail) the snapshot they follow, by object key, for a serializer
        that unpacks msgpack as LangGraph's does: neither fetched nor decoded again."""

    def key(self, key: str, name: str) -> str:
        """Return the object key of the thread `key`'s value or list object `name`."""
        return self.layout.key(LANGGRAPH_VALUES, f"{key}/{name}")

    def fetch_large(self, key: str, packed: Sequence[Mapping[str, Any]]) -> Steps[dict[str, Any]]:
        """Return the large values the packed items name, by name, each checked by its hash."""
        names = sorted({p["object"] for p in packed if isinstance(p, Mapping) and "object" in p})
        found: dict[str, Any] = {}
        for start in range(0, len(names), _FETCH_BATCH):
            batch = names[start : start + _FETCH_BATCH]
            object_keys = [self.key(key, name) for name in batch]
            infos = yield from ask(
                Parallel(
                    tuple(
                        GetObject(k, None, self.codec.limits.max_compressed_bytes)
                        for k in object_keys
                    )
                )
            )
            for name, object_key, info in zip(batch, object_keys, infos, strict=True):
                found[name] = yield from self._large_value(name, object_key, info)
        return found

    def _large_value(
        self, name: str, object_key: str, info: ObjectInfo | None
    ) -> Steps[tuple[str, bytes]]:
        """Return the large value an object holds, checked against its name (its hash)."""
        if info is None or info.body is None:
            raise InvalidPayload(
                "a checkpoint names a large value whose object is missing", object_name=object_key
            )
        document = yield from self.codec.document_decoding(
            info.body, name=object_key, format_name=VALUE_FORMAT, format_version=1
        )
        type_, data = unpack_bytes(document, object_key)
        if large_value_name(data) != name:
            raise InvalidPayload(
                "large value object does not hold the value its name says", object_name=object_key
            )
        return type_, data

    def list_objects(
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
        `doc`, at `version`); the one it supersedes to `replaced` (deleted once the
        extension landed). Both are named by `version` and the sha256 of their bytes: a
        reader checks the hash.
        """
        snapshot, tail = location.snapshot, location.tail
        if _snapshot_due(location):
            name = yield from self._list_object("s-", version, life, None, ser, large, objects)
            doc["snapshot"] = name
            replaced.extend(
                old[0] for old in (snapshot, tail) if old is not None and old[0] != name
            )
            return location.changed(
                snapshot=(name, version), since=0, tail=None, snapshot_items=len(ser)
            )
        if _tail_due(location) and snapshot is not None and location.snapshot_items is not None:
            items = ser[location.snapshot_items :]
            name = yield from self._list_object(
                "t-", version, life, snapshot[0], items, large, objects
            )
            doc["tail"] = name
            if tail is not None and tail[0] != name:
                replaced.append(tail[0])
            return location.changed(tail=(name, version))
        return location

    def _list_object(
        self,
        prefix: str,
        version: int,
        life: int,
        after: str | None,
        items: Sequence[tuple[str, bytes]],
        large: dict[str, tuple[str, bytes]],
        objects: dict[str, bytes],
    ) -> Steps[str]:
        """Encode a snapshot (`s-`) or a tail after snapshot `after` (`t-`) into `objects`.

        Returns its name (`list_object_name`): the prefix, `version` and the sha256 of its
        bytes, which a reader checks.
        """
        document: dict[str, Any] = {"format": f"{SNAPSHOT_FORMAT}/1", "life": life}
        if after is not None:
            document["after"] = after
        document["items"] = [packed(t, d, large) for t, d in items]
        body = yield from self.codec.document_encoding(document, name=f"a list {prefix}object")
        name = list_object_name(prefix, version, body)
        objects[name] = body
        return name

    def erase(self, key: str) -> Steps[None]:
        """Delete every stored version under a purged thread's values prefix."""
        yield from delete_every_version(self.key(key, ""))

    def store_large(
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
            object_key = self.key(key, name)
            document = {"format": f"{VALUE_FORMAT}/1", "life": life, **pack(type_, data)}
            body = yield from self.codec.document_encoding(document, name=object_key)
            judge = self._judge(object_key, name, life)
            sends.append((PutObject(object_key, body, Create()), self._named(object_key, judge)))
        yield from put_all(sends, self.retry, what="large value")
        done.update(f"{life}/{name}" for name in large)

    def _named(self, object_key: str, judge: Judge) -> ReadBack:
        limit = self.codec.limits.max_compressed_bytes
        return named_read_back(object_key, judge, limit=limit, refresh=False)

    def _judge(self, object_key: str, name: str, life: int) -> Judge:
        def judge(info: ObjectInfo) -> Steps[Found]:
            document = yield from self._document(info, object_key, VALUE_FORMAT)
            if document is None or _life(document) < life:
                return Found.OTHER
            try:
                _, data = unpack_bytes(document, object_key)
            except InvalidPayload:
                return Found.OTHER
            return Found.SAME if large_value_name(data) == name else Found.OTHER

        return judge

    def _document(
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

    def store_snapshots(self, key: str, snapshots: Mapping[str, bytes]) -> Steps[None]:
        """Write each whole list snapshot (its name is its bytes' hash, its life inside)."""

        def judge(info: ObjectInfo, name: str) -> Steps[Found]:
            return Found.SAME if list_object_holds(name, info.body or b"") else Found.OTHER
            yield  # a generator, like every judge

        sends: list[tuple[PutObject, ReadBack]] = []
        for name, body in snapshots.items():
            object_key = self.key(key, name)
            read_back = self._named(object_key, functools.partial(judge, name=name))
            sends.append((PutObject(object_key, body, Create()), read_back))
        yield from put_all(sends, self.retry, what="list snapshot")
        for name, body in snapshots.items():
            self.bodies.put(self.key(key, name), body)

    def decoded_snapshots(
        self,
        key: str,
        names: Sequence[str],
        bodies: Sequence[bytes | None],
        kept: Mapping[str, tuple[int, bytes, Any]] | None,
    ) -> Steps[dict[str, Whole] | None]:
        """Return the named list snapshots; None when one is gone (a newer one replaced it).

        `kept`: the serializer unpacks msgpack as LangGraph's does (`_unpacks_msgpack`), and
        these snapshots' items are kept as msgpack (`_msgpack`): used as they are, and the
        others' kept so from now on, instead of decoding a body on every read. A body read
        and not kept so is kept as it is (`_lists`): named by its hash, it never changes.
        """
        object_keys = [self.key(key, name) for name in names]
        found: dict[str, Whole] = {}
        tails: dict[str, tuple[Any, Whole, str]] = {}
        fast = kept is not None
        for name, object_key, body in zip(names, object_keys, bodies, strict=True):
            msgpack = None if kept is None else kept.get(name)
            if msgpack is not None:
                own = Whole(msgpack[0], None, msgpack[1])
                if name.startswith("t-"):
                    tails[name] = (msgpack[2], own, object_key)
                else:
                    found[name] = own
                continue
            if body is None:
                return None
            own, after = yield from self._decoded_snapshot(name, object_key, body, fast=fast)
            if name.startswith("t-"):
                tails[name] = (after, own, object_key)
            else:
                found[name] = own
        return _with_tails(found, tails)

    def _decoded_snapshot(
        self, name: str, object_key: str, body: bytes, *, fast: bool
    ) -> Steps[tuple[Whole, Any]]:
        """Decode a list snapshot's body (checked against its name).

        Returns it, and the snapshot a tail names. Kept as msgpack when `fast`, else as
        the body.
        """
        if not list_object_holds(name, body):
            raise InvalidPayload(
                "list snapshot does not hold what its name says", object_name=object_key
            )
        document = yield from self.codec.document_decoding(
            body, name=object_key, format_name=SNAPSHOT_FORMAT, format_version=1
        )
        items = document.get("items")
        if not isinstance(items, list):
            raise InvalidPayload("list snapshot without items", object_name=object_key)
        own = Whole(len(items), items, msgpack_elements(items, object_key) if fast else None)
        after = document.get("after") if name.startswith("t-") else None
        if own.msgpack is not None:
            self.msgpack.put(object_key, (own.count, own.msgpack, after))
            self.bodies.pop(object_key)  # kept as msgpack instead
        else:
            self.bodies.put(object_key, body)
        return own, after

    def drop(self, key: str, below: int, ended_lists: frozenset[str]) -> Steps[None]:
        """Delete the thread's value objects written for lives before `below` (deleted).

        Each is judged by what it holds and deleted only if it is still the object judged
        (conditional on its ETag): a put of the new life that reuses a value writes it
        over with its own life first, so this never frees a key a new checkpoint names.
        `ended_lists`: the list snapshots and tails the ended life's last state names,
        deleted without a read. Their names are the hash of bytes that hold their life, so
        no later life writes an object of that name.
        """
        prefix = self.key(key, "")
        token: str | None = None
        while True:
            page = yield from ask(ListKeys(prefix, token))
            ended = [k for k in page.keys if k[len(prefix) :] in ended_lists]
            rest = [k for k in page.keys if k[len(prefix) :] not in ended_lists]
            yield from delete_keys(ended)  # one request for all of them
            doomed = yield from self._of_ended_lives(prefix, rest, below)
            yield from delete_all(doomed, self.retry, what="large value delete")
            token = page.next_token
            if token is None:
                return

    def _of_ended_lives(
        self, prefix: str, keys: list[str], below: int
    ) -> Steps[list[tuple[DeleteObject, ReadBack]]]:
        """Read each value object of `keys`; return the deletes of those of ended lives.

        Those written for lives before `below`, or unreadable; each delete conditional on
        the ETag read.
        """
        limit = self.codec.limits.max_compressed_bytes
        doomed: list[tuple[DeleteObject, ReadBack]] = []
        for start in range(0, len(keys), _FETCH_BATCH):
            batch = keys[start : start + _FETCH_BATCH]
            infos = yield from ask(Parallel(tuple(GetObject(k, None, limit) for k in batch)))
            for object_key, info in zip(batch, infos, strict=True):
                if info is None:
                    continue
                # Snapshots and tails alike (a tail read as a value would not decode, and
                # be taken for another life's).
                is_list = object_key[len(prefix) :].startswith(("s-", "t-"))
                format_name = SNAPSHOT_FORMAT if is_list else VALUE_FORMAT
                document = yield from self._document(info, object_key, format_name)
                if document is None or _life(document) < below:
                    read_back = judged_read_back(object_key, info.etag)
                    doomed.append((DeleteObject(object_key, info.etag), read_back))
        return doomed


_VERSION_DIGITS = 20
"""Digits of the version in a list object's name (as in a log entry's key)."""


def list_object_name(prefix: str, version: int, body: bytes) -> str:
    """Return the name of a list snapshot (`s-`) or tail (`t-`) whose bytes are `body`.

    The prefix, the version of the put that names it (20 digits, so names sort by it), a
    `-` and the sha256 of `body`: `s-00000000000000000123-<sha256>`. Names written before
    the version was added (`s-<sha256>`) read as they did.
    """
    return f"{prefix}{version:0{_VERSION_DIGITS}d}-{hashlib.sha256(body).hexdigest()}"


def list_object_holds(name: str, body: bytes) -> bool:
    """Whether list object `name` names `body`: its hash is the one in the name."""
    digest = hashlib.sha256(body).hexdigest()
    return name[:2] in ("s-", "t-") and (
        name[2:] == digest or (listed_version(name) is not None and name.endswith("-" + digest))
    )


def listed_version(name: str) -> int | None:
    """Return the version a list object's name carries; None: an older name, or no list's."""
    digits = name[2 : 2 + _VERSION_DIGITS]
    if (
        name[:2] not in ("s-", "t-")
        or len(name) != 2 + _VERSION_DIGITS + 1 + 64
        or name[2 + _VERSION_DIGITS] != "-"
        or not digits.isdigit()
        or not digits.isascii()
    ):
        return None
    return int(digits)


def _snapshot_due(location: ValueLocation) -> bool:
    """Whether a list extension at `location` writes a snapshot of the whole list.

    One every `SNAPSHOT_EVERY` extensions, the first after `TAIL_EVERY`.
    """
    since = location.since
    return since >= SNAPSHOT_EVERY or (location.snapshot is None and since >= TAIL_EVERY)


def _tail_due(location: ValueLocation) -> bool:
    """Whether a list extension at `location` writes a tail.

    One every `TAIL_EVERY` extensions since its snapshot.
    """
    return location.since % TAIL_EVERY == 0


def _life(document: Mapping[str, Any]) -> int:
    """Return the thread life a value object was written for (0: before lives were named)."""
    life = document.get("life")
    return life if type(life) is int else 0


def packed(type_: str, data: bytes, large: dict[str, tuple[str, bytes]]) -> dict[str, Any]:
    """Pack a serialized value, setting it aside as an object of its own when large."""
    if len(data) > LARGE_VALUE:
        name = large_value_name(data)
        large[name] = (type_, data)
        return {"type": type_, "object": name, "bytes": len(data)}
    return pack(type_, data)


def load(serde: Serializer, packed: Any, name: str, objects: Mapping[str, Any]) -> Any:
    """Return the value a packed item holds (a large one from `objects`, by its name)."""
    if not isinstance(packed, Mapping):
        raise InvalidPayload("a stored value must be an object", object_name=name)
    if "object" in packed:
        return serde.loads_typed(objects[packed["object"]])
    return serde.loads_typed(unpack_bytes(packed, name))


def _body(info: ObjectInfo | None) -> bytes | None:
    return None if info is None else info.body


def _whole_at(part: Mapping[str, Any], snapshots: Mapping[str, Whole]) -> str | None:
    """Return the fetched snapshot or tail holding the whole list at this part, if any."""
    for field in ("tail", "snapshot"):
        name = part.get(field)
        if isinstance(name, str) and name in snapshots:
            return name
    return None


def refs_in_values(
    model: ThreadModel,
    ns: str,
    docs: Mapping[str, dict[str, Any]],
    snapshots: Mapping[str, Whole] | None = None,
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


def channel_value(
    serde: Serializer,
    model: ThreadModel,
    ns: str,
    channel: str,
    version: Any,
    name: str,
    objects: Mapping[str, Any],
    snapshots: Mapping[str, Whole] | None = None,
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
        base = Whole(len(items), items, None)
        if unpacks_msgpack(serde):
            base = Whole(base.count, items, msgpack_elements(items, name))
        return _joined(serde, base, parts, name, objects)
    return load(serde, current, name, objects)


def _joined(
    serde: Serializer,
    base: Whole,
    parts: Sequence[Sequence[Any]],
    name: str,
    objects: Mapping[str, Any],
) -> list[Any]:
    """Return `base`'s items followed by the extensions' (`parts`, newest first), unpacked.

    When every item is msgpack and the serializer unpacks it as LangGraph's does, the
    whole list is one msgpack array and one `loads_typed` (the same values, item for item).
    """
    after = [item for part in reversed(parts) for item in part]
    if base.msgpack is not None and unpacks_msgpack(serde):
        extra = msgpack_elements(after, name)
        if extra is not None:
            return _loaded_array(serde, base.count + len(after), base.msgpack + extra)
        whole = _loaded_array(serde, base.count, base.msgpack)
    else:
        assert base.items is not None  # kept without items only as msgpack
        whole = [load(serde, item, name, objects) for item in base.items]
    whole.extend(load(serde, item, name, objects) for item in after)
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


def unpacks_msgpack(serde: Serializer) -> bool:
    """Whether `serde` unpacks msgpack as LangGraph's own serializer does.

    Any subclass that keeps its `loads_typed`, whatever its allow-lists: an array unpacks
    item by item, as each item alone would.
    """
    return getattr(type(serde), "loads_typed", None) is _jsonplus_loads()


def dumped(serde: Serializer, value: Any, what: str, key: str) -> tuple[str, bytes]:
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


def _with_tails(
    found: dict[str, Whole], tails: dict[str, tuple[Any, Whole, str]]
) -> dict[str, Whole] | None:
    """Add each tail, joined to the snapshot it follows, to `found` (the whole list).

    None when a tail's snapshot is not among them (replaced since: read the chain), or
    when one is kept as msgpack and its tail is not.
    """
    for name, (after, own, object_key) in tails.items():
        if not isinstance(after, str) or not after.startswith("s-"):
            raise InvalidPayload("list tail names no snapshot", object_name=object_key)
        if after not in found:
            return None
        whole = found[after].joined(own)
        if whole.items is None and whole.msgpack is None:
            return None
        found[name] = whole
    return found
