"""A LangGraph store item as it is stored: its id, its payload, and the rules on reading it.

Each item of a `StashpointStore` is one head envelope in the `langgraph-store` namespace,
saved by the one compare-and-swap engine (`stores.cas`): its value, the vectors of its
indexed fields and its time to live travel together, so an item is written, expired and
purged whole or not at all. This module holds what needs no I/O: the id of a
`(namespace, key)` pair, the payload's form, metadata filters, namespace matching and
vector scores.

An id is the namespace's labels and the key, each escaped to `[A-Za-z0-9_-]` (any other
character becomes `:` and the hex of its UTF-8 bytes), each label followed by `.` and the
key after one more `.`: `("memories", "user-1")`, key `k1` is `memories.user-1..k1`. A
namespace prefix is then an id prefix (`memories.` selects `("memories", ...)` and nothing
of `("memoriesX",)`), so a search lists exactly its namespaces' items.
"""

from __future__ import annotations

import math
import re
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from stashpoint.errors import InvalidArgument, InvalidPayload, described
from stashpoint.ids import MAX_ID_LENGTH

KIND = "langgraph.item"
"""The envelope kind of a store item."""
SCHEMA_VERSION = 1
"""The payload schema of a store item."""

_KEPT = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")
_PLAIN = re.compile(r"[A-Za-z0-9_-]*")
"""Text that escaping leaves as it is (most labels and keys: read and written at once)."""


def _escaped(text: str) -> str:
    if _PLAIN.fullmatch(text):
        return text
    return "".join(
        char if char in _KEPT else "".join(f":{byte:02x}" for byte in char.encode("utf-8"))
        for char in text
    )


def _unescaped(text: str) -> str:
    if ":" not in text:
        if not text.isascii():
            raise ValueError("not an escaped label")  # as `encode("ascii")` below would
        return text
    out = bytearray()
    index = 0
    while index < len(text):
        char = text[index]
        if char == ":":
            out.append(int(text[index + 1 : index + 3], 16))
            index += 3
        else:
            out += char.encode("ascii")
            index += 1
    return out.decode("utf-8")


def check_namespace(namespace: Any, *, what: str = "namespace") -> tuple[str, ...]:
    """Return `namespace` as a tuple of labels, or raise `InvalidArgument`.

    LangGraph's rules: at least one label, each a non-empty `str` without `.`, the first
    not `langgraph`.
    """
    if not isinstance(namespace, (tuple, list)):
        raise InvalidArgument(f"a {what} is a tuple of str labels, not {described(namespace)}")
    labels = tuple(namespace)
    for label in labels:
        if not isinstance(label, str) or not label or "." in label:
            raise InvalidArgument(
                f"{what} label {label!r} is invalid: labels are non-empty str without '.'"
            )
        if not _encodable(label):
            raise InvalidArgument(f"{what} label {label!r} is not valid Unicode (a lone surrogate)")
    return labels


def _encodable(text: str) -> bool:
    """Whether `text` encodes as UTF-8 (a lone surrogate does not: it names no object)."""
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def namespace_prefix_id(prefix: Sequence[str]) -> str:
    """Return the id prefix every item under the namespace `prefix` starts with."""
    return "".join(_escaped(label) + "." for label in prefix)


def item_id(namespace: Sequence[str], key: str) -> str:
    """Return the id of the item `key` in `namespace`; `InvalidArgument` if too long."""
    if not isinstance(key, str):
        raise InvalidArgument(f"an item key is a str, not {described(key)}")
    if not _encodable(key):
        raise InvalidArgument(f"item key {key!r} is not valid Unicode (a lone surrogate)")
    found = namespace_prefix_id(namespace) + "." + _escaped(key)
    if len(found) > MAX_ID_LENGTH:
        raise InvalidArgument(
            f"namespace and key are {len(found)} characters once escaped for storage "
            f"(at most {MAX_ID_LENGTH}): use a shorter key or fewer labels"
        )
    return found


def parse_item_id(object_id: str) -> tuple[tuple[str, ...], str] | None:
    """Return the `(namespace, key)` an id names, or None for an id no item has."""
    head, separator, key = object_id.partition("..")
    if not separator or not head:
        return None
    try:
        return tuple(_unescaped(label) for label in head.split(".")), _unescaped(key)
    except (ValueError, UnicodeDecodeError):
        return None


