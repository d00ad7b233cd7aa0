"""The archive as an Apache Iceberg table: the projection's files, registered in a catalog.

`publish` makes an Iceberg table (`stashpoint.records` by default) hold exactly the
projection's Parquet files (`stashpoint.projection`) as they are now, so Athena, Spark,
Trino, DuckDB and pyiceberg read the archive by its table name with no stashpoint code.

- **Derived, never the source.** The table registers the files the projection wrote where
  they are (no copy, no rewrite); its metadata (`projection/_iceberg/` under the stash's
  prefix by default) can be dropped and published again from the files at any time. A run
  lists the projected files, reads the table's current files, and commits one snapshot that
  adds the new ones and removes those no longer there.
- **Conditional commits.** The catalog commits a snapshot only on the one it was built on
  (SQL catalogs compare the metadata location, Glue its version): two publishers at once
  never register a file twice; the one that lost the race builds again on the new snapshot.
- **Erasure reaches it.** A purge erases a log's projected files; the next `publish` (or
  `stashpoint project --iceberg`) commits a snapshot without them. A superseded snapshot is
  kept for `GRACE` (an engine reading it finishes), then expired, and the manifests nothing
  names are erased once as old. An engine reading a snapshot that names an erased file
  fails on it rather than returning erased rows. The table's metadata never holds
  content: column statistics are kept for ids and times only (namespace, log id, tenant,
  version, position, written_at, day), counts for the rest.
- **Where the catalog lives.** A local folder's default is pyiceberg's SQL catalog on
  SQLite in the folder itself (`projection/_iceberg/catalog.sqlite3`); an S3 stash names
  its catalog (`type=glue`, or a SQL catalog's `uri=`), and the table's files are read with
  the stash's own endpoint and credentials. Encrypted stashes are refused: their files are
  sealed, and only stashpoint reads them.

Needs the `iceberg` extra (pyiceberg with SQLite, pyarrow), imported only here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from itertools import pairwise
from typing import TYPE_CHECKING, Any

from stashpoint.errors import (
    ConfigurationError,
    InvalidArgument,
    StashpointError,
    StorageUnavailable,
)
from stashpoint.projection import SOURCES
from stashpoint.stores.layout import PROJECTION

if TYPE_CHECKING:
    from datetime import datetime

    from stashpoint.compaction import CompactionReport
    from stashpoint.composition import EngineFiles
    from stashpoint.stash import Stash
    from stashpoint.steps import Steps

__all__ = ["DEFAULT_TABLE", "IcebergReport", "publish"]

DEFAULT_TABLE = "stashpoint.records"
"""The table `publish` keeps by default (`{catalog namespace}.{table}`)."""
WAREHOUSE = "_iceberg"
"""Where the table's metadata goes in the projection's namespace by default (a leading `_`:
not a source namespace's folder, and hidden from engines that read every file under a
location)."""
CATALOG_FILE = f"{WAREHOUSE}/catalog.sqlite3"
"""A local folder's default catalog: pyiceberg's SQL catalog on this SQLite file."""
CATALOG_NAME = "stashpoint"
"""The catalog's name (a SQL catalog's tables are keyed by it): load it under this name."""
DESCRIBERS = 8
"""New files whose Parquet footers a publish reads at once."""
GRACE = timedelta(hours=1)
"""How long a superseded snapshot is kept, and how old a file of the table's metadata
folder that nothing names must be to be erased: an engine reading the table meanwhile, or
a publisher not yet committed, finds what it reads."""
_NAME_MAPPING = "schema.name-mapping.default"
"""The table property mapping the files' column names to field ids (projected files carry
no field ids)."""
COMMIT_ATTEMPTS = 16
"""Commits tried before `publish` gives up (each lost one means another publisher won)."""
_OPEN_ATTEMPTS = 5
"""Openings of the catalog and table tried (a race between two first openers)."""
_STATISTICS = ("namespace", "log_id", "tenant", "version", "position", "written_at", "day")
"""Columns whose lower and upper bounds the table's manifests hold: ids and times only."""
TABLE_PROPERTIES = {
    "write.metadata.metrics.default": "counts",
    **{f"write.metadata.metrics.column.{name}": "full" for name in _STATISTICS},
    # Old metadata files are erased by `publish`'s sweep, after `grace`, not at once.
    "write.metadata.delete-after-commit.enabled": "false",
    "write.metadata.previous-versions-max": "100",
    # A lost commit is built again from the projection's listing by `publish`, not replayed
    # by pyiceberg on the new snapshot after a wall-clock sleep.
    "commit.retry.num-retries": "0",
}
"""The table's properties: no content in its statistics, a bounded metadata folder, no
replayed commits."""


