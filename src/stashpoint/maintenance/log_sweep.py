"""A log's sweep in a purge: how each version listed under an ended log is judged.

Below the tombstone a log keeps one small marker per version (ids alone, no payload), so a
key is never freed; everything else the purge lists under the log goes. `LogSweep.sort`
puts each listed version of the ended life in one of a `Found`'s lists: kept, vacated (a
marker written over it first) or deleted; a small object kept is read before it is trusted
as a marker (`Found.unsure`).

Pure: no requests.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from stashpoint.errors import StashpointError
from stashpoint.logs.format import parse_entry_name
from stashpoint.maintenance.deletion import UNVERSIONED
from stashpoint.stores.objects import StoredVersion

__all__ = ["Found", "LogSweep", "Verdict", "judge_entry"]


class Verdict(Enum):
    """What becomes of one version listed under an ended log."""

    KEEP = "keep"
    VACATE = "vacate"
    DELETE = "delete"


@dataclass
class Found:
    """What one listing of a log's sweep found, sorted by what becomes of it."""

    doomed: list[StoredVersion] = field(default_factory=list)
    """Versions to delete."""
    vacate: list[tuple[int, str | None]] = field(default_factory=list)
    """Entries (version, ETag) a marker is written over before their content goes."""
    unsure: list[tuple[int, StoredVersion]] = field(default_factory=list)
    """Small objects kept below the tombstone, to read before they are trusted as markers."""
    kept: int = 0
    """Versions kept (the tombstone and the markers)."""


@dataclass
class LogSweep:
    """One log's sweep: its tombstone, the marker size bound and the markers it wrote."""

    tombstone: int | None
    """The version the purge ended the log at (None: the log was never written)."""
    ceiling: int
    """Largest size a marker can have: a bigger object below the tombstone is an entry."""
    entries: str
    """The key prefix of the log's entries."""
    ours: set[str] = field(default_factory=set)
    """ETags of markers this purge wrote: known to hold no payload."""

    def sort(self, found: Found, version: StoredVersion, prefix: str) -> None:
        """Add a listed version of this life to what `found` keeps, vacates or deletes."""
        verdict, number = (
            judge_entry(version, prefix, self.tombstone, self.ceiling)
            if prefix == self.entries
            else (Verdict.DELETE, None)
        )
        if verdict is Verdict.KEEP:
            if number != self.tombstone and version.etag not in self.ours and number is not None:
                found.unsure.append((number, version))
            found.kept += 1
            return
        if verdict is Verdict.VACATE and number is not None:
            found.vacate.append((number, version.etag))
            if version.version_id == UNVERSIONED:
                return  # its marker overwrites it: deleting it would free the key
        found.doomed.append(version)


def judge_entry(
    version: StoredVersion, prefix: str, tombstone: int | None, ceiling: int
) -> tuple[Verdict, int | None]:
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
        return Verdict.DELETE, None
    if tombstone is None or number > tombstone:
        return Verdict.DELETE, None
    if not version.is_latest or version.is_delete_marker:
        return Verdict.DELETE, None
    if number == tombstone or version.size <= ceiling:
        return Verdict.KEEP, number
    return Verdict.VACATE, number
