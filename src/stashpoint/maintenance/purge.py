"""Purge: erase ids for good, every stored version, and write an erasure receipt.

On a versioned bucket a DELETE only adds a delete marker; every version stays readable to
anyone who asks for it by id. A purge removes every version of everything an id owns: a
head's revisions, a log's entries, its sealed segments, its large values, what a repair
quarantined, its index items and the blobs nothing else references. In this order, each
step resumable because each one lists what is left:

1. **Receipt opened.** A log in the `purges` namespace (one per purge: the one log-backed
   state), created with the plan: the targets, who asked (`actor`), when.
2. **Tombstone.** Each target gets one that every reader and writer meets: a log's last
   version ends it with the purge's id (`LogSteps.end_for_purge`), a head is replaced by a
   `stashpoint.purged` envelope (`CompareAndSwap.end_for_purge`). From then on a read is
   `Purged` (a not-found with its own kind), never a shorter transcript presented as
   whole, and a write is refused with it.
3. **Sweep.** Every version under the target's prefixes is listed; what is doomed is first
   written into the receipt (the intent: key, version id, bytes), then deleted in batches
   of up to 1,000 (`DeleteVersions`). A log's entries below the tombstone keep one small
   marker each, with no payload: a key is never freed, so a writer holding a stale head
   (a zombie worker, a Lambda that never saw the purge) finds its version occupied and is
   told `Purged`; nothing it sends lands where no reader looks. The sweep lists again
   until a listing finds nothing to remove: that last listing is the verification.
4. **Index and blobs.** A run's index items are deleted (and read again). A blob that
   what was purged referenced goes when no other head or log references it (the garbage
   collector's walk, `garbage.collect_garbage`) and it is older than the blob age bound.
5. **Receipt closed**, with the counts and `verified`.

A crash anywhere leaves an open receipt: `Admin.resume_purges` (and `stashpoint purge
--resume`, and `gc`) carry it on from its last state; the intents written before each
batch make the finished receipt list every version removed, whichever process removed it.

The receipt holds ids, keys, version ids, sizes and times, never a payload.

Object Lock: on a bucket with Object Lock, every version is read for its retention and
legal hold first; anything kept refuses the whole purge (`RetentionLocked`, naming each
version and its retain-until date) before anything is written.

Free of I/O, like every step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from typing import Any, Literal

from stashpoint import jsontext, tracing
from stashpoint.codec import Codec
from stashpoint.encryption import (
    Encryption,
    KeyRule,
    ShredMasterKey,
    read_record,
)
from stashpoint.errors import (
    ConfigurationError,
    InvalidPayload,
    KeyShredded,
    RetentionLocked,
    StashpointError,
    StorageUnavailable,
)
from stashpoint.index.requests import DeleteItem, GetPartition
from stashpoint.index.schema import execution_due_pk
from stashpoint.logs.log import LogHead, LogSteps
from stashpoint.maintenance import receipt_seal
from stashpoint.maintenance.deletion import UNVERSIONED, delete_versions
from stashpoint.maintenance.garbage import GcReport, references
from stashpoint.maintenance.lives import LifeBounds, Lives
from stashpoint.maintenance.log_sweep import Found, LogSweep
from stashpoint.maintenance.receipts import (
    RECEIPT_KIND,
    PurgeReceipt,
    ReceiptLog,
    ReceiptState,
    RemovedVersion,
    Target,
)
from stashpoint.maintenance.selection import (
    NAMESPACE_NAMES,
    IdSources,
    Selection,
    Selector,
    chosen_ids,
    selection,
    with_derived,
)
from stashpoint.retry import DEFAULT_RETRY
from stashpoint.runs.indexing import run_pk
from stashpoint.steps import NewId, Now, Parallel, Steps, ask
from stashpoint.stores import writes
from stashpoint.stores.cas import CompareAndSwap
from stashpoint.stores.layout import (
    BLOBS,
    DATA_KEYS,
    DURABLE_EXECUTIONS,
    NAMESPACES,
    PROJECTION,
    PURGES,
    QUARANTINE,
    RUN_LOGS,
    Layout,
    Shape,
    derived_namespaces,
)
from stashpoint.stores.objects import (
    Create,
    GetObject,
    GetObjectLock,
    HeadObject,
    ObjectInfo,
    PutObject,
    SetLegalHold,
    StoredVersion,
    every_version,
)

__all__ = [
    "NAMESPACE_NAMES",
    "RECEIPT_KIND",
    "Garbage",
    "PurgeReceipt",
    "Purger",
    "RemovedVersion",
    "Selection",
    "Selector",
    "Target",
    "selection",
    "shreddable",
]

_ROUNDS = 4
"""Listings one target's sweep makes at most before it gives up (objects kept appearing)."""
_PARALLEL = 256
"""Requests sent in one `Parallel` (the driver keeps 16 in flight)."""


