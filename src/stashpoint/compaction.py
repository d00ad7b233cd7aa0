"""The archive's compacted files: a tenant's small projected files rewritten into large ones.

A projection writes one small file per log per run (`stashpoint.projection`): right for
erasure and reruns, slow for engines that open every file. `compact` rewrites the small
files of one tenant of one source namespace into files of up to `TARGET_BYTES`, under
`projection/_compacted/{namespace}/{tenant}/`, and the Iceberg table (`stashpoint.iceberg`)
registers a compacted file instead of the small files it covers. The small files stay: they
are the projection's own record of what it has projected.

- **Each row once.** A compacted file's *covers* (`{name}.covers.json`, written first)
  names the small files it holds, each with the identity the listing gave it (ETag, else
  size and time). A compacted file counts only while every file it covers is there with
  that identity, and none is counted by an earlier one (by name); the table's files are
  the counted compacted files and every small file none of them covers (`table_files`).
  Anything else under the folder (a stale, damaged or planted file) is erased by the next
  compaction or publish.
- **Erasure reaches it.** A purge of a log erases its tenant's compacted files after the
  log's own projected files (`Layout.compacted_prefix`, `maintenance.purge`), and so does
  a projection run that erases a deleted log's files: the next compaction writes the other
  logs' rows again. A compactor that read a file a purge then erased finds it gone when it
  checks its covers after writing, and erases what it wrote; one whose write lands after
  the purge's erasure is the one that checks. Erasing one tenant's rows rewrites only that
  tenant's compacted files.
- **Create-only, named by what they cover** (a hash of the covers): two compactors of the
  same files write the same names, and one creates them (`writes.create_named`).

Needs the `archive` extra (pyarrow). Encrypted stashes are not compacted (their projected
files are sealed per log's tenant, and only stashpoint reads them).
"""

from __future__ import annotations

import hashlib
import io
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from stashpoint.errors import InvalidArgument
from stashpoint.projection import (
    FILE_READ_LIMIT,
    SOURCES,
    arrow_schema,
    check_namespaces,
    conformed,
    described_by,
    erase_for_good,
    parse_file_name,
)
from stashpoint.steps import Parallel, Steps, ask, run_sync
from stashpoint.stores import writes
from stashpoint.stores.layout import COMPACTED, CONVERSATIONS, PROJECTION, log_tenant
from stashpoint.stores.objects import (
    Create,
    GetObject,
    KeyPage,
    ObjectInfo,
    PutObject,
    every_key_page,
)

if TYPE_CHECKING:
    from stashpoint.stash import Stash

__all__ = ["TARGET_BYTES", "CompactionReport", "compact", "table_files"]

FORMAT = "stashpoint.compacted/1"
"""The format of a compacted file's covers."""
TARGET_BYTES = 128 << 20
"""The size a compacted file is filled to, counted in the small files' bytes (Athena and
DuckDB read files of 128 MB and more best)."""
MIN_FILES = 8
"""Small files of one tenant left uncovered before `compact` rewrites them."""
_COVERS = ".covers.json"
_PARQUET = ".parquet"
_COVERS_LIMIT = 64 << 20
"""Largest covers read back (a name and an identity per small file)."""
_FETCH = 32
"""Small files read at once."""


@dataclass(frozen=True, slots=True)
class SmallFile:
    """A projected file as the listing shows it."""

    key: str
    namespace: str
    tenant: str
    identity: str
    """Its ETag, else its size and time: what says it is the file a compacted file holds."""
    size: int


@dataclass(frozen=True, slots=True)
class Compacted:
    """A compacted file and the small files it covers (from its covers)."""

    key: str
    covers_key: str
    covers: tuple[tuple[str, str], ...]
    """`(key, identity)` of each small file it holds."""


@dataclass
class CompactionReport:
    """What one `compact` did."""

    written: list[str] = field(default_factory=list)
    """Keys of the compacted files written (or found written by another compactor)."""
    covered: int = 0
    """Small files the written files hold."""
    erased: list[str] = field(default_factory=list)
    """Keys under the compacted folder erased: stale (a file they covered is gone or
    changed), covered twice, damaged or planted, or written while a purge took a file."""


@dataclass
class _Listing:
    """The small files and what the compacted folder holds, as listed."""

    small: dict[str, SmallFile] = field(default_factory=dict)
    parquet: set[str] = field(default_factory=set)
    covers: set[str] = field(default_factory=set)
    other: list[str] = field(default_factory=list)


def _identity(page: KeyPage, index: int) -> str:
    if page.etags is not None and page.etags[index]:
        return f"etag:{page.etags[index]}"
    size = None if page.sizes is None else page.sizes[index]
    when = None if page.modified is None else page.modified[index].isoformat()
    return f"size:{size}@{when}"


