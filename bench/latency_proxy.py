"""A latency proxy on 127.0.0.1: every request waits `latency` seconds before it is relayed.

What a Lambda in a region sees of S3 and DynamoDB, roughly: each request costs a round trip
whatever its size. The proxy also counts what passes through it: requests, and rounds (a
request that arrives while none is in flight starts a new round; requests sent together,
in parallel, share one), so any client can be measured the same way, stashpoint or not.
Built on the tests' relay (`tests.faultproxy.RelayHandler`): bytes relayed unchanged, so
SigV4 signatures hold.
"""

from __future__ import annotations

import socketserver
import threading
import time
from typing import BinaryIO
from urllib.parse import urlsplit

from tests.faultproxy import ClientRequest, RelayHandler, _serialise


class Counts:
    """Requests and rounds seen since the last `reset` (shared by every proxy given it)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0
        self.rounds = 0
        self.sent = 0
        self.in_flight = 0

    def reset(self) -> None:
        """Start counting from zero."""
        with self.lock:
            self.requests = self.rounds = self.sent = 0

    def started(self, body: int = 0) -> None:
        """Count a request that arrived (a new round if none was in flight), `body` bytes."""
        with self.lock:
            self.requests += 1
            self.sent += body
            if self.in_flight == 0:
                self.rounds += 1
            self.in_flight += 1

    def ended(self) -> None:
        """Note that a request's answer went back."""
        with self.lock:
            self.in_flight -= 1


class _Handler(RelayHandler):
    server: _Server

    def relay_one(self, request: ClientRequest, upstream: object, up_rfile: BinaryIO) -> bool:
        counts = self.server.counts
        counts.started(len(request.body))
        try:
            time.sleep(self.server.latency)
            response = self.forward(request, upstream, up_rfile)  # type: ignore[arg-type]
            if response is None:
                return False
            self.wfile.write(_serialise(*response))
            self.wfile.flush()
            return True
        finally:
            counts.ended()


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True
    # socketserver's default backlog is 5: a client opening 40 connections at once had
    # SYNs dropped and retried a second later (a cold parallel read took 1.1 s, not 0.1).
    request_queue_size = 256

    def __init__(self, upstream: tuple[str, int], latency: float, counts: Counts) -> None:
        self.upstream = upstream
        self.latency = latency
        self.counts = counts
        super().__init__(("127.0.0.1", 0), _Handler)


class LatencyProxy:
    """A running proxy: point clients at `endpoint`; read `counts`."""

    def __init__(self, upstream_endpoint: str, latency: float, counts: Counts) -> None:
        parts = urlsplit(upstream_endpoint)
        self.counts = counts
        self._server = _Server((parts.hostname or "127.0.0.1", parts.port or 80), latency, counts)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> LatencyProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
