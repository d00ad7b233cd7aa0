"""A stand-in for an S3 Express One Zone directory bucket: a proxy in front of SeaweedFS.

Directory buckets keep stashpoint's every rule about conditional writes, and break three
habits of S3 general purpose buckets (AWS documentation, 2024-2025):

- **listings are not in key order**, and pages continue with a token only: this proxy
  answers `ListObjectsV2` itself, from the whole listing (read from SeaweedFS), shuffled
  once per listing and paged with tokens of its own;
- **no `StartAfter`**, and **`/` as the only delimiter**: either is `400 InvalidArgument`;
- **no versioning**: `ListObjectVersions`, `?versioning`, a `versionId` are `501
  NotImplemented`;
- **ETags are not MD5s**: every ETag the proxy answers with is a stable stand-in of its
  own (in headers and in listings), and an `If-Match` it receives is translated back
  (re-signed with the tests' credentials); one it never issued matches nothing.

Every other request is relayed byte for byte. Point a stash at it with the unversioned
bucket (`servers.UNVERSIONED_BUCKET`) and `?provider=s3express`.
"""

from __future__ import annotations

import hashlib
import random
import re
import socket
import socketserver
import threading
from dataclasses import replace
from typing import Any, BinaryIO
from urllib.parse import parse_qs, quote, urlsplit
from xml.sax.saxutils import escape

import boto3
from botocore.auth import S3SigV4Auth, SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.config import Config
from botocore.credentials import Credentials

from tests import servers
from tests.faultproxy import (
    ClientRequest,
    RelayHandler,
    _error_response,
    _header,
    _serialise,
)

_NOT_IMPLEMENTED = _error_response(
    b"501 Not Implemented", b"NotImplemented", b"Not supported by directory buckets."
)
_START_AFTER = _error_response(
    b"400 Bad Request", b"InvalidArgument", b"StartAfter is not supported by directory buckets."
)
_DELIMITER = _error_response(
    b"400 Bad Request", b"InvalidArgument", b"Only '/' is a delimiter in directory buckets."
)
_ETAG = re.compile(rb"<ETag>(.*?)</ETag>")


class _KeepPayload(S3SigV4Auth):
    """SigV4 that signs the client's own payload hash (a streaming body stays as sent)."""

    def _modify_request_before_signing(self, request: AWSRequest) -> None:
        SigV4Auth._modify_request_before_signing(self, request)

    def payload(self, request: AWSRequest) -> str:
        return str(request.headers["X-Amz-Content-SHA256"])


class _Etags:
    """Stand-in ETags: stable per real ETag, translated back for conditions."""

    def __init__(self) -> None:
        self._real: dict[bytes, bytes] = {}
        self._lock = threading.Lock()

    def fake(self, real: bytes) -> bytes:
        stripped = real.strip(b'"')
        made = (
            b'"' + hashlib.sha256(b"directory-bucket:" + stripped).hexdigest()[:32].encode() + b'"'
        )
        with self._lock:
            self._real[made] = real
        return made

    def real(self, fake: bytes) -> bytes:
        with self._lock:
            return self._real.get(fake.strip(), b'"not-an-etag-this-bucket-issued"')