def _list(
    stash: Stash, namespaces: Sequence[str], *, id_prefix: str = "", compacted: bool = True
) -> Steps[_Listing]:
    """List the small files of `namespaces`' logs (ids from `id_prefix`), and the folder.

    `compacted`: list the compacted folder too.
    """
    layout = stash.layout
    listing = _Listing()
    for namespace in namespaces:
        below = layout.key(PROJECTION, f"{namespace}/")
        for page in (yield from every_key_page(below + id_prefix)):
            for index, key in enumerate(page.keys):
                log_id, _, name = key[len(below) :].rpartition("/")
                if not log_id or parse_file_name(name) is None:
                    continue
                size = 0 if page.sizes is None else page.sizes[index]
                listing.small[key] = SmallFile(
                    key, namespace, log_tenant(namespace, log_id), _identity(page, index), size
                )
    if not compacted:
        return listing
    folder = layout.key(PROJECTION, f"{COMPACTED}/")
    for page in (yield from every_key_page(folder)):
        for key in page.keys:
            if key.endswith(_COVERS):
                listing.covers.add(key)
            elif key.endswith(_PARQUET):
                listing.parquet.add(key)
            else:
                listing.other.append(key)
    return listing


def _parse_covers(body: bytes, namespace: str, tenant: str) -> tuple[tuple[str, str], ...] | None:
    try:
        document = json.loads(body)
    except ValueError:
        return None
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        return None
    if (document.get("namespace"), document.get("tenant")) != (namespace, tenant):
        return None
    covers = document.get("covers")
    if not isinstance(covers, list) or not covers:
        return None
    found: list[tuple[str, str]] = []
    for item in covers:
        if not (
            isinstance(item, list) and len(item) == 2 and all(isinstance(x, str) for x in item)
        ):
            return None
        found.append((item[0], item[1]))
    return tuple(found)


def _group_of(stash: Stash, key: str) -> tuple[str, str] | None:
    """`(namespace, tenant)` of a key in the compacted folder (None: not in a group)."""
    folder = stash.layout.key(PROJECTION, f"{COMPACTED}/")
    parts = key[len(folder) :].split("/")
    return (parts[0], parts[1]) if len(parts) == 3 else None


def _counted(stash: Stash, listing: _Listing) -> Steps[tuple[list[Compacted], list[str]]]:
    """Return the compacted files that count, and the keys of everything else there."""
    named = sorted(listing.covers)
    bodies = yield from _read_all(named, _COVERS_LIMIT)
    counted: list[Compacted] = []
    doomed = list(listing.other)
    taken: set[str] = set()
    for covers_key, info in zip(named, bodies, strict=True):
        parquet = covers_key[: -len(_COVERS)] + _PARQUET
        group = _group_of(stash, covers_key)
        covers = None
        if info is not None and info.body is not None and group is not None:
            covers = _parse_covers(info.body, *group)
        whole = (
            covers is not None
            and parquet in listing.parquet
            and all(
                key not in taken
                and key in listing.small
                and listing.small[key].identity == identity
                and (listing.small[key].namespace, listing.small[key].tenant) == group
                for key, identity in covers
            )
        )
        if covers is None or not whole:
            # A covers whose file is not there yet may be another compactor's, mid-write:
            # it is erased only when something it names is gone or counted already.
            if (
                covers is not None
                and parquet not in listing.parquet
                and _intact(covers, listing, taken)
            ):
                continue
            doomed += [covers_key] + ([parquet] if parquet in listing.parquet else [])
            continue
        taken.update(key for key, _ in covers)
        counted.append(Compacted(parquet, covers_key, covers))
    paired = {c.key for c in counted} | {k[: -len(_COVERS)] + _PARQUET for k in listing.covers}
    doomed += sorted(listing.parquet - paired)  # a file without covers: planted or damaged
    return counted, doomed


def _intact(covers: tuple[tuple[str, str], ...], listing: _Listing, taken: set[str]) -> bool:
    return all(
        key not in taken and key in listing.small and listing.small[key].identity == identity
        for key, identity in covers
    )


def _read_all(keys: Sequence[str], limit: int) -> Steps[list[ObjectInfo | None]]:
    found: list[ObjectInfo | None] = []
    for start in range(0, len(keys), _FETCH):
        batch = tuple(GetObject(k, None, limit) for k in keys[start : start + _FETCH])
        found += yield from ask(Parallel(batch))
    return found


def table_files(stash: Stash, *, namespaces: Sequence[str] = SOURCES) -> list[str]:
    """Return the keys the archive's table holds: counted compacted files, uncovered small files.

    Erases what is stale, doubled, damaged or planted in the compacted folder, as `compact`
    does.
    """
    _check(stash)

    def steps() -> Steps[list[str]]:
        listing = yield from _list(stash, namespaces)
        counted, doomed = yield from _counted(stash, listing)
        yield from erase_for_good(doomed, "a compacted file")
        covered = {key for c in counted for key, _ in c.covers}
        return sorted([c.key for c in counted] + [k for k in listing.small if k not in covered])

    return run_sync(steps(), stash.driver)


