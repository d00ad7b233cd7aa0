"""A tiny S3 look-alike that accepts every PUT: it ignores If-None-Match and If-Match.

Such servers exist; `stashpoint doctor` must catch them. It keeps objects in a dict and
answers PUT, GET, HEAD, DELETE, versioning (off) and an empty version listing.
"""

from __future__ import annotations

import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit


class _Handler(BaseHTTPRequestHandler):
    server: FakeS3

    def log_message(self, *args: object) -> None:
        pass

    def _key(self) -> str:
        return urlsplit(self.path).path.lstrip("/")

    def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_PUT(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.headers.get("Expect") == "100-continue":
            pass
        etag = '"' + hashlib.md5(body).hexdigest() + '"'
        self.server.objects[self._key()] = (body, etag)  # conditions? never heard of them
        self._send(200, headers={"ETag": etag})

    def do_GET(self) -> None:
        query = urlsplit(self.path).query
        if "versioning" in query:
            self._send(
                200, b'<VersioningConfiguration xmlns="http://s3.amazonaws.com/doc/2006-03-01/"/>'
            )
            return
        if "versions" in query:
            self._send(200, b'<ListVersionsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
                            b"<IsTruncated>false</IsTruncated></ListVersionsResult>")  # fmt: skip
            return
        found = self.server.objects.get(self._key())
        if found is None:
            self._send(404, b"<Error><Code>NoSuchKey</Code></Error>")
            return
        self._send(200, found[0], {"ETag": found[1]})

    do_HEAD = do_GET

    def do_DELETE(self) -> None:
        self.server.objects.pop(self._key(), None)
        self._send(204)


class FakeS3(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.objects: dict[str, tuple[bytes, str]] = {}
        self.endpoint = f"http://127.0.0.1:{self.server_address[1]}"
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    def __enter__(self) -> FakeS3:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
