"""Garbage collection of blobs: delete what no checkpoint or run references any more.

A run that is a log references blobs from its records (attempt inputs and outputs, all of
them current) and its latest state (the snapshot): gc reads every run log whole. Older
states count only with `history`, like older envelope revisions.

Blobs (`stores.blobs`) are written before the compare-and-swap that references them, so a
young unreferenced blob may be about to be referenced: only blobs older than `min_age` go.
A head that cannot be decoded (corrupt, or written by a newer stashpoint) has unknown
references: while there is one, nothing is deleted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from stashpoint.codec import Codec
from stashpoint.errors import (
    CheckpointNotFound,
    ConfigurationError,
    KeyShredded,
    StashpointError,
    StorageUnavailable,
)
from stashpoint.logs.log import LogSteps
from stashpoint.progress import OnProgress, Progress, silent
from stashpoint.retry import DEFAULT_RETRY
from stashpoint.steps import NewWriteId, Now, Steps, ask
from stashpoint.stores import writes
from stashpoint.stores.blobs import REF_KEY, is_ref
from stashpoint.stores.layout import BLOBS, CLOCK, Layout
from stashpoint.stores.objects import (
    Create,
    DeleteObject,
    GetObject,
    HeadObject,
    ListKeys,
    ListVersions,
    PutObject,
    WriteOutcome,
)


@dataclass(frozen=True)
class GcReport:
    """What a garbage collection found and did."""

    blobs: int
    """Blobs examined."""
    referenced: int
    """Blobs some head references."""
    unreferenced: list[str]
    """Unreferenced blobs old enough to go (deleted unless it was a dry run)."""
    deleted: int
    """Blobs deleted."""
    too_young: int
    """Unreferenced blobs kept because a writer may be about to reference them."""
    unreadable: list[str] = field(default_factory=list)
    """Heads (or revisions) that could not be decoded; while there are any, nothing is
    deleted, since their references are unknown (a corrupt object, or a newer format
    written by a newer stashpoint)."""
    logs: int = 0
    """Logs looked at, in every log namespace (agents, conversations, runs, LangGraph
    threads, `stash.logs`)."""
    segments_sealed: int = 0
    """Segments written for complete ranges an interrupted append left unsealed (none in a
    dry run)."""
    purges_resumed: int = 0
    """Purges a crash had left open that this collection finished (none in a dry run)."""
    open_purges: list[str] = field(default_factory=list)
    """Purges still open afterwards (one under way elsewhere, or a dry run's)."""
    shredded: list[str] = field(default_factory=list)
    """Heads and logs of shredded tenants: known, unreadable for good, skipped (they never
    hold a collection back; a purge of their prefix erases them without reading them)."""
    unsealed_receipts: list[str] = field(default_factory=list)
    """Receipts not obeyed: their seal does not verify under the stash's erasure key (or
    no key is set), or an open shred waiting for the operator (`receipt_seal`)."""
    unreadable_receipts: list[str] = field(default_factory=list)
    """Receipts under `purges/` that could not be read (damaged, planted, or of a newer
    version), as `purge id: error kind`: skipped, never obeyed."""
    purge_leftovers: int = 0
    """Versions writers that never saw a finished purge left beside its ids (removed and
    recorded in its receipt; none in a dry run)."""
    lives_tidied: int = 0
    """Entries (and segments) below a LangGraph thread's deletion or rebase vacated (and
    deleted): `delete_thread`, `prune`, `copy_thread` and `delete_for_runs` leave them to
    gc (none in a dry run)."""
    packs: int = 0
    """With `pack`: packs of 1,024 versions written or found whole (none in a dry run)."""
    entries_vacated: int = 0
    """With `pack`: sealed entries replaced by their small markers."""
    segments_deleted: int = 0
    """With `pack`: segments deleted because a pack holds them."""
    store_items_expired: int = 0
    """LangGraph store items whose time to live had run out: deleted, whole (counted only,
    in a dry run). Swept by `stashpoint gc` where the `langgraph` extra is installed."""


def references(value: Any, found: set[str]) -> None:
    """Add the digest of every blob `value` references (anywhere in it) to `found`."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if is_ref(item):
                found.add(str(item[REF_KEY]))
            else:
                stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def collect_garbage(
    layout: Layout,
    codec: Codec,
    namespaces: tuple[str, ...],
    *,
    dry_run: bool,
    min_age: timedelta,
    history: bool = False,
    logs: tuple[LogSteps, ...] = (),
    blob_logs: tuple[str, ...] = (),
    on_progress: OnProgress = silent,
    pack: bool = False,
) -> Steps[GcReport]:
    """Delete blobs that no head in `namespaces` references and that are older than `min_age`.

    Only heads count unless `history`: then every older revision of every head is read too,
    and a blob any of them references stays. Blobs younger than `min_age` stay, since a
    writer stores its blobs just before its compare-and-swap references them. If any head
    cannot be decoded, nothing is deleted: its references are unknown.

    Every log of `logs` (one `LogSteps` per log namespace) is sealed where an interrupted
    append left a complete range unsealed (unless `dry_run`); those of the namespaces in
    `blob_logs` are read whole for references: records and the latest state count (every
    state, with `history`). With `pack`, every log's old ranges are packed for archives
    and its sealed entries vacated (`LogSteps.pack`).

    `on_progress` hears the count of each phase: `heads` read, `logs` looked at, `blobs`
    judged.
    """
    blob_prefix = layout.namespace_prefix(BLOBS)
    blobs = yield from _all_keys(blob_prefix)
    walk = _Walk()
    heads: list[str] = []
    for namespace in namespaces:
        heads += yield from _all_keys(layout.namespace_prefix(namespace))
    for done, key in enumerate(heads):
        on_progress(Progress("heads", done, len(heads)))
        yield from _read_head(walk, codec, key, history=history)
    on_progress(Progress("heads", len(heads), len(heads)))
    log_count = yield from _walk_logs(
        walk, logs, blob_logs, dry_run=dry_run, pack=pack, history=history, on_progress=on_progress
    )
    # A dry run writes nothing, not even the clock probe: its report judges on this clock.
    now = (yield from ask(Now())) if dry_run else (yield from storage_now(layout))
    doomed, young = yield from _judge_blobs(
        blobs, blob_prefix, walk.referenced, now, min_age, on_progress
    )
    deleted = 0
    if not dry_run and not walk.unreadable:
        deleted = yield from _delete_blobs(layout, doomed)
    return GcReport(
        len(blobs),
        len(blobs) - len(doomed) - young,
        [digest for digest, _ in doomed],
        deleted,
        young,
        walk.unreadable,
        log_count,
        walk.sealed,
        lives_tidied=walk.tidied,
        packs=walk.packs,
        entries_vacated=walk.vacated,
        segments_deleted=walk.segments_deleted,
        shredded=sorted(set(walk.shredded)),
    )


@dataclass
class _Walk:
    """What a collection's walk over heads and logs found, and what it tidied on the way."""

    referenced: set[str] = field(default_factory=set)
    """Digests of the blobs something references."""
    unreadable: list[str] = field(default_factory=list)
    """Heads and logs whose references are unknown (nothing is deleted while there are)."""
    shredded: list[str] = field(default_factory=list)
    """Heads and logs of shredded tenants: skipped."""
    sealed: int = 0
    """Segments sealed."""
    tidied: int = 0
    """Entries vacated below a deletion or rebase."""
    packs: int = 0
    """Packs written or found whole."""
    vacated: int = 0
    """Sealed entries replaced by markers by packing."""
    segments_deleted: int = 0
    """Segments deleted because a pack holds them."""


def _walk_logs(
    walk: _Walk,
    logs: tuple[LogSteps, ...],
    blob_logs: tuple[str, ...],
    *,
    dry_run: bool,
    pack: bool,
    history: bool,
    on_progress: OnProgress,
) -> Steps[int]:
    """Tidy and seal every log (unless `dry_run`); return how many there were.

    The logs of the namespaces in `blob_logs` are read for the blobs they reference.
    """
    listed: list[tuple[LogSteps, str]] = []
    for steps in logs:
        listed += [(steps, log_id) for log_id in (yield from steps.list_ids())]
    for done, (steps, log_id) in enumerate(listed):
        on_progress(Progress("logs", done, len(listed)))
        readable = dry_run or (yield from _tidy_log(walk, steps, log_id, pack=pack))
        if readable and steps.keys.namespace in blob_logs:
            yield from _read_log(walk, steps, log_id, history=history)
    on_progress(Progress("logs", len(listed), len(listed)))
    return len(listed)


def _read_head(walk: _Walk, codec: Codec, key: str, *, history: bool) -> Steps[None]:
    """Add what a head references (with `history`, every older revision too) to `walk`."""
    versions: list[str | None] = [None]
    if history:
        versions += yield from _older_versions(key)
    for version_id in versions:
        name = key if version_id is None else f"{key}@{version_id}"
        try:
            info = yield from ask(GetObject(key, version_id, codec.limits.max_compressed_bytes))
            if info is None or info.body is None:
                continue  # deleted since it was listed
            envelope = yield from codec.decoding(info.body, name=key)
        except KeyShredded:
            # Known, and unreadable for good: its blobs are its tenant's, as unreadable.
            walk.shredded.append(name)
            continue
        except StashpointError:
            walk.unreadable.append(name)
            continue
        references(envelope.payload, walk.referenced)


def _tidy_log(walk: _Walk, steps: LogSteps, log_id: str, *, pack: bool) -> Steps[bool]:
    """Tidy, seal (and with `pack`, pack) one log; return whether it is readable."""
    try:
        walk.tidied += yield from steps.tidy(log_id)
        walk.sealed += yield from steps.seal(log_id)
        if pack:
            packing = yield from steps.pack(log_id)
            walk.packs += packing.packed
            walk.vacated += packing.vacated
            walk.segments_deleted += packing.segments_deleted
    except CheckpointNotFound:
        pass  # a deleted log: nothing to seal
    except KeyShredded:
        walk.shredded.append(steps.keys.entries_prefix(log_id))
        return False
    except StashpointError as exc:
        walk.unreadable.append(f"{steps.keys.entries_prefix(log_id)}: {exc.kind.value}")
        return False
    return True


def _read_log(walk: _Walk, steps: LogSteps, log_id: str, *, history: bool) -> Steps[None]:
    """Add what a log's records and latest state (every state: `history`) reference."""
    try:
        entries = yield from steps.entries(log_id)
    except CheckpointNotFound:
        return  # deleted since it was listed
    except KeyShredded:
        walk.shredded.append(steps.keys.entries_prefix(log_id))
        return
    except StashpointError as exc:
        walk.unreadable.append(f"{steps.keys.entries_prefix(log_id)}: {exc}")
        return
    for entry in entries:
        references(entry.records, walk.referenced)
        if history or entry is entries[-1]:
            references(entry.state, walk.referenced)


def _judge_blobs(
    blobs: list[str],
    blob_prefix: str,
    referenced: set[str],
    now: datetime,
    min_age: timedelta,
    on_progress: OnProgress,
) -> Steps[tuple[list[tuple[str, str]], int]]:
    """Return the unreferenced blobs old enough to go (digest, ETag), and a count.

    The count is of unreferenced blobs too young to go: a writer may be about to
    reference them.
    """
    doomed: list[tuple[str, str]] = []
    young = 0
    for done, key in enumerate(blobs):
        on_progress(Progress("blobs", done, len(blobs)))
        digest = key[len(blob_prefix) :]
        if digest in referenced:
            continue
        head = yield from ask(HeadObject(key))
        if head is None:
            continue
        if head.last_modified is not None and now - head.last_modified < min_age:
            young += 1
            continue
        doomed.append((digest, head.etag))
    on_progress(Progress("blobs", len(blobs), len(blobs)))
    return doomed, young


def _delete_blobs(layout: Layout, doomed: list[tuple[str, str]]) -> Steps[int]:
    """Delete each doomed blob (digest, ETag judged); return how many went."""
    deleted = 0
    for digest, etag in doomed:
        # Only the object judged: a save that reused the blob since wrote its own copy
        # over it (`Blobs.offload`), whose new ETag makes this delete fail.
        key = layout.key(BLOBS, digest)
        deleted += yield from writes.delete(
            DeleteObject(key, etag),
            writes.judged_read_back(key, etag),
            DEFAULT_RETRY,
            what="blob delete",
        )
    return deleted


def storage_now(layout: Layout) -> Steps[datetime]:
    """Return what time storage's clock says: an object's age is judged on it alone.

    A tiny probe object is written (create-only, a fresh name), read back for its write
    time and deleted, so a collector whose own clock runs ahead never takes a blob written
    a moment ago for an old one.
    """
    key = layout.key(CLOCK, (yield from ask(NewWriteId())))
    result = yield from ask(PutObject(key, b"{}", Create(), content_encoding=None))
    if result.outcome is not WriteOutcome.STORED:
        raise StorageUnavailable(
            f"could not read storage's clock ({result.detail or result.outcome.value})",
            object_name=key,
        )
    # Deleted whatever the read says (no `finally`: a step closed mid-request, as when its
    # process is dying, must not send another).
    try:
        info = yield from ask(HeadObject(key))
    except StashpointError:
        yield from ask(DeleteObject(key))
        raise
    yield from ask(DeleteObject(key))
    if info is None or info.last_modified is None:
        raise StorageUnavailable(
            "storage did not say when the clock probe was written", object_name=key
        )
    return info.last_modified


def _older_versions(key: str) -> Steps[list[str | None]]:
    """Return the version ids of a head's older revisions (none where nothing is versioned)."""
    try:
        refs = yield from ask(ListVersions(key))
    except ConfigurationError:
        return []  # a bucket without versioning keeps no older revisions
    return [r.version_id for r in refs if not r.is_latest and not r.is_delete_marker]


def _all_keys(prefix: str) -> Steps[list[str]]:
    keys: list[str] = []
    token: str | None = None
    while True:
        page = yield from ask(ListKeys(prefix, token))
        keys.extend(k for k in page.keys if "/" not in k[len(prefix) :])
        token = page.next_token
        if token is None:
            return keys
