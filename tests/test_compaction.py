"""The archive's compacted files: each row once in the table, and erased with its log.

Rows are checked by their identity (namespace, log, version, position) in the files the
table holds (`compaction.table_files`), against the logs themselves; erasure by a byte scan
of every stored version under `projection/`.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("pyarrow")

import pyarrow
import pyarrow.parquet

import stashpoint
from stashpoint import compaction, projection
from stashpoint.errors import InvalidArgument
from stashpoint.stores.layout import COMPACTED, PROJECTION
from stashpoint.stores.objects import GetObject, PutObject
from tests.archive_rows import Row
from tests.archive_rows import expected_rows as _expected
from tests.archive_rows import write_log as _write
from tests.crashes import crash_everywhere, fresh_local_stashes
from tests.purging import versions
from tests.together import threads_at_once

SECRET = "card 4111-1111-1111-1111"


def _table_rows(stash: Any) -> Counter[Row]:
    """The rows of the files the table holds, read through the stash."""
    rows: Counter[Row] = Counter()
    for key in compaction.table_files(stash):
        info = stash.driver(GetObject(key))
        assert info is not None, key
        for r in pyarrow.parquet.read_table(pyarrow.BufferReader(info.body)).to_pylist():
            rows[(r["namespace"], r["log_id"], r["version"], r["position"])] += 1
    return rows


def _compacted_keys(stash: Any) -> list[str]:
    folder = stash.layout.key(PROJECTION, f"{COMPACTED}/")
    return [v.key for v in versions(stash, folder) if not v.is_delete_marker]


def _stored_text(stash: Any) -> str:
    """Every stored version under projection/, Parquet decoded: what a byte scan finds."""
    found = []
    for version in versions(stash, f"{PROJECTION}/"):
        if version.is_delete_marker:
            continue
        body = stash.driver(GetObject(version.key, version.version_id)).body
        found.append(body.decode("utf-8", "replace"))
        if body[:4] == b"PAR1":
            rows = pyarrow.parquet.read_table(pyarrow.BufferReader(body)).to_pylist()
            found += [str(value) for row in rows for value in row.values()]
    return "\n".join(found)


ACME = [f"acme.t{n}" for n in range(9)]
GLOBEX = ["globex.t0", "globex.t1"]


def _fill(stash: Any) -> None:
    for log_id in ACME:
        _write(stash, log_id, 2, SECRET if log_id == "acme.t3" else "turn")
    for log_id in GLOBEX:
        _write(stash, log_id, 2)
    projection.project(stash)


def test_a_tenants_small_files_become_one_compacted_file_holding_each_row_once(
    tmp_path: Path,
) -> None:
    with stashpoint.open(f"local://{tmp_path / 'stash'}") as stash:
        _fill(stash)
        heads = {log_id: stash.logs.head(log_id) for log_id in ACME}
        report = compaction.compact(stash)
        assert len(report.written) == 1 and report.covered == len(ACME)  # globex: 2 < 8
        files = compaction.table_files(stash)
        assert len(files) == 1 + len(GLOBEX)
        assert _table_rows(stash) == _expected(stash, *ACME, *GLOBEX)

        again = compaction.compact(stash)  # nothing uncovered: nothing written
        assert (again.written, again.erased) == ([], [])

        _write(stash, "acme.t0", 1, "later", after=heads["acme.t0"])
        projection.project(stash)  # one more small file, not covered
        assert len(compaction.table_files(stash)) == len(files) + 1
        assert _table_rows(stash) == _expected(stash, *ACME, *GLOBEX)


def test_files_are_filled_to_the_target_size(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path / 'stash'}") as stash:
        _fill(stash)
        small = sum(v.size for v in versions(stash, f"{PROJECTION}/logs/acme."))
        report = compaction.compact(stash, target_bytes=small // 3 + 1)
        assert len(report.written) >= 3 and report.covered == len(ACME)
        assert _table_rows(stash) == _expected(stash, *ACME, *GLOBEX)


def test_a_purge_erases_the_tenants_compacted_files_and_they_are_written_again(
    tmp_path: Path,
) -> None:
    with stashpoint.open(f"local://{tmp_path / 'stash'}") as stash:
        _fill(stash)
        compaction.compact(stash)
        assert SECRET in _stored_text(stash)
        compacted = _compacted_keys(stash)
        receipt = stash.admin.purge(log="acme.t3")
        assert set(compacted) <= {removed.key for removed in receipt.removed}
        assert _compacted_keys(stash) == []
        assert SECRET not in _stored_text(stash)  # in no file, small or compacted
        live = [log_id for log_id in ACME if log_id != "acme.t3"]
        assert _table_rows(stash) == _expected(stash, *live, *GLOBEX)
        report = compaction.compact(stash)
        assert report.covered == len(live)
        assert _table_rows(stash) == _expected(stash, *live, *GLOBEX)
        assert SECRET not in _stored_text(stash)


def test_a_deleted_logs_projection_erasure_takes_the_tenants_compacted_files(
    tmp_path: Path,
) -> None:
    with stashpoint.open(f"local://{tmp_path / 'stash'}") as stash:
        _fill(stash)
        compaction.compact(stash)
        stash.logs.delete("acme.t3")
        assert "logs/acme.t3" in projection.project(stash).erased
        assert _compacted_keys(stash) == []
        live = [log_id for log_id in ACME if log_id != "acme.t3"]
        assert _table_rows(stash) == _expected(stash, *live, *GLOBEX)


def _purge_when(url: str, moment: Callable[[Any], bool]) -> Callable[[Any, Callable[[], Any]], Any]:
    """A request hook that purges acme.t3 (from another stash) once, at `moment`."""
    done = threading.Event()

    def hook(request: Any, proceed: Callable[[], Any]) -> Any:
        result = proceed()
        if not done.is_set() and moment(request):
            done.set()
            with stashpoint.open(url) as other:
                other.admin.purge(log="acme.t3")
        return result

    return hook


def _is_put(suffix: str) -> Callable[[Any], bool]:
    return lambda r: isinstance(r, PutObject) and COMPACTED in r.key and r.key.endswith(suffix)


@pytest.mark.parametrize(
    "moment",
    [
        pytest.param(_is_put(".covers.json"), id="after-the-covers"),
        pytest.param(_is_put(".parquet"), id="after-the-file"),
        pytest.param(
            lambda r: type(r).__name__ == "GetObject" and "/logs/acme.t3/" in r.key,
            id="after-reading-the-purged-file",
        ),
    ],
)
def test_a_compactor_racing_a_purge_leaves_none_of_the_purged_rows(
    tmp_path: Path, moment: Callable[[Any], bool]
) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        _fill(stash)
        with stash.intercept(_purge_when(url, moment)):
            compaction.compact(stash)
        assert SECRET not in _stored_text(stash)
        live = [log_id for log_id in ACME if log_id != "acme.t3"]
        assert _table_rows(stash) == _expected(stash, *live, *GLOBEX)


def test_a_crash_at_any_request_of_a_compaction_leaves_each_row_once(tmp_path: Path) -> None:

    def check(stash: Any, step: int, after: bool) -> None:
        assert _table_rows(stash) == _expected(stash, *ACME, *GLOBEX), (step, after)
        compaction.compact(stash)  # the next run completes it
        assert len(compaction.table_files(stash)) == 1 + len(GLOBEX), (step, after)
        assert _table_rows(stash) == _expected(stash, *ACME, *GLOBEX), (step, after)

    requests = crash_everywhere(
        fresh_local_stashes(tmp_path),
        _fill,
        compaction.compact,
        check,
        at_least=5,
    )
    assert requests >= 5


def test_compactors_racing_on_seaweedfs_count_each_row_once(seaweedfs: Any) -> None:
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}")
    with stashpoint.open(url) as stash:
        _fill(stash)

        def compactor() -> None:
            with stashpoint.open(url) as own:
                compaction.compact(own, min_files=2)

        threads_at_once(3, compactor)
        assert _table_rows(stash) == _expected(stash, *ACME, *GLOBEX)
        assert len(compaction.table_files(stash)) == 2  # acme's and globex's


def test_hostile_objects_in_the_compacted_folder_are_erased_never_counted(
    tmp_path: Path,
) -> None:
    with stashpoint.open(f"local://{tmp_path / 'stash'}") as stash:
        _fill(stash)
        compaction.compact(stash)
        folder = stash.layout.key(PROJECTION, f"{COMPACTED}/logs/acme/")
        zero = "0" * 20
        small = stash.layout.key(PROJECTION, f"logs/acme.t0/{zero}-{zero}.parquet")
        globex = stash.layout.key(PROJECTION, "logs/globex.t0/")
        planted = {
            "a.covers.json": b"\xff\xfe not json",
            "a.parquet": b"PAR1 garbage",
            "b.parquet": b"PAR1 a file without covers",
            "c.covers.json": b'{"format": "stashpoint.compacted/1", "namespace": "logs", '
            b'"tenant": "acme", "covers": [["' + small.encode() + b'", "not its identity"]]}',
            "d.covers.json": b'{"format": "stashpoint.compacted/1", "namespace": "logs", '
            b'"tenant": "acme", "covers": [["' + globex.encode() + b'x.parquet", "y"]]}',
            "d.parquet": b"PAR1",
            "notes.txt": b"\x00\x07 control characters",
        }
        for name, body in planted.items():
            stash.driver(PutObject(folder + name, body, None))
        report = compaction.compact(stash)
        assert {folder + name for name in planted} <= set(report.erased)
        assert _table_rows(stash) == _expected(stash, *ACME, *GLOBEX)


def test_bad_input_gets_typed_errors(tmp_path: Path) -> None:
    from stashpoint.encryption import Encryption

    with stashpoint.open(f"local://{tmp_path / 'stash'}") as stash:
        for bad in ({"target_bytes": 0}, {"min_files": -1}, {"min_files": True}):
            with pytest.raises(InvalidArgument):
                compaction.compact(stash, **bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            compaction.compact(stash, namespaces=["not-a-namespace"])
    encryption = Encryption.local(tmp_path / "keyring.json", ("acme", "acme."))
    with (
        stashpoint.open(f"local://{tmp_path / 'sealed'}", encryption=encryption) as stash,
        pytest.raises(InvalidArgument),
    ):
        compaction.compact(stash)