@dataclass(frozen=True, slots=True)
class StoredItem:
    """One item's payload as stored: what `get` and `search` return, and its upkeep."""

    namespace: tuple[str, ...]
    """The item's namespace."""
    key: str
    """The item's key within its namespace."""
    value: dict[str, Any]
    """The value the application stored (a JSON object)."""
    vectors: Mapping[str, array[float]]
    """The embeddings of its indexed fields, by path (`text`, `tags.1`); empty when the
    store has no index or the item was put with `index=False`. Arrays of doubles: a third
    of the memory of a tuple of floats, for the items a store keeps to search."""
    ttl_minutes: float | None
    """Minutes the item lives after it was last written or read; None: forever."""
    expires_at: datetime | None
    """When the item may be swept (its last refresh + TTL + the refresh slack)."""

    def payload(self) -> dict[str, Any]:
        """Return the JSON payload of this item's envelope."""
        document: dict[str, Any] = {
            "namespace": list(self.namespace),
            "key": self.key,
            "value": self.value,
        }
        if self.vectors:
            document["vectors"] = {path: list(vector) for path, vector in self.vectors.items()}
        if self.ttl_minutes is not None:
            document["ttl_minutes"] = self.ttl_minutes
            assert self.expires_at is not None
            document["expires_at"] = self.expires_at.isoformat()
        return document

    def expired(self, now: datetime) -> bool:
        """Whether the item's time to live has run out at `now`."""
        return self.expires_at is not None and now >= self.expires_at

    def needs_refresh(self, now: datetime) -> bool:
        """Whether a read at `now` should push the expiry out (once per `refresh_slack`)."""
        if self.ttl_minutes is None or self.expires_at is None:
            return False
        return self.expires_at - now < timedelta(minutes=self.ttl_minutes)

    def refreshed(self, now: datetime) -> StoredItem:
        """Return this item with its expiry pushed out from `now`."""
        return StoredItem(
            self.namespace,
            self.key,
            self.value,
            self.vectors,
            self.ttl_minutes,
            expiry(now, self.ttl_minutes),
        )


def vector_of(values: Sequence[float]) -> array[float]:
    """Return an embedding as stored in memory (an array of doubles)."""
    return array("d", values)


def refresh_slack(ttl_minutes: float) -> timedelta:
    """How much later than its TTL an item may expire, so that reads refresh it seldom.

    An item read at `t` expires between `t + ttl` and `t + ttl + slack`: never earlier
    than asked, and a read rewrites it only once `slack` has passed since the last
    refresh (a tenth of the TTL, at most a minute), not on every read.
    """
    return min(timedelta(minutes=ttl_minutes) / 10, timedelta(minutes=1))


def expiry(now: datetime, ttl_minutes: float | None) -> datetime | None:
    """Return when an item written or refreshed at `now` may be swept."""
    if ttl_minutes is None:
        return None
    return now + timedelta(minutes=ttl_minutes) + refresh_slack(ttl_minutes)


def check_ttl(ttl: Any) -> float | None:
    """Return a TTL in minutes (None: forever), or raise `InvalidArgument`."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float)) or not 0 < ttl < 10**9:
        raise InvalidArgument(f"ttl is minutes > 0 (or None), not {described(ttl)}")
    return float(ttl)


def stored_item(object_id: str, payload: Any, *, named: bool = False) -> StoredItem:
    """Return the item a decoded payload holds; `InvalidPayload` if it is not one.

    The payload must name the namespace and key its id names: an object copied under
    another item's key is refused, never served as that item. `named`: the id was made
    from the payload's own namespace and key (a catalog's copy), so that holds already.
    """
    if not isinstance(payload, dict):
        raise InvalidPayload("store item payload is not an object", object_name=object_id)
    namespace, key, value = payload.get("namespace"), payload.get("key"), payload.get("value")
    if (
        not isinstance(namespace, list)
        or not all(isinstance(label, str) for label in namespace)
        or not isinstance(key, str)
        or not isinstance(value, dict)
    ):
        raise InvalidPayload("store item payload is malformed", object_name=object_id)
    if not named and parse_item_id(object_id) != (tuple(namespace), key):
        raise InvalidPayload(
            "store item names another namespace or key than its id", object_name=object_id
        )
    vectors = payload.get("vectors", {})
    if not _vectors_ok(vectors):
        raise InvalidPayload("store item vectors are malformed", object_name=object_id)
    ttl_minutes, expires_at = _stored_ttl(payload, object_id)
    return StoredItem(
        tuple(namespace),
        key,
        value,
        {path: vector_of(vector) for path, vector in vectors.items()},
        ttl_minutes,
        expires_at,
    )


def _vectors_ok(vectors: Any) -> bool:
    """Whether an item's stored vectors are a dict of paths to lists of numbers."""
    return isinstance(vectors, dict) and all(
        isinstance(path, str)
        and isinstance(vector, list)
        and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in vector)
        for path, vector in vectors.items()
    )