@dataclass
class IcebergReport:
    """What one `publish` did."""

    table: str
    """The table's name in its catalog."""
    metadata_location: str = ""
    """The table's current metadata file (what `iceberg_scan` or a static table reads)."""
    files: int = 0
    """Data files the table holds now."""
    added: list[str] = field(default_factory=list)
    """URIs of the files this run registered."""
    removed: list[str] = field(default_factory=list)
    """URIs of the files this run removed from the table (erased from the projection)."""
    skipped: list[str] = field(default_factory=list)
    """`URI: why` of each projected file left out (not Parquet of the projection's schema:
    a damaged or planted object, written over by the projection's next run)."""
    expired_snapshots: int = 0
    """Snapshots expired because they named files no longer there."""
    commits: int = 0
    """Snapshots this run committed (0: the table already held exactly the files)."""
    compaction: CompactionReport | None = None
    """What compacting the small files did (with `compact=True`)."""
    orphans_erased: int = 0
    """Files of the table's metadata folder nothing names, older than the grace by storage's
    clock, erased (expired snapshots', metadata no longer listed, a dead publisher's)."""


def _pyiceberg() -> Any:
    try:
        import pyiceberg.catalog
    except ImportError:  # pragma: no cover - the extra is missing
        raise ConfigurationError(
            "the Iceberg table needs pyiceberg: pip install 'stashpoint[iceberg]'"
        ) from None
    return pyiceberg.catalog


def catalog_properties(
    stash: Stash, files: EngineFiles, catalog: Mapping[str, str] | None
) -> dict[str, str]:
    """Return the pyiceberg catalog properties: `catalog`'s, else the local default's.

    The stash's file-I/O properties (endpoint, credentials) come first, so `catalog` may
    override them; the warehouse is `projection/_iceberg` under the stash's prefix.
    """
    if catalog is not None and not isinstance(catalog, Mapping):
        raise InvalidArgument("catalog is a mapping of pyiceberg catalog properties")
    given = {str(k): str(v) for k, v in (catalog or {}).items()}
    warehouse = files.uri(stash.layout.key(PROJECTION, WAREHOUSE))
    properties = {**files.properties, "warehouse": warehouse, **given}
    if catalog is None:
        if not files.root.startswith("file://"):
            raise ConfigurationError(
                "an S3 stash's Iceberg table needs a catalog: type=glue (Athena), or "
                "uri=sqlite:///PATH or uri=postgresql://... for pyiceberg's SQL catalog"
            )
        from urllib.parse import unquote, urlsplit

        folder = unquote(urlsplit(files.root).path)
        database = f"{folder}/{stash.layout.key(PROJECTION, CATALOG_FILE)}"
        properties.update(type="sql", uri=f"sqlite:///{database}")
    elif "type" not in given and "uri" in given:
        properties["type"] = "sql"
    return properties


