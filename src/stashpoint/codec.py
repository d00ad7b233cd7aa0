"""Envelope <-> bytes: one zstd frame of UTF-8 JSON whose first key names the format.

The bytes of a stored object are readable without this library for as long as zstd and JSON
exist: `zstd -d < object | jq`. Decoding is bounded: a small frame that claims or inflates
to gigabytes fails fast with bounded memory, and JSON nesting depth is bounded.
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass
from typing import Any

import zstandard

from stashpoint import jsontext
from stashpoint.envelope import Envelope
from stashpoint.errors import (
    ConfigurationError,
    InvalidPayload,
    LimitExceeded,
    StashpointError,
    Undecryptable,
    UnsupportedFormat,
    described,
)
from stashpoint.steps import Compute, Steps, ask

FORMAT_NAME = "stashpoint.envelope"
"""The name in the `format` field of every envelope."""
FORMAT_VERSION = 1
"""The newest envelope format version this library reads and the one it writes."""
FORMAT = f"{FORMAT_NAME}/{FORMAT_VERSION}"
"""The value of the `format` field this library writes."""

PARSER_MAX_DEPTH = jsontext.MAX_DEPTH
"""The JSON parser's own nesting ceiling; `Limits.max_depth` cannot exceed it."""

_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
SEALED_MAGIC = b"SPE1"
"""The first bytes of an encrypted object (`stashpoint.encryption`): the codec names them."""
_STREAM_CHUNK = 1 << 20
_RATIO_FLOOR = 1 << 20
"""Documents up to this size are never refused for their inflation ratio."""
_PREFIX_BYTES = 256
"""How much of a document is decompressed first, to check it starts with the format."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Bounds applied when encoding and decoding envelopes: one object for both directions.

    What a save accepts, a load accepts: the writer refuses anything a reader with the
    same limits would refuse, so nothing acknowledged is ever unreadable.
    """

    max_compressed_bytes: int = 64 * 1024 * 1024
    """Largest stored object accepted (compressed bytes); larger ones are refused from
    their size, before their body is read."""
    max_decompressed_bytes: int = 64 * 1024 * 1024
    """Largest JSON document accepted once decompressed (see `max_values` for memory)."""
    max_values: int = 4 * 1024 * 1024
    """Most JSON values a document may hold, counted from its text (every `,` `:` `[`
    `{`, strings included, so an overestimate). Python spends up to ~82 bytes on a value
    and up to 4 on a byte of text, so a document's parsed value takes at most about
    `82 * max_values + 4 * max_decompressed_bytes` (~600 MB by default), and reading it
    at most that plus its text and its stored bytes: whatever the content, a typed
    `LimitExceeded` rather than an out-of-memory kill in a 1 GB Lambda."""
    max_depth: int = PARSER_MAX_DEPTH
    """Deepest JSON nesting accepted, the envelope object itself counting as 1."""
    max_window_bytes: int = 1 << 27
    """Largest zstd window a frame may ask for (bounds decoder memory)."""
    max_inflation_ratio: int = 1000
    """Largest decompressed/compressed size ratio past the first MiB: real checkpoints
    compress 3-50x, zstd bombs thousands of times (refused before they inflate)."""

    def __post_init__(self) -> None:
        for name in (
            "max_compressed_bytes",
            "max_decompressed_bytes",
            "max_values",
            "max_depth",
            "max_window_bytes",
            "max_inflation_ratio",
        ):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise ConfigurationError(
                    f"Limits.{name} must be a positive int, not {described(value)}"
                )
        if self.max_depth > PARSER_MAX_DEPTH:
            raise ConfigurationError(f"Limits.max_depth must be at most {PARSER_MAX_DEPTH}")


DEFAULT_LIMITS = Limits()
"""The limits used when none are given."""