def _stored_ttl(payload: dict[str, Any], object_id: str) -> tuple[float | None, datetime | None]:
    """Return an item's TTL and expiry (both or neither; an aware expiry), checked."""
    ttl, expires = payload.get("ttl_minutes"), payload.get("expires_at")
    try:
        ttl_minutes = check_ttl(ttl)
        expires_at = None if expires is None else datetime.fromisoformat(expires)
    except (InvalidArgument, TypeError, ValueError):
        raise InvalidPayload("store item TTL is malformed", object_name=object_id) from None
    if (ttl_minutes is None) != (expires_at is None) or (
        expires_at is not None and expires_at.tzinfo is None
    ):
        raise InvalidPayload("store item TTL is malformed", object_name=object_id)
    return ttl_minutes, expires_at


# -- filters --------------------------------------------------------------------------------

_OPERATORS = frozenset({"$eq", "$ne", "$gt", "$gte", "$lt", "$lte"})


def check_filter(filter: Any) -> dict[str, Any]:
    """Return a metadata filter, or raise `InvalidArgument` (unknown operators included)."""
    if filter is None:
        return {}
    if not isinstance(filter, dict) or not all(isinstance(k, str) for k in filter):
        raise InvalidArgument(f"a filter is a dict of str keys, not {described(filter)}")
    for condition in filter.values():
        _check_operators(condition)
    return filter


def _check_operators(condition: Any) -> None:
    """Refuse a filter condition of operators that names one LangGraph does not know."""
    if not (isinstance(condition, dict) and any(k.startswith("$") for k in condition)):
        return
    unknown = sorted(str(k) for k in condition if k not in _OPERATORS)
    if unknown:
        raise InvalidArgument(
            f"unknown filter operator {unknown[0]!r}: use one of {', '.join(sorted(_OPERATORS))}"
        )


_MISSING = object()


def _field(value: Mapping[str, Any], path: str) -> Any:
    """Return the field `path` names: a key of the value, else a dotted path into it."""
    if path in value:
        return value[path]
    found: Any = value
    for part in path.split("."):
        if not isinstance(found, Mapping) or part not in found:
            return _MISSING
        found = found[part]
    return found


def matches(value: Mapping[str, Any], filter: Mapping[str, Any]) -> bool:
    """Whether an item's value meets every condition of a metadata filter.

    As LangGraph's stores: a plain value must equal the field (lists element by element,
    objects key by key); `{"$gt": 3}` and the other operators compare; a field that is
    missing or not comparable meets no comparison.
    """
    return all(_meets(_field(value, path), wanted) for path, wanted in filter.items())


def _meets(found: Any, wanted: Any) -> bool:
    if isinstance(wanted, dict):
        return _meets_object(found, wanted)
    if isinstance(wanted, (list, tuple)):
        return (
            isinstance(found, list)
            and len(found) == len(wanted)
            and all(_meets(f, w) for f, w in zip(found, wanted, strict=True))
        )
    return found is not _MISSING and _equal(found, wanted)


def _meets_object(found: Any, wanted: dict[Any, Any]) -> bool:
    """Whether `found` meets a condition object: operators, or an object key by key."""
    if any(str(k).startswith("$") for k in wanted):
        return all(_compare(found, op, operand) for op, operand in wanted.items())
    if not isinstance(found, dict):
        return False
    return all(_meets(found.get(k, _MISSING), v) for k, v in wanted.items())


