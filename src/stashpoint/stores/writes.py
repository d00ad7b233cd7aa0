"""The one conditional-write engine: every object stashpoint writes goes through `put`.

A write is a `PutObject` under a condition: create-only (`If-None-Match: *`) for immutable
objects (log entries, sealed segments, blobs, large LangGraph values), compare-and-swap
(`If-Match: <ETag>`) for the few mutable heads and for replacing an object stashpoint has
judged (a damaged content-named object, a log entry clean-up vacates). The engine sends it
and judges the answer:

- stored: done (the ETag is returned);
- HTTP 409 (a concurrent conditional write on the wire): back off, send the same bytes;
- anything else (a 412, a 404, a timeout, a reset, a 5xx): not definite, since a 412 may
  answer botocore's own retry of our landed write. The caller's `read_back` reads the
  object and says what became of the write (a `Verdict`): it landed; another writer's
  object is there (a conflict, raised as the caller says); it has not landed (the same
  bytes are sent again under the same condition, so at most one copy can land); or the
  object must be written over its ETag (`Rewrite`: a damaged content-named object, an
  identical one made young again, a freed key occupied again).

Content-named objects (blobs, sealed segments, LangGraph values and list snapshots) are
created with `create_named`: whatever is found under the name is judged by what it holds
(`Found`), never trusted for being there.

One set of errors for every object kind: a conflict is the caller's (`Refused`), a write
that certainly did not land after every resend is `StorageUnavailable` ("not stored"), and
one whose fate storage would not tell is `StorageUnavailable` carrying the write id. Never
a false success.

Deletes have their engine beside it, `delete`: a `DeleteObject`, conditional on the ETag of
the object judged (or unconditional where nothing could be judged), whose unclear answers
are judged by a read-back with the same verdicts: it is gone (`Landed`, whoever deleted it),
it is still the object judged (`NotLanded`: the same delete again), another writer's object
stands there now (`Kept`: it stays; or `Refused`, a conflict, where the caller demanded that
very object), or the delete goes on under another condition (`Rewrite`). `judged_read_back`
is the read-back of the common case, a clean-up deleting an object it has just judged.

Free of I/O, like every step: tested by scripts in `tests/stores/test_writes.py` for each
caller's read-back, end to end through the fault proxy, crashes and `kill -9` elsewhere.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

from stashpoint import tracing
from stashpoint.errors import StashpointError, StorageUnavailable
from stashpoint.retry import RetryPolicy
from stashpoint.steps import Parallel, Sleep, Steps, ask
from stashpoint.stores.objects import (
    Create,
    DeleteObject,
    GetObject,
    HeadObject,
    Match,
    ObjectInfo,
    PutObject,
    WriteOutcome,
    WriteResult,
)

_REFUSALS = (WriteOutcome.PRECONDITION_FAILED, WriteOutcome.NOT_FOUND)
_BATCH = 256
"""Writes sent in one `Parallel` by `put_all` (the driver keeps 16 in flight)."""
_REWRITES = 4
"""Most times one write is sent over another object's ETag before the engine gives up."""


class Answer(Enum):
    """What to do after one answer to a conditional write (`WriteTracker.judge`)."""

    STORED = "stored"
    """The write is acknowledged: done."""
    BACK_OFF = "back_off"
    """A 409 conflict on the wire: wait, then send the same bytes again."""
    READ_BACK = "read_back"
    """Not definite: read the object back to see whether the write landed."""