class Codec:
    """Encodes envelopes to stored bytes and decodes them back, within `Limits`."""

    def __init__(self, limits: Limits = DEFAULT_LIMITS, *, level: int = 3) -> None:
        self.limits = limits
        """The bounds this codec enforces."""
        self.level = level
        """zstd compression level used when encoding."""
        self._max_window = limits.max_window_bytes
        # zstd contexts cost ~20 us to create, more than compressing a small envelope, and
        # are not thread-safe: each thread keeps its own pair.
        self._contexts = threading.local()

    def encode(self, envelope: Envelope) -> bytes:
        """Return the stored bytes of `envelope` (a zstd frame with size and checksum)."""
        return self.compress(self.serialize(envelope), name=envelope.id)

    def encoding(self, envelope: Envelope) -> Steps[bytes]:
        """Encode `envelope` as steps that yield its compression as `Compute`.

        The async driver then takes a large compression off the event loop.
        """
        raw = self.serialize(envelope)
        return (
            yield from ask(
                Compute(functools.partial(self.compress, raw, name=envelope.id), len(raw))
            )
        )

    def serialize(self, envelope: Envelope) -> bytes:
        """Return the envelope's JSON document, checked for JSON types, depth and size."""
        document = {"format": FORMAT, **envelope.fields()}
        # The envelope object is depth 1, so its payload starts at depth 2.
        nodes = check_json(envelope.payload, self.limits.max_depth, name=envelope.id, start_depth=2)
        try:
            raw = jsontext.write(document, nodes + len(document))
        except (ValueError, TypeError) as exc:
            raise InvalidPayload(
                f"payload is not JSON-serialisable: {exc}", object_name=envelope.id
            ) from exc
        self.check_text(raw, "envelope", envelope.id)
        return raw

    def check_text(self, raw: bytes, what: str, name: str | None) -> None:
        """Refuse JSON text over the size or value-count limit (`LimitExceeded`).

        Writers and readers check the same text the same way, so what a save accepts, a
        load accepts. The count is of structural bytes, a few `bytes.count` passes.
        """
        limits = self.limits
        if len(raw) > limits.max_decompressed_bytes:
            raise LimitExceeded(
                f"{what} is {len(raw)} bytes of JSON, over the limit of "
                f"{limits.max_decompressed_bytes} (Limits.max_decompressed_bytes)",
                object_name=name,
            )
        if len(raw) > limits.max_values:
            values = raw.count(b",") + raw.count(b":") + raw.count(b"[") + raw.count(b"{")
            if values > limits.max_values:
                raise LimitExceeded(
                    f"{what} holds up to {values} JSON values, over the limit of "
                    f"{limits.max_values} (Limits.max_values bounds a reader's memory)",
                    object_name=name,
                )

    def compress(self, raw: bytes, *, name: str | None = None, level: int | None = None) -> bytes:
        """Return `raw` JSON as a zstd frame with size and checksum, within the size limit.

        `level` overrides the codec's level (sealed segments, written once and kept for
        years, are worth a slower level).
        """
        level = self.level if level is None else level
        compressors: dict[int, zstandard.ZstdCompressor] | None = getattr(
            self._contexts, "compressors", None
        )
        if compressors is None:
            compressors = self._contexts.compressors = {}
        compressor = compressors.get(level)
        if compressor is None:
            compressor = compressors[level] = zstandard.ZstdCompressor(
                level=level, write_checksum=True, write_content_size=True
            )
        data = compressor.compress(raw)
        if len(raw) > _RATIO_FLOOR and len(data) * self.limits.max_inflation_ratio < len(raw):
            # Readers refuse a frame that inflates past max_inflation_ratio (the zip-bomb
            # guard), so a document that compresses that well (5 MB of one repeated
            # character) is stored as plain JSON, which they read: never an acknowledged
            # write that cannot be read back.
            data = raw
        if len(data) > self.limits.max_compressed_bytes:
            raise LimitExceeded(
                f"envelope compresses to {len(data)} bytes, over the limit of "
                f"{self.limits.max_compressed_bytes}",
                object_name=name,
            )
        return data

    def decode(self, data: bytes, *, name: str | None = None) -> Envelope:
        """Return the envelope stored in `data`, or raise a typed error naming `name`.

        Accepts a zstd frame or an uncompressed JSON object (first byte `{`).
        """
        document = self.decode_document(data, name=name)
        return self.envelope_from_document(document, name=name)

    def decoding(self, data: bytes, *, name: str | None = None) -> Steps[Envelope]:
        """Decode `data` as steps that yield its decompression as `Compute`.

        The async driver then takes a large decompression off the event loop.
        """
        size = max(len(data), declared_size(data))
        raw = yield from ask(Compute(functools.partial(self.unwrap, data, name=name), size))
        return self.envelope_from_document(self.parse_document(raw, name=name), name=name)

    def document_encoding(
        self, document: dict[str, Any], *, name: str, level: int | None = None
    ) -> Steps[bytes]:
        """Encode any stashpoint JSON document (a log entry, a segment) as steps.

        The document is checked like an envelope (JSON types, depth, size) and its first
        field must be `format`; compression is a `Compute`, off the event loop when large.
        """
        nodes = check_json(document, self.limits.max_depth, name=name, root="document")
        try:
            raw = jsontext.write(document, nodes)
        except (ValueError, TypeError) as exc:
            raise InvalidPayload(f"not JSON-serialisable: {exc}", object_name=name) from exc
        self.check_text(raw, "document", name)
        work = functools.partial(self.compress, raw, name=name, level=level)
        return (yield from ask(Compute(work, len(raw))))

    def document_decoding(
        self, data: bytes, *, name: str, format_name: str, format_version: int
    ) -> Steps[dict[str, Any]]:
        """Decode a stashpoint JSON document of the named format as steps, within the limits."""
        size = max(len(data), declared_size(data))
        raw = yield from ask(Compute(functools.partial(self.unwrap, data, name=name), size))
        return self.parse_document(
            raw, name=name, format_name=format_name, format_version=format_version
        )

    def decode_document(self, data: bytes, *, name: str | None = None) -> dict[str, Any]:
        """Return the envelope's JSON object, checked for format, size and depth."""
        return self.parse_document(self.unwrap(data, name=name), name=name)

    def unwrap(self, data: bytes, *, name: str | None = None) -> bytes:
        """Return the JSON inside stored bytes (decompressed within the limits)."""
        if len(data) > self.limits.max_compressed_bytes:
            raise LimitExceeded(
                f"object is {len(data)} bytes, over the limit of "
                f"{self.limits.max_compressed_bytes}",
                object_name=name,
            )
        if data[:4] == _ZSTD_MAGIC:
            raw = self._decompress(data, name)
        elif data.lstrip()[:1] == b"{":
            raw = data
            if len(raw) > self.limits.max_decompressed_bytes:
                raise LimitExceeded("JSON document over the size limit", object_name=name)
            _check_prefix(raw[:_PREFIX_BYTES], name)
        elif not data:
            raise InvalidPayload("object is empty", object_name=name)
        elif data[:4] == SEALED_MAGIC:
            raise Undecryptable(
                "object is encrypted (stashpoint.encrypted/1): open the stash with the "
                "encryption settings it was written with, or run `stashpoint decrypt`",
                object_name=name,
            )
        else:
            raise InvalidPayload(
                "object is neither a zstd frame nor a JSON object", object_name=name
            )
        return raw

    def parse_document(
        self,
        raw: bytes,
        *,
        name: str | None = None,
        format_name: str = FORMAT_NAME,
        format_version: int = FORMAT_VERSION,
    ) -> dict[str, Any]:
        """Return the document's JSON object parsed from `raw`, checked for format and depth."""
        self.check_text(raw, "document", name)
        try:
            document = jsontext.parse(raw)
        except ValueError as exc:
            if "recursion limit" in str(exc):
                raise LimitExceeded(
                    f"JSON nesting deeper than {PARSER_MAX_DEPTH}", object_name=name
                ) from exc
            raise InvalidPayload(f"object is not valid JSON: {exc}", object_name=name) from exc
        if not isinstance(document, dict):
            raise InvalidPayload("envelope JSON is not an object", object_name=name)
        _check_format(document.get("format"), name, format_name, format_version)
        if self.limits.max_depth < PARSER_MAX_DEPTH:
            _check_depth(document, self.limits.max_depth, name)
        return document

    def envelope_from_document(
        self, document: dict[str, Any], *, name: str | None = None
    ) -> Envelope:
        """Validate a decoded JSON object into an `Envelope` (`Envelope.from_fields`).

        Our own fields are strict: a revision of `"7"`, `true` or `7.0`, an epoch-number or
        naive timestamp is refused, since this library never wrote one.
        """
        fields = {k: v for k, v in document.items() if k != "format"}
        try:
            return Envelope.from_fields(**fields)
        except InvalidPayload as exc:  # it says which fields already; name the stored object
            raise InvalidPayload(exc.message, object_name=name) from exc
        except StashpointError as exc:
            raise InvalidPayload(
                f"envelope fields are invalid: {exc.message}", object_name=name
            ) from exc

    def _decompress(self, data: bytes, name: str | None) -> bytes:
        limits = self.limits
        try:
            params = zstandard.get_frame_parameters(data)
        except zstandard.ZstdError as exc:
            raise InvalidPayload(f"corrupt zstd frame header: {exc}", object_name=name) from exc
        # Past the first MiB, a document may be at most `ratio` times its stored size.
        ceiling = min(
            limits.max_decompressed_bytes,
            max(_RATIO_FLOOR, limits.max_inflation_ratio * len(data)),
        )
        declared = params.content_size
        if declared != zstandard.CONTENTSIZE_UNKNOWN and declared > ceiling:
            if declared > limits.max_decompressed_bytes:
                reason = f"over the limit of {limits.max_decompressed_bytes}"
            else:
                reason = (
                    f"a {declared // max(1, len(data))}x inflation of {len(data)} stored "
                    f"bytes, over max_inflation_ratio={limits.max_inflation_ratio}"
                )
            raise LimitExceeded(f"zstd frame declares {declared} bytes, {reason}", object_name=name)
        if params.window_size > limits.max_window_bytes:
            raise LimitExceeded(
                f"zstd frame asks for a {params.window_size}-byte window", object_name=name
            )
        dctx: zstandard.ZstdDecompressor | None = getattr(self._contexts, "decompressor", None)
        if dctx is None:
            dctx = zstandard.ZstdDecompressor(max_window_size=self._max_window)
            self._contexts.decompressor = dctx
        try:
            # The first bytes must name the format: anything else stops here, uninflated.
            with dctx.stream_reader(data, read_across_frames=False) as reader:
                _check_prefix(reader.read(_PREFIX_BYTES), name)
            if declared != zstandard.CONTENTSIZE_UNKNOWN:
                # zstd checks the declared size against the real one, so this bounds memory.
                dobj = dctx.decompressobj()
                raw = dobj.decompress(data)
                if not dobj.eof:
                    raise InvalidPayload("truncated zstd frame", object_name=name)
                if dobj.unused_data:
                    raise InvalidPayload("trailing bytes after the zstd frame", object_name=name)
                return raw
            return self._decompress_streaming(dctx, data, ceiling, name)
        except zstandard.ZstdError as exc:
            raise InvalidPayload(f"corrupt zstd frame: {exc}", object_name=name) from exc

    @staticmethod
    def _decompress_streaming(
        dctx: zstandard.ZstdDecompressor, data: bytes, limit: int, name: str | None
    ) -> bytes:
        chunks: list[bytes] = []
        total = 0
        with dctx.stream_reader(data, read_across_frames=False) as reader:
            while chunk := reader.read(_STREAM_CHUNK):
                total += len(chunk)
                if total > limit:
                    raise LimitExceeded(
                        f"zstd frame inflates past {limit} bytes (size limit, or "
                        f"max_inflation_ratio times its {len(data)} stored bytes)",
                        object_name=name,
                    )
                chunks.append(chunk)
        return b"".join(chunks)