def _equal(found: Any, wanted: Any) -> bool:
    # JSON keeps true apart from 1: so does a filter.
    if isinstance(found, bool) or isinstance(wanted, bool):
        return type(found) is type(wanted) and found == wanted
    return bool(found == wanted)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        return float(value)
    except OverflowError:  # an int beyond a float's range
        return math.inf if value > 0 else -math.inf


def _compare(found: Any, operator: str, operand: Any) -> bool:
    if found is _MISSING:
        return operator == "$ne"
    if operator == "$eq":
        return _equal(found, operand)
    if operator == "$ne":
        return not _equal(found, operand)
    left, right = _number(found), _number(operand)
    if left is None or right is None:
        if isinstance(found, str) and isinstance(operand, str):
            left_text, right_text = found, operand
            return {
                "$gt": left_text > right_text,
                "$gte": left_text >= right_text,
                "$lt": left_text < right_text,
                "$lte": left_text <= right_text,
            }[operator]
        return False
    return {"$gt": left > right, "$gte": left >= right, "$lt": left < right, "$lte": left <= right}[
        operator
    ]


# -- namespaces -----------------------------------------------------------------------------


def namespace_matches(namespace: tuple[str, ...], match_type: str, path: Sequence[str]) -> bool:
    """Whether `namespace` starts (`prefix`) or ends (`suffix`) with `path`; `*` is any label."""
    if len(namespace) < len(path):
        return False
    if match_type == "prefix":
        pairs = zip(namespace, path, strict=False)
    elif match_type == "suffix":
        pairs = zip(reversed(namespace), reversed(path), strict=False)
    else:
        raise InvalidArgument(f"match_type is 'prefix' or 'suffix', not {described(match_type)}")
    return all(wanted == "*" or label == wanted for label, wanted in pairs)


def literal_prefix(conditions: Sequence[tuple[str, Sequence[str]]]) -> tuple[str, ...]:
    """Return the labels every matching namespace starts with (before any wildcard)."""
    for match_type, path in conditions:
        if match_type == "prefix":
            labels: list[str] = []
            for label in path:
                if label == "*":
                    break
                labels.append(label)
            return tuple(labels)
    return ()


# -- vectors --------------------------------------------------------------------------------


def cosine_scores(query: Sequence[float], vectors: Sequence[Sequence[float]]) -> list[float]:
    """Return the cosine similarity of `query` with each of `vectors` (0 for a zero vector).

    With numpy installed (the `vectors` extra) one matrix product per vector length (the
    arrays' bytes joined, not their floats walked); without it, plain Python, as
    LangGraph's in-memory store does. A vector of another length than the query scores 0.
    """
    if not vectors:
        return []
    try:
        import numpy as np
    except ImportError:
        return [_cosine(query, vector) for vector in vectors]
    wanted = np.asarray(query, dtype=np.float64)
    scores = [0.0] * len(vectors)
    positions = [i for i, vector in enumerate(vectors) if len(vector) == len(wanted)]
    if not positions or not wanted.any():
        return scores
    joined = b"".join(_doubles(vectors[i]) for i in positions)
    matrix = np.frombuffer(joined, dtype=np.float64).reshape(len(positions), len(wanted))
    norms = np.linalg.norm(matrix, axis=1) * np.linalg.norm(wanted)
    products = matrix @ wanted
    found = np.divide(products, norms, out=np.zeros_like(products), where=norms != 0)
    for position, score in zip(positions, found.tolist(), strict=True):
        scores[position] = score
    return scores


def _doubles(vector: Sequence[float]) -> array[float]:
    """Return a vector as float64s (an `array("d")` as it is: its bytes are not copied)."""
    return vector if isinstance(vector, array) else array("d", vector)


def _cosine(query: Sequence[float], vector: Sequence[float]) -> float:
    dot = sum(a * b for a, b in zip(query, vector, strict=False))
    norm = math.sqrt(sum(a * a for a in query)) * math.sqrt(sum(b * b for b in vector))
    return dot / norm if norm > 0 else 0.0
