"""A stash's maintenance half, `stash.admin`: erase, hold, collect, repair, probe, rotate.

What operators and retention jobs call, apart from what applications call: `purge` (with
receipts, `purge_receipt`, `resume_purges`), `legal_hold`, `collect_garbage`, `repair_log`,
`doctor`, `conformance`, `rotate_keys` and `decrypt`. `Admin` is the blocking view
(`stash.admin`), `AsyncAdmin` the asyncio twin (`async_stash.admin`); both run on the
stash's client and clock, through its hooks. The work itself lives in
`stashpoint.maintenance` (purge, selection, receipts, gc, doctor) and the stash's parts; this
module only checks the arguments and hands them on.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Protocol, Unpack

from stashpoint.errors import ConfigurationError, InvalidArgument, KeyShredded, described
from stashpoint.progress import OnProgress, silent
from stashpoint.steps import Steps
from stashpoint.twins import Awaiting, Blocking, operation

if TYPE_CHECKING:  # maintenance and encryption load on first use (Lambda cold starts)
    from stashpoint._backends.conformance import Conformance
    from stashpoint.encryption import Rotation, Sealer
    from stashpoint.logs.repair import LogRepair
    from stashpoint.maintenance.doctor import Check
    from stashpoint.maintenance.garbage import GcReport
    from stashpoint.maintenance.purge import Purger, PurgeReceipt, Selector

__all__ = ["Admin", "AsyncAdmin", "StashParts"]


class StashParts(Protocol):
    """What the maintenance operations need of a stash's parts (its composition)."""

    sealer: Sealer | None
    """The encryption's logic (None: objects are stored plain)."""

    def gc(
        self, dry_run: bool, min_age: timedelta, history: bool, on_progress: OnProgress, pack: bool
    ) -> Steps[GcReport]:
        """Finish the purges a crash left open, then collect garbage."""
        ...

    def purger(self, blob_min_age: timedelta = ...) -> Purger:
        """Return the purge logic, with this stash's settings."""
        ...

    def actor(self) -> str:
        """Who the caller is, for receipts."""
        ...

    def repair_log(self, namespace: str, log_id: str, dry_run: bool) -> Steps[LogRepair]:
        """Quarantine the objects above a log's first gap."""
        ...

    def doctor(self) -> Steps[list[Check]]:
        """Probe storage and index."""
        ...

    def conformance(self) -> Callable[[], Conformance] | None:
        """Return the S3 conformance kit's run (None: not an S3 stash)."""
        ...


