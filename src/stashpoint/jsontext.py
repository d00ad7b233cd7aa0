"""JSON text of stored documents: one behaviour, two engines.

pydantic_core's Rust parser and writer are the reference, and the engine for large
documents and for every document once a process has loaded it. Importing it costs 50-80
ms, more than a whole small save and load, which a Lambda cold start would pay on its
first checkpoint; so until something else loads it, a small document goes through the
standard library's C `json` instead, on terms that keep the behaviour the reference's:

- **parse** (`parse_light`): the standard library answers only for a plain document
  (strict UTF-8, no surrogate escapes, at most `MAX_DEPTH` deep) that it parses. For
  anything else (an error, an unusual token, a deep document) the reference parses it
  again and its answer, value or error, is the answer. `tests/test_jsontext.py` checks
  that the two agree on generated and mutated documents.
- **write** (`write_light`): the values reaching here are checked by `codec.check_json`
  (JSON types only, finite floats, ints within `MAX_INT_DIGITS`, which both engines write
  and read). Both write compact UTF-8 JSON; a float may be spelled differently (`1e-07`,
  `1e-7`) and reads back as the same number.

The light engine is 2-5x slower per byte than the reference, hence the small thresholds:
it saves the import where the import would dominate, and no more.
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

MAX_DEPTH = 200
"""The deepest nesting the reference parser reads (an object counting as 1 level)."""
MAX_INT_DIGITS = 4300
"""The most digits of an integer the reference parser reads (and Python converts)."""

SMALL_TEXT = 16 * 1024
"""Documents up to this many bytes may be parsed by the light engine."""
SMALL_NODES = 1024
"""Values of up to this many nodes may be written by the light engine."""

_REFERENCE = "pydantic_core"
_UNUSUAL = re.compile(rb"\\u[dD][89a-fA-F]|[0-9]{4000}")
"""A surrogate escape (the engines differ on lone ones), or a number of thousands of digits
(the reference refuses past about 4,300, where Python's float reads infinity): the
reference reads them all."""


def parse(raw: bytes) -> Any:
    """Return the JSON value in `raw`; `ValueError` (as the reference words it) if invalid."""
    if len(raw) <= SMALL_TEXT and _REFERENCE not in sys.modules:
        return parse_light(raw)
    return _reference().from_json(raw)


def write(value: Any, nodes: int) -> bytes:
    """Return `value` (checked by `check_json`, `nodes` as it counted) as compact JSON.

    Raises `ValueError` for what JSON cannot carry (a lone surrogate in a string).
    """
    if nodes <= SMALL_NODES and _REFERENCE not in sys.modules:
        return write_light(value)
    return write_reference(value)


def parse_light(raw: bytes) -> Any:
    """Return the value in `raw`: the standard library's answer if plain, else the reference's."""
    if not _UNUSUAL.search(raw):
        try:
            value = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError):
            pass  # the reference decides, and words the error
        else:
            # Fewer brackets than the ceiling cannot nest deeper than it (a C count).
            if raw.count(b"[") + raw.count(b"{") <= MAX_DEPTH or _within_depth(value):
                return value
    return _reference().from_json(raw)


def write_light(value: Any) -> bytes:
    """Write a checked value with the standard library (`ValueError` for lone surrogates)."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.encode("utf-8")  # UnicodeEncodeError, a ValueError, for lone surrogates


def write_reference(value: Any) -> bytes:
    """Write a checked value with the reference (`ValueError` for lone surrogates)."""
    engine = _reference()
    try:
        return engine.to_json(value)  # type: ignore[no-any-return]
    except engine.PydanticSerializationError as exc:
        raise ValueError(str(exc)) from None


def _within_depth(value: Any) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)] if type(value) in (dict, list) else []
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return False
        children = item.values() if type(item) is dict else item
        stack.extend((c, depth + 1) for c in children if type(c) is dict or type(c) is list)
    return True


def _reference() -> Any:
    import pydantic_core  # deferred: see the module's docstring

    return pydantic_core
