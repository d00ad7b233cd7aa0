"""A local folder as object storage: the embedded default, safe across processes.

Layout under the root folder (keys as in S3):

    {key}                               the head: a plain zstd frame, `zstd -d < f | jq` works
    .versions/{key}/{ns}-{etag}         every stored version (a hard link, no copy)
    .versions/{key}/.pending            the version of a write in progress (a hard link)
    .locks/{key}.lock                   one lock file per key (flock); it records the
                                        newest version name, so names keep write order
    .tmp/                               files being written (swept after an hour)

A write takes the key's lock, settles any write a crash interrupted (below), checks the
condition against the head, writes a temp file, fsyncs it, links it as the key's `.pending`
version, renames it over the head, then renames `.pending` to its final version name and
fsyncs the folders. A crash leaves the old head or the new one, never a torn file.

Why `.pending`: a version has to be linked before the head is replaced (after the rename the
temp name is gone), so a crash in between leaves a version that was never the head. Linked
under its final name, that orphan sat between two real revisions once the next write landed
and `history` listed one revision twice. Under the fixed name `.pending`, the next locked
operation settles it: if its bytes are the head's, the write landed and it is promoted to a
version; otherwise it never landed and is removed. Readers of history settle it first too.
A head found without any version (a power loss that kept the head's rename but not the link
in the other folder, or a file copied in by hand) is given one before anything lists or
replaces it.

Symlinks: nothing inside the root is followed. Every path is checked component by component
below the root (`lstat`), files are opened with `O_NOFOLLOW`, and listings skip links; a
link where a folder or object should be raises `UnsafeStorage` naming it, so a planted link
cannot make a load read, a delete or gc remove, or the temp sweep touch anything outside the
store. The root itself may be a symlink (it is the user's choice of folder).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import itertools
import os
import stat
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ClassVar

from stashpoint._backends.without_extras import EXTRAS, answer_without_extras
from stashpoint.errors import (
    ConfigurationError,
    InvalidId,
    LimitExceeded,
    StashpointError,
    StorageUnavailable,
    UnsafeStorage,
)
from stashpoint.stores.layout import NAMESPACES, is_namespace_name
from stashpoint.stores.objects import (
    Create,
    DeleteFailure,
    DeleteKeys,
    DeleteObject,
    DeleteVersions,
    GetObject,
    HeadObject,
    KeyPage,
    ListKeys,
    ListVersionPage,
    ListVersions,
    Match,
    ObjectInfo,
    ObjectRequest,
    PutObject,
    StoredVersion,
    VersionPage,
    VersionRef,
    WriteOutcome,
    WriteResult,
    delimited,
)

_VERSIONS = ".versions"
_LOCKS = ".locks"
_TMP = ".tmp"
_PENDING = ".pending"
_NS_DIGITS = 20
_RESERVED = frozenset({_VERSIONS, _LOCKS, _TMP})
_DELETED = "deleted"
"""Version-name suffix of a delete marker (an empty file)."""
_READ_ONLY = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})
_MAX_NAME = 255
_ABANDONED_AFTER_SECONDS = 3600
"""A temp file this old belongs to a writer that died (a write takes milliseconds)."""


class _AfterCommit(Exception):
    """An error after the new version was in place: stored, of unclear durability."""

    def __init__(self, error: OSError) -> None:
        super().__init__(error)
        self.error = error


class _NotStored(Exception):
    """A write failed before its commit point: certainly nothing was stored."""

    def __init__(self, error: OSError) -> None:
        super().__init__(str(error))
        self.error = error


def _certain_failure(exc: OSError, key: str) -> StashpointError:
    """Return the typed error of a write that certainly did not happen."""
    if exc.errno in _READ_ONLY:
        return ConfigurationError(
            f"the stash folder is not writable ({exc.strerror}): nothing was stored",
            object_name=key,
        )
    if exc.errno == errno.ENAMETOOLONG:
        return InvalidId(f"the file system refuses this name as too long: {exc}", object_name=key)
    return StorageUnavailable(f"local write failed, nothing was stored: {exc}", object_name=key)


_FILE_MODE = 0o600
"""Mode of every file the local backend creates (owner only; the umask may narrow it)."""
_FOLDER_MODE = 0o700
"""Mode of every folder the local backend creates."""


def _lock_name(key: str) -> str:
    folder, _, name = key.rpartition("/")
    if len(name) + len(".lock") > _MAX_NAME:
        name = hashlib.sha256(name.encode()).hexdigest()
    return f"{folder}/{name}.lock" if folder else f"{name}.lock"


def _etag(body: bytes) -> str:
    return hashlib.blake2b(body, digest_size=16).hexdigest()


def _version_names(folder: Path) -> list[str]:
    """Return the names of a key's settled versions, newest first."""
    try:
        return sorted((n for n in os.listdir(folder) if n != _PENDING), reverse=True)
    except FileNotFoundError:
        return []


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def nested_stash(root: Path) -> Path | None:
    """Return a stash folder that shares keys with a stash at `root`, or None.

    A stash in a folder named after a namespace (`outer/checkpoints`) shares its keys with
    a stash at `outer`, and a folder named after a namespace inside `root` may be a stash
    sharing `root`'s. A folder is taken for a stash when it holds the SQLite index or the
    lock folder every write makes. A few `stat` calls on open, so only real neighbours are
    refused.
    """

    def is_stash(folder: Path) -> bool:
        with contextlib.suppress(OSError):
            return (folder / "index.sqlite3").is_file() or (folder / _LOCKS).is_dir()
        return False

    if is_namespace_name(root.name) and is_stash(root.parent):
        return root.parent
    return next((root / name for name in NAMESPACES if is_stash(root / name)), None)