def declared_size(data: bytes) -> int:
    """Return the content size a zstd frame declares (0 when unknown or not a frame)."""
    if data[:4] != _ZSTD_MAGIC:
        return 0
    try:
        size = zstandard.frame_content_size(data)
    except zstandard.ZstdError:
        return 0
    return max(size, 0)


def _check_prefix(first: bytes, name: str | None) -> None:
    """Refuse a document whose first bytes are not `{"format":` (whitespace allowed)."""
    head = first.lstrip()
    if not head.startswith(b"{"):
        raise InvalidPayload("object is not a JSON object", object_name=name)
    if not head[1:].lstrip().startswith(b'"format"') and len(head) > 1:
        raise UnsupportedFormat(
            "not a stashpoint envelope: it does not start with its 'format' field",
            object_name=name,
        )


_SCALARS = frozenset({str, bool, type(None)})
_INT_BOUND = 10**jsontext.MAX_INT_DIGITS
"""Ints must be within +-(this - 1): what the JSON reader reads back."""


class CheckedJson(dict[str, Any]):
    """A JSON object `check_json` accepted where it was made: later checks count it whole.

    A value checked once where it is produced (a LangGraph value as it is packed) is not
    walked again by the check of the document that holds it: `nodes` is what its own check
    counted, `depth` the depth it was checked within (its root at 1). Writers see a plain
    JSON object.
    """

    __slots__ = ("depth", "nodes")

    def __init__(self, value: dict[str, Any], nodes: int, depth: int) -> None:
        super().__init__(value)
        self.nodes = nodes
        """Values inside its containers (`check_json`'s count)."""
        self.depth = depth
        """At most how deep it nests, its root at 1 (the bound it was checked within)."""