Garbage = Callable[[], Steps[GcReport]]
"""Returns a dry-run garbage collection: which blobs nothing references any more."""


class Purger:
    """The purge engine: tombstones, sweeps and receipts, as steps."""

    def __init__(
        self,
        layout: Layout,
        codec: Codec,
        logs: Callable[[str], LogSteps],
        heads: Callable[[str], CompareAndSwap],
        garbage: Garbage,
        *,
        has_index: bool,
        encryption: Encryption | None = None,
        erasure_key: bytes | None = None,
        beyond_reach: str = "",
    ) -> None:
        self.layout = layout
        """Where the stash's objects live."""
        self.codec = codec
        """Decodes what is erased, for the blobs it references."""
        self.logs = logs
        """Makes the log steps of a log namespace (with the stash's settings)."""
        self.heads = heads
        """Makes the compare-and-swap steps of a head namespace."""
        self.garbage = garbage
        """Judges which blobs nothing references any more (old enough to go)."""
        self.has_index = has_index
        """Whether the stash has a run index whose items a run's purge deletes."""
        self.receipts = logs(PURGES)
        """The receipts' logs."""
        self.lives = Lives(layout, codec, logs)
        """Which objects belong to the lives a purge ended (the lives rule)."""
        self.encryption = encryption
        """The stash's encryption (its tenants' master keys, for a shred), if any."""
        self.unreadable_receipts: list[str] = []
        """Receipts the last `maintain` could not read (purge id and error kind): skipped."""
        self.erasure_key = erasure_key
        """The secret receipts are sealed and checked with (`receipt_seal`); None: none."""
        self.beyond_reach = beyond_reach
        """What the object store keeps beyond a purge's reach, said in every receipt."""
        self.unsealed_receipts: list[str] = []
        """Receipts the last `maintain` did not obey: their seal does not verify (planted,
        tampered, or unsealed), or an open shred that waits for the operator."""

    # -- choosing what to purge -----------------------------------------------------------

    # -- running a purge ------------------------------------------------------------------

    def _sources(self) -> IdSources:
        return IdSources(self.layout, self.heads, self.logs)

    def purge(
        self, chosen: Selection, *, actor: str, reusable: bool, dry_run: bool
    ) -> Steps[PurgeReceipt]:
        """Erase what `chosen` selects (see `run`); return the receipt."""
        targets = list(chosen.targets)
        cutoff = None
        if chosen.prefix is not None:
            if chosen.older_than is not None:
                cutoff = (yield from ask(Now())) - chosen.older_than
            targets = yield from chosen_ids(
                self._sources(), chosen.prefix, chosen.namespaces, cutoff
            )
            # Copies under the prefix go too, whatever their age, even of sources gone.
            copies = [
                d for n in chosen.namespaces for d in derived_namespaces(n)
                if d not in chosen.namespaces
            ]  # fmt: skip
            if copies:
                targets += yield from chosen_ids(self._sources(), chosen.prefix, copies, None)
        targets = with_derived(targets)
        return (
            yield from self.run(
                targets, purge_id=f"purge-{(yield from ask(NewId()))}", actor=actor,
                selector=chosen.asked,
                reusable=reusable, dry_run=dry_run, cutoff=cutoff,
            )
        )  # fmt: skip

    def hold(self, chosen: Selection, *, on: bool) -> Steps[int]:
        """Set (or clear) an Object Lock legal hold on every version `chosen` owns.

        Returns how many versions it was set on. `ConfigurationError` on a bucket without
        Object Lock (a legal hold needs it).
        """
        lock = yield from ask(GetObjectLock())
        if lock is None or not lock.enabled:
            raise ConfigurationError(
                "legal holds need a bucket with S3 Object Lock (enabled when the bucket is "
                "created: the template's ObjectLockMode parameter)"
            )
        targets = list(chosen.targets)
        if chosen.prefix is not None:
            sources = self._sources()
            targets = yield from chosen_ids(sources, chosen.prefix, chosen.namespaces, None)
        versions: list[StoredVersion] = []
        for target in targets:
            for prefix, exact in self._prefixes(target):
                versions += [
                    v for v in (yield from self._versions(prefix, exact)) if not v.is_delete_marker
                ]
        for start in range(0, len(versions), _PARALLEL):
            batch = versions[start : start + _PARALLEL]
            yield from ask(Parallel(tuple(SetLegalHold(v.key, v.version_id, on) for v in batch)))
        return len(versions)

    def run(
        self,
        targets: list[Target],
        *,
        purge_id: str,
        actor: str,
        selector: dict[str, Any],
        reusable: bool,
        dry_run: bool,
        cutoff: datetime | None = None,
    ) -> Steps[PurgeReceipt]:
        """Purge `targets`; return the receipt (a dry run writes nothing and plans).

        `cutoff` (a retention purge): each id is erased only if, when its tombstone is
        written, it was last written before it; one saved since it was chosen is spared.
        """
        now = yield from ask(Now())
        planned = yield from self._plan(targets, now, listing=dry_run)
        if dry_run:
            return PurgeReceipt(
                purge_id, "dry_run", actor, now, None, selector, targets,
                [RemovedVersion(v.key, v.version_id, v.size) for v in planned],
                reusable=reusable,
            )  # fmt: skip
        state = ReceiptState(
            purge_id, actor, now.isoformat(), selector,
            [[t.namespace, t.object_id] for t in targets], reusable,
            cutoff=None if cutoff is None else cutoff.isoformat(),
            beyond_reach=self.beyond_reach,
        )  # fmt: skip
        if self.erasure_key is not None:
            state.seal = receipt_seal.seal(self.erasure_key, state.document())
        head = yield from self.receipts.append(
            purge_id, [], after=None, state=state.document(), kind=RECEIPT_KIND
        )
        yield from self._carry_on(head, state)
        return (yield from self.receipt(purge_id))

    def _plan(
        self, targets: list[Target], now: datetime, *, listing: bool
    ) -> Steps[list[StoredVersion]]:
        """Return every version `targets` own when `listing` or under Object Lock, else none.

        Under Object Lock the whole purge is refused if one is kept by a retention or a
        legal hold.
        """
        lock = yield from ask(GetObjectLock())
        locked = lock is not None and lock.enabled
        planned: list[StoredVersion] = []
        if not (listing or locked):
            return planned
        for target in targets:
            for prefix, exact in self._prefixes(target):
                planned += yield from self._versions(prefix, exact)
        if locked:
            yield from self._refuse_locked(planned, now)
        return planned

    def resume(self, purge_id: str, *, confirm_shred: bool = False) -> Steps[PurgeReceipt]:
        """Carry an open purge on from its receipt's last state; return the receipt.

        The operator's own request: an unsealed receipt is carried on where no erasure key
        is set; one whose seal does not verify is `InvalidPayload` (never obeyed); a shred
        needs `confirm_shred`.
        """
        head = yield from self.receipts.head(purge_id)
        state = ReceiptState.parse(head.state, purge_id)
        if state.status != "complete":
            self._check_obeyable(state, explicit=True, confirm_shred=confirm_shred)
            yield from self._carry_on(head, state)
        return (yield from self.receipt(purge_id))

    def _check_obeyable(self, state: ReceiptState, *, explicit: bool, confirm_shred: bool) -> None:
        """Raise unless maintenance may carry this receipt on (`receipt_seal`)."""
        name = state.purge_id
        if self.erasure_key is not None:
            if not receipt_seal.verifies(self.erasure_key, state.document()):
                raise InvalidPayload(
                    "this receipt's seal does not verify under the stash's erasure key "
                    "(planted, tampered, or written without the key): it is not obeyed",
                    object_name=name,
                )
        elif state.seal is not None:
            raise ConfigurationError(
                "this receipt is sealed: open the stash with its erasure key "
                f"(erasure_key, or {receipt_seal.ENVIRONMENT}) to carry it on",
                object_name=name,
            )
        elif not explicit:
            raise ConfigurationError(
                "no erasure key is set, so receipts are unsealed: gc obeys none; resume it "
                "yourself (stashpoint purge --resume)",
                object_name=name,
            )
        shreds = [t for t in state.target_list() if NAMESPACES[t.namespace].shape is Shape.KEYS]
        if shreds and not (explicit and confirm_shred):
            raise ConfigurationError(
                f"this receipt shreds tenant {shreds[0].object_id!r}: carry it on only with "
                "the operator's confirmation (resume_purges(confirm_shred=True), stashpoint "
                "purge --resume --confirm-shred)",
                object_name=name,
            )

    def resume_open(
        self, idle: timedelta, *, confirm_shred: bool = False
    ) -> Steps[list[PurgeReceipt]]:
        """Resume every open purge whose receipt last moved at least `idle` ago.

        The operator's own request (see `resume`): receipts it may not obey are skipped
        (`unsealed_receipts` says which).
        """
        done, _, _ = yield from self.maintain(
            idle, leftovers=False, explicit=True, confirm_shred=confirm_shred
        )
        return done

    def maintain(
        self,
        idle: timedelta,
        *,
        leftovers: bool = True,
        explicit: bool = False,
        confirm_shred: bool = False,
    ) -> Steps[tuple[list[PurgeReceipt], list[str], int]]:
        """Finish the open purges idle for `idle` and sweep leftovers (what `gc` does).

        Leftovers are what a writer that never saw a finished purge left beside its ids'
        logs (a stale LangGraph put's large values, a seal racing the purge's last
        listing): they are removed and recorded in that purge's receipt. Returns the
        purges finished, those still open, and how many leftover versions went.
        """
        now = yield from ask(Now())
        finished: list[PurgeReceipt] = []
        still_open: list[str] = []
        swept = 0
        self.unreadable_receipts = []
        self.unsealed_receipts = []
        for purge_id in (yield from self.receipts.list_ids()):
            try:
                head = yield from self.receipts.head(purge_id)
                state = ReceiptState.parse(head.state, purge_id)
            except StashpointError as exc:
                # Damaged, planted, or written by a newer version: never obeyed, never
                # fatal to the collection; said in the report.
                self.unreadable_receipts.append(f"{purge_id}: {exc.kind.value}")
                continue
            if state.status != "complete":
                if now - head.written_at < idle:
                    still_open.append(purge_id)
                    continue
                try:
                    self._check_obeyable(state, explicit=explicit, confirm_shred=confirm_shred)
                except StashpointError:
                    self.unsealed_receipts.append(purge_id)
                    still_open.append(purge_id)
                    continue
                try:
                    finished.append((yield from self._resume_checked(head, state)))
                except ConfigurationError:
                    still_open.append(purge_id)  # a shred whose keys this stash lacks
            elif leftovers:
                if not receipt_seal.verifies(self.erasure_key, state.document()):
                    # Its targets are not to be trusted: a planted "finished" receipt
                    # would have gc sweep beside any id.
                    self.unsealed_receipts.append(purge_id)
                    continue
                swept += yield from self._sweep_leftovers(ReceiptLog(self.receipts, head, state))
        return finished, still_open, swept

    def _resume_checked(self, head: LogHead, state: ReceiptState) -> Steps[PurgeReceipt]:
        yield from self._carry_on(head, state)
        return (yield from self.receipt(state.purge_id))

    def open_purges(self) -> Steps[list[str]]:
        """Return the purges whose receipt is still open."""
        _, still_open, _ = yield from self.maintain(timedelta.max, leftovers=False)
        return still_open

    def _sweep_leftovers(self, receipt: ReceiptLog) -> Steps[int]:
        """Remove what landed beside a finished purge's logs, of the purged lives only.

        The lives rule: a purge owns a log's versions up to its tombstone; a reusable id's
        later lives (entries above the tombstone, their segments and packs, their large
        values) are never touched. A reusable purge whose tombstone cannot be placed (a
        receipt written before receipts recorded it, on a log that has moved on) sweeps
        nothing of that log.
        """
        state = receipt.state
        doomed: list[StoredVersion] = []
        guarded: dict[str, str] = {}
        for index, target in enumerate(state.target_list()):
            if NAMESPACES[target.namespace].shape is not Shape.LOGS:
                continue  # a head's tombstone keeps its one key: nothing lands beside it
            if str(target) in state.spared:
                continue  # a retention purge left it whole: it is not this purge's
            logs = self.logs(target.namespace)
            tombstone = state.ends.get(str(index))
            if tombstone is None and state.reusable:
                tombstone = yield from self.lives.own_tombstone(
                    logs, target.object_id, state.purge_id
                )
                if tombstone is None:
                    continue
            later = LifeBounds(tombstone, state.reusable)
            entries = logs.keys.entries_prefix(target.object_id)
            for prefix, exact in self._prefixes(target):
                if prefix != entries:  # entries keep their markers; appends are refused
                    listed = yield from self._versions(prefix, exact)
                    doomed += yield from self.lives.of_this_life(target, prefix, listed, later)
            guarded.update(later.guarded)
        if doomed:
            yield from receipt.intend(doomed)
            yield from delete_versions(doomed, guarded)
        return len(doomed)

    def receipt(self, purge_id: str) -> Steps[PurgeReceipt]:
        """Read a purge's receipt (every version it removed, from its log's records)."""
        entries = yield from self.receipts.entries(purge_id)
        state = ReceiptState.parse(entries[-1].state, purge_id)
        try:
            removed = [
                RemovedVersion(str(r["key"]), str(r["version_id"]), int(r["bytes"]))
                for entry in entries
                for r in entry.records
            ]
        except (KeyError, TypeError, ValueError):
            raise InvalidPayload(
                "a receipt's record is not a removed version", object_name=purge_id
            ) from None
        return PurgeReceipt(
            purge_id=state.purge_id,
            status=state.status,
            actor=state.actor,
            started_at=datetime.fromisoformat(state.started_at),
            finished_at=None
            if state.finished_at is None
            else datetime.fromisoformat(state.finished_at),
            selector=state.selector,
            targets=state.target_list(),
            removed=removed,
            index_items=state.index_items,
            blobs=state.blobs,
            kept_blobs=state.kept_blobs,
            kept=state.kept,
            verified=state.verified,
            reusable=state.reusable,
            unreadable=state.unreadable,
            shredded=state.shredded,
            spared=state.spared,
            keyless=state.keyless,
            beyond_reach=state.beyond_reach,
        )

    def _carry_on(self, head: LogHead, state: ReceiptState) -> Steps[None]:
        receipt = ReceiptLog(self.receipts, head, state)
        for index, target in enumerate(state.target_list()):
            if index in state.swept:
                continue
            yield from self._erase(target, receipt, index)
            state.swept.append(index)  # written with the next entry
        if state.candidates:
            yield from self._drop_blobs(receipt)
        now = yield from ask(Now())
        state.status, state.verified, state.finished_at = "complete", True, now.isoformat()
        yield from receipt.write([])
        tracing.event("purged", targets=len(state.targets))

    # -- one target -----------------------------------------------------------------------

    def _erase(self, target: Target, receipt: ReceiptLog, index: int) -> Steps[None]:
        namespace = NAMESPACES[target.namespace]
        if namespace.shape is Shape.HEADS:
            yield from self._erase_head(target, receipt)
        elif namespace.shape is Shape.KEYS:
            yield from self._shred(target, receipt)
        elif namespace.owned:
            yield from self._erase_owned(target, receipt)
        else:
            yield from self._erase_log(target, receipt, index)

    def _erase_log(self, target: Target, receipt: ReceiptLog, index: int) -> Steps[None]:
        state = receipt.state
        logs = self.logs(target.namespace)
        go_on, tombstone = yield from self._end_log(target, receipt, index)
        if not go_on:
            return
        later = LifeBounds(tombstone, state.reusable)
        sweep = LogSweep(
            tombstone,
            (yield from logs.marker_ceiling(target.object_id)),
            logs.keys.entries_prefix(target.object_id),
        )
        for _ in range(_ROUNDS):
            found = Found()
            for prefix, exact in self._prefixes(target):
                listed = yield from self._versions(prefix, exact)
                for version in (yield from self.lives.of_this_life(target, prefix, listed, later)):
                    sweep.sort(found, version, prefix)
            yield from self._read_unsure(target, sweep, found)
            if not found.doomed and not found.vacate:
                state.kept += found.kept
                if self.has_index:
                    yield from self._drop_index(target, receipt)
                return
            yield from self._clear(target, receipt, sweep, found, later)
        raise _unfinished(target)

    def _clear(
        self, target: Target, receipt: ReceiptLog, sweep: LogSweep, found: Found, later: LifeBounds
    ) -> Steps[None]:
        """Write the intent, vacate the entries found whole, then delete what was doomed."""
        logs = self.logs(target.namespace)
        if NAMESPACES[target.namespace].references_blobs:
            yield from self._collect_references(found.doomed, receipt.state)
        if found.doomed:
            yield from receipt.intend(found.doomed)
        if found.vacate:
            # Markers first: a version's content is deleted only once it is no longer
            # the key's current version, and a key found free is occupied again.
            written = yield from logs.vacate(
                target.object_id, found.vacate, reason="purged", by=sweep.tombstone or 0
            )
            sweep.ours.update(etag for etag in written if etag)
        if found.doomed:
            yield from delete_versions(found.doomed, later.guarded)

    def _end_log(
        self, target: Target, receipt: ReceiptLog, index: int
    ) -> Steps[tuple[bool, int | None]]:
        """End the log with the purge's tombstone (once).

        Returns whether its sweep goes on, and the tombstone's version (None: the log was
        never written).
        """
        state = receipt.state
        logs = self.logs(target.namespace)
        tombstone = state.ends.get(str(index))
        if tombstone is None and state.reusable:
            # A crash after the tombstone and before the receipt said so: a new life may
            # have started on it since, which ending the log again would erase.
            tombstone = yield from self.lives.own_tombstone(logs, target.object_id, state.purge_id)
        if tombstone is None:
            try:
                ended = yield from logs.end_for_purge(
                    target.object_id, state.purge_id, reusable=state.reusable,
                    written_before=state.cutoff_time(),
                )  # fmt: skip
            except KeyShredded:
                yield from self._erase_keyless(target, receipt)
                return False, None
            if ended is not None and ended.purge_id is None:
                state.spared.append(str(target))  # saved since it was chosen: not old enough
                return False, None
            tombstone = None if ended is None else ended.version
        if tombstone is not None:
            state.ends[str(index)] = tombstone
        return True, tombstone

    def _read_unsure(self, target: Target, sweep: LogSweep, found: Found) -> Steps[None]:
        """Read each small object kept below the tombstone: kept only once read as a marker.

        One planted under the id (whatever its size) is replaced like an entry.
        """
        logs = self.logs(target.namespace)
        unsure = found.unsure
        for start in range(0, len(unsure), _PARALLEL):
            batch = unsure[start : start + _PARALLEL]
            infos = yield from ask(
                Parallel(tuple(GetObject(v.key, v.version_id) for _, v in batch))
            )
            for (number, version), info in zip(batch, infos, strict=True):
                if info is None:
                    continue
                if (yield from logs.holds_marker(target.object_id, number, info)):
                    sweep.ours.add(info.etag)
                    continue
                found.kept -= 1
                found.vacate.append((number, info.etag))
                if version.version_id != UNVERSIONED:
                    found.doomed.append(version)

    def _shred(self, target: Target, receipt: ReceiptLog) -> Steps[None]:
        """Retire a tenant's master key, then erase every version of its data keys.

        The master key goes first: from then on no data key of the tenant unwraps, even
        one a crash left behind (a resumed shred erases it). Data-key ids are random and
        never reused, so their keys may be freed.
        """
        state = receipt.state
        prefix = self.layout.key(DATA_KEYS, f"{target.object_id}/")
        shred_mark = self.layout.key(DATA_KEYS, f"{target.object_id}.shredded")
        if not state.shredded:  # once the key is retired, erasing needs no key settings
            masters = yield from self._masters(
                shreddable(self.encryption, target.object_id), prefix
            )
            # The mark first: a process about to make a data key for the tenant reads it.
            mark = {"format": "stashpoint.shredded/1", "tenant": target.object_id,
                    "purge_id": state.purge_id}  # fmt: skip
            body = yield from self.codec.document_encoding(mark, name=target.object_id)
            yield from writes.create_named(
                PutObject(shred_mark, body, Create()),
                self._shred_mark_judge(target.object_id, shred_mark),
                DEFAULT_RETRY,
                what="shred mark",
                limit=self.codec.limits.max_compressed_bytes,
                refresh=False,
            )
            for master in sorted(masters):
                state.shredded.append((yield from ask(ShredMasterKey(master))))
            yield from receipt.write([])
        for _ in range(_ROUNDS):
            doomed = yield from self._versions(prefix, False)
            if not doomed:
                return
            yield from receipt.intend(doomed)
            yield from delete_versions(doomed)
        raise _unfinished(target)

    def _shred_mark_judge(self, tenant: str, key: str) -> writes.Judge:
        """Return the judge of an object found where a tenant's shred mark goes.

        Any shred's mark of the tenant is as good as ours (the tenant is shredded either
        way); anything else is replaced.
        """

        def judge(found: ObjectInfo) -> Steps[writes.Found]:
            try:
                document = jsontext.parse(self.codec.unwrap(found.body or b"", name=key))
            except (StashpointError, ValueError):
                return writes.Found.OTHER
            if (
                isinstance(document, dict)
                and str(document.get("format", "")).startswith("stashpoint.shredded/")
                and document.get("tenant") == tenant
            ):
                return writes.Found.SAME
            return writes.Found.OTHER
            yield  # a generator, like every judge

        return judge

    def _masters(self, rule: KeyRule, prefix: str) -> Steps[set[str]]:
        """Return the master keys a tenant's data keys (under `prefix`) are wrapped with."""
        if not rule.key.startswith("alias/"):
            return {rule.key}
        masters: set[str] = set()  # KMS deletes a key by its id, not an alias
        for version in (yield from self._versions(prefix, False)):
            if version.is_latest and not version.is_delete_marker:
                masters.add((yield from self._master_of(version)) or rule.key)
        return masters or {rule.key}

    def _master_of(self, version: StoredVersion) -> Steps[str | None]:
        info = yield from ask(GetObject(version.key, version.version_id))
        if info is None or info.body is None:
            return None
        try:
            return read_record(self.codec, info.body, version.key).master
        except StashpointError:
            return None

    def _erase_head(self, target: Target, receipt: ReceiptLog) -> Steps[None]:
        cas = self.heads(target.namespace)
        for _ in range(_ROUNDS):
            versions = yield from self._versions(cas.key(target.object_id), True)
            if not versions and not _derived(target):
                return  # nothing was ever stored under it
            latest = next((v for v in versions if v.is_latest), None)
            step = yield from self._end_head(target, receipt, latest)
            if step == "done":
                return
            if step == "again":
                continue
            doomed = [v for v in versions if v is not latest]
            if not doomed:
                receipt.state.kept += 1
                return
            yield from self._collect_references(doomed, receipt.state)
            yield from receipt.intend(doomed)
            yield from delete_versions(doomed)
        raise _unfinished(target)

    def _end_head(
        self, target: Target, receipt: ReceiptLog, latest: StoredVersion | None
    ) -> Steps[Literal["sweep", "again", "done"]]:
        """Make sure a head's current version is the purge's tombstone.

        "sweep": it is, erase the versions below it; "again": one was written just now
        (list again); "done": nothing more to do (spared, or erased keyless).
        """
        state = receipt.state
        try:
            tombstone = (
                latest is not None
                and not latest.is_delete_marker
                and (yield from self._is_tombstone(target, latest))
            )
            if tombstone:
                return "sweep"
            # A tombstone first (again, if a writer got in since): the key stays occupied.
            # A derived head (a store catalog) gets one even where none is stored yet, so a
            # copy made before its source was erased can never be written after: it is
            # always reusable (rebuilt from what stays) and never spared by its age.
            derived = _derived(target)
            ended = yield from self.heads(target.namespace).end_for_purge(
                target.object_id, state.purge_id, reusable=state.reusable or derived,
                written_before=None if derived else state.cutoff_time(),
            )  # fmt: skip
        except KeyShredded:  # no tombstone can be read or sealed for a shredded tenant
            yield from self._erase_keyless(target, receipt)
            return "done"
        if not ended:
            state.spared.append(str(target))  # saved since it was chosen
            return "done"
        return "again"

    def _erase_keyless(self, target: Target, receipt: ReceiptLog) -> Steps[None]:
        """Erase every version of an id whose tenant was shredded, reading none of them.

        Its objects cannot be read, nor a tombstone sealed for it: none is needed, since
        the tenant's shred mark already refuses every write sealed for the tenant, so its
        keys stay occupied by nothing a reader could open. Recorded in `keyless`.
        """
        state = receipt.state
        if str(target) not in state.keyless:
            state.keyless.append(str(target))
        for _ in range(_ROUNDS):
            doomed: list[StoredVersion] = []
            for prefix, exact in self._prefixes(target):
                doomed += yield from self._versions(prefix, exact)
            if not doomed:
                if self.has_index:
                    yield from self._drop_index(target, receipt)
                return
            yield from receipt.intend(doomed)
            yield from delete_versions(doomed)
        raise _unfinished(target)

    def _erase_owned(self, target: Target, receipt: ReceiptLog) -> Steps[None]:
        """Erase every stored version of an owner's values (a content namespace).

        Values are immutable and named by their content: there is nothing to end first, so
        the receipt names each version before it is deleted. A retention purge (its
        cutoff) spares the whole owner if a value was written since the cutoff, as a log
        written since is spared: whole owners, never half. A value stored after the purge
        (a workflow still running) is new data of its owner, kept.
        """
        state = receipt.state
        cutoff = state.cutoff_time()
        for _ in range(_ROUNDS):
            doomed: list[StoredVersion] = []
            for prefix, exact in self._prefixes(target):
                doomed += yield from self._versions(prefix, exact)
            if not doomed:
                return
            if cutoff is not None and any(
                v.last_modified is None or v.last_modified >= cutoff
                for v in doomed
                if not v.is_delete_marker
            ):
                state.spared.append(str(target))
                return
            yield from receipt.intend(doomed)
            yield from delete_versions(doomed)
        raise _unfinished(target)

    def _is_tombstone(self, target: Target, version: StoredVersion) -> Steps[bool]:
        facts = yield from self.heads(target.namespace).read_head(version.key, version.version_id)
        return facts is not None and facts.purge is not None

    def _prefixes(self, target: Target) -> Iterator[tuple[str, bool]]:
        """Yield the key prefixes (or, `exact`, the key) of everything `target` owns."""
        namespace = NAMESPACES[target.namespace]
        if namespace.shape is Shape.HEADS:
            yield self.heads(target.namespace).key(target.object_id), True
            return
        if namespace.shape is Shape.KEYS:
            yield self.layout.key(DATA_KEYS, f"{target.object_id}/"), False
            return
        if namespace.owned:
            yield self.layout.key(target.namespace, f"{target.object_id}/"), False
            return
        keys = self.logs(target.namespace).keys
        entries = keys.entries_prefix(target.object_id)
        yield entries, False
        yield keys.segments_prefix(target.object_id), False
        below_prefix = entries[len(self.layout.prefix) + 1 :] if self.layout.prefix else entries
        yield self.layout.namespace_prefix(QUARANTINE) + below_prefix, False
        if namespace.values is not None:
            yield self.layout.key(namespace.values, target.object_id) + "/", False
        # What the queryable archive derived from the log (`stashpoint.projection`), then
        # the compacted files of its tenant that may hold its rows (`stashpoint.compaction`;
        # after the log's own files: a compactor that read them finds them gone and erases
        # what it wrote).
        yield self.layout.key(PROJECTION, f"{target.namespace}/{target.object_id}/"), False
        yield self.layout.compacted_prefix(target.namespace, target.object_id), False

    def _versions(self, prefix: str, exact: bool) -> Steps[list[StoredVersion]]:
        """Return every stored version under `prefix` (`exact`: of that key alone)."""
        return (yield from every_version(prefix, exact=exact))

    def _refuse_locked(self, versions: list[StoredVersion], now: datetime) -> Steps[None]:
        live = [v for v in versions if not v.is_delete_marker]
        locked: list[_Lock | None] = []
        for start in range(0, len(live), _PARALLEL):
            batch = live[start : start + _PARALLEL]
            infos = yield from ask(Parallel(tuple(HeadObject(v.key, v.version_id) for v in batch)))
            locked += [_lock_of(v, info, now) for v, info in zip(batch, infos, strict=True) if info]
        kept = [lock for lock in locked if lock is not None]
        if kept:
            raise RetentionLocked(kept)

    def _collect_references(self, doomed: list[StoredVersion], state: ReceiptState) -> Steps[None]:
        """Note the blobs the doomed versions reference, before they are gone."""
        live = [v for v in doomed if not v.is_delete_marker]
        found: set[str] = set(state.candidates)
        for start in range(0, len(live), _PARALLEL):
            batch = live[start : start + _PARALLEL]
            infos = yield from ask(Parallel(tuple(GetObject(v.key, v.version_id) for v in batch)))
            for version, info in zip(batch, infos, strict=True):
                if info is None or info.body is None:
                    continue
                try:
                    # Any stashpoint object (an envelope, an entry, a segment): its JSON.
                    document = jsontext.parse(self.codec.unwrap(info.body, name=version.key))
                except (StashpointError, ValueError):
                    state.unreadable.append(version.key)
                    continue
                references(document, found)
        state.candidates = sorted(found)

    def _drop_index(self, target: Target, receipt: ReceiptLog) -> Steps[None]:
        """Delete the index items that name the id (an erased id leaves the index too).

        A run's item and its attempts', or an execution's due item.
        """
        if target.namespace == RUN_LOGS:
            pk = run_pk(target.object_id)
        elif target.namespace == DURABLE_EXECUTIONS:
            pk = execution_due_pk(self.layout.prefix, target.object_id)
        else:
            return
        for _ in range(_ROUNDS):
            items = yield from ask(GetPartition(pk))
            if not items:
                return
            yield from ask(Parallel(tuple(DeleteItem(str(i["pk"]), str(i["sk"])) for i in items)))
            receipt.state.index_items += len(items)

    def _drop_blobs(self, receipt: ReceiptLog) -> Steps[None]:
        state = receipt.state
        report = yield from self.garbage()
        unreferenced = set() if report.unreadable else set(report.unreferenced)
        doomed: list[StoredVersion] = []
        gone: list[str] = []
        kept: list[str] = []
        for digest in state.candidates:
            if digest in state.blobs:
                continue
            if digest not in unreferenced:
                kept.append(digest)
                continue
            key = self.layout.key(BLOBS, digest)
            doomed += yield from self._versions(key, True)
            gone.append(digest)
        state.blobs = sorted({*state.blobs, *gone})
        state.kept_blobs = sorted(set(kept) - set(state.blobs))
        yield from receipt.intend(doomed)
        yield from delete_versions(doomed)


