"""Temporal's large payloads in the stash: an External Storage driver.

Temporal keeps workflow inputs, results and activity arguments in its history, and moves
those over a size threshold to external storage through a `StorageDriver`, keeping a small
claim in the history (`temporalio.converter.ExternalStorage`, experimental in temporalio
1.35). `StashStorageDriver(stash)` is that driver on a stash: each payload one object of
namespace `temporal-payloads`, named `{owner}/{sha256}` (the owner: a hash of the
workflow's namespace and id, or the activity's, so no name leaks into keys), created only
if absent and judged by its content (the one named-values engine, `stores.named_values`:
a retried store finds its own copy, a planted object is refused), read back checked
against the hash its claim names, sealed with the tenant's key on an encrypted stash, and
under Object Lock where the bucket has it. A purge erases a workflow's payloads with a
receipt (`stash.admin.purge(values=("temporal-payloads", workflow_owner(namespace, id)))`, or a
prefix of owners, `--older-than` for retention); `erase(namespace, workflow_id)` deletes
them without one.

Needs `temporalio` (`stashpoint[temporal]`); imported only by this module.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    StorageDriver,
    StorageDriverActivityInfo,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)

from stashpoint.errors import InvalidArgument, InvalidId, InvalidPayload, LimitExceeded, described
from stashpoint.ids import validate_id
from stashpoint.steps import Steps
from stashpoint.stores.layout import TEMPORAL_PAYLOADS
from stashpoint.stores.named_values import NamedValues

if TYPE_CHECKING:
    from stashpoint.stash import AsyncStash, Stash

T = TypeVar("T")

PAYLOAD_FORMAT = "stashpoint.temporal-payload"
"""The stored document's format (`zstd -d | jq` shows the target, metadata and data)."""
DEFAULT_MAX_PAYLOAD = 50 * 1024 * 1024
"""Largest serialized payload stored (Temporal's S3 driver's default)."""

Target = StorageDriverWorkflowInfo | StorageDriverActivityInfo | None


def _hash(*parts: str | None) -> str:
    return hashlib.blake2b("\0".join(p or "" for p in parts).encode(), digest_size=16).hexdigest()


def workflow_owner(namespace: str, workflow_id: str) -> str:
    """Return the owner a workflow's payloads are kept under (`erase` takes it apart)."""
    return "w" + _hash(namespace, workflow_id)


def default_owner(target: Target) -> str:
    """Return the owner of a payload stored for `target`: its workflow, activity or none."""
    if isinstance(target, StorageDriverWorkflowInfo):
        return workflow_owner(target.namespace, target.id or "")
    if isinstance(target, StorageDriverActivityInfo):
        return "a" + _hash(target.namespace, target.id, target.run_id)
    return "n" + _hash(None)


def _document(payload: Payload, target: Target) -> dict[str, Any]:
    """Return the stored form of a payload: its metadata, its data as text when UTF-8."""
    described_target: dict[str, Any] | None = None
    if target is not None:
        kind = "workflow" if isinstance(target, StorageDriverWorkflowInfo) else "activity"
        described_target = {
            "kind": kind,
            "namespace": target.namespace,
            "id": target.id,
            "type": target.type,
            "run_id": target.run_id,
        }
    metadata = {k: base64.b64encode(v).decode("ascii") for k, v in payload.metadata.items()}
    document: dict[str, Any] = {"target": described_target, "metadata": metadata}
    try:
        document["text"] = payload.data.decode("utf-8")  # JSON payloads: readable, compact
    except UnicodeDecodeError:
        document["base64"] = base64.b64encode(payload.data).decode("ascii")
    return document


def _payload(document: dict[str, Any]) -> Payload | None:
    """Rebuild a payload from its stored form (None: not a payload's form)."""
    metadata, text, coded = document.get("metadata"), document.get("text"), document.get("base64")
    if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
        return None
    try:
        data = text.encode("utf-8") if isinstance(text, str) else base64.b64decode(coded or "")
        return Payload(
            metadata={k: base64.b64decode(v, validate=True) for k, v in metadata.items()},
            data=data,
        )
    except (ValueError, TypeError):
        return None


def _digest(payload: Payload) -> str:
    # Deterministic serialization (map entries sorted): the same payload, the same hash.
    return hashlib.sha256(payload.SerializeToString(deterministic=True)).hexdigest()


def _holding(digest: str) -> Callable[[dict[str, Any]], bool]:
    def holds(document: dict[str, Any]) -> bool:
        payload = _payload(document)
        return payload is not None and _digest(payload) == digest

    return holds