@dataclass
class WriteTracker:
    """Judges the answers to one conditional write, resent as often as needed.

    It remembers whether some copy sent so far may have been applied without our hearing
    of it, since a 412 proves failure only while none may have: after a timeout or a
    client retry it may answer a repeat of our own landed write.
    """

    retry: RetryPolicy
    """Bounds the resends."""
    attempt: int = 0
    """Copies sent so far."""
    copy_may_have_landed: bool = False
    """Whether a copy may have been applied unheard (a timeout, a 5xx, a client retry)."""
    refused_for_sure: bool = False
    """Whether the last answer refused our only copy (a 412/404 no landed copy explains)."""

    def judge(self, result: WriteResult) -> Answer:
        """Count one sent copy and say what to do about its answer."""
        self.attempt += 1
        if result.outcome is WriteOutcome.STORED:
            return Answer.STORED
        self.refused_for_sure = (
            not self.copy_may_have_landed and not result.retried and result.outcome in _REFUSALS
        )
        if result.retried or result.outcome is WriteOutcome.AMBIGUOUS:
            self.copy_may_have_landed = True
        if (
            result.outcome is WriteOutcome.CONDITION_CONFLICT
            and self.attempt < self.retry.max_attempts
        ):
            tracing.event("retry", attempt=self.attempt, outcome=result.outcome.value)
            return Answer.BACK_OFF
        if self.refused_for_sure:
            tracing.event("conflict", attempt=self.attempt, outcome=result.outcome.value)
        else:
            tracing.event("read_back", attempt=self.attempt, outcome=result.outcome.value)
        return Answer.READ_BACK

    @property
    def may_resend(self) -> bool:
        """Whether the retry policy allows another copy."""
        return self.attempt < self.retry.max_attempts


@dataclass(frozen=True, slots=True)
class Landed:
    """Verdict: the write is in storage (ours, or an identical content-named object)."""

    etag: str | None = None
    """The stored object's ETag, when the read-back saw it."""


@dataclass(frozen=True, slots=True)
class NotLanded:
    """Verdict: the write has not landed; send the same bytes under the first condition."""


@dataclass(frozen=True, slots=True)
class Refused:
    """Verdict: another writer's object is there (or the head moved on): raise `error`."""

    error: StashpointError
    """What the caller raises (a `CheckpointConflict` naming the winner, usually)."""


@dataclass(frozen=True, slots=True)
class Rewrite:
    """Verdict: send our bytes again under `condition` (over the ETag found, or create).

    For objects the caller judged replaceable: a content-named object that holds something
    else (damaged, or planted under our name), an identical one to be made young again (so
    a concurrent garbage collection's conditional delete fails), a freed key to occupy.
    A delete goes on over the ETag found (`Match`), or, with None, unconditionally (an
    object that cannot be judged, where the caller deletes whatever is there).
    """

    condition: Create | Match | None
    """The condition of the next copy (None: deletes only, unconditional)."""


@dataclass(frozen=True, slots=True)
class Kept:
    """Verdict (deletes): the object stays: it is no longer the one judged (written over)."""


Verdict = Landed | NotLanded | Refused | Rewrite | Kept
"""What a read-back says became of a write whose answer was not definite."""

ReadBack = Callable[[WriteTracker], Steps[Verdict]]
"""Reads the object back and judges it; the tracker says what was sent and heard."""


def put(
    request: PutObject,
    read_back: ReadBack,
    retry: RetryPolicy,
    *,
    what: str,
    write_id: str | None = None,
    name: str | None = None,
    look_in: str = "",
    sent: WriteResult | None = None,
) -> Steps[str | None]:
    """Write `request`, judging every answer that is not definite with `read_back`.

    Returns the stored object's ETag (None when only the read-back saw it land and did not
    say). `what` names the write in messages ("save", "append", "segment", "blob");
    `write_id` is the id a caller can look for when the outcome stays unknown, and
    `look_in` where (" in the head's lineage"); `name` is the object errors name (default:
    the key). `sent`: the answer to a first copy already sent (`put_all`). Raises what
    `read_back` refuses with, or `StorageUnavailable`.
    """
    name = name or request.key
    first = request
    tracker = WriteTracker(retry)
    rewrites = 0
    while True:
        result = yield from _answer(request, sent)
        sent = None
        answer = tracker.judge(result)
        if answer is Answer.STORED:
            return result.etag
        if answer is Answer.BACK_OFF:
            yield Sleep(retry.delay(tracker.attempt))
            continue
        said = _Said(what, result.detail or result.outcome.value, name, write_id, look_in)
        try:
            verdict = yield from read_back(tracker)
        except StashpointError as exc:
            raise said.unread(exc, sure=tracker.refused_for_sure) from exc
        if isinstance(verdict, Landed):
            return verdict.etag
        if isinstance(verdict, Rewrite):
            rewrites += 1
            request = _rewritten(first, verdict, rewrites, said)
            continue
        _check_put_verdict(verdict)
        request = first  # not landed: the same bytes under the first condition
        if not tracker.may_resend:
            raise said.given_up(tracker)
        yield Sleep(retry.delay(tracker.attempt))


