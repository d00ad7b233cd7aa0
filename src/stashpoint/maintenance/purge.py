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

from collections.abc import Callable, Iterator, Mapping
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

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
from stashpoint.logs.format import parse_entry_name
from stashpoint.logs.log import LogHead, LogSteps
from stashpoint.maintenance import receipt_seal
from stashpoint.maintenance.garbage import GcReport, references
from stashpoint.maintenance.lives import LifeBounds, Lives
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
)
from stashpoint.stores.objects import (
    MAX_DELETE_BATCH,
    Create,
    DeleteObject,
    DeleteVersions,
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
_UNVERSIONED = "null"
"""The version id of an object written without versioning: overwriting it replaces it."""
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
        lock = yield from ask(GetObjectLock())
        if dry_run or (lock is not None and lock.enabled):
            planned: list[StoredVersion] = []
            for target in targets:
                for prefix, exact in self._prefixes(target):
                    planned += yield from self._versions(prefix, exact)
            if lock is not None and lock.enabled:
                yield from self._refuse_locked(planned, now)
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
            yield from self._delete(doomed, guarded)
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
        state = receipt.state
        namespace = NAMESPACES[target.namespace]
        if namespace.shape is Shape.HEADS:
            yield from self._erase_head(target, receipt)
            return
        if namespace.shape is Shape.KEYS:
            yield from self._shred(target, receipt)
            return
        if namespace.owned:
            yield from self._erase_owned(target, receipt)
            return
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
                return
            if ended is not None and ended.purge_id is None:
                state.spared.append(str(target))  # saved since it was chosen: not old enough
                return
            tombstone = None if ended is None else ended.version
        if tombstone is not None:
            state.ends[str(index)] = tombstone
        later = LifeBounds(tombstone, state.reusable)
        ceiling = yield from logs.marker_ceiling(target.object_id)
        entries = logs.keys.entries_prefix(target.object_id)
        ours: set[str] = set()  # markers this purge wrote: known to hold no payload
        for _ in range(_ROUNDS):
            doomed: list[StoredVersion] = []
            vacate: list[tuple[int, str | None]] = []
            unsure: list[tuple[int, StoredVersion]] = []
            kept = 0
            for prefix, exact in self._prefixes(target):
                listed = yield from self._versions(prefix, exact)
                for version in (yield from self.lives.of_this_life(target, prefix, listed, later)):
                    verdict, number = (
                        _judge_entry(version, prefix, tombstone, ceiling)
                        if prefix == entries
                        else (_Verdict.DELETE, None)
                    )
                    if verdict is _Verdict.KEEP:
                        if number != tombstone and version.etag not in ours and number is not None:
                            unsure.append((number, version))
                        kept += 1
                        continue
                    if verdict is _Verdict.VACATE and number is not None:
                        vacate.append((number, version.etag))
                        if version.version_id == _UNVERSIONED:
                            continue  # its marker overwrites it: deleting it would free the key
                    doomed.append(version)
            # A small object is kept only once read as a marker: one planted under the id
            # (whatever its size) is replaced like an entry.
            for start in range(0, len(unsure), _PARALLEL):
                batch = unsure[start : start + _PARALLEL]
                infos = yield from ask(
                    Parallel(tuple(GetObject(v.key, v.version_id) for _, v in batch))
                )
                for (number, version), info in zip(batch, infos, strict=True):
                    if info is None:
                        continue
                    if (yield from logs.holds_marker(target.object_id, number, info)):
                        ours.add(info.etag)
                        continue
                    kept -= 1
                    vacate.append((number, info.etag))
                    if version.version_id != _UNVERSIONED:
                        doomed.append(version)
            if not doomed and not vacate:
                state.kept += kept
                if self.has_index:
                    yield from self._drop_index(target, receipt)
                return
            if namespace.references_blobs:
                yield from self._collect_references(doomed, state)
            if doomed:
                yield from receipt.intend(doomed)
            if vacate:
                # Markers first: a version's content is deleted only once it is no longer
                # the key's current version, and a key found free is occupied again.
                written = yield from logs.vacate(
                    target.object_id, vacate, reason="purged", by=tombstone or 0
                )
                ours.update(etag for etag in written if etag)
            if doomed:
                yield from self._delete(doomed, later.guarded)
        raise _unfinished(target)

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
            rule = shreddable(self.encryption, target.object_id)
            masters = {rule.key}
            if rule.key.startswith("alias/"):  # KMS deletes a key by its id, not an alias
                masters = set()
                for version in (yield from self._versions(prefix, False)):
                    if version.is_latest and not version.is_delete_marker:
                        masters.add((yield from self._master_of(version)) or rule.key)
                masters = masters or {rule.key}
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
            yield from self._delete(doomed)
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

    def _master_of(self, version: StoredVersion) -> Steps[str | None]:
        info = yield from ask(GetObject(version.key, version.version_id))
        if info is None or info.body is None:
            return None
        try:
            return read_record(self.codec, info.body, version.key).master
        except StashpointError:
            return None

    def _erase_head(self, target: Target, receipt: ReceiptLog) -> Steps[None]:
        state = receipt.state
        cas = self.heads(target.namespace)
        key = cas.key(target.object_id)
        for _ in range(_ROUNDS):
            versions = yield from self._versions(key, True)
            if not versions:
                return  # nothing was ever stored under it
            latest = next((v for v in versions if v.is_latest), None)
            try:
                tombstone = (
                    latest is not None
                    and not latest.is_delete_marker
                    and (yield from self._is_tombstone(target, latest))
                )
            except KeyShredded:
                yield from self._erase_keyless(target, receipt)
                return
            if not tombstone:
                # A tombstone first (again, if a writer got in since): the key stays occupied.
                try:
                    ended = yield from cas.end_for_purge(
                        target.object_id, state.purge_id, reusable=state.reusable,
                        written_before=state.cutoff_time(),
                    )  # fmt: skip
                except KeyShredded:  # no tombstone can be sealed for a shredded tenant
                    yield from self._erase_keyless(target, receipt)
                    return
                if not ended:
                    state.spared.append(str(target))  # saved since it was chosen
                    return
                continue
            doomed = [v for v in versions if v is not latest]
            if not doomed:
                state.kept += 1
                return
            yield from self._collect_references(doomed, state)
            yield from receipt.intend(doomed)
            yield from self._delete(doomed)
        raise _unfinished(target)

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
            yield from self._delete(doomed)
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
            yield from self._delete(doomed)
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
        # What the queryable archive derived from the log (`stashpoint.projection`).
        yield self.layout.key(PROJECTION, f"{target.namespace}/{target.object_id}/"), False

    def _versions(self, prefix: str, exact: bool) -> Steps[list[StoredVersion]]:
        """Return every stored version under `prefix` (`exact`: of that key alone)."""
        return (yield from every_version(prefix, exact=exact))

    def _refuse_locked(self, versions: list[StoredVersion], now: datetime) -> Steps[None]:
        live = [v for v in versions if not v.is_delete_marker]
        locked: list[tuple[str, str, datetime | None, bool]] = []
        for start in range(0, len(live), _PARALLEL):
            batch = live[start : start + _PARALLEL]
            infos = yield from ask(Parallel(tuple(HeadObject(v.key, v.version_id) for v in batch)))
            for version, info in zip(batch, infos, strict=True):
                if info is None:
                    continue
                retained = info.retain_until is not None and info.retain_until > now
                if retained or info.legal_hold:
                    until = info.retain_until if retained else None
                    locked.append((version.key, version.version_id, until, info.legal_hold))
        if locked:
            raise RetentionLocked(locked)

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

    def _delete(
        self, doomed: list[StoredVersion], guarded: Mapping[str, str] | None = None
    ) -> Steps[None]:
        """Delete `doomed`; an unversioned key in `guarded` only while it has that ETag.

        A guarded key that another writer replaced since it was judged stays: the next
        listing judges it again.
        """
        guarded = guarded or {}
        conditional = [
            (DeleteObject(v.key, guarded[v.key]), writes.judged_read_back(v.key, guarded[v.key]))
            for v in doomed
            if v.version_id == _UNVERSIONED and v.key in guarded
        ]
        doomed = [v for v in doomed if not (v.version_id == _UNVERSIONED and v.key in guarded)]
        yield from writes.delete_all(conditional, DEFAULT_RETRY, what="large value delete")
        # A key's older versions go before its current one, so a store that keeps the
        # current version as a copy (the local folder) never promotes an old one.
        ordered = sorted(doomed, key=lambda v: (v.key, v.is_latest))
        batches = [
            DeleteVersions(tuple((v.key, v.version_id) for v in ordered[i : i + MAX_DELETE_BATCH]))
            for i in range(0, len(ordered), MAX_DELETE_BATCH)
        ]
        for start in range(0, len(batches), 16):
            results = yield from ask(Parallel(tuple(batches[start : start + 16])))
            failures = [failure for result in results for failure in result]
            if failures:
                denied = [f for f in failures if f.code == "AccessDenied"]
                if denied:
                    raise RetentionLocked([(f.key, f.version_id, None, False) for f in denied])
                raise StorageUnavailable(
                    f"storage did not delete {len(failures)} version(s) ({failures[0].code}); "
                    "resume the purge",
                    object_name=failures[0].key,
                )

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
        yield from self._delete(doomed)


class _Verdict(Enum):
    KEEP = "keep"
    VACATE = "vacate"
    DELETE = "delete"


def _judge_entry(
    version: StoredVersion, prefix: str, tombstone: int | None, ceiling: int
) -> tuple[_Verdict, int | None]:
    """Judge one listed version under a log's entries; return it with the log version.

    Kept: the tombstone, and the current marker of each version below it (a small object:
    ids alone). A current entry below the tombstone that may be whole is vacated (a marker
    is written over it) and its content deleted. Everything else goes: older versions,
    delete markers (the key is then occupied again), anything above the tombstone or not
    named like an entry (planted). The version is returned for a key that stays occupied.
    """
    try:
        number = parse_entry_name(version.key[len(prefix) :], version.key)
    except StashpointError:
        return _Verdict.DELETE, None
    if tombstone is None or number > tombstone:
        return _Verdict.DELETE, None
    if not version.is_latest or version.is_delete_marker:
        return _Verdict.DELETE, None
    if number == tombstone or version.size <= ceiling:
        return _Verdict.KEEP, number
    return _Verdict.VACATE, number


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


def _unfinished(target: Target) -> StorageUnavailable:
    return StorageUnavailable(
        f"purge of {target} did not finish: objects kept appearing under it; resume it "
        "(`stashpoint purge --resume`)",
        object_name=str(target),
    )