def pointer_token(key: object) -> str:
    """Return `key` as one reference token of a JSON Pointer (`~` and `/` escaped).

    Any key is named (a non-str one is what a save is refused for, and must be shown).
    """
    return str(key).replace("~", "~0").replace("/", "~1")


def check_json(
    value: object,
    max_depth: int,
    *,
    name: str | None = None,
    start_depth: int = 1,
    root: str = "payload",
) -> int:
    """Refuse a value that JSON cannot carry unchanged, or that nests deeper than `max_depth`.

    Allowed: dict with str keys, list, str, int of at most 4,300 digits, finite float,
    bool, None (exact types, so an Enum, a tuple, a set, a datetime or a Decimal is refused
    instead of coming back as something else; a dict subclass counts as a dict, and a
    `CheckedJson` is counted whole). Raises `InvalidPayload` (or `LimitExceeded` for
    depth) naming the path as a JSON Pointer (RFC 6901) under `root`: `/payload/items/3`.
    Returns the number of values inside containers (what `jsontext.write` sizes its engine
    by).
    """
    stack: list[tuple[Any, int]] = [(value, start_depth)]
    nodes = 0
    ok = True
    while stack and ok:
        item, depth = stack.pop()
        kind = type(item)
        if kind is CheckedJson:
            ok = depth - 1 + item.depth <= max_depth
            nodes += item.nodes
        elif kind is dict or kind is list or isinstance(item, dict):
            if depth > max_depth:
                ok = False
                break
            nodes += len(item)
            children = item if kind is list else item.values()
            if kind is not list and any(type(key) is not str for key in item):
                ok = False
                break
            for child in children:
                child_kind = type(child)
                if child_kind is str or child_kind is bool or child is None:
                    continue  # the common leaves, checked without a push
                if child_kind is int and -_INT_BOUND < child < _INT_BOUND:
                    continue
                stack.append((child, depth + 1))
        elif kind is float:
            ok = math.isfinite(item)
        elif kind is int:
            ok = -_INT_BOUND < item < _INT_BOUND
        elif kind not in _SCALARS:
            ok = False
    if ok:
        return nodes
    where, problem = _first_problem(value, max_depth, start_depth, root)
    error = LimitExceeded if problem.startswith("nesting") else InvalidPayload
    raise error(f"{where}: {problem}", object_name=name)