def publish(
    stash: Stash,
    *,
    catalog: Mapping[str, str] | None = None,
    table: str = DEFAULT_TABLE,
    namespaces: Sequence[str] = SOURCES,
    compact: bool = False,
    grace: timedelta = GRACE,
) -> IcebergReport:
    """Make the Iceberg table `table` hold exactly the projection's files of `namespaces`.

    The table's files are the compacted files that count and the small files none of them
    covers (`compaction.table_files`); `compact` compacts each tenant's uncovered small
    files first (`compaction.compact`).

    `catalog`: pyiceberg catalog properties (`type=glue`, `uri=sqlite:///...`; a local
    folder's default is a SQL catalog on SQLite in the folder). Creates the table (and its
    catalog namespace) when missing; registers new projected files and removes erased ones
    in one snapshot; expires the snapshots superseded `grace` ago (by the stash's clock),
    and erases the metadata files nothing names once `grace` old (by storage's): an engine
    reading the table meanwhile finds what it reads. Run `projection.project` first.
    Raises `ConfigurationError` (no extra, no catalog for an S3 stash, `memory://`),
    `InvalidArgument` (an encrypted stash, a bad name or argument), `StorageUnavailable`
    (the catalog or the files cannot be reached, or the table kept moving: other
    publishers won `COMMIT_ATTEMPTS` commits in a row).
    """
    from stashpoint import compaction

    catalogs = _pyiceberg()
    if stash.encryption is not None:
        raise InvalidArgument(
            "an encrypted stash's projected files are sealed: only stashpoint reads them "
            "(stashpoint query)"
        )
    namespace, name = _table_name(table)
    files = stash.engine_files()
    properties = catalog_properties(stash, files, catalog)
    report = IcebergReport(table=f"{namespace}.{name}")
    if not isinstance(compact, bool):
        raise InvalidArgument("compact is a bool")
    if not isinstance(grace, timedelta) or grace < timedelta(0):
        raise InvalidArgument("grace is a timedelta >= 0")
    if compact:
        report.compaction = compaction.compact(stash, namespaces=namespaces)
    keys = compaction.table_files(stash, namespaces=namespaces)
    wanted = {files.uri(key) for key in keys}
    from stashpoint.iceberg_files import lent

    try:
        if properties.get("type") == "sql" and properties.get("uri", "").startswith("sqlite:///"):
            _make_folder(properties["uri"])
        with lent(stash, files) as through_stash:
            iceberg_table = _opened(catalogs, {**properties, **through_stash}, namespace, name)
            _sync(iceberg_table, wanted, report, _clock(stash), grace)
            report.orphans_erased = _sweep_orphans(stash, files, iceberg_table, grace)
    except StashpointError:
        raise
    except Exception as exc:  # pyiceberg, pyarrow, SQLAlchemy or the store said no
        raise StorageUnavailable(
            f"the Iceberg table {report.table} could not be published ({type(exc).__name__})",
            object_name=report.table,
        ) from None
    return report


def _table_name(table: str) -> tuple[str, str]:
    if not isinstance(table, str):
        raise InvalidArgument("the table is named `namespace.name`")
    namespace, dot, name = table.rpartition(".")
    if (
        not dot
        or not namespace
        or not name
        or not all(part.replace("_", "").isalnum() for part in (*namespace.split("."), name))
    ):
        raise InvalidArgument(
            "the table is named `namespace.name` (letters, digits and `_`)", object_name=table
        )
    return namespace, name


def _make_folder(uri: str) -> None:
    from pathlib import Path

    Path(uri.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)


def _opened(catalogs: Any, properties: dict[str, str], namespace: str, name: str) -> Any:
    """Return the table, its catalog opened; a race with another opener is tried again.

    A new SQL catalog creates its own tables, and two processes doing so at once may see
    each other's (`table ... already exists`): the second attempt finds them made.
    """
    for attempt in range(_OPEN_ATTEMPTS):
        try:
            return _table(catalogs.load_catalog(CATALOG_NAME, **properties), namespace, name)
        except Exception:
            if attempt == _OPEN_ATTEMPTS - 1:
                raise
    raise AssertionError("unreachable")  # pragma: no cover