class LocalTransport:
    """Executes object requests against a folder, with a file lock per key."""

    def __init__(self, root: str | os.PathLike[str], *, fsync: bool = True) -> None:
        self.root = Path(root)
        """The folder holding the objects."""
        self._root_text = os.fspath(self.root)
        # What every path below the root starts with ("" for the working folder itself,
        # which pathlib drops from the paths it joins).
        self._root_prefix = (
            "" if self._root_text == "." else self._root_text.rstrip(os.sep) + os.sep
        )
        self.fsync = fsync
        """Whether writes are flushed to disk before they are acknowledged."""
        self._swept = False

    def execute(self, request: ObjectRequest) -> Any:
        """Execute one object request and return its result."""
        if isinstance(request, EXTRAS):
            return answer_without_extras(request, "a stash in a local folder")
        handler = self._HANDLERS.get(type(request))
        if handler is None:
            raise TypeError(f"local storage cannot execute {request!r}")
        try:
            return handler(self, request)
        except OSError as exc:
            if isinstance(request, DeleteObject) and exc.errno in _READ_ONLY:
                raise _certain_failure(exc, request.key) from exc  # the unlink did not happen
            if isinstance(request, PutObject | DeleteObject):
                return WriteResult(WriteOutcome.AMBIGUOUS, detail=f"local I/O error: {exc}")
            raise StorageUnavailable(
                f"local storage error: {exc}", object_name=getattr(request, "key", None)
            ) from exc

    def _get_object(self, request: GetObject) -> ObjectInfo | None:
        return self._get(request.key, request.version_id, request.max_bytes)

    def _head_object(self, request: HeadObject) -> ObjectInfo | None:
        return self._get(request.key, request.version_id)

    def _delete_object(self, request: DeleteObject) -> WriteResult:
        if request.version_id is not None:
            return self._delete_version(request.key, request.version_id)
        return self._delete(request.key, request.etag)

    def _list_versions(self, request: ListVersions) -> list[VersionRef]:
        key = request.key
        if not self._versions_dir(key).exists() and self._read(self._path(key)) is None:
            return []  # never written (or purged): no lock file made for nothing
        with self._locked(key, reading=True) as lock_fd:
            if lock_fd is not None:
                self._settle_pending(lock_fd, key)
            return self._versions(lock_fd, key)

    def _list_version_page(self, request: ListVersionPage) -> VersionPage:
        return self._version_page(request.prefix, request.marker, request.page_size)

    def _delete_version_list(self, request: DeleteVersions) -> list[DeleteFailure]:
        return self._delete_versions(request.targets)

    def _delete_keys(self, request: DeleteKeys) -> list[DeleteFailure]:
        for key in request.keys:
            self._delete(key, None)
        return []

    def _list_keys(self, request: ListKeys) -> KeyPage:
        return self._list(request.prefix, request.after, request.page_size, request.delimiter)

    def close(self) -> None:
        """Nothing to release: files are opened per request."""

    def _path(self, key: str) -> Path:
        return self._safe(self.root / key)

    def _mkdirs(self, folder: Path) -> None:
        """Create `folder` and the folders above it up to the root, each owner-only.

        Transcripts are private: folders are 0700 and files 0600 (a umask may narrow
        them further, never widen them), whoever else shares the host.
        """
        missing: list[Path] = []
        current = folder
        while current != current.parent and not current.exists():
            missing.append(current)
            current = current.parent
        for path in reversed(missing):
            with contextlib.suppress(FileExistsError):
                path.mkdir(mode=_FOLDER_MODE)

    def _safe(self, path: Path) -> Path:
        """Return `path` once it stays below the root and no part there is a symlink.

        A key or listing prefix with a `.` or `..` segment (or an absolute one) is
        refused, so nothing outside the store is ever read, listed, written or deleted.
        """
        # Strings, not pathlib: this runs for every path of every request (about 25 per
        # write), and pathlib's joins cost more than the lstat calls themselves.
        text = os.fspath(path)
        if text == self._root_text:
            return path
        inside = text.startswith(self._root_prefix)
        relative = text[len(self._root_prefix) :] if inside else text
        parts = relative.split(os.sep)
        if not inside or os.path.isabs(relative) or "." in parts or ".." in parts:
            raise UnsafeStorage(
                "refusing a key or prefix that leaves the store (a '.' or '..' segment)",
                object_name=relative,
            )
        current = self._root_prefix
        for index, part in enumerate(parts):
            current = f"{current}{os.sep}{part}" if index else f"{current}{part}"
            try:
                mode = os.lstat(current).st_mode
            except (FileNotFoundError, NotADirectoryError):
                return path  # nothing further exists: nothing to follow
            if stat.S_ISLNK(mode):
                raise UnsafeStorage(
                    f"refusing to follow a symlink inside the store: {current}",
                    object_name=current,
                )
        return path

    def _versions_dir(self, key: str) -> Path:
        return self._safe(self.root / _VERSIONS / key)

    @contextlib.contextmanager
    def _locked(self, key: str, *, reading: bool = False) -> Iterator[int | None]:
        """Hold the key's lock; a reader of a read-only store goes on without one (None)."""
        lock_path = self._safe(self.root / _LOCKS / _lock_name(key))
        try:
            self._mkdirs(lock_path.parent)
            self._safe(lock_path)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, _FILE_MODE)
        except OSError as exc:
            if reading and exc.errno in _READ_ONLY:
                yield None  # nothing can change here, and nothing needs settling
                return
            raise
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)  # closing releases the lock

    def _name_version(self, lock_fd: int, key: str, head_etag: str | None, etag: str) -> str:
        """Name the key's next version so that names sort in write order.

        Names start with a nanosecond timestamp, but a wall clock can step backwards (NTP,
        a restored VM); a name sorting below the previous head would drop revisions from
        history. So a name is always above the previous one, which the key's lock file
        records; the record is trusted only if that version is still the head, otherwise
        the folder is listed once (after a crash, a deleted version, or an older layout).
        `head_etag` is the ETag of the head this version replaces. The caller holds the lock.
        """
        versions = self._versions_dir(key)
        raw = os.pread(lock_fd, _NS_DIGITS, 0)
        previous = int(raw) if len(raw) == _NS_DIGITS and raw.isdigit() else None
        if (
            previous is None
            or head_etag is None
            or not (versions / f"{previous:0{_NS_DIGITS}d}-{head_etag}").exists()
        ):
            names = self._version_head(lock_fd, key, head_etag)
            previous = int(names[0].partition("-")[0]) if names else 0
        return self._record_name(lock_fd, previous, etag)

    def _record_name(self, lock_fd: int, previous_ns: int, etag: str) -> str:
        ns = max(time.time_ns(), previous_ns + 1)
        os.pwrite(lock_fd, b"%0*d" % (_NS_DIGITS, ns), 0)
        return f"{ns:0{_NS_DIGITS}d}-{etag}"

    def _version_head(self, lock_fd: int | None, key: str, head_etag: str | None) -> list[str]:
        """Return the key's version names, newest first, after versioning an unversioned head.

        A head has no version when a power loss kept its rename but not the link made just
        before it in another folder, or when the file was copied in by hand. Left so, the
        next write would drop it from history, and every version would look newer than the
        head (unacknowledged) and go unlisted. The caller holds the key's lock.
        """
        versions = self._versions_dir(key)
        names = _version_names(versions)
        if head_etag is None or any(n.endswith(f"-{head_etag}") for n in names):
            return names
        current = self._read(self._path(key))
        if lock_fd is None or current is None:
            return names  # read-only: list what is there
        previous = int(names[0].partition("-")[0]) if names else 0
        name = self._record_name(lock_fd, previous, head_etag)
        self._mkdirs(versions)
        tmp_dir = self._safe(self.root / _TMP)
        self._mkdirs(tmp_dir)
        os.replace(self._temp_copy(tmp_dir, current), versions / name)
        if self.fsync:
            _fsync_dir(versions)
        return [name, *names]

    def _read(self, path: Path) -> bytes | None:
        found = self._read_file(path, None)
        return None if found is None else found[0]

    def _read_file(self, path: Path, max_bytes: int | None) -> tuple[bytes, float] | None:
        """Return a file's bytes and mtime, never through a symlink; None if absent."""
        self._safe(path)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # the file itself became a symlink
                raise UnsafeStorage(
                    f"refusing to follow a symlink inside the store: {path}",
                    object_name=str(path),
                ) from exc
            raise
        try:
            info = os.fstat(fd)
            if stat.S_ISDIR(info.st_mode):
                return None
            if max_bytes is not None and info.st_size > max_bytes:
                raise LimitExceeded(
                    f"object is {info.st_size} bytes, over the limit of {max_bytes}; "
                    "refused from its size, unread",
                    object_name=str(path),
                )
            with os.fdopen(os.dup(fd), "rb") as f:
                return f.read(), info.st_mtime
        finally:
            os.close(fd)

    def _get(
        self, key: str, version_id: str | None, max_bytes: int | None = None
    ) -> ObjectInfo | None:
        if version_id is None:
            path = self._path(key)
        else:
            path = self._safe(self._versions_dir(key) / version_id)
        found = self._read_file(path, max_bytes)
        if found is None:
            return None
        body, mtime = found
        modified = datetime.fromtimestamp(mtime, UTC)
        return ObjectInfo(
            etag=_etag(body),
            body=body,
            version_id=version_id,
            last_modified=modified,
            size=len(body),
        )

    def _put(self, request: PutObject) -> WriteResult:
        try:
            return self._put_locked(request)
        except _NotStored as failure:
            raise _certain_failure(failure.error, request.key) from failure.error

    def _put_locked(self, request: PutObject) -> WriteResult:
        head = self._path(request.key)
        committed = False
        try:
            with self._locked(request.key) as lock_fd:
                assert lock_fd is not None
                result = self._put_under_lock(request, head, lock_fd)
                committed = True
                return result
        except _AfterCommit as late:
            raise late.error from None  # stored: the caller judges it as unclear
        except OSError as exc:
            if not committed:
                raise _NotStored(exc) from exc
            raise

    def _put_under_lock(self, request: PutObject, head: Path, lock_fd: int) -> WriteResult:
        self._settle_pending(lock_fd, request.key)
        current = self._read(head)
        current_etag = None if current is None else _etag(current)
        condition = request.condition
        if isinstance(condition, Create) and current is not None:
            return WriteResult(
                WriteOutcome.PRECONDITION_FAILED, detail="object exists", retried=False
            )
        if isinstance(condition, Match):
            if current is None:
                return WriteResult(
                    WriteOutcome.NOT_FOUND, detail="no object to match", retried=False
                )
            if current_etag != condition.etag:
                return WriteResult(
                    WriteOutcome.PRECONDITION_FAILED, detail="etag differs", retried=False
                )
        etag = _etag(request.body)
        version = self._name_version(lock_fd, request.key, current_etag, etag)
        tmp_dir = self._safe(self.root / _TMP)
        self._mkdirs(tmp_dir)
        self._safe(tmp_dir)
        if not self._swept:
            self._sweep_abandoned(tmp_dir)
        # The version and the head are two copies, not one inode: a head corrupted in
        # place (a disk fault, an editor) leaves its version intact for history.
        versions = self._versions_dir(request.key)
        self._mkdirs(versions)
        self._safe(versions)
        os.replace(self._temp_copy(tmp_dir, request.body), versions / _PENDING)
        self._mkdirs(head.parent)
        self._safe(head)
        tmp = self._temp_copy(tmp_dir, request.body)
        try:
            os.replace(tmp, head)  # the commit point: before it nothing is stored
        except OSError:
            tmp.unlink(missing_ok=True)
            raise
        try:
            if self.fsync:
                _fsync_dir(head.parent)
            os.replace(versions / _PENDING, versions / version)
            if self.fsync:
                _fsync_dir(versions)
        except OSError as exc:  # stored; its durability is unclear
            raise _AfterCommit(exc) from exc
        return WriteResult(WriteOutcome.STORED, etag=etag)

    def _temp_copy(self, tmp_dir: Path, body: bytes) -> Path:
        """Write `body` to a new temp file (flushed to disk) and return its path."""
        tmp = tmp_dir / os.urandom(16).hex()
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, _FILE_MODE)
            with os.fdopen(fd, "wb") as f:
                f.write(body)
                if self.fsync:
                    f.flush()
                    os.fsync(f.fileno())
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return tmp

    def _sweep_abandoned(self, tmp_dir: Path) -> None:
        """Remove temp files left by writers killed mid-write, once per transport.

        Safe even for a writer that is only paused: losing its temp file fails its link,
        which it reports as an unclear outcome that the read-back settles.
        """
        self._swept = True
        cutoff = time.time() - _ABANDONED_AFTER_SECONDS
        with os.scandir(tmp_dir) as entries:
            for entry in entries:
                with contextlib.suppress(FileNotFoundError):
                    if entry.stat(follow_symlinks=False).st_mtime < cutoff:
                        os.unlink(entry.path)  # a link is removed, never its target

    def _settle_pending(self, lock_fd: int, key: str) -> None:
        """Finish or undo a write a crash interrupted; the caller holds the key's lock."""
        versions = self._versions_dir(key)
        pending = self._read(versions / _PENDING)
        if pending is None:
            return
        current = self._read(self._path(key))
        if current is not None and _etag(current) == _etag(pending):
            # The head was replaced before the crash: the version is real.
            # The lock file records the version before it, so this lists the folder once.
            name = self._name_version(lock_fd, key, None, _etag(pending))
            os.replace(versions / _PENDING, versions / name)
        else:
            # The crash came before the head was replaced: it never landed.
            (versions / _PENDING).unlink(missing_ok=True)
        if self.fsync:
            _fsync_dir(versions)

    def _delete(self, key: str, etag: str | None) -> WriteResult:
        head = self._path(key)
        with self._locked(key) as lock_fd:
            assert lock_fd is not None  # only readers go without the lock
            self._settle_pending(lock_fd, key)
            current = self._read(head)
            if current is None:
                return WriteResult(WriteOutcome.NOT_FOUND if etag else WriteOutcome.STORED)
            if etag is not None and _etag(current) != etag:
                return WriteResult(
                    WriteOutcome.PRECONDITION_FAILED, detail="etag differs", retried=False
                )
            # A delete marker in the history, as S3 versioning keeps one: the history of a
            # re-created id starts after it.
            versions = self._versions_dir(key)
            self._mkdirs(versions)
            marker = self._name_version(lock_fd, key, _etag(current), _DELETED)
            head.unlink()
            if self.fsync:
                _fsync_dir(head.parent)
            os.close(
                os.open(versions / marker, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, _FILE_MODE)
            )
            if self.fsync:
                _fsync_dir(versions)
            return WriteResult(WriteOutcome.STORED)

    def _delete_version(self, key: str, version_id: str) -> WriteResult:
        """Delete one version for good; if it was current, the previous one becomes current."""
        with self._locked(key) as lock_fd:
            assert lock_fd is not None  # only readers go without the lock
            self._settle_pending(lock_fd, key)
            was_current = self._versions(lock_fd, key)[:1] == [VersionRef(version_id, True)]
            (self._versions_dir(key) / version_id).unlink(missing_ok=True)
            if was_current:
                names = _version_names(self._versions_dir(key))
                head = self._path(key)
                if not names or names[0].endswith(f"-{_DELETED}"):
                    head.unlink(missing_ok=True)  # what is left was deleted at that point
                else:
                    tmp_dir = self._safe(self.root / _TMP)
                    self._mkdirs(tmp_dir)
                    previous = self._versions_dir(key) / names[0]
                    os.replace(self._temp_copy(tmp_dir, previous.read_bytes()), head)
                if self.fsync:
                    _fsync_dir(head.parent)
            self._purge_if_gone(key)
        return WriteResult(WriteOutcome.STORED)

    def _version_page(
        self, prefix: str, marker: tuple[str, str] | None, page_size: int
    ) -> VersionPage:
        """List the versions of every key under `prefix`, a page of whole keys at a time.

        Keys are found among the heads and among the versions folders (a key whose head is
        deleted keeps its versions there). The marker names the last key listed.
        """
        listed: list[StoredVersion] = []
        ordered = sorted(k for k in self._version_keys(prefix) if marker is None or k > marker[0])
        for index, key in enumerate(ordered):
            if len(listed) >= page_size:
                return VersionPage(listed, (ordered[index - 1], ""))
            listed += self._stored_versions(key)
        return VersionPage(listed, None)

    def _version_keys(self, prefix: str) -> set[str]:
        """Return every key under `prefix` with a head or a versions folder."""
        keys: set[str] = set()
        after = ""
        while True:
            heads = self._list(prefix, after, 100_000)
            keys.update(heads.keys)
            if heads.next_token is None:
                break
            after = heads.next_token
        folder = prefix.rpartition("/")[0]
        versions_root = self._safe(self.root / _VERSIONS)
        start = self._safe(versions_root / folder) if folder else versions_root
        for path, _, names in os.walk(start):  # never follows a symlinked folder
            if any(n != _PENDING for n in names):
                key = os.path.relpath(path, versions_root)
                if key.startswith(prefix):
                    keys.add(key)
        return keys

    def _stored_versions(self, key: str) -> list[StoredVersion]:
        """Return a key's versions, newest first, with their sizes and write times."""
        with self._locked(key, reading=True) as lock_fd:
            if lock_fd is not None:
                self._settle_pending(lock_fd, key)
            refs = self._versions(lock_fd, key)
        listed: list[StoredVersion] = []
        for ref in refs:
            size = 0
            written = None
            if not ref.is_delete_marker:
                with contextlib.suppress(OSError):
                    size = os.stat(self._versions_dir(key) / ref.version_id).st_size
            with contextlib.suppress(ValueError):
                written = datetime.fromtimestamp(int(ref.version_id.partition("-")[0]) / 1e9, UTC)
            etag = None if ref.is_delete_marker else ref.version_id.partition("-")[2]
            listed.append(
                StoredVersion(
                    key, ref.version_id, ref.is_latest, ref.is_delete_marker, size, etag, written
                )
            )
        return listed

    def _delete_versions(self, targets: tuple[tuple[str, str], ...]) -> list[DeleteFailure]:
        failures: list[DeleteFailure] = []
        for key, version_id in targets:
            if "/" in version_id or version_id in ("", ".", "..", _PENDING):
                failures.append(DeleteFailure(key, version_id, "InvalidVersionId"))
                continue
            self._delete_version(key, version_id)
        return failures

    def _purge_if_gone(self, key: str) -> bool:
        """After the last version of a key is deleted for good, remove what was left for it.

        Its versions folder, its lock file and the folders they emptied: a key deleted
        version by version (the doctor's probe) leaves nothing behind. Only whole-history
        deletes come here, which only the doctor makes, on keys no one else writes.
        """
        folder = self._versions_dir(key)
        if self._read(self._path(key)) is not None or _version_names(folder):
            return False
        for path in (folder / _PENDING, self.root / _LOCKS / _lock_name(key)):
            path.unlink(missing_ok=True)
        for start, top in ((folder, _VERSIONS), (self._path(key).parent, None),
                           ((self.root / _LOCKS / _lock_name(key)).parent, _LOCKS)):  # fmt: skip
            current = start
            while current != self.root and current.name not in (top, *_RESERVED):
                try:
                    current.rmdir()
                except OSError:
                    break  # not empty: others live there
                current = current.parent
        return True

    def _versions(self, lock_fd: int | None, key: str) -> list[VersionRef]:
        """Return the key's versions, newest first; the caller holds the key's lock."""
        current = self._read(self._path(key))
        head_etag = None if current is None else _etag(current)
        names = self._version_head(lock_fd, key, head_etag)
        refs: list[VersionRef] = []
        seen_head = head_etag is None
        for index, name in enumerate(names):
            if name.endswith(f"-{_DELETED}"):
                if seen_head:
                    refs.append(VersionRef(name, head_etag is None and index == 0, True))
                continue
            is_head = not seen_head and name.endswith(f"-{head_etag}")
            if not seen_head and not is_head:
                continue  # linked by a write that crashed before it replaced the head
            seen_head = True
            refs.append(VersionRef(name, is_head))
        return refs

    def _list(
        self, prefix: str, after: str, page_size: int, delimiter: str | None = None
    ) -> KeyPage:
        folder, _, name_prefix = prefix.rpartition("/")
        base = self._safe(self.root / folder) if folder else self.root
        # Walked in key order, folders wholly at or before `after` passed over, and stopped
        # one key past the page: a page costs what it lists, not the whole prefix (a
        # namespace of 200 logs of 400 versions was walked whole for every page).
        ordered = self._ordered(base, folder, name_prefix, after)
        prefixes: list[str] = []
        if delimiter:
            page, prefixes, token = delimited(ordered, prefix, delimiter, page_size)
        else:
            keys = list(itertools.islice(ordered, page_size + 1))
            page = keys[:page_size]
            token = page[-1] if len(keys) > page_size else None
        stats = [self._stat(key) for key in page]
        return KeyPage(
            page,
            token,
            [datetime.fromtimestamp(seconds, UTC) for seconds, _ in stats],
            [size for _, size in stats],
            None,
            prefixes,
        )

    def _ordered(
        self, folder: Path, key_prefix: str, name_prefix: str, after: str
    ) -> Iterator[str]:
        """Yield the keys of regular files below `folder` after `after`, in key order.

        Never enters a symlink. A folder's keys all start with its name and a `/`: sorting
        siblings by their first key (a folder's name with `/` after it) is key order.
        """
        listed: list[tuple[str, os.DirEntry[str], bool]] = []
        try:
            with os.scandir(folder) as found:
                for entry in found:
                    if not entry.name.startswith(name_prefix):
                        continue
                    if not key_prefix and entry.name in _RESERVED:
                        continue
                    if entry.is_file(follow_symlinks=False):
                        listed.append((entry.name, entry, False))
                    elif entry.is_dir(follow_symlinks=False):
                        listed.append((entry.name + "/", entry, True))
                    # anything else (a symlink, a socket) is not an object: skipped
        except (FileNotFoundError, NotADirectoryError):
            return
        for _, entry, is_folder in sorted(listed, key=lambda item: item[0]):
            key = f"{key_prefix}/{entry.name}" if key_prefix else entry.name
            if not is_folder:
                if key > after:
                    yield key
            elif after[: len(key) + 1] <= key + "/":  # else every key in it is before `after`
                yield from self._ordered(Path(entry.path), key, "", after)

    def _stat(self, key: str) -> tuple[float, int]:
        """Return a listed file's write time and size."""
        try:
            stat = os.stat(self.root / key, follow_symlinks=False)
        except OSError:
            # Gone since the walk: the oldest possible (never "too new"), and as large as
            # a real object (never taken for a vacated marker).
            return 0.0, 1 << 62
        return stat.st_mtime, stat.st_size

    _HANDLERS: ClassVar[dict[type[Any], Callable[[Any, Any], Any]]] = {
        GetObject: _get_object,
        HeadObject: _head_object,
        PutObject: _put,
        DeleteObject: _delete_object,
        ListVersions: _list_versions,
        ListVersionPage: _list_version_page,
        DeleteVersions: _delete_version_list,
        DeleteKeys: _delete_keys,
        ListKeys: _list_keys,
    }
    """How the local transport executes each request it can."""