class _Handler(RelayHandler):
    server: _Server

    def relay_one(
        self, request: ClientRequest, upstream: socket.socket, up_rfile: BinaryIO
    ) -> bool:
        method, target, headers, body = (
            request.method,
            request.target,
            request.headers,
            request.body,
        )
        parts = request.url
        query = parse_qs(parts.query, keep_blank_values=True)
        path = parts.path.strip("/")
        if {"versions", "versioning", "versionId"} & set(query):
            self.wfile.write(_NOT_IMPLEMENTED)
            return True
        if method == b"GET" and "/" not in path and query.get("list-type") == ["2"]:
            self._list(path, query)
            return True
        if_match = _header(headers, b"if-match")
        if if_match is not None:
            headers = [
                (k, self.server.etags.real(v) if k.lower() == b"if-match" else v)
                for k, v in headers
            ]
            request = replace(request, headers=self._signed(method, target, headers, body))
        response = self.forward(request, upstream, up_rfile)
        if response is None:
            return False
        status_line, response_headers, response_body = response
        response_headers = [
            (k, self.server.etags.fake(v) if k.lower() == b"etag" else v)
            for k, v in response_headers
        ]
        if b"<ETag>" in response_body:  # CompleteMultipartUpload, CopyObject
            response_body = _ETAG.sub(
                lambda m: b"<ETag>" + self.server.etags.fake(m.group(1)) + b"</ETag>",
                response_body,
            )
            response_headers = [
                (k, str(len(response_body)).encode() if k.lower() == b"content-length" else v)
                for k, v in response_headers
            ]
        self.wfile.write(_serialise(status_line, response_headers, response_body))
        self.wfile.flush()
        return True

    def _signed(
        self, method: bytes, target: bytes, headers: list[tuple[bytes, bytes]], body: bytes
    ) -> list[tuple[bytes, bytes]]:
        """Sign a request again after changing a header (with the tests' credentials)."""
        host = (_header(headers, b"host") or b"").decode()
        kept = {
            k.decode(): v.decode()
            for k, v in headers
            if k.lower() not in (b"authorization", b"x-amz-date", b"host")
        }
        request = AWSRequest(
            method=method.decode(), url=f"http://{host}{target.decode()}", data=body, headers=kept
        )
        _KeepPayload(
            Credentials(servers.ACCESS_KEY, servers.SECRET_KEY), "s3", "us-east-1"
        ).add_auth(request)
        signed = [(b"Host", host.encode())]
        signed += [(k.encode(), v.encode()) for k, v in request.headers.items()]
        return signed

    def _list(self, bucket: str, query: dict[str, list[str]]) -> None:
        if "start-after" in query:
            self.wfile.write(_START_AFTER)
            return
        delimiter = query.get("delimiter", [""])[0]
        if delimiter not in ("", "/"):
            self.wfile.write(_DELIMITER)
            return
        prefix = query.get("prefix", [""])[0]
        size = min(1000, int(query.get("max-keys", ["1000"])[0]))
        token = query.get("continuation-token", [None])[0]
        if token is None:
            listed = self.server.listing(bucket, prefix)
            token_id = self.server.remember(listed)
            offset = 0
        else:
            token_id, _, at = token.partition(":")
            listed = self.server.listings[token_id]
            offset = int(at)
        page = listed[offset : offset + size]
        more = offset + size < len(listed)
        entries = "".join(
            f"<Contents><Key>{escape(item['Key'])}</Key>"
            f"<LastModified>{item['LastModified'].strftime('%Y-%m-%dT%H:%M:%S.000Z')}</LastModified>"
            f"<ETag>{escape(self.server.etags.fake(item['ETag'].encode()).decode())}</ETag>"
            f"<Size>{item['Size']}</Size><StorageClass>EXPRESS_ONEZONE</StorageClass></Contents>"
            for item in page
        )
        next_token = (
            f"<NextContinuationToken>{token_id}:{offset + size}</NextContinuationToken>"
            if more
            else ""
        )
        xml = (
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            f"<Name>{escape(bucket)}</Name><Prefix>{escape(prefix)}</Prefix>"
            f"<KeyCount>{len(page)}</KeyCount><MaxKeys>{size}</MaxKeys>"
            f"<IsTruncated>{'true' if more else 'false'}</IsTruncated>"
            + (
                f"<ContinuationToken>{escape(quote(query['continuation-token'][0]))}</ContinuationToken>"
                if token
                else ""
            )
            + next_token
            + entries
            + "</ListBucketResult>"
        ).encode()
        self.wfile.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/xml\r\nContent-Length: "
            + str(len(xml)).encode()
            + b"\r\n\r\n"
            + xml
        )
        self.wfile.flush()


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, upstream_endpoint: str, seed: int) -> None:
        parts = urlsplit(upstream_endpoint)
        self.upstream = (parts.hostname or "127.0.0.1", parts.port or 80)
        self.etags = _Etags()
        self.listings: dict[str, list[dict[str, Any]]] = {}
        self._random = random.Random(seed)
        self._lock = threading.Lock()
        self._client = boto3.client(
            "s3", endpoint_url=upstream_endpoint, region_name="us-east-1",
            aws_access_key_id=servers.ACCESS_KEY, aws_secret_access_key=servers.SECRET_KEY,
            config=Config(s3={"addressing_style": "path"}),
        )  # fmt: skip
        super().__init__(("127.0.0.1", 0), _Handler)

    def listing(self, bucket: str, prefix: str) -> list[dict[str, Any]]:
        """Every key under `prefix`, in an order of the proxy's own."""
        listed: list[dict[str, Any]] = []
        for page in self._client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=prefix
        ):
            listed += page.get("Contents", [])
        with self._lock:
            self._random.shuffle(listed)
        return listed

    def remember(self, listed: list[dict[str, Any]]) -> str:
        with self._lock:
            token_id = f"t{len(self.listings)}"
            self.listings[token_id] = listed
        return token_id


class DirectoryBucketProxy:
    """A running stand-in: `endpoint` to point clients at (`servers.UNVERSIONED_BUCKET`)."""

    def __init__(self, upstream_endpoint: str, seed: int = 7) -> None:
        self._server = _Server(upstream_endpoint, seed)
        self.endpoint = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> DirectoryBucketProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
