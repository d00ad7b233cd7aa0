"""`file://` sources of fleet maps: a folder's files, a manifest on local disk.

Any stash reads them (the router sends `file://` source requests here, whatever the
stash's storage): a planner on a laptop or a build machine maps over files it has. Keys
are paths relative to the folder, `/`-separated, in order; a file's ETag is its size and
modification time, so a manifest rewritten while it is read is `SourceChanged`.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stashpoint.errors import ConfigurationError, SourceChanged, StorageUnavailable
from stashpoint.stores.objects import KeyPage, ListSource, ObjectInfo, ReadSource, source_parts


class FileSources:
    """Executes `ListSource` and `ReadSource` for `file://` URLs."""

    def execute(self, request: Any) -> Any:
        """Execute one source request."""
        try:
            if isinstance(request, ListSource):
                return self._list(request)
            if isinstance(request, ReadSource):
                return self._read(request)
        except OSError as exc:
            raise StorageUnavailable(
                f"local source error: {exc.strerror or type(exc).__name__}",
                object_name=getattr(request, "url", None),
            ) from exc
        raise TypeError(f"file sources cannot execute {request!r}")

    def _list(self, request: ListSource) -> KeyPage:
        root = Path(source_parts(request.url)[2])
        if not root.is_dir():
            raise ConfigurationError(f"no folder at {request.url}", object_name=request.url)
        files: list[tuple[str, os.stat_result]] = []
        for folder, dirs, names in os.walk(root):
            dirs.sort()
            for name in names:
                path = Path(folder) / name
                if path.is_file():
                    files.append((path.relative_to(root).as_posix(), path.stat()))
        files.sort()
        after = request.token or ""
        page = [f for f in files if f[0] > after][: request.page_size]
        more = len(page) == request.page_size and files and page[-1][0] < files[-1][0]
        return KeyPage(
            [key for key, _ in page],
            page[-1][0] if more else None,
            [datetime.fromtimestamp(st.st_mtime, UTC) for _, st in page],
            [st.st_size for _, st in page],
            None,
        )

    def _read(self, request: ReadSource) -> ObjectInfo | None:
        path = Path(source_parts(request.url)[2])
        try:
            handle = path.open("rb")
        except FileNotFoundError:
            return None
        with handle:
            stat = os.fstat(handle.fileno())
            etag = f"{stat.st_size}-{stat.st_mtime_ns}"
            if request.etag and request.etag != etag:
                raise SourceChanged("the file changed while it was read", object_name=request.url)
            handle.seek(request.start)
            body = handle.read() if request.length is None else handle.read(request.length)
        return ObjectInfo(etag=etag, body=body, size=stat.st_size)

    def close(self) -> None:
        """Nothing to release: files are opened per request."""
