"""The archive as an Iceberg table: every projected row once, and erased rows nowhere.

Each test reads the table as an engine does (pyiceberg's scan, a static table from the
metadata file, DuckDB over the files the scan plans) and checks rows by their identity
(namespace, log, version, position) against the logs themselves.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyiceberg")
pytest.importorskip("duckdb")

import duckdb
import pyarrow
import pyarrow.parquet
from pyiceberg.avro.file import AvroFile
from pyiceberg.io.pyarrow import PyArrowFileIO
from pyiceberg.table import StaticTable

import stashpoint
from stashpoint import iceberg, projection
from stashpoint.errors import ConfigurationError, InvalidArgument, StorageUnavailable
from stashpoint.stores.layout import PROJECTION
from stashpoint.stores.objects import PutObject
from tests.archive_rows import Row
from tests.archive_rows import expected_rows as _expected
from tests.archive_rows import write_log as _write
from tests.crashes import Crash, crash_everywhere, fresh_local_stashes
from tests.kills import counting_child
from tests.together import threads_at_once

SECRET = "card 4111-1111-1111-1111"


def _identities(rows: pyarrow.Table) -> Counter[Row]:
    return Counter(
        (r["namespace"], r["log_id"], r["version"], r["position"]) for r in rows.to_pylist()
    )


def _catalog(stash: Any) -> Any:
    from pyiceberg.catalog import load_catalog

    files = stash.engine_files()
    return load_catalog(iceberg.CATALOG_NAME, **iceberg.catalog_properties(stash, files, None))


def _read_three_ways(stash: Any, report: iceberg.IcebergReport) -> Counter[Row]:
    """The table's rows as pyiceberg's scan, a static table and DuckDB read them: all equal."""
    table = _catalog(stash).load_table(report.table)
    scanned = _identities(table.scan().to_arrow())
    static = StaticTable.from_metadata(report.metadata_location)
    assert _identities(static.scan().to_arrow()) == scanned
    paths = [task.file.file_path for task in table.scan().plan_files()]
    if paths:
        local = [p.removeprefix("file://") for p in paths]
        listed = ", ".join(f"'{p}'" for p in local)
        with duckdb.connect() as connection:
            rows = connection.sql(
                f"select namespace, log_id, version, position from read_parquet([{listed}])"
            ).fetchall()
        assert Counter(tuple(r) for r in rows) == scanned
    return scanned


def test_a_published_table_holds_every_projected_row_once(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path / 'stash'}") as stash:
        ids = [f"acme.t{n}" for n in range(4)] + [f"globex.t{n}" for n in range(2)]
        heads = {log_id: _write(stash, log_id, 3) for log_id in ids}
        projection.project(stash)
        report = iceberg.publish(stash)
        assert report.commits == 1 and report.files == len(ids) == len(report.added)
        assert _read_three_ways(stash, report) == _expected(stash, *ids)
        table = _catalog(stash).load_table(report.table)
        assert [f.name for f in table.spec().fields] == ["namespace", "tenant"]

        again = iceberg.publish(stash)  # nothing new: no commit, same snapshot
        assert (again.commits, again.added, again.removed) == (0, [], [])
        assert again.metadata_location == report.metadata_location

        _write(stash, "acme.t0", 2, "later", after=heads["acme.t0"])
        _write(stash, "initech.t9", 1)
        projection.project(stash)
        grown = iceberg.publish(stash, grace=timedelta(0))
        assert len(grown.added) == 2 and grown.removed == []  # only the two new files
        assert grown.files == len(ids) + 2
        assert _read_three_ways(stash, grown) == _expected(stash, *ids, "initech.t9")
        table = _catalog(stash).load_table(grown.table)
        assert len(table.metadata.snapshots) == 1  # no grace: the superseded ones expired


def _every_text(folder: Path) -> str:
    """Every byte under `folder`, decompressed: data files' values, manifests' records."""
    found = []
    io = PyArrowFileIO()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        raw = path.read_bytes()
        found.append(raw.decode("utf-8", "replace"))
        if raw[:4] == b"PAR1":
            rows = pyarrow.parquet.read_table(pyarrow.BufferReader(raw)).to_pylist()
            found += [str(value) for row in rows for value in row.values()]
        elif raw[:4] == b"Obj\x01":
            with AvroFile(io.new_input(str(path))) as records:  # type: ignore[type-var]
                found += [str(record) for record in records]
    return "\n".join(found)


def test_a_purge_reaches_the_table_and_leaves_no_byte_of_the_purged_rows(
    tmp_path: Path,
) -> None:
    with stashpoint.open(f"local://{tmp_path / 'stash'}") as stash:
        _write(stash, "acme.t1", 3, SECRET)
        _write(stash, "acme.t2", 3)
        _write(stash, "globex.t1", 2)
        projection.project(stash)
        first = iceberg.publish(stash)
        assert SECRET in _every_text(tmp_path / "stash" / PROJECTION)

        stash.admin.purge(log="acme.t1")
        with pytest.raises(Exception):
            _catalog(stash).load_table(first.table).scan().to_arrow()
        report = iceberg.publish(stash, grace=timedelta(0))
        assert [uri.rsplit("/", 2)[1] for uri in report.removed] == ["acme.t1"]
        assert report.added == [] and report.expired_snapshots >= 1
        assert _read_three_ways(stash, report) == _expected(stash, "acme.t2", "globex.t1")
        text = _every_text(tmp_path / "stash" / PROJECTION)
        assert SECRET not in text  # in no data file, manifest, metadata file or catalog
        assert "turn 2" in text  # the byte scan reads what the files hold
        catalog = tmp_path / "stash" / PROJECTION / iceberg.CATALOG_FILE
        with sqlite3.connect(catalog) as connection:
            (location,) = connection.execute(
                "select metadata_location from iceberg_tables"
            ).fetchone()
        assert location == report.metadata_location


def test_a_deleted_log_leaves_the_table_when_the_projection_erases_it(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path / 'stash'}") as stash:
        _write(stash, "acme.t1", 2)
        _write(stash, "acme.t2", 2)
        projection.project(stash)
        iceberg.publish(stash)
        stash.logs.delete("acme.t1")
        assert projection.project(stash).erased == ["logs/acme.t1"]
        report = iceberg.publish(stash)
        assert len(report.removed) == 1
        assert _read_three_ways(stash, report) == _expected(stash, "acme.t2")


def _publish_at_once(
    url: str, publishers: int, catalog: dict[str, str] | None = None
) -> list[iceberg.IcebergReport]:
    """Run `publishers` publishes of the stash at `url` at once; return their reports."""

    def publisher() -> iceberg.IcebergReport:
        with stashpoint.open(url) as own:
            return iceberg.publish(own, catalog=catalog)

    return threads_at_once(publishers, publisher)


def test_two_publishers_at_once_register_every_file_once(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        for round_ in range(3):
            for n in range(3):
                _write(stash, f"acme.r{round_}n{n}", 2)
            projection.project(stash)
            reports = _publish_at_once(url, 2)
            added = [uri for report in reports for uri in report.added]
            assert len(added) == len(set(added)) == 3  # each new file registered by one
            ids = [f"acme.r{r}n{n}" for r in range(round_ + 1) for n in range(3)]
            assert _read_three_ways(stash, reports[-1]) == _expected(stash, *ids)


def test_a_crash_at_any_request_of_a_publish_leaves_a_table_the_next_publish_completes(
    tmp_path: Path,
) -> None:
    """A publish that removes a purged log's file, adds a new one and expires the older
    snapshot dies at each of its requests (every metadata file, manifest and deletion goes
    through the stash), before or after it took effect: the table then reads consistently
    (no row twice, none of an erased file), and the next publish makes it exact."""
    live = ["acme.t2", "acme.new"]

    def scenario(stash: Any) -> None:
        _write(stash, "acme.t1", 1, SECRET)
        _write(stash, "acme.t2", 1)
        projection.project(stash)
        iceberg.publish(stash)
        stash.admin.purge(log="acme.t1")
        _write(stash, "acme.new", 1)
        projection.project(stash)

    def check(stash: Any, step: int, after: bool) -> None:
        _consistent(stash, live)
        report = iceberg.publish(stash)
        assert _read_three_ways(stash, report) == _expected(stash, *live), (step, after)
        assert SECRET not in _every_text(Path(stash.url.removeprefix("local://")) / PROJECTION)

    requests = crash_everywhere(
        fresh_local_stashes(tmp_path),
        scenario,
        iceberg.publish,
        check,
        at_least=8,
    )
    assert requests >= 8


@pytest.mark.parametrize("after", [False, True])
def test_a_crash_at_the_catalogs_commit_leaves_a_table_the_next_publish_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, after: bool
) -> None:
    from pyiceberg.catalog.sql import SqlCatalog

    original = SqlCatalog.commit_table
    dying = {"left": 1}

    def commit(self: Any, *args: Any, **kwargs: Any) -> Any:
        if dying["left"] > 0:
            dying["left"] -= 1
            if after:
                original(self, *args, **kwargs)
            raise Crash("commit")
        return original(self, *args, **kwargs)

    with stashpoint.open(f"local://{tmp_path / 'stash'}") as stash:
        _write(stash, "acme.t1", 1)
        _write(stash, "acme.t2", 1)
        projection.project(stash)
        iceberg.publish(stash)
        stash.admin.purge(log="acme.t1")
        projection.project(stash)
        monkeypatch.setattr(SqlCatalog, "commit_table", commit)
        with pytest.raises(Crash):
            iceberg.publish(stash)
        _consistent(stash, ["acme.t2"])
        report = iceberg.publish(stash, grace=timedelta(0))
        assert _read_three_ways(stash, report) == _expected(stash, "acme.t2")
        assert len(_catalog(stash).load_table(report.table).metadata.snapshots) == 1


def _consistent(stash: Any, live: list[str]) -> None:
    """Whatever snapshot is current holds rows of live logs only, each at most once."""
    try:
        table = _catalog(stash).load_table(iceberg.DEFAULT_TABLE)
    except Exception:
        return
    if table.current_snapshot() is None:
        return
    expected = _expected(stash, *live)
    paths = [task.file.file_path for task in table.scan().plan_files()]
    present = [p for p in paths if Path(p.removeprefix("file://")).exists()]
    rows = Counter[Row]()
    for path in present:
        rows += _identities(pyarrow.parquet.read_table(path.removeprefix("file://")))
    # Missing files are those a purge erased (the table names them until a publish): no
    # engine reads their rows. What is read is each row once, and only live logs' rows.
    assert all(count == 1 and row in expected for row, count in rows.items())


def test_a_planted_object_named_as_a_projected_file_is_reported_not_registered(
    tmp_path: Path,
) -> None:
    with stashpoint.open(f"local://{tmp_path / 'stash'}") as stash:
        _write(stash, "acme.t1", 2)
        projection.project(stash)
        zero = "0" * 20
        planted = stash.layout.key(PROJECTION, f"logs/acme.evil/{zero}-{zero}.parquet")
        stash.driver(PutObject(planted, b"PAR1 not really \xff\xfe", None))
        report = iceberg.publish(stash)
        assert len(report.skipped) == 1 and "acme.evil" in report.skipped[0]
        assert _read_three_ways(stash, report) == _expected(stash, "acme.t1")


def test_bad_input_gets_typed_errors(tmp_path: Path) -> None:
    with stashpoint.open("memory://") as stash, pytest.raises(ConfigurationError):
        iceberg.publish(stash)
    with stashpoint.open(f"local://{tmp_path / 'stash'}") as stash:
        for table in ("records", "a.", ".b", "a.b c", "a;drop.t", 7):
            with pytest.raises(InvalidArgument):
                iceberg.publish(stash, table=table)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            iceberg.publish(stash, catalog=["type", "sql"])  # type: ignore[arg-type]
        (tmp_path / "a-file").write_text("")
        with pytest.raises(StorageUnavailable):  # the catalog's folder cannot be made
            iceberg.publish(stash, catalog={"uri": f"sqlite:///{tmp_path / 'a-file' / 'c.db'}"})


def test_an_encrypted_stash_is_refused(tmp_path: Path) -> None:
    from stashpoint.encryption import Encryption

    encryption = Encryption.local(tmp_path / "keyring.json", ("acme", "acme."))
    with (
        stashpoint.open(f"local://{tmp_path / 'stash'}", encryption=encryption) as stash,
        pytest.raises(InvalidArgument),
    ):
        iceberg.publish(stash)


def test_an_s3_stash_publishes_through_its_own_endpoint_and_credentials(
    seaweedfs: Any, tmp_path: Path
) -> None:
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}")
    catalog = {"uri": f"sqlite:///{tmp_path / 'catalog.db'}"}
    with stashpoint.open(url) as stash:
        with pytest.raises(ConfigurationError):
            iceberg.publish(stash)  # an S3 stash names its catalog
        _write(stash, "acme.t1", 2, SECRET)
        _write(stash, "acme.t2", 2)
        projection.project(stash)
        report = iceberg.publish(stash, catalog=catalog)
        assert report.metadata_location.startswith("s3://")
        from pyiceberg.catalog import load_catalog

        properties = iceberg.catalog_properties(stash, stash.engine_files(), catalog)
        table = load_catalog(iceberg.CATALOG_NAME, **properties).load_table(report.table)
        assert _identities(table.scan().to_arrow()) == _expected(stash, "acme.t1", "acme.t2")
        stash.admin.purge(log="acme.t1")
        after = iceberg.publish(stash, catalog=catalog)
        assert len(after.removed) == 1
        table = load_catalog(iceberg.CATALOG_NAME, **properties).load_table(report.table)
        assert _identities(table.scan().to_arrow()) == _expected(stash, "acme.t2")


KILLED_PUBLISHER = counting_child(
    "stashpoint.iceberg.publish(stash)", imports="import stashpoint.iceberg"
)


def test_a_publisher_killed_with_sigkill_leaves_what_the_next_publish_completes(
    tmp_path: Path,
) -> None:
    from tests.kills import kill_after_requests

    for kill_after in (3, 8, 13, 17):
        url = f"local://{tmp_path / f's-{kill_after}'}"
        with stashpoint.open(url) as stash:
            for n in range(3):
                _write(stash, f"acme.t{n}", 1)
            projection.project(stash)
            iceberg.publish(stash)
            stash.admin.purge(log="acme.t0")
            _write(stash, "acme.new", 1)
            projection.project(stash)
        made = kill_after_requests(KILLED_PUBLISHER, [url], kill_after)
        assert made == kill_after  # killed mid-publish
        with stashpoint.open(url) as stash:
            live = ["acme.t1", "acme.t2", "acme.new"]
            _consistent(stash, live)
            report = iceberg.publish(stash)
            assert _read_three_ways(stash, report) == _expected(stash, *live), kill_after


def _s3_rows(stash: Any, catalog: dict[str, str]) -> Counter[Row]:
    from pyiceberg.catalog import load_catalog

    properties = iceberg.catalog_properties(stash, stash.engine_files(), catalog)
    table = load_catalog(iceberg.CATALOG_NAME, **properties).load_table(iceberg.DEFAULT_TABLE)
    return _identities(table.scan().to_arrow())


def test_publishers_racing_on_seaweedfs_register_every_file_once(
    seaweedfs: Any, tmp_path: Path
) -> None:
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}")
    catalog = {"uri": f"sqlite:///{tmp_path / 'catalog.db'}"}
    ids: list[str] = []
    with stashpoint.open(url) as stash:
        for round_ in range(3):  # bounded: three rounds of three publishers at once
            ids += [f"acme.r{round_}n{n}" for n in range(2)]
            for log_id in ids[-2:]:
                _write(stash, log_id, 1)
            projection.project(stash)
            reports = _publish_at_once(url, 3, catalog)
            added = [uri for report in reports for uri in report.added]
            assert len(added) == len(set(added)) == 2
            assert _s3_rows(stash, catalog) == _expected(stash, *ids)


def test_the_fault_proxy_on_every_request_of_a_publish_loses_and_repeats_no_file(
    seaweedfs: Any, tmp_path: Path
) -> None:
    from tests.faultproxy import FaultProxy, everyday_faults

    plan, config = everyday_faults()
    prefix = f"t-{uuid.uuid4().hex}"
    catalog = {"uri": f"sqlite:///{tmp_path / 'catalog.db'}"}
    ids: list[str] = []
    failures: list[str] = []
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        with stashpoint.open(url, client_config=config) as stash:
            for turn in range(6):  # bounded: new logs and a purge between publishes
                with stashpoint.open(seaweedfs.url(prefix)) as clean:
                    ids.append(f"acme.t{turn}")
                    _write(clean, ids[-1], 1, SECRET if turn == 1 else "turn")
                    if turn == 3:
                        clean.admin.purge(log="acme.t1")
                        ids.remove("acme.t1")
                    projection.project(clean)
                try:
                    iceberg.publish(stash, catalog=catalog)
                except stashpoint.StashpointError as exc:
                    failures.append(exc.kind.value)
    assert sum(plan.injected.values()) > 0
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        iceberg.publish(clean, catalog=catalog)
        assert _s3_rows(clean, catalog) == _expected(clean, *ids), failures


def test_a_compacted_table_registers_one_file_per_tenant_and_a_purge_reaches_it(
    tmp_path: Path,
) -> None:
    with stashpoint.open(f"local://{tmp_path / 'stash'}") as stash:
        acme = [f"acme.t{n}" for n in range(9)]
        for log_id in acme:
            _write(stash, log_id, 2, SECRET if log_id == "acme.t3" else "turn")
        _write(stash, "globex.t0", 2)
        projection.project(stash)
        report = iceberg.publish(stash, compact=True)
        assert report.compaction is not None and report.compaction.covered == len(acme)
        assert report.files == 2  # acme's compacted file, globex's small one
        assert _read_three_ways(stash, report) == _expected(stash, *acme, "globex.t0")

        stash.admin.purge(log="acme.t3")
        after = iceberg.publish(stash)  # the compacted file is gone: acme's small files
        live = [log_id for log_id in acme if log_id != "acme.t3"]
        assert after.files == len(live) + 1
        assert _read_three_ways(stash, after) == _expected(stash, *live, "globex.t0")
        assert SECRET not in _every_text(tmp_path / "stash" / PROJECTION)
        again = iceberg.publish(stash, compact=True)
        assert again.files == 2 and len(again.removed) == len(live)
        assert _read_three_ways(stash, again) == _expected(stash, *live, "globex.t0")


def test_metadata_files_nothing_names_are_erased_once_an_hour_old(tmp_path: Path) -> None:
    """A publisher that died before its commit leaves files no snapshot names: the next
    publish erases those older than an hour by storage's clock, never a younger one (a
    running publisher's)."""
    import os
    import time

    with stashpoint.open(f"local://{tmp_path / 'stash'}") as stash:
        _write(stash, "acme.t1", 1)
        projection.project(stash)
        report = iceberg.publish(stash)
        assert report.orphans_erased == 0
        folder = Path(report.metadata_location.removeprefix("file://")).parent
        old, young = folder / "00009-dead.metadata.json", folder / "snap-1-0-young.avro"
        old.write_text("{}")
        young.write_bytes(b"Obj\x01")
        hours_ago = time.time() - 2 * 3600
        os.utime(old, (hours_ago, hours_ago))
        again = iceberg.publish(stash)
        assert again.orphans_erased == 1
        assert not old.exists() and young.exists()
        assert _read_three_ways(stash, again) == _expected(stash, "acme.t1")