def _table(catalog: Any, namespace: str, name: str) -> Any:
    """Return the table, created (with its namespace) when missing; a racing creator's wins."""
    import pyarrow
    from pyiceberg.exceptions import (
        CommitFailedException,
        NoSuchTableError,
        TableAlreadyExistsError,
    )

    from stashpoint import projection

    identifier = (*namespace.split("."), name)
    schema = projection.arrow_schema(pyarrow)
    try:
        return _evolved(catalog.load_table(identifier), schema)
    except NoSuchTableError:
        pass
    if not catalog.namespace_exists(namespace):  # Glue: a database infra/ may have made
        catalog.create_namespace_if_not_exists(namespace)
    try:
        creating = catalog.create_table_transaction(
            identifier, schema=schema, properties=TABLE_PROPERTIES
        )
        with creating.update_spec() as spec:  # files are one log's: one namespace, one tenant
            spec.add_identity("namespace")
            spec.add_identity("tenant")
        creating.set_properties(**{_NAME_MAPPING: _mapping_of(creating.table_metadata.schema())})
        creating.commit_transaction()
    except (TableAlreadyExistsError, CommitFailedException):
        pass  # another publisher created it first: its table is as good
    return catalog.load_table(identifier)


def _evolved(table: Any, schema: Any) -> Any:
    """Return `table` with the projection's columns: those a release added since, added.

    The projection's columns are only ever added, at the end (`projection.arrow_schema`):
    Iceberg's schema evolution adds them by name, with new field ids, and the files
    registered before read them as null. The table's name mapping follows.
    """
    present = {field.name for field in table.schema().fields}
    if not set(schema.names) <= present:
        with table.update_schema() as update:
            update.union_by_name(schema)
    mapping = table.metadata.name_mapping()
    mapped = set() if mapping is None else {n for field in mapping for n in field.names}
    if not set(schema.names) <= mapped:  # files carry no field ids: names find columns
        with table.transaction() as transaction:
            transaction.set_properties(**{_NAME_MAPPING: _mapping_of(table.schema())})
    return table


def _mapping_of(schema: Any) -> str:
    """Return the name mapping of an Iceberg schema, as the table property holds it."""
    return str(schema.name_mapping.model_dump_json())


def _clock(stash: Stash) -> Callable[[], datetime]:
    """Return what the stash's clock says, asked at each call (time is an input)."""
    from stashpoint.steps import Now, ask, run_sync

    return lambda: run_sync(ask(Now()), stash.driver)


def _sync(
    table: Any,
    wanted: set[str],
    report: IcebergReport,
    now: Callable[[], datetime],
    grace: timedelta,
) -> None:
    """Commit the snapshot that makes `table` hold `wanted`; expire superseded snapshots."""
    from pyiceberg.exceptions import CommitFailedException, ValidationException

    described: dict[str, Any] = {}  # a new file's description, kept across lost commits
    for _ in range(COMMIT_ATTEMPTS):
        table.refresh()
        held = {task.file.file_path: task.file for task in table.scan().plan_files()}
        removed = sorted(set(held) - wanted)
        added = sorted(wanted - set(held))
        unread = [uri for uri in added if uri not in described]
        # Files at once: each is a GET of its own, and most of a run is waiting on them.
        with ThreadPoolExecutor(DESCRIBERS, thread_name_prefix="stashpoint-iceberg") as pool:
            for uri, data_file, problem in pool.map(lambda u: _described(table, u), unread):
                described[uri] = data_file
                if problem is not None:
                    report.skipped.append(f"{uri}: {problem}")
        adding = [described[uri] for uri in added if described[uri] is not None]
        if adding or removed:
            try:
                with (
                    table.transaction() as transaction,
                    transaction.update_snapshot().overwrite() as snapshot,
                ):
                    for uri in removed:
                        snapshot.delete_data_file(held[uri])
                    for data_file in adding:
                        snapshot.append_data_file(data_file)
            except (CommitFailedException, ValidationException):
                continue  # another publisher moved the table: build again on its snapshot
            report.commits += 1
            report.added = [d.file_path for d in adding]
            report.removed = removed
        report.files = len(held) - len(removed) + len(adding)
        if _expire(table, report, now, grace):
            report.metadata_location = table.metadata_location
            return
    raise StorageUnavailable(
        f"the Iceberg table {report.table} moved on {COMMIT_ATTEMPTS} commits in a row",
        object_name=report.table,
    )