def _check(stash: Stash) -> None:
    from stashpoint.stash import Stash

    if not isinstance(stash, Stash):
        raise InvalidArgument(
            f"compaction needs a blocking stash (stashpoint.open), not {type(stash).__name__}"
        )
    if stash.encryption is not None:
        raise InvalidArgument("an encrypted stash's projected files are sealed: not compacted")


def compact(
    stash: Stash,
    *,
    namespaces: Sequence[str] = SOURCES,
    target_bytes: int = TARGET_BYTES,
    min_files: int = MIN_FILES,
) -> CompactionReport:
    """Rewrite each tenant's uncovered small projected files into compacted files.

    A tenant of a namespace with at least `min_files` small files no compacted file covers
    gets compacted files of up to `target_bytes` (counted in the small files' bytes). What
    is stale, doubled, damaged or planted in the compacted folder is erased. Run
    `projection.project` first; `iceberg.publish(compact=True)` runs both.
    """
    _check(stash)
    chosen = check_namespaces(namespaces)
    for name, value in (("target_bytes", target_bytes), ("min_files", min_files)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise InvalidArgument(f"{name} is a positive int")
    report = CompactionReport()

    def steps() -> Steps[None]:
        listing = yield from _list(stash, chosen)
        counted, doomed = yield from _counted(stash, listing)
        yield from erase_for_good(doomed, "a compacted file")
        report.erased += doomed
        covered = {key for c in counted for key, _ in c.covers}
        groups: dict[tuple[str, str], list[SmallFile]] = {}
        for key in sorted(listing.small):
            if key not in covered:
                small = listing.small[key]
                groups.setdefault((small.namespace, small.tenant), []).append(small)
        for (namespace, tenant), files in sorted(groups.items()):
            if len(files) < min_files:
                continue
            for batch in _batches(files, target_bytes):
                yield from _write(stash, namespace, tenant, batch, report)

    run_sync(steps(), stash.driver)
    return report


def _batches(files: list[SmallFile], target_bytes: int) -> list[list[SmallFile]]:
    batches: list[list[SmallFile]] = [[]]
    size = 0
    for small in files:
        if batches[-1] and size + small.size > target_bytes:
            batches.append([])
            size = 0
        batches[-1].append(small)
        size += small.size
    return batches


def _write(
    stash: Stash, namespace: str, tenant: str, batch: list[SmallFile], report: CompactionReport
) -> Steps[None]:
    """Write one compacted file of `batch` (covers first), then check its covers are there."""
    import pyarrow
    import pyarrow.parquet

    infos = yield from _read_all([s.key for s in batch], FILE_READ_LIMIT)
    tables = []
    held: list[SmallFile] = []
    for small, info in zip(batch, infos, strict=True):
        body = b"" if info is None or info.body is None else info.body
        if described_by(body) is None:
            continue  # gone since the listing, or not a projection: left to the projection
        loaded = pyarrow.parquet.read_table(pyarrow.BufferReader(body), use_threads=False)
        tables.append(conformed(pyarrow, loaded))
        held.append(small)
    if len(held) < 2:
        return  # nothing worth a file of its own
    covers = [[s.key, s.identity] for s in held]
    document = {"format": FORMAT, "namespace": namespace, "tenant": tenant, "covers": covers}
    covers_body = json.dumps(document, separators=(",", ":")).encode()
    name = hashlib.sha256(covers_body).hexdigest()[:32]
    folder = stash.layout.key(PROJECTION, f"{COMPACTED}/{namespace}/{tenant}/")
    covers_key, key = folder + name + _COVERS, folder + name + _PARQUET
    buffer = io.BytesIO()
    schema = arrow_schema(pyarrow).with_metadata({b"stashpoint": covers_body})
    pyarrow.parquet.write_table(
        pyarrow.concat_tables(tables).replace_schema_metadata(schema.metadata),
        buffer,
        compression="zstd",
        row_group_size=1 << 20,
    )
    yield from _create(stash, covers_key, covers_body, "application/json")
    yield from _create(stash, key, buffer.getvalue(), "application/vnd.apache.parquet")
    # A purge may have taken a covered file while this one was written: look again, and
    # erase what was written if anything it holds is gone (the purge erased the folder
    # before, or erases it after, this check).
    # Only the tenant's logs (a conversation's tenant is not its id's start: all of them).
    id_prefix = "" if namespace == CONVERSATIONS else tenant
    listing = yield from _list(stash, [namespace], id_prefix=id_prefix, compacted=False)
    if not _intact(tuple((k, i) for k, i in covers), listing, set()):
        yield from erase_for_good([key, covers_key], "a compacted file")
        report.erased += [key, covers_key]
        return
    report.written.append(key)
    report.covered += len(held)


def _create(stash: Stash, key: str, body: bytes, content_type: str) -> Steps[None]:
    request = PutObject(key, body, Create(), content_type=content_type, content_encoding=None)
    yield from writes.create_named(
        request, writes.same_bytes(body), stash.retry, what="compacted file", limit=FILE_READ_LIMIT,
        refresh=False,
    )  # fmt: skip