def _derived(target: Target) -> bool:
    """Whether `target` is a derived head (a copy of other heads, `Namespace.derived_from`)."""
    return NAMESPACES[target.namespace].derived_from is not None


def shreddable(encryption: Encryption | None, tenant: str) -> KeyRule:
    """Return the rule of a tenant that may be shredded; `ConfigurationError` if none.

    Refused when another tenant's rule names the same master key: shredding it would
    make that tenant unreadable too.
    """
    if encryption is None:
        raise ConfigurationError(
            "this stash is not encrypted: there is no tenant key to shred (open it with "
            "its encryption settings)"
        )
    rule = encryption.tenant(tenant)
    if rule.catch_all:
        raise ConfigurationError(
            f"tenant {tenant!r} is the catch-all rule, whose key seals erasure receipts, "
            "probes and every id no other tenant claims: shredding it would block every "
            "purge; give the ids to erase a tenant of their own",
            object_name=tenant,
        )
    sharing = [r.tenant for r in encryption.rules if r.key == rule.key and r is not rule]
    if sharing:
        raise ConfigurationError(
            f"tenant {tenant!r} shares its master key with {', '.join(sharing)}: shredding "
            "it would erase them too; give each tenant a key of its own",
            object_name=tenant,
        )
    return rule


_Lock = tuple[str, str, datetime | None, bool]
"""A version kept from deletion: key, version id, retained until, under legal hold."""


def _lock_of(version: StoredVersion, info: ObjectInfo, now: datetime) -> _Lock | None:
    """Return what keeps `version` from deletion now, if anything."""
    retained = info.retain_until is not None and info.retain_until > now
    if not (retained or info.legal_hold):
        return None
    return (
        version.key,
        version.version_id,
        info.retain_until if retained else None,
        info.legal_hold,
    )


def _unfinished(target: Target) -> StorageUnavailable:
    return StorageUnavailable(
        f"purge of {target} did not finish: objects kept appearing under it; resume it "
        "(`stashpoint purge --resume`)",
        object_name=str(target),
    )