@dataclass(frozen=True)
class _Said:
    """What a write's errors say: which write, the last answer, the object, the id."""

    what: str
    """The write's name in messages ("save", "append", ...)."""
    detail: str
    """Storage's last answer."""
    name: str
    """The object errors name."""
    write_id: str | None
    """The id a caller can look for when the outcome stays unknown."""
    look_in: str
    """Where to look for it."""

    def unread(self, exc: StashpointError, *, sure: bool) -> StorageUnavailable:
        """Return the error of a write whose read-back failed (`sure`: refused for sure)."""
        if sure:
            return StorageUnavailable(
                f"{self.what} not stored ({self.detail}) and the object could not be read "
                f"back ({exc.kind.value}); retry later",
                object_name=self.name,
            )
        return StorageUnavailable(
            f"{self.what} outcome unknown ({self.detail}) and the object could not be read "
            f"back ({exc.kind.value}){_look_for(self.write_id, self.look_in)}",
            object_name=self.name,
            write_id=self.write_id,
        )

    def given_up(self, tracker: WriteTracker) -> StorageUnavailable:
        """Return the error of a write that may not be sent again (refused, or unknown)."""
        if not tracker.copy_may_have_landed:
            return StorageUnavailable(
                f"{self.what} not stored: storage refused it {tracker.attempt} times "
                f"({self.detail}); retry later",
                object_name=self.name,
            )
        return StorageUnavailable(
            f"{self.what} outcome unknown after {tracker.attempt} attempts ({self.detail})"
            f"{_look_for(self.write_id, self.look_in)}",
            object_name=self.name,
            write_id=self.write_id,
        )


def _rewritten(first: PutObject, verdict: Rewrite, rewrites: int, said: _Said) -> PutObject:
    """Return the write sent again under the read-back's condition (a bounded number)."""
    if verdict.condition is None:
        raise AssertionError("a write is never sent unconditionally by the engine")
    if rewrites > _REWRITES:
        raise StorageUnavailable(
            f"{said.what} not stored: the object kept changing under it", object_name=said.name
        )
    return dataclasses.replace(first, condition=verdict.condition)


def _check_put_verdict(verdict: Verdict) -> None:
    """Raise a refusal; a write's read-back never keeps (that is a delete's verdict)."""
    if isinstance(verdict, Refused):
        raise verdict.error
    if isinstance(verdict, Kept):
        raise AssertionError("a write's read-back never keeps: that is a delete's verdict")


class Found(Enum):
    """What a create-only write of a content-named object found under its name."""

    OURS = "ours"
    """This write's own copy (it landed unheard)."""
    SAME = "same"
    """Another writer's copy of the same content: as good as ours, but perhaps old."""
    OTHER = "other"
    """Something else: damaged, foreign, planted under the name, or too old to keep."""


Judge = Callable[[ObjectInfo], Steps[Found]]
"""Judges an object found under a content name by what it holds."""


def create_named(
    request: PutObject, judge: Judge, retry: RetryPolicy, *, what: str, limit: int, refresh: bool
) -> Steps[str | None]:
    """Create an immutable object named by its content; return its ETag (None: not seen).

    An object found under the name is judged by what it holds, never trusted for being
    there: `OTHER` is replaced over its own ETag (so no later read fails on it); `SAME`
    is kept, or, with `refresh`, written over once with our bytes so that a clean-up that
    judged the old copy (a delete conditional on its ETag) fails instead of freeing a key
    this write is about to reference. `limit` bounds the read-back's size.
    """
    read_back = named_read_back(request.key, judge, limit=limit, refresh=refresh)
    return (yield from put(request, read_back, retry, what=what))


