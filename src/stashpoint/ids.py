"""Identifiers: validation, time-ordered UUIDv7 ids and random write ids."""

from __future__ import annotations

import base64
import hashlib
import os
import re
import sys
import threading
import time

from stashpoint.errors import InvalidId, InvalidPayload, described

MAX_ID_LENGTH = 255
"""Longest id: the longest file name common file systems allow (the local backend)."""
_ID_PATTERN = re.compile(r"[A-Za-z0-9._:-]{1,255}")


def validate_id(value: str, *, what: str = "id") -> str:
    """Return `value` if it is a valid id, else raise `InvalidId`.

    Valid ids match `[A-Za-z0-9._:-]{1,255}` and are not `.` or `..`; they never contain
    `/`, so an id maps to exactly one object key or file name.
    """
    if not isinstance(value, str) or not _ID_PATTERN.fullmatch(value) or value in (".", ".."):
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        raise InvalidId(
            f"invalid {what} {shown}: use 1-255 characters of [A-Za-z0-9._:-], not '.' or '..'"
        )
    return value


_PREFIX_PATTERN = re.compile(r"[A-Za-z0-9._:-]{0,255}")


def validate_prefix(value: str, *, what: str = "prefix") -> str:
    """Return `value` if it can start a valid id (`[A-Za-z0-9._:-]{0,255}`), else `InvalidId`.

    A listing prefix never reaches another folder of the store: no `/`, so no `..` path.
    """
    if not isinstance(value, str) or not _PREFIX_PATTERN.fullmatch(value):
        shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
        raise InvalidId(f"invalid {what} {shown}: use up to 255 characters of [A-Za-z0-9._:-]")
    return value


def new_id() -> str:
    """Return a new time-ordered UUIDv7 string (RFC 9562), monotonic within this process."""
    return _PROCESS_IDS.next(time.time_ns() // 1_000_000, int.from_bytes(os.urandom(8), "big"))


def _next_tick(ms: int, last_ms: int, last_seq: int) -> tuple[int, int]:
    """Return the (millisecond, sequence) of the next id after (`last_ms`, `last_seq`)."""
    if ms > last_ms:
        return ms, 0
    # Same (or an earlier, after a clock step) millisecond: keep order with a counter.
    if last_seq + 1 >= 1 << 12:
        return last_ms + 1, 0
    return last_ms, last_seq + 1


def uuid7(ms: int, seq: int, rand: int) -> str:
    """Return the UUIDv7 text of a Unix millisecond, a 12-bit sequence and random bits.

    Only the low 62 bits of `rand` are used.
    """
    rand &= (1 << 62) - 1
    value = (ms & ((1 << 48) - 1)) << 80 | 0x7 << 76 | seq << 64 | 0b10 << 62 | rand
    # The canonical 8-4-4-4-12 text, written out: the `uuid` module costs a cold start ~5 ms.
    digits = f"{value:032x}"
    return f"{digits[:8]}-{digits[8:12]}-{digits[12:16]}-{digits[16:20]}-{digits[20:]}"


class IdSequence:
    """Time-ordered UUIDv7 ids from given times and random bits, monotonic per instance.

    `new_id` uses one for the whole process; a seeded source of ids keeps its own.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = (0, 0)

    def next(self, ms: int, rand: int) -> str:
        """Return the id for Unix millisecond `ms` (or just after the last one given)."""
        with self._lock:
            ms, seq = _next_tick(ms, *self._last)
            self._last = (ms, seq)
        return uuid7(ms, seq, rand)


_PROCESS_IDS = IdSequence()

_PROCESS = base64.urlsafe_b64encode(os.urandom(9)).decode("ascii")


def _new_process() -> None:
    global _PROCESS
    _PROCESS = base64.urlsafe_b64encode(os.urandom(9)).decode("ascii")


os.register_at_fork(after_in_child=_new_process)  # a forked child is another writer


def writer_token(depth: int = 0) -> str:
    """Return the token of the writer saving now: this process, thread and asyncio task.

    A writer saves one revision at a time (a thread, or a task, waits for its save), so a
    head that remembers each writer's last save says whether a save landed whatever
    happened since (`Envelope.writers`). `depth` counts the saves this thread or task is
    already inside (a save made from within another's request path is another writer).
    16 URL-safe characters.
    """
    task = 0
    asyncio = sys.modules.get("asyncio")  # never imported here: a sync program has none
    if asyncio is not None:
        try:
            task = id(asyncio.current_task())
        except RuntimeError:
            task = 0  # no running loop in this thread
    raw = f"{_PROCESS}:{threading.get_ident()}:{task}:{depth}".encode()
    return base64.urlsafe_b64encode(hashlib.sha256(raw).digest()[:12]).decode("ascii")


def new_write_id() -> str:
    """Return a fresh random write id: 128 bits, 22 URL-safe characters."""
    return write_id_text(os.urandom(16))


def write_id_text(raw: bytes) -> str:
    """Return the write id of 16 random bytes: 22 URL-safe characters."""
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


_SAFE_THREAD = re.compile(r"[A-Za-z0-9._-]{1,200}")


def thread_key(thread_id: str) -> str:
    """Return the log id of a thread: the id itself when safe, else an escaped form.

    Safe ids (letters, digits, `._-`) stay readable; anything else (a `/`, spaces, unicode,
    a colon) becomes `:` + base32 of its UTF-8, and a very long one `:sha256-` + its hash.
    `:` never appears in a safe id, so two thread ids never share a key (`t` vs `t/x`).
    """
    if not isinstance(thread_id, str) or not thread_id:
        raise InvalidPayload(f"thread_id must be a non-empty str, not {described(thread_id)}")
    if _SAFE_THREAD.fullmatch(thread_id) and thread_id not in (".", ".."):
        return thread_id
    encoded = base64.b32encode(thread_id.encode()).decode().rstrip("=").lower()
    if len(encoded) <= 250:
        return ":" + encoded
    return ":sha256-" + hashlib.sha256(thread_id.encode()).hexdigest()


def thread_id_of(key: str) -> str | None:
    """Return the thread id a log id stands for; None for a hashed (very long) one."""
    if not key.startswith(":"):
        return key
    if key.startswith(":sha256-"):
        return None
    encoded = key[1:].upper()
    try:
        return base64.b32decode(encoded + "=" * (-len(encoded) % 8)).decode()
    except (ValueError, UnicodeDecodeError):
        return None
