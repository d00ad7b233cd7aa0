"""A small fault-injecting HTTP/1.1 proxy for S3 traffic, on 127.0.0.1.

It relays SigV4-signed requests byte for byte (the Host header is signed with the proxy's
address and the server checks it as received), answers `Expect: 100-continue` itself, sets
TCP_NODELAY, and on object PUTs (and bulk deletes, `POST ?delete`) can:

- `drop_response`: forward the request, let the server apply it, then close the client's
  connection without an answer (the classic "did my write land?" case);
- `drop_request`: close the connection without forwarding anything;
- `slowdown`: answer 503 SlowDown without forwarding;
- `conflict`: answer 409 ConditionalRequestConflict without forwarding.

Faults are drawn from a seeded random generator, so a run is reproducible.
"""

from __future__ import annotations

import random
import socket
import socketserver
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, BinaryIO
from urllib.parse import SplitResult, urlsplit

FAULTS = ("drop_response", "drop_request", "slowdown", "conflict")


def _error_response(status: bytes, code: bytes, message: bytes) -> bytes:
    body = (
        b'<?xml version="1.0" encoding="UTF-8"?><Error><Code>'
        + code
        + b"</Code><Message>"
        + message
        + b"</Message></Error>"
    )
    return (
        b"HTTP/1.1 "
        + status
        + b"\r\nContent-Type: application/xml\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\n\r\n"
        + body
    )


_SLOWDOWN = _error_response(b"503 Slow Down", b"SlowDown", b"Please reduce your request rate.")
_CONFLICT = _error_response(
    b"409 Conflict", b"ConditionalRequestConflict", b"A conflicting operation is in progress."
)


@dataclass
class FaultPlan:
    """How often each fault strikes an object PUT (the rest pass through)."""

    rates: dict[str, float] = field(default_factory=dict)
    seed: int = 1234
    injected: Counter[str] = field(default_factory=Counter)

    def __post_init__(self) -> None:
        self._random = random.Random(self.seed)
        self._lock = threading.Lock()

    def draw(self) -> str:
        with self._lock:
            roll = self._random.random()
            for fault, rate in self.rates.items():
                if roll < rate:
                    self.injected[fault] += 1
                    return fault
                roll -= rate
            self.injected["pass"] += 1
            return "pass"


def _read_head(rfile: BinaryIO) -> tuple[bytes, list[tuple[bytes, bytes]]] | None:
    line = rfile.readline(65537)
    if not line:
        return None
    headers: list[tuple[bytes, bytes]] = []
    while True:
        raw = rfile.readline(65537)
        if raw in (b"\r\n", b"\n", b""):
            break
        name, _, value = raw.partition(b":")
        headers.append((name.strip(), value.strip()))
    return line, headers


def _header(headers: list[tuple[bytes, bytes]], name: bytes) -> bytes | None:
    for key, value in headers:
        if key.lower() == name:
            return value
    return None


def _read_body(rfile: BinaryIO, headers: list[tuple[bytes, bytes]]) -> bytes:
    if (_header(headers, b"transfer-encoding") or b"").lower() == b"chunked":
        chunks = []
        while True:
            size_line = rfile.readline()
            chunks.append(size_line)
            size = int(size_line.split(b";")[0].strip(), 16)
            data = rfile.read(size + 2)
            chunks.append(data)
            if size == 0:
                # trailers until the blank line
                while data not in (b"\r\n", b""):
                    data = rfile.readline()
                    chunks.append(data)
                return b"".join(chunks)
    length = int(_header(headers, b"content-length") or b"0")
    return rfile.read(length) if length else b""


def _serialise(line: bytes, headers: list[tuple[bytes, bytes]], body: bytes) -> bytes:
    head = line + b"".join(k + b": " + v + b"\r\n" for k, v in headers) + b"\r\n"
    return head + body


@dataclass
class ClientRequest:
    """One request a proxy read from its client, its body whole (`Expect` answered)."""

    line: bytes
    method: bytes
    target: bytes
    headers: list[tuple[bytes, bytes]]
    body: bytes

    @property
    def url(self) -> SplitResult:
        """The target, split (path, query)."""
        return urlsplit(self.target.decode())


Response = tuple[bytes, list[tuple[bytes, bytes]], bytes]
"""An upstream response, whole: its status line, headers and body."""