def _first_problem(value: object, max_depth: int, start_depth: int, root: str) -> tuple[str, str]:
    """Find (path, reason) of the first value `check_json` refuses (only on failure)."""
    root = root if root.startswith("/") else f"/{root}"
    stack: list[tuple[Any, int, str]] = [(value, start_depth, root)]
    while stack:
        item, depth, path = stack.pop()
        kind = type(item)
        if _too_deep(item, depth, max_depth):
            return path, f"nesting deeper than {max_depth} (the envelope counting as 1)"
        if isinstance(item, CheckedJson):
            continue
        if isinstance(item, dict):
            for key, child in item.items():
                if type(key) is not str:
                    return path, f"key {key!r} is a {type(key).__name__}; JSON keys are strings"
                stack.append((child, depth + 1, f"{path}/{pointer_token(key)}"))
        elif kind is list:
            stack.extend((c, depth + 1, f"{path}/{i}") for i, c in enumerate(item))
        elif (problem := _leaf_problem(item)) is not None:
            return path, problem
    return root, "not JSON"


def _too_deep(item: Any, depth: int, max_depth: int) -> bool:
    """Whether a container at `depth` (or a checked value's deepest) is over `max_depth`."""
    if isinstance(item, CheckedJson):
        return depth - 1 + item.depth > max_depth
    return isinstance(item, dict | list) and depth > max_depth


def _leaf_problem(item: Any) -> str | None:
    """Say why JSON cannot carry a value that is not a container (None: it can)."""
    kind = type(item)
    if kind is float:
        return None if math.isfinite(item) else f"{item} (NaN/Infinity) cannot be stored in JSON"
    if kind is int:
        if -_INT_BOUND < item < _INT_BOUND:
            return None
        return f"an int of over {jsontext.MAX_INT_DIGITS} digits cannot be read back"
    if kind in _SCALARS:
        return None
    return (
        f"a {kind.__name__} would not come back as one from JSON; convert it "
        "(to a str, list or dict) before saving"
    )


def _check_format(value: object, name: str | None, expected: str, newest: int) -> None:
    if not isinstance(value, str):
        raise UnsupportedFormat(
            "not a stashpoint document: no 'format' field naming the format", object_name=name
        )
    fmt_name, _, fmt_version = value.partition("/")
    if fmt_name != expected:
        raise UnsupportedFormat(
            f"unknown format {value!r} (expected {expected!r})", object_name=name
        )
    if not fmt_version.isdigit():
        raise UnsupportedFormat(f"malformed format version in {value!r}", object_name=name)
    if int(fmt_version) > newest:
        raise UnsupportedFormat(
            f"format {value!r} is newer than this library reads ({expected}/{newest}); "
            "upgrade stashpoint",
            object_name=name,
        )
    if int(fmt_version) < 1:
        raise UnsupportedFormat(f"unknown format version in {value!r}", object_name=name)


def _check_depth(document: object, max_depth: int, name: str | None) -> None:
    stack: list[tuple[object, int]] = [(document, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children: Any = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > max_depth:
            raise LimitExceeded(f"JSON nesting deeper than {max_depth}", object_name=name)
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
