"""pyiceberg's file I/O through the stash: the Iceberg table's writes through the write engine.

`StashFileIO` is the `FileIO` `stashpoint.iceberg.publish` gives pyiceberg: the table's
metadata files, manifest lists and manifests are created only if absent (`If-None-Match`,
`writes.create_named`, judged by their bytes when found), so they pass a bucket policy that
denies unconditional writes under the stash's prefix (`infra/stashpoint.yaml`), the fault
proxy's unclear answers are judged like every other create, and a crash or a resend never
writes over another file. A deletion (the manifests of expired snapshots) erases every
stored version, as a purge does. Reads (the projected files' footers, the table's metadata)
are GETs of the stash.

pyiceberg makes a `FileIO` from properties alone (`py-io-impl`), so the stash is found by a
token `publish` registers for the length of its run (`lent`).
"""

from __future__ import annotations

import io
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from pyiceberg.io import FileIO, InputFile, InputStream, OutputFile, OutputStream

from stashpoint.errors import InvalidArgument, StorageUnavailable
from stashpoint.steps import run_sync
from stashpoint.stores import writes
from stashpoint.stores.objects import (
    Create,
    GetObject,
    HeadObject,
    ObjectInfo,
    PutObject,
    delete_every_version,
)

if TYPE_CHECKING:
    from stashpoint.composition import EngineFiles
    from stashpoint.stash import Stash

__all__ = ["IO_IMPL", "TOKEN", "StashFileIO", "lent"]

IO_IMPL = f"{__name__}.StashFileIO"
"""pyiceberg's `py-io-impl` property naming this file I/O."""
TOKEN = "stashpoint.stash-token"
"""The property naming the lent stash."""
READ_LIMIT = 1 << 30
"""Largest file read through the stash (a projected file, a manifest)."""
_LENT: dict[str, tuple[Stash, EngineFiles]] = {}
_LENT_LOCK = threading.Lock()


@contextmanager
def lent(stash: Stash, files: EngineFiles) -> Iterator[dict[str, str]]:
    """Lend `stash` to the file I/O pyiceberg makes meanwhile; yield the properties naming it."""
    token = uuid.uuid4().hex
    with _LENT_LOCK:
        _LENT[token] = (stash, files)
    try:
        yield {"py-io-impl": IO_IMPL, TOKEN: token}
    finally:
        with _LENT_LOCK:
            _LENT.pop(token, None)


class StashFileIO(FileIO):
    """pyiceberg file I/O over a lent stash: create-only writes, erasing deletes."""

    def __init__(self, properties: Any = None) -> None:
        super().__init__(properties or {})
        with _LENT_LOCK:
            found = _LENT.get(str(self.properties.get(TOKEN)))
        if found is None:
            raise InvalidArgument("the Iceberg table's file I/O is used outside a publish")
        self.stash, self.files = found

    def key(self, location: str) -> str:
        """Return the stash key of `location` (a URI under the stash's files)."""
        root = f"{self.files.root}/"
        if location.startswith("/") and root.startswith("file:///"):
            location = f"file://{location}"  # a local path, as pyiceberg may give one
        if not location.startswith(root):
            raise InvalidArgument("an Iceberg file outside the stash", object_name=location)
        return location[len(root) :]

    def new_input(self, location: str) -> InputFile:
        """Return the file at `location`, read with one GET."""
        return _StashInput(self, location)

    def new_output(self, location: str) -> OutputFile:
        """Return a file to create at `location` (only if absent)."""
        return _StashOutput(self, location)

    def delete(self, location: str | InputFile | OutputFile) -> None:
        """Erase every stored version of the file at `location`."""
        where = location if isinstance(location, str) else location.location
        key = self.key(where)
        _, failures = run_sync(delete_every_version(key), self.stash.driver)
        if failures:
            raise StorageUnavailable("an Iceberg file could not be erased", object_name=key)


class _StashInput(InputFile):
    def __init__(self, owner: StashFileIO, location: str) -> None:
        super().__init__(location)
        self.owner = owner
        self.info: ObjectInfo | None = None

    def _read(self) -> ObjectInfo:
        if self.info is None:
            key = self.owner.key(self.location)
            info = self.owner.stash.driver(GetObject(key, None, READ_LIMIT))
            if info is None:
                raise FileNotFoundError(self.location)
            self.info = info
        return self.info

    def __len__(self) -> int:
        return len(self._read().body or b"")

    def exists(self) -> bool:
        if self.info is not None:
            return True
        key = self.owner.key(self.location)
        return self.owner.stash.driver(HeadObject(key)) is not None

    def open(self, seekable: bool = True) -> InputStream:
        return io.BytesIO(self._read().body or b"")


class _Buffer(io.BytesIO):
    """An output stream that creates its file when closed."""

    def __init__(self, output: _StashOutput) -> None:
        super().__init__()
        self.output = output

    def close(self) -> None:
        if not self.closed:
            body = self.getvalue()
            super().close()
            self.output.write(body)


class _StashOutput(OutputFile):
    def __init__(self, owner: StashFileIO, location: str) -> None:
        super().__init__(location)
        self.owner = owner
        self.written: bytes | None = None

    def __len__(self) -> int:
        return len(self.written) if self.written is not None else len(self.to_input_file())

    def exists(self) -> bool:
        return self.to_input_file().exists()

    def to_input_file(self) -> InputFile:
        return _StashInput(self.owner, self.location)

    def create(self, overwrite: bool = False) -> OutputStream:
        return _Buffer(self)

    def write(self, body: bytes) -> None:
        """Create the file with `body`: kept when found with the same bytes, else replaced."""
        key = self.owner.key(self.location)
        request = PutObject(key, body, Create(), content_encoding=None)
        run_sync(
            writes.create_named(
                request,
                writes.same_bytes(body),
                self.owner.stash.retry,
                what="iceberg metadata",
                limit=READ_LIMIT,
                refresh=False,
            ),
            self.owner.stash.driver,
        )
        self.written = body