class StashStorageDriver(StorageDriver):
    """Temporal's `StorageDriver` keeping payloads in a stash.

    `ExternalStorage(drivers=[StashStorageDriver(stash)])` in the client's and the worker's
    `DataConverter`. `stash` is a `Stash` (its calls run on a worker thread) or an
    `AsyncStash`. `name` is the driver's name in claims (keep it stable: claims in histories
    name it); `owner(target)` names what a payload is kept under (a hash of its workflow by
    default); payloads larger than `max_payload_size` bytes are refused.
    """

    def __init__(
        self,
        stash: Stash | AsyncStash,
        *,
        name: str = "stashpoint",
        owner: Callable[[Target], str] = default_owner,
        max_payload_size: int = DEFAULT_MAX_PAYLOAD,
    ) -> None:
        from stashpoint.stash import AsyncStash, Stash

        if not isinstance(stash, Stash | AsyncStash):
            raise InvalidArgument(f"stash must be an opened stash, not {described(stash)}")
        if type(max_payload_size) is not int or max_payload_size <= 0:
            raise InvalidArgument(
                f"max_payload_size must be an int > 0, not {described(max_payload_size)}"
            )
        if not isinstance(name, str) or not name:
            raise InvalidArgument(f"name must be a non-empty str, not {described(name)}")
        self.stash = stash
        """Where the payloads are kept."""
        self.owner = owner
        """Names what a payload is kept under, from its target."""
        self.max_payload_size = max_payload_size
        """Largest serialized payload stored, in bytes."""
        self._name = name
        self._values = NamedValues(
            stash.layout,
            stash.codec,
            TEMPORAL_PAYLOADS,
            PAYLOAD_FORMAT,
            stash.retry,
        )

    def name(self) -> str:
        """Return the driver's name, as claims name it."""
        return self._name

    def type(self) -> str:
        """Return the driver's type (the same for every instance)."""
        return "stashpoint"

    async def _run(self, steps: Steps[T]) -> T:
        from stashpoint.stash import awaited

        return await awaited(self.stash, steps)

    def _owner_of(self, target: Target) -> str:
        owner = self.owner(target)
        try:
            # An id, as a purge names it (`stash.admin.purge(values=("temporal-payloads", owner))`).
            return validate_id(owner, what="owner(target)")
        except InvalidId:
            raise InvalidArgument(
                f"owner(target) must return 1-255 characters of [A-Za-z0-9._:-], "
                f"not {described(owner)}"
            ) from None

    async def store(
        self, context: StorageDriverStoreContext, payloads: Sequence[Payload]
    ) -> list[StorageDriverClaim]:
        """Store each payload (created only if absent); return a claim for each."""
        owner = self._owner_of(context.target)

        async def one(payload: Payload) -> StorageDriverClaim:
            size = payload.ByteSize()
            if size > self.max_payload_size:
                raise LimitExceeded(
                    f"a payload of {size} bytes is over max_payload_size ({self.max_payload_size})"
                )
            digest = _digest(payload)
            name = f"{owner}/{digest}"
            document = _document(payload, context.target)
            await self._run(
                self._values.store(name, document, _holding(digest), what="Temporal payload")
            )
            return StorageDriverClaim({"name": name, "sha256": digest, "bytes": str(size)})

        return list(await asyncio.gather(*(one(p) for p in payloads)))

    async def retrieve(
        self, context: StorageDriverRetrieveContext, claims: Sequence[StorageDriverClaim]
    ) -> list[Payload]:
        """Return the payload of each claim, checked against the hash it names."""

        async def one(claim: StorageDriverClaim) -> Payload:
            name, digest = claim.claim_data.get("name"), claim.claim_data.get("sha256")
            if not isinstance(name, str) or not isinstance(digest, str):
                raise InvalidPayload("a Temporal payload claim is malformed")
            document = await self._run(
                self._values.fetch(name, _holding(digest), what="Temporal payload")
            )
            payload = _payload(document)
            assert payload is not None  # `holds` rebuilt it already
            return payload

        return list(await asyncio.gather(*(one(c) for c in claims)))

    async def erase(self, namespace: str, workflow_id: str) -> int:
        """Delete every stored version of a workflow's payloads; return how many.

        No receipt: `stash.admin.purge(values=("temporal-payloads", workflow_owner(namespace,
        workflow_id)))` erases the same with one, and refuses what Object Lock retains.
        For retention or a person's erasure, once the workflow's history is gone (or its
        claims are no longer read). Payloads stored for its activities are kept under the
        activities' owners: pass an `owner` that names the workflow for them too.
        """
        if not isinstance(namespace, str) or not isinstance(workflow_id, str) or not workflow_id:
            raise InvalidArgument("namespace and workflow_id must be str, workflow_id non-empty")
        return await self._run(self._values.erase(f"{workflow_owner(namespace, workflow_id)}/"))


__all__ = ["StashStorageDriver", "default_owner", "workflow_owner"]