class RelayHandler(socketserver.StreamRequestHandler):
    """A keep-alive connection relayed to `server.upstream`, one request at a time.

    The proxies of the tests (this fault proxy, `tests.directory_proxy`) differ only in
    what they do with each request: `relay_one`.
    """

    def setup(self) -> None:
        self.request.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        super().setup()

    def handle(self) -> None:
        upstream = socket.create_connection(self.server.upstream)  # type: ignore[attr-defined]
        upstream.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        up_rfile = upstream.makefile("rb")
        try:
            while (request := self.read_request()) is not None and self.relay_one(
                request, upstream, up_rfile
            ):
                pass
        except (ConnectionError, OSError, ValueError):
            pass
        finally:
            up_rfile.close()
            upstream.close()

    def read_request(self) -> ClientRequest | None:
        """Read the client's next request (None: it closed the connection)."""
        request = _read_head(self.rfile)
        if request is None:
            return None
        line, headers = request
        method, target = line.split(b" ")[:2]
        if (_header(headers, b"expect") or b"").lower() == b"100-continue":
            self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.wfile.flush()
            headers = [(k, v) for k, v in headers if k.lower() != b"expect"]
        return ClientRequest(line, method, target, headers, _read_body(self.rfile, headers))

    def forward(
        self, request: ClientRequest, upstream: socket.socket, up_rfile: BinaryIO
    ) -> Response | None:
        """Send `request` upstream; return its response, whole (None: upstream closed)."""
        upstream.sendall(_serialise(request.line, request.headers, request.body))
        response = _read_head(up_rfile)
        if response is None:
            return None
        status_line, response_headers = response
        status = int(status_line.split(b" ")[1])
        no_body = request.method == b"HEAD" or status in (204, 304) or 100 <= status < 200
        return (
            status_line,
            response_headers,
            b"" if no_body else _read_body(up_rfile, response_headers),
        )

    def relay_one(
        self, request: ClientRequest, upstream: socket.socket, up_rfile: BinaryIO
    ) -> bool:
        """Handle one request; False to close the connection."""
        raise NotImplementedError


class _Handler(RelayHandler):
    server: _Server

    def relay_one(
        self, request: ClientRequest, upstream: socket.socket, up_rfile: BinaryIO
    ) -> bool:
        parts = request.url
        is_object_put = request.method == b"PUT" and parts.path.strip("/").count("/") >= 1
        is_bulk_delete = request.method == b"POST" and "delete" in parts.query.split("&")
        fault = self.server.plan.draw() if is_object_put or is_bulk_delete else "pass"
        if fault == "drop_request":
            return False
        if fault == "slowdown":
            self.wfile.write(_SLOWDOWN)
            return True
        if fault == "conflict":
            self.wfile.write(_CONFLICT)
            return True
        response = self.forward(request, upstream, up_rfile)
        if response is None or fault == "drop_response":
            return False  # applied upstream (or not); the client never hears of it
        self.wfile.write(_serialise(*response))
        self.wfile.flush()
        return True


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog is 5: a burst of parallel connections had SYNs dropped
    # and retried a second later, a fault nobody planned.
    request_queue_size = 256

    def __init__(self, upstream: tuple[str, int], plan: FaultPlan) -> None:
        self.upstream = upstream
        self.plan = plan
        super().__init__(("127.0.0.1", 0), _Handler)


class FaultProxy:
    """A running proxy: `endpoint` to point clients at, `plan` to read what it injected."""

    def __init__(self, upstream_endpoint: str, plan: FaultPlan) -> None:
        parts = urlsplit(upstream_endpoint)
        self.plan = plan
        self._server = _Server((parts.hostname or "127.0.0.1", parts.port or 80), plan)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FaultProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()


def everyday_faults() -> tuple[FaultPlan, Any]:
    """The plan most write-path tests run under, with the client settings that meet it.

    Responses and requests dropped, slow answers and 409s, a few percent each; a botocore
    client that times out in 2 s and retries 3 times, so each fault is felt by the library.
    """
    from botocore.config import Config

    plan = FaultPlan(
        {"drop_response": 0.06, "drop_request": 0.04, "slowdown": 0.04, "conflict": 0.04}
    )
    config = Config(
        read_timeout=2, connect_timeout=2, retries={"mode": "standard", "max_attempts": 3}
    )
    return plan, config