def same_bytes(body: bytes) -> Judge:
    """Judge an object found under a create-only name: the same bytes are as good as ours.

    For files whose name says nothing of their content (a random or content-hash name):
    anything else found there is `OTHER` (written over).
    """

    def judge(found: ObjectInfo) -> Steps[Found]:
        return Found.SAME if found.body == body else Found.OTHER
        yield  # a generator, like every step

    return judge


def named_read_back(key: str, judge: Judge, *, limit: int, refresh: bool) -> ReadBack:
    """Return the read-back of a create-only write of a content-named object (`create_named`).

    For `put_all`, which sends many such writes at once.
    """
    refreshed = False

    def read_back(tracker: WriteTracker) -> Steps[Verdict]:
        nonlocal refreshed
        existing = yield from ask(GetObject(key, None, limit))
        if existing is None:
            return NotLanded()
        found = yield from judge(existing)
        if found is Found.OTHER:
            return Rewrite(Match(existing.etag))
        if found is Found.OURS or refreshed or not refresh:
            return Landed(existing.etag)
        refreshed = True
        return Rewrite(Match(existing.etag))

    return read_back


def _look_for(write_id: str | None, where: str) -> str:
    return "" if write_id is None else f"; look for write id {write_id}{where}"


def put_all(
    writes: Sequence[tuple[PutObject, ReadBack]],
    retry: RetryPolicy,
    *,
    what: str,
) -> Steps[list[str | None]]:
    """Write independent objects: every first copy at once, then judge the unclear ones.

    Each write whose answer was not definite is judged (and resent) by `put`, one after
    another. Returns their ETags in order; raises the first failure once every write was judged.
    """
    for request, _ in writes:
        tracing.sent(len(request.body))

    def judged(request: PutObject, read_back: ReadBack, sent: WriteResult) -> Steps[str | None]:
        return (yield from put(request, read_back, retry, what=what, sent=sent))

    return (yield from _sent_at_once(writes, judged, None))


def delete(
    request: DeleteObject,
    read_back: ReadBack,
    retry: RetryPolicy,
    *,
    what: str,
    name: str | None = None,
    sent: WriteResult | None = None,
) -> Steps[bool]:
    """Delete `request.key` (under its ETag condition), judging unclear answers by `read_back`.

    Returns True when the object is gone (this delete, or another's: a 404 says so too),
    False when the read-back keeps it (`Kept`: written over since it was judged). `what`
    names the delete in messages; `name` the object errors name (default: the key);
    `sent`: the answer to a first copy already sent (`delete_all`). Raises what `read_back`
    refuses with, or `StorageUnavailable` when storage would not say. Never a false
    success: a delete whose fate is unknown is not reported done.
    """
    name = name or request.key
    tracker = WriteTracker(retry)
    retargets = 0
    while True:
        result = yield from _answer(request, sent)
        sent = None
        if result.outcome is WriteOutcome.NOT_FOUND:
            return True  # nothing under the key: gone, whoever deleted it
        answer = tracker.judge(result)
        if answer is Answer.STORED:
            return True
        if answer is Answer.BACK_OFF:
            yield Sleep(retry.delay(tracker.attempt))
            continue
        detail = result.detail or result.outcome.value
        verdict = yield from _read_back_delete(read_back, tracker, what, detail, name)
        settled = _settled(verdict)
        if settled is not None:
            return settled
        if isinstance(verdict, Rewrite):
            retargets += 1
            request = _retargeted(request, verdict, retargets, what, name)
            continue
        if tracker.may_resend:  # still there, as judged: the same delete again
            yield Sleep(retry.delay(tracker.attempt))
            continue
        raise StorageUnavailable(
            f"{what} not done after {tracker.attempt} attempts ({detail}); delete again",
            object_name=name,
        )