def test_a_table_of_an_older_release_gains_the_columns_added_since(tmp_path: Path) -> None:
    """The projection's columns are only ever added, at the end: a table made when there
    were fewer is evolved (Iceberg schema evolution, by name), and reads every column."""
    from pyiceberg.catalog import load_catalog

    with stashpoint.open(f"local://{tmp_path / 'stash'}") as stash:
        stash.logs.append(
            "acme.t1", [{"role": "assistant", "content": "hi", "model": "m-1"}], after=None
        )
        projection.project(stash)
        properties = iceberg.catalog_properties(stash, stash.engine_files(), None)
        Path(properties["uri"].removeprefix("sqlite:///")).parent.mkdir(parents=True)
        catalog = load_catalog(iceberg.CATALOG_NAME, **properties)
        catalog.create_namespace("stashpoint")
        older = projection.arrow_schema(pyarrow)
        older = pyarrow.schema([older.field(n) for n in older.names[:-3]])  # before tokens
        catalog.create_table(
            "stashpoint.records", schema=older, properties=iceberg.TABLE_PROPERTIES
        )
        report = iceberg.publish(stash)
        table = catalog.load_table("stashpoint.records")
        assert [f.name for f in table.schema().fields] == projection.arrow_schema(pyarrow).names
        rows = table.scan().to_arrow().to_pylist()
        assert [(r["log_id"], r["model"]) for r in rows] == [("acme.t1", "m-1")]
        assert report.files == 1


