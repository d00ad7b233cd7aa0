"""A fake EC2 instance metadata service on 127.0.0.1: IMDSv2 tokens and the spot paths.

`PUT /latest/api/token` (with `X-aws-ec2-metadata-token-ttl-seconds`) issues a token; every
GET must carry it in `X-aws-ec2-metadata-token` (401 otherwise, as IMDSv2 answers). A test
sets `action` (the body of `spot/instance-action`) or `rebalance` (of
`events/recommendations/rebalance`); unset paths answer 404, as on a healthy instance.
"""

from __future__ import annotations

import json
import secrets
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeImds:
    """A running fake metadata service; `endpoint` is its base URL."""

    def __init__(self, instance_id: str = "i-0123456789abcdef0") -> None:
        self.instance_id = instance_id
        self.action: dict[str, Any] | None = None
        self.rebalance: dict[str, Any] | None = None
        self.tokens: set[str] = set()
        self.requests: list[tuple[str, str, bool]] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_PUT(self) -> None:
                ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
                fake.requests.append(("PUT", self.path, True))
                if self.path != "/latest/api/token" or not ttl or not ttl.isdigit():
                    self._answer(400, "")
                    return
                token = secrets.token_urlsafe(16)
                fake.tokens.add(token)
                self._answer(200, token)

            def do_GET(self) -> None:
                valid = self.headers.get("X-aws-ec2-metadata-token") in fake.tokens
                fake.requests.append(("GET", self.path, valid))
                if not valid:
                    self._answer(401, "")
                    return
                documents = {
                    "/latest/meta-data/instance-id": fake.instance_id,
                    "/latest/meta-data/spot/instance-action": fake.action,
                    "/latest/meta-data/events/recommendations/rebalance": fake.rebalance,
                }
                body = documents.get(self.path)
                if body is None:
                    self._answer(404, "")
                else:
                    self._answer(200, body if isinstance(body, str) else json.dumps(body))

            def _answer(self, status: int, body: str) -> None:
                data = body.encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> FakeImds:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
