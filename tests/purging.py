"""What purge tests look at: every stored version of a stash, its bytes decompressed."""

from __future__ import annotations

from typing import Any

import zstandard

from stashpoint.steps import Parallel, Steps, ask, run_sync
from stashpoint.stores.objects import GetObject, ListVersionPage, PutObject, StoredVersion
from tests.contract.drivers import BlockingFacade


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


def bodies(stash: Any, found: list[StoredVersion]) -> list[tuple[StoredVersion, Any]]:
    """Read every version (64 at a time), each with what a GET returned."""
    live = [v for v in found if not v.is_delete_marker]

    def read() -> Steps[list[Any]]:
        infos: list[Any] = []
        for start in range(0, len(live), 64):
            batch = live[start : start + 64]
            infos += yield from ask(Parallel(tuple(GetObject(v.key, v.version_id) for v in batch)))
        return infos

    if isinstance(stash, BlockingFacade):  # the async driver: one request at a time
        return [(v, stash.driver(GetObject(v.key, v.version_id))) for v in live]
    return list(zip(live, run_sync(read(), stash.driver), strict=True))


def holding(stash: Any, needle: str | tuple[str, ...], prefix: str = "") -> list[str]:
    """The `key@version` of every stored version whose bytes contain `needle` (any one)."""
    needles = [n.encode() for n in ((needle,) if isinstance(needle, str) else needle)]
    return [
        f"{version.key}@{version.version_id}"
        for version, info in bodies(stash, versions(stash, prefix))
        if info is not None
        and info.body is not None
        and any(n in plain(info.body) for n in needles)
    ]


def pairs(found: list[StoredVersion]) -> set[tuple[str, str]]:
    """(key, version id) of each version."""
    return {(v.key, v.version_id) for v in found}


def log(stash: Any, log_id: str, text: str, turns: int) -> Any:
    """Append `turns` versions to `log_id` (records and state say `text` and the turn)."""
    head = None
    for turn in range(turns):
        head = stash.logs.append(
            log_id, [{"message": f"{text} {turn}"}], after=head, state={"last": f"{text} {turn}"}
        )
    return head


def replay(source: Any, target: Any) -> int:
    """Write every stored version of `source` onto `target`, each key's oldest first.

    The same keys (under the target's prefix) and bytes, in the order they were written:
    a transcript written turn by turn on a memory stash, stored on a real server in a few
    parallel rounds instead of one round trip per turn. Returns how many were written.
    """
    by_key: dict[str, list[StoredVersion]] = {}
    for version in versions(source):
        if not version.is_delete_marker:
            by_key.setdefault(version.key, []).append(version)
    base = target.layout.prefix + "/" if target.layout.prefix else ""
    rounds: list[list[PutObject]] = []
    for key, found in by_key.items():
        for depth, (_, info) in enumerate(bodies(source, list(reversed(found)))):
            while len(rounds) <= depth:
                rounds.append([])
            rounds[depth].append(PutObject(base + key, info.body, None))

    def put_all() -> Steps[int]:
        sent = 0
        for puts in rounds:  # every key's first version, then every second one, ...
            for start in range(0, len(puts), 256):
                yield from ask(Parallel(tuple(puts[start : start + 256])))
                sent += len(puts[start : start + 256])
        return sent

    return run_sync(put_all(), target.driver)