def _described(table: Any, uri: str) -> tuple[str, Any, str | None]:
    """Return `uri`, its Iceberg description (None: left out) and why it was left out.

    A file erased since it was listed is not there to add (no problem: the purge's); one
    that is not Parquet of the projection's schema is named by the error's kind.
    """
    from pyiceberg.io.pyarrow import parquet_file_to_data_file

    try:
        return uri, parquet_file_to_data_file(table.io, table.metadata, uri), None
    except FileNotFoundError:
        return uri, None, None
    except StashpointError:
        raise  # the stash could not be read: the publish fails, the file is not judged
    except Exception as exc:  # damaged, planted, another schema
        return uri, None, type(exc).__name__


def _expire(
    table: Any, report: IcebergReport, now: Callable[[], datetime], grace: timedelta
) -> bool:
    """Expire the snapshots superseded at least `grace` ago; True when done.

    A superseded snapshot may name files a purge erased (an engine reading it fails on
    them, and reads no erased row: the files are gone), and its manifests (ids and times
    only, no content) would outlive them. It is kept for `grace` after it stopped being
    current, so an engine that began reading it then finishes; its files, named by no
    snapshot once it is expired, are erased by the sweep (`_sweep_orphans`). False:
    another publisher committed meanwhile (the caller looks again).
    """
    from pyiceberg.exceptions import CommitFailedException

    table.refresh()
    metadata = table.metadata
    current = metadata.current_snapshot_id
    superseded: dict[int, int] = {}  # snapshot -> when the next one became current (ms)
    log = metadata.snapshot_log
    for entry, following in pairwise(log):
        superseded[entry.snapshot_id] = following.timestamp_ms
    limit = (now() - grace).timestamp() * 1000
    older = [
        s.snapshot_id
        for s in metadata.snapshots
        if s.snapshot_id != current and superseded.get(s.snapshot_id, s.timestamp_ms) <= limit
    ]
    if not older:
        return True
    try:
        table.maintenance.expire_snapshots().by_ids(older).commit()
    except (CommitFailedException, ValueError):
        return False  # another publisher moved the table, or expired these snapshots first
    report.expired_snapshots += len(older)
    return True


def _sweep_orphans(stash: Stash, files: EngineFiles, table: Any, grace: timedelta) -> int:
    """Erase the table's metadata files nothing names, older than `grace`; count them.

    Named: the current metadata file and those it lists, every snapshot's manifest list and
    manifests. Anything else belonged to expired snapshots, to metadata no longer listed,
    or to a publisher that died before its commit; its age is judged on storage's clock (a
    probe), so a running publisher's new files are never taken.
    """
    from stashpoint.maintenance.garbage import storage_now
    from stashpoint.projection import erase_for_good
    from stashpoint.steps import run_sync
    from stashpoint.stores.objects import every_key_page

    table.refresh()
    metadata = table.metadata
    named = {table.metadata_location, *(entry.metadata_file for entry in metadata.metadata_log)}
    for snapshot in metadata.snapshots:
        named.add(snapshot.manifest_list)
        named.update(m.manifest_path for m in snapshot.manifests(table.io))
    root = f"{files.root}/"
    folder = f"{metadata.location}/metadata/"
    if not folder.startswith(root):
        return 0  # the table's metadata is not in the stash: not ours to sweep

    def steps() -> Steps[int]:
        unnamed: list[tuple[str, datetime]] = []
        for page in (yield from every_key_page(folder[len(root) :])):
            times: list[datetime | None] = [None] * len(page.keys)
            if page.modified is not None:
                times = list(page.modified)
            for key, when in zip(page.keys, times, strict=True):
                if files.uri(key) not in named and when is not None:
                    unnamed.append((key, when))
        if not unnamed:
            return 0
        now = yield from storage_now(stash.layout)
        old = [key for key, when in unnamed if now - when >= grace]
        yield from erase_for_good(old, "an Iceberg metadata file")
        return len(old)

    return run_sync(steps(), stash.driver)
