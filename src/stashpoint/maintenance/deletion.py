"""Deleting stored versions for good: what every erasing step of the maintenance wing ends with.

A purge, a shred and the sweep of leftovers all hand their doomed versions here. Two rules
keep an acknowledged write safe while keys are freed:

- an unversioned key judged while it held one ETag is deleted only while it still holds it
  (a conditional DELETE): a writer that replaced it since keeps its write, and the next
  listing judges it again;
- a key's older versions go before its current one, so a store that keeps the current
  version as a copy (the local folder) never promotes an old one.

Free of I/O, like every step.
"""

from __future__ import annotations

from collections.abc import Mapping

from stashpoint.errors import RetentionLocked, StorageUnavailable
from stashpoint.retry import DEFAULT_RETRY
from stashpoint.steps import Parallel, Steps, ask
from stashpoint.stores import writes
from stashpoint.stores.objects import (
    MAX_DELETE_BATCH,
    DeleteFailure,
    DeleteObject,
    DeleteVersions,
    StoredVersion,
)

__all__ = ["UNVERSIONED", "delete_versions"]

UNVERSIONED = "null"
"""The version id of an object written without versioning: overwriting it replaces it."""
_IN_FLIGHT = 16
"""Batch deletes sent in one `Parallel`."""


def delete_versions(
    doomed: list[StoredVersion], guarded: Mapping[str, str] | None = None
) -> Steps[None]:
    """Delete `doomed`; an unversioned key in `guarded` only while it has that ETag.

    A version that storage refused to delete raises: `RetentionLocked` when it was
    access denied (Object Lock), else `StorageUnavailable` (resume the purge).
    """
    guarded = guarded or {}
    plain = yield from _delete_guarded(doomed, guarded)
    ordered = sorted(plain, key=lambda v: (v.key, v.is_latest))
    batches = [
        DeleteVersions(tuple((v.key, v.version_id) for v in ordered[i : i + MAX_DELETE_BATCH]))
        for i in range(0, len(ordered), MAX_DELETE_BATCH)
    ]
    for start in range(0, len(batches), _IN_FLIGHT):
        results = yield from ask(Parallel(tuple(batches[start : start + _IN_FLIGHT])))
        _raise_failures([failure for result in results for failure in result])


def _delete_guarded(
    doomed: list[StoredVersion], guarded: Mapping[str, str]
) -> Steps[list[StoredVersion]]:
    """Delete the guarded unversioned keys of `doomed` conditionally; return the others."""
    conditional: list[tuple[DeleteObject, writes.ReadBack]] = []
    plain: list[StoredVersion] = []
    for version in doomed:
        etag = guarded.get(version.key) if version.version_id == UNVERSIONED else None
        if etag is None:
            plain.append(version)
        else:
            conditional.append(
                (DeleteObject(version.key, etag), writes.judged_read_back(version.key, etag))
            )
    yield from writes.delete_all(conditional, DEFAULT_RETRY, what="large value delete")
    return plain


def _raise_failures(failures: list[DeleteFailure]) -> None:
    if not failures:
        return
    denied = [f for f in failures if f.code == "AccessDenied"]
    if denied:
        raise RetentionLocked([(f.key, f.version_id, None, False) for f in denied])
    raise StorageUnavailable(
        f"storage did not delete {len(failures)} version(s) ({failures[0].code}); resume the purge",
        object_name=failures[0].key,
    )
