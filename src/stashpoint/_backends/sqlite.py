"""SQLite as the index: the embedded default, the same model as the DynamoDB table.

One connection per thread (WAL mode, a busy timeout), so threads and processes on one
machine share the file safely. Items whose `expires_at` has passed are hidden from queries,
as DynamoDB's TTL would eventually delete them.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from stashpoint.errors import IndexDamaged, StorageUnavailable, UnsupportedFormat
from stashpoint.index.requests import (
    DeleteItem,
    DescribeIndex,
    Expected,
    GetItem,
    GetItems,
    GetPartition,
    IndexDescription,
    IndexRequest,
    ItemPage,
    Malformed,
    PutItems,
    QueryItems,
    ReplaceItems,
)
from stashpoint.index.schema import (
    KEY_ATTRIBUTES,
    LAYOUT,
    PARTITION_KEY,
    REVISION,
    SECONDARY_INDEXES,
    SORT_KEY,
    TTL_ATTRIBUTE,
    sqlite_missing_columns,
    sqlite_schema,
)

_COLUMNS = (*KEY_ATTRIBUTES, REVISION, TTL_ATTRIBUTE, "item")
_UPSERT = (
    f"INSERT INTO items ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _ in _COLUMNS)}) "
    f"ON CONFLICT ({PARTITION_KEY}, {SORT_KEY}) DO UPDATE SET "
    + ", ".join(f"{c} = excluded.{c}" for c in _COLUMNS[2:])
    + f" WHERE excluded.{REVISION} > items.{REVISION}"
)
_GSI = {gsi.name: gsi for gsi in SECONDARY_INDEXES}


def _row(item: Any) -> list[Any]:
    """Return the column values of an item (its keys, revision, TTL, and the item as JSON)."""
    row = [item.get(k) for k in KEY_ATTRIBUTES]
    return [*row, item[REVISION], item.get(TTL_ATTRIBUTE), json.dumps(dict(item))]


def _expecting(expected: int | Malformed) -> tuple[str, tuple[Any, ...]]:
    """Return the SQL condition (and its parameters) that finds the stored revision."""
    if isinstance(expected, Malformed):
        # The item's JSON says what was stored (the column coerces "7" to 7).
        return "json_type(item, '$.revision') IS NOT 'integer'", ()
    return f"{REVISION} = ? AND json_type(item, '$.revision') = 'integer'", (expected,)


def _in_transaction(db: sqlite3.Connection, writes: Callable[[], int]) -> int:
    """Run `writes` in one immediate transaction; return how many rows they changed."""
    db.execute("BEGIN IMMEDIATE")
    try:
        written = writes()
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise
    return written


def _refuse_other_layout(db: sqlite3.Connection, path: str) -> None:
    """Refuse a file of another index layout, before anything is written to it.

    Format v1 has index layout 2 only. The index is derived from storage, so a file of an
    earlier pre-release layout is rebuilt, not migrated: delete it and run `stashpoint
    reindex`. A new file (no table yet) is this layout's.
    """
    if db.execute("PRAGMA user_version").fetchone()[0] == LAYOUT:
        return
    columns = {row[1] for row in db.execute("PRAGMA table_info(items)")}
    if columns and sqlite_missing_columns(columns):
        raise UnsupportedFormat(
            "this index file has an earlier pre-release layout: delete it and run "
            "`stashpoint reindex` to rebuild it from storage",
            object_name=path,
        )


def _writable_dir(folder: Path) -> bool:
    """Whether files can be made in `folder` (a read-only mount says no even to root)."""
    try:
        probe = folder / f".stashpoint-probe-{os.getpid()}"
        os.close(os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        probe.unlink()
    except OSError:
        return False
    return True


def _empty_index() -> sqlite3.Connection:
    """Return an empty index database in memory (what a read of no file answers from)."""
    connection = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
    for statement in sqlite_schema():
        connection.execute(statement)
    return connection


class SqliteIndexTransport:
    """Executes index requests against one SQLite file (or a private in-memory database)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        """The database file, or `:memory:`."""
        self._local = threading.local()
        self._memory: sqlite3.Connection | None = None
        self._memory_lock = threading.Lock()
        self._closed = False

    def _connection(self, *, writing: bool = True) -> sqlite3.Connection:
        """Return this thread's connection; a read of an index not made yet makes nothing.

        Reading a file that does not exist answers from an empty database in memory (so a
        typo'd URL, or a read command in another folder, creates no file); the first write
        creates the file.
        """
        if self.path == ":memory:":
            # One shared connection: an in-memory database is private to its connection.
            if self._memory is None:
                self._memory = self._open()
            return self._memory
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None and not writing and not Path(self.path).exists():
            empty: sqlite3.Connection | None = getattr(self._local, "empty", None)
            if empty is None:
                empty = self._local.empty = _empty_index()
            return empty
        if connection is None:
            path = Path(self.path)
            if not path.parent.exists():
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            if not path.exists():
                # Owner-only, like the store's files (its -wal and -shm files follow it).
                with contextlib.suppress(OSError):
                    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            connection = self._open()
            self._local.connection = connection
        return connection

    def _open(self) -> sqlite3.Connection:
        try:
            return self._open_writable()
        except sqlite3.OperationalError as exc:
            if self.path == ":memory:" or (
                os.access(self.path, os.W_OK) and _writable_dir(Path(self.path).parent)
            ):
                raise
            failure = exc
        # A file this process may not write (a read-only mount, another user's stash):
        # opened read-only, so listings still work; a write then fails as storage's refusal.
        try:
            return self._open_read_only()
        except sqlite3.OperationalError:
            raise failure from None

    def _open_read_only(self) -> sqlite3.Connection:
        uri = Path(self.path).resolve().as_uri()
        for mode in ("mode=ro", "mode=ro&immutable=1"):  # immutable: no -shm to write either
            connection = sqlite3.connect(
                f"{uri}?{mode}", uri=True, timeout=30, isolation_level=None,
                check_same_thread=False,
            )  # fmt: skip
            try:
                _refuse_other_layout(connection, self.path)
                connection.execute("SELECT 1 FROM items LIMIT 1").fetchall()
            except sqlite3.OperationalError:
                connection.close()
                continue
            except BaseException:
                connection.close()
                raise
            return connection
        raise sqlite3.OperationalError(f"cannot open {self.path} even read-only")

    def _open_writable(self) -> sqlite3.Connection:
        connection = sqlite3.connect(
            self.path, timeout=30, isolation_level=None, check_same_thread=False
        )
        try:
            connection.execute("PRAGMA busy_timeout = 30000")
            _refuse_other_layout(connection, self.path)
            if self.path != ":memory:":
                connection.execute("PRAGMA journal_mode = WAL")
                connection.execute("PRAGMA synchronous = NORMAL")
            for statement in sqlite_schema():
                connection.execute(statement)
            if connection.execute("PRAGMA user_version").fetchone()[0] != LAYOUT:
                connection.execute(f"PRAGMA user_version = {LAYOUT}")
        except BaseException:
            connection.close()  # a refused file is not left open (and locked) behind
            raise
        return connection

    def execute(self, request: IndexRequest) -> Any:
        """Execute one index request."""
        try:
            if self.path == ":memory:":
                with self._memory_lock:
                    return self._execute(request)
            return self._execute(request)
        except sqlite3.Error as exc:
            if type(exc) is sqlite3.DatabaseError:  # not busy or locked: the file is damaged
                raise IndexDamaged(
                    f"the SQLite run index is damaged ({exc}); it is derived from storage: "
                    "`stashpoint reindex` sets it aside and rebuilds it",
                    object_name=self.path,
                ) from None
            raise StorageUnavailable(f"SQLite index error: {exc}", object_name=self.path) from exc

    def _execute(self, request: IndexRequest) -> Any:
        db = self._connection(writing=isinstance(request, PutItems | ReplaceItems | DeleteItem))
        match request:
            case PutItems(items):
                return _in_transaction(
                    db, lambda: sum(db.execute(_UPSERT, _row(item)).rowcount for item in items)
                )
            case ReplaceItems(pairs):
                return _in_transaction(
                    db, lambda: sum(self._replace(db, item, expected) for item, expected in pairs)
                )
            case GetPartition(pk):
                rows = db.execute(
                    "SELECT item FROM items WHERE pk = ? ORDER BY sk", (pk,)
                ).fetchall()
                return [json.loads(r[0]) for r in rows]
            case GetItems(keys):
                return self._get_items(db, keys)
            case GetItem(pk, sk):
                found = db.execute(
                    "SELECT item FROM items WHERE pk = ? AND sk = ?", (pk, sk)
                ).fetchone()
                return None if found is None else json.loads(found[0])
            case DeleteItem(pk, sk, expected):
                if expected is None:
                    db.execute("DELETE FROM items WHERE pk = ? AND sk = ?", (pk, sk))
                else:
                    where, values = _expecting(expected)
                    db.execute(
                        f"DELETE FROM items WHERE pk = ? AND sk = ? AND {where}", (pk, sk, *values)
                    )
                return None
            case QueryItems():
                return self._query(db, request)
            case DescribeIndex():
                names = tuple(
                    row[0]
                    for row in db.execute(
                        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'items'"
                    )
                    if not row[0].startswith("sqlite_")
                )
                # Expired items are hidden from queries: SQLite's stand-in for DynamoDB TTL.
                return IndexDescription(True, names, TTL_ATTRIBUTE, engine="sqlite")
        raise TypeError(f"SQLite index cannot execute {request!r}")

    @staticmethod
    def _replace(db: sqlite3.Connection, item: Any, expected: Expected) -> int:
        row = _row(item)
        if expected is None:
            insert = f"INSERT OR IGNORE INTO items ({', '.join(_COLUMNS)}) VALUES "
            return db.execute(insert + f"({', '.join('?' for _ in _COLUMNS)})", row).rowcount
        sets = ", ".join(f"{c} = ?" for c in _COLUMNS[2:])
        where, values = _expecting(expected)
        return db.execute(
            f"UPDATE items SET {sets} WHERE pk = ? AND sk = ? AND {where}",
            (*row[2:], item[PARTITION_KEY], item[SORT_KEY], *values),
        ).rowcount

    @staticmethod
    def _get_items(db: sqlite3.Connection, keys: tuple[tuple[str, str], ...]) -> list[Any]:
        found: dict[tuple[str, str], Any] = {}
        for start in range(0, len(keys), 400):  # SQLite's host-parameter limit
            chunk = keys[start : start + 400]
            where = " OR ".join("(pk = ? AND sk = ?)" for _ in chunk)
            rows = db.execute(
                f"SELECT pk, sk, item FROM items WHERE {where}", [p for key in chunk for p in key]
            )
            for pk, sk, raw in rows:
                found[(pk, sk)] = json.loads(raw)
        return [found.get(key) for key in keys]

    def _query(self, db: sqlite3.Connection, request: QueryItems) -> ItemPage:
        gsi = _GSI[request.index]
        where = [f"{gsi.partition_key} = ?", f"({TTL_ATTRIBUTE} IS NULL OR {TTL_ATTRIBUTE} > ?)"]
        params: list[Any] = [request.partition, int(time.time())]
        if request.sort_at_least is not None:
            where.append(f"{gsi.sort_key} >= ?")
            params.append(request.sort_at_least)
        if request.sort_below is not None:
            where.append(f"{gsi.sort_key} < ?")
            params.append(request.sort_below)
        rows = db.execute(
            f"SELECT item FROM items WHERE {' AND '.join(where)} "
            f"ORDER BY {gsi.sort_key} {'ASC' if request.ascending else 'DESC'} LIMIT ?",
            (*params, request.limit + 1),
        ).fetchall()
        items = [json.loads(r[0]) for r in rows[: request.limit]]
        return ItemPage(items, len(rows) > request.limit)

    def close(self) -> None:
        """Close this thread's connection (others close when their threads end)."""
        connection = getattr(self._local, "connection", None)
        if connection is not None:
            connection.close()
            self._local.connection = None
        empty = getattr(self._local, "empty", None)
        if empty is not None:
            empty.close()
            self._local.empty = None
        if self._memory is not None:
            self._memory.close()
            self._memory = None
