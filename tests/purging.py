"""What purge tests look at: every stored version of a stash, its bytes decompressed."""

from __future__ import annotations

from typing import Any

import zstandard

from stashpoint.stores.objects import GetObject, ListVersionPage, StoredVersion


def versions(stash: Any, prefix: str = "") -> list[StoredVersion]:
    """Every stored version (delete markers included) under the stash's `prefix`."""
    base = stash.layout.prefix + "/" if stash.layout.prefix else ""
    found: list[StoredVersion] = []
    marker = None
    while True:
        page = stash.driver(ListVersionPage(base + prefix, marker))
        found += page.versions
        marker = page.next_marker
        if marker is None:
            return found


def plain(body: bytes) -> bytes:
    """A stored body as bytes a search can read (zstd frames decompressed)."""
    try:
        return zstandard.ZstdDecompressor().decompress(body, max_output_size=1 << 26)
    except zstandard.ZstdError:
        return body


def holding(stash: Any, needle: str, prefix: str = "") -> list[str]:
    """The `key@version` of every stored version whose bytes contain `needle`."""
    found = []
    for version in versions(stash, prefix):
        if version.is_delete_marker:
            continue
        info = stash.driver(GetObject(version.key, version.version_id))
        if info is not None and info.body is not None and needle.encode() in plain(info.body):
            found.append(f"{version.key}@{version.version_id}")
    return found


def pairs(found: list[StoredVersion]) -> set[tuple[str, str]]:
    """(key, version id) of each version."""
    return {(v.key, v.version_id) for v in found}