class _AdminApi:
    """The maintenance operations, defined once; see `Admin`."""

    def __init__(self, parts: StashParts, driver: Callable[[Any], Any]) -> None:
        self._parts = parts
        self.driver = driver
        """Runs this view's requests: the stash's own driver (its client, clock and hooks)."""

    @operation
    def collect_garbage(
        self,
        *,
        dry_run: bool = True,
        min_age: timedelta = timedelta(hours=1),
        history: bool = False,
        on_progress: OnProgress = silent,
        pack: bool = False,
    ) -> Steps[GcReport]:
        """Find (and unless `dry_run`, delete) blobs no checkpoint or run head references.

        With `history`, a blob any older revision references stays too (every revision is
        read). Nothing is deleted while some head cannot be decoded (`GcReport.unreadable`).
        `on_progress` is told how far each phase has come (`stashpoint.progress`). With
        `pack`, every log's old sealed segments are packed into archive objects of 1,024
        versions and its sealed entries vacated (`LogStore.pack`, docs/logs.md).
        """
        return self._parts.gc(dry_run, min_age, history, on_progress, pack)

    @operation
    def repair_log(self, namespace: str, log_id: str, *, dry_run: bool = True) -> Steps[LogRepair]:
        """Move the objects above a log's first gap to quarantine, so the log reads again.

        For a log (or run, or LangGraph thread) whose reads stop at a missing version below
        objects planted or left by another tool; see `stashpoint.logs.repair`. With
        `dry_run` (the default) only reports. `namespace`: the log namespace the error
        names (`agents`, `conversations`, `run-logs`, `logs`, `langgraph`).
        """
        return self._parts.repair_log(namespace, log_id, dry_run)

    @operation
    def purge(
        self,
        *,
        reusable: bool = False,
        dry_run: bool = False,
        actor: str | None = None,
        blob_min_age: timedelta = timedelta(hours=1),
        **selector: Unpack[Selector],
    ) -> Steps[PurgeReceipt]:
        """Erase for good every stored version of one id, or of every id a prefix selects.

        What (`stashpoint.maintenance.purge.Selector`): one of `checkpoint`, `agent` (an agent
        checkpoint), `run`, `thread` (a LangGraph thread), `conversation` (its namespace
        and id), `log` (of `stash.logs`), or a `prefix` of ids (in every namespace, or in
        `namespace`: `checkpoints`, `agents`, `conversations`, `runs`, `threads`, `logs`,
        `durable-executions`),
        with `older_than` to take only ids last written longer ago (a retention policy).
        An empty prefix needs `all_of_namespace=True`.

        Every version, delete marker, log entry, sealed segment, large value, index item
        and the blobs only it referenced are removed; a tombstone and one payload-free
        marker per log version stay, so the ids cannot be written again unnoticed (writes
        get `Purged`; with `reusable`, a create starts the id afresh). Returns the erasure
        receipt (`PurgeReceipt`), also stored under `purges/`: what was removed, by whom
        (`actor`, default: the caller's STS identity or `user@host`), verified by a
        listing. `dry_run` lists the plan and writes nothing. A blob only it referenced
        that is younger than `blob_min_age` stays (a writer may be about to reference the
        same content; `gc` takes it later). `tenant=NAME, shred=True` crypto-shreds an
        encryption tenant instead: its master key is retired (KMS deletion scheduled, or
        removed from the keyring) and its data keys erased, so every object sealed for it
        is unreadable (`KeyShredded`), locked or not. Raises `RetentionLocked`, naming
        every version Object Lock keeps, before erasing anything; a crash leaves an open
        purge that `resume_purges` (or `gc`) finishes.
        """
        from stashpoint.maintenance.purge import selection, shreddable

        chosen = selection(**selector)
        tenant = selector.get("tenant") if selector.get("shred") else None
        sealer = self._parts.sealer
        if tenant is not None:
            shreddable(None if sealer is None else sealer.encryption, str(tenant))
        if actor is not None and (not isinstance(actor, str) or not 0 < len(actor) <= 512):
            raise InvalidArgument(
                f"actor must be a str of 1-512 characters, not {described(actor)}"
            )
        if not isinstance(blob_min_age, timedelta):
            raise InvalidArgument(
                f"blob_min_age must be a timedelta, not {described(blob_min_age)}"
            )
        receipt = yield from self._parts.purger(blob_min_age).purge(
            chosen, actor=actor or self._parts.actor(), reusable=reusable, dry_run=dry_run
        )
        if tenant is not None and sealer is not None and not dry_run:
            sealer.forget(str(tenant))  # nothing more sealed with its keys here
        return receipt

    @operation
    def purge_receipt(self, purge_id: str) -> Steps[PurgeReceipt]:
        """Return the erasure receipt of a purge (`PurgeReceipt.purge_id`)."""
        return self._parts.purger().receipt(purge_id)

    @operation
    def resume_purges(
        self, *, idle: timedelta = timedelta(0), confirm_shred: bool = False
    ) -> Steps[list[PurgeReceipt]]:
        """Finish every purge a crash left open (its receipt idle for at least `idle`).

        Only receipts this stash may obey (`stashpoint.maintenance.receipt_seal`): sealed
        under its erasure key, or, where none is set, unsealed ones; a shred only with
        `confirm_shred`. Others are left open (`gc` reports them).
        """
        if not isinstance(confirm_shred, bool):
            raise InvalidArgument(f"confirm_shred must be a bool, not {described(confirm_shred)}")
        return self._parts.purger().resume_open(idle, confirm_shred=confirm_shred)

    @operation
    def legal_hold(self, on: bool, **selector: Unpack[Selector]) -> Steps[int]:
        """Set (`on`) or clear an S3 Object Lock legal hold on every version of an id.

        The same selection as `purge` (`stashpoint.maintenance.purge.Selector`). A held
        version cannot be deleted until the hold is cleared, so a purge of it is refused
        (`RetentionLocked`). Returns how many versions were held or released.
        `ConfigurationError` without Object Lock.
        """
        from stashpoint.maintenance.purge import selection

        return self._parts.purger().hold(selection(**selector), on=on)

    @operation
    def doctor(self) -> Steps[list[Check]]:
        """Probe storage and index; see `stashpoint.maintenance.doctor`. Leaves nothing behind."""
        return self._parts.doctor()

    def conformance(self) -> Conformance:
        """Probe what the bucket's S3 really does (`stashpoint doctor --conformance`).

        Conditional writes and their races, conditional delete, versioning, listing order,
        `StartAfter`, read-after-write, multipart, ETags: every probe writes under
        `{prefix}/.doctor/` and everything is removed after. S3 only (`ConfigurationError`
        elsewhere). Returns the report, with the closest known provider profile. Blocking
        on both twins (the kit drives a client of its own).
        """
        run = self._parts.conformance()
        if run is None:
            raise ConfigurationError("the conformance kit probes S3 endpoints: open an s3:// stash")
        return run()

    @operation
    def rotate_keys(self, tenant: str | None = None) -> Steps[list[Rotation]]:
        """Give each tenant's master key (or `tenant`'s) new material; re-wrap its data keys.

        No data object is rewritten: each names its data key, and only the data-key objects
        (a few per tenant) are written again. KMS keys also get yearly rotation enabled.
        `ConfigurationError` on a stash without encryption.
        """
        from stashpoint.encryption import Rotation

        sealer = self._parts.sealer
        if sealer is None:
            raise ConfigurationError("this stash is not encrypted: there are no keys to rotate")
        if tenant is not None and not isinstance(tenant, str):
            raise InvalidArgument(f"tenant must be a str, not {described(tenant)}")
        tenants = [tenant] if tenant else [r.tenant for r in sealer.encryption.rules]
        done: list[Rotation] = []
        for name in tenants:
            sealer.encryption.tenant(name)
            try:
                what, rewrapped = yield from sealer.rotating(name)
            except KeyShredded:
                if tenant is not None:
                    raise
                what, rewrapped = "shredded: nothing to rotate", 0  # the others go on
            done.append(Rotation(name, what, rewrapped))
        return done

    @operation
    def decrypt(self, body: bytes, *, key: str | None = None) -> Steps[bytes]:
        """Return the stored bytes (a zstd frame of JSON) an encrypted object holds.

        For an object copied out of the bucket (`stashpoint decrypt --file`): `key` is the
        object key it was read from (default: the one its header names, under this
        stash's prefix); the frame must have been sealed for that key.
        """
        sealer = self._parts.sealer
        if sealer is None:
            raise ConfigurationError(
                "open the stash with the encryption settings the object was written with"
            )
        if not isinstance(body, bytes):
            raise InvalidArgument(f"body must be bytes, not {described(body)}")
        if key is not None and not isinstance(key, str):
            raise InvalidArgument(f"key must be an object key (a str), not {described(key)}")
        return (yield from sealer.decrypting(body, key))


class Admin(Blocking, _AdminApi):
    """A stash's maintenance operations (`stash.admin`): purge, holds, gc, repair, doctor, keys."""


class AsyncAdmin(Awaiting, _AdminApi):
    """The asyncio twin of `Admin` (`async_stash.admin`)."""