def test_a_superseded_snapshot_is_kept_for_the_grace_then_expired_and_its_files_erased(
    tmp_path: Path,
) -> None:
    """An engine that began reading the table before a publish finishes: the snapshot it
    reads is kept for `grace` after it stopped being current (by the stash's clock), then
    expired, and the manifests only it named are erased."""
    from stashpoint.clock import FakeClock

    clock = FakeClock(datetime.now(UTC))
    with stashpoint.open(f"local://{tmp_path / 'stash'}", clock=clock) as stash:
        _write(stash, "acme.t1", 1)
        projection.project(stash)
        first = iceberg.publish(stash)
        reader = StaticTable.from_metadata(first.metadata_location)  # an engine, mid-read
        _write(stash, "acme.t2", 1)
        projection.project(stash)
        second = iceberg.publish(stash)
        assert second.expired_snapshots == 0 and second.orphans_erased == 0
        assert _identities(reader.scan().to_arrow()) == _expected(stash, "acme.t1")
        clock.advance(2 * 3600)  # superseded two hours ago, by the stash's clock
        third = iceberg.publish(stash, grace=timedelta(hours=1))
        assert third.expired_snapshots == 1
        table = _catalog(stash).load_table(third.table)
        assert [s.snapshot_id for s in table.metadata.snapshots] == [
            table.current_snapshot().snapshot_id
        ]
        assert _read_three_ways(stash, third) == _expected(stash, "acme.t1", "acme.t2")
        # The expired snapshot's manifest list is no longer named: erased once an hour
        # old by storage's clock (the files' own times), never before.
        expired_list = reader.current_snapshot().manifest_list.removeprefix("file://")
        assert Path(expired_list).exists()
        zero = iceberg.publish(stash, grace=timedelta(0))
        assert zero.orphans_erased >= 1 and not Path(expired_list).exists()
        assert _read_three_ways(stash, zero) == _expected(stash, "acme.t1", "acme.t2")