def _answer(request: PutObject | DeleteObject, sent: WriteResult | None) -> Steps[WriteResult]:
    """Return the answer to `request`: `sent` (a first copy's, already sent), else send it."""
    if sent is not None:
        return sent
    if isinstance(request, PutObject):
        tracing.sent(len(request.body))
    return (yield from ask(request))


def _read_back_delete(
    read_back: ReadBack, tracker: WriteTracker, what: str, detail: str, name: str
) -> Steps[Verdict]:
    """Judge an unclear delete by its read-back; one that fails says the fate is unknown."""
    try:
        return (yield from read_back(tracker))
    except StashpointError as exc:
        raise StorageUnavailable(
            f"{what} outcome unknown ({detail}) and the object could not be read back "
            f"({exc.kind.value}); delete again",
            object_name=name,
        ) from exc


def _settled(verdict: Verdict) -> bool | None:
    """Return what a delete's read-back settles: gone (True), kept (False), or None.

    A refusal raises.
    """
    if isinstance(verdict, Refused):
        raise verdict.error
    if isinstance(verdict, Landed | Kept):
        return isinstance(verdict, Landed)
    return None


def _retargeted(
    request: DeleteObject, verdict: Rewrite, retargets: int, what: str, name: str
) -> DeleteObject:
    """Return the delete sent again under the read-back's ETag (a bounded number)."""
    if retargets > _REWRITES:
        raise StorageUnavailable(
            f"{what} not done: the object kept changing under it", object_name=name
        )
    if isinstance(verdict.condition, Create):
        raise AssertionError("a delete is conditional on an ETag, or on nothing")
    etag = None if verdict.condition is None else verdict.condition.etag
    return dataclasses.replace(request, etag=etag)


def judged_read_back(key: str, etag: str) -> ReadBack:
    """Return the read-back of deleting an object judged at `etag`: gone, still it, or kept.

    A HEAD: nothing there is `Landed`; the same ETag is `NotLanded` (the delete is sent
    again); another ETag is `Kept` (another writer's object, which the delete never takes).
    """

    def read_back(tracker: WriteTracker) -> Steps[Verdict]:
        found = yield from ask(HeadObject(key))
        if found is None:
            return Landed()
        return NotLanded() if found.etag == etag else Kept()

    return read_back


def delete_all(
    deletes: Sequence[tuple[DeleteObject, ReadBack]], retry: RetryPolicy, *, what: str
) -> Steps[list[bool]]:
    """Delete independent objects: every first request at once, then judge the unclear ones.

    Returns, in order, whether each object is gone (`delete`); raises the first failure once
    every delete was judged.
    """

    def judged(request: DeleteObject, read_back: ReadBack, sent: WriteResult) -> Steps[bool]:
        return (yield from delete(request, read_back, retry, what=what, sent=sent))

    return (yield from _sent_at_once(deletes, judged, False))


_Sent = TypeVar("_Sent", PutObject, DeleteObject)
_Judged = TypeVar("_Judged")


def _sent_at_once(
    items: Sequence[tuple[_Sent, ReadBack]],
    judge: Callable[[_Sent, ReadBack, WriteResult], Steps[_Judged]],
    failed: _Judged,
) -> Steps[list[_Judged]]:
    """Send every first request at once (in batches), then judge each answer in order.

    The unclear ones are judged (and resent) one after another by `judge`; `failed` stands
    for one that raised. Raises the first failure once every request was judged.
    """
    found: list[_Judged] = []
    failure: StashpointError | None = None
    for start in range(0, len(items), _BATCH):
        batch = items[start : start + _BATCH]
        results = yield from ask(Parallel(tuple(request for request, _ in batch)))
        for (request, read_back), result in zip(batch, results, strict=True):
            try:
                found.append((yield from judge(request, read_back, result)))
            except StashpointError as exc:
                failure = failure or exc
                found.append(failed)
    if failure is not None:
        raise failure
    return found
