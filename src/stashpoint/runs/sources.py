"""Where a fleet map's items come from: a prefix's objects, or a manifest's lines.

    stashpoint.Prefix("s3://photos/raw/")          every object under it: {"url", "size", "etag"}
    stashpoint.Manifest("s3://jobs/today.jsonl")   one item per line (JSON Lines)
    stashpoint.Manifest("file:///data/jobs.csv")   one item per row (a dict by the header)

A source is read once, by `FleetMap.start`, into the map's plan: workers never read it
again, so a source that changes later changes nothing. A manifest is read in parts, each
conditional on the ETag of the first (`ReadSource.etag`): one that changes while it is read
is `SourceChanged`, and nothing is planned. A line that is not JSON (or a row that does not
fit the header) is `InvalidPayload` naming its line number, never a shorter map.

Free of I/O: the requests (`ListSource`, `ReadSource`) are executed by the S3 transport for
`s3://` and by the router for `file://`.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from typing import Any, Literal

from stashpoint.errors import InvalidArgument, InvalidPayload, LimitExceeded, described
from stashpoint.steps import Steps, ask
from stashpoint.stores.objects import ListSource, ReadSource, source_parts

PART_BYTES = 8 * 1024 * 1024
"""Bytes of a manifest read per request."""
MAX_MANIFEST_BYTES = 4 * 1024 * 1024 * 1024
"""Largest manifest read (its items are planned in memory)."""


class Source:
    """Base of the item sources `FleetMap.start` reads (`Prefix`, `Manifest`)."""

    url: str
    """Where the items are."""


@dataclass(frozen=True)
class Prefix(Source):
    """Every object under an S3 prefix (or a local folder), in key order, as an item.

    Each item is `{"url": "s3://bucket/key", "size": bytes, "etag": "..."}` (a folder's
    items have no `etag`). Folders' own placeholder keys (ending in `/`) are skipped.
    """

    url: str
    """`s3://bucket/prefix` (a stash on S3 reads it with its client) or `file:///folder/`."""

    def __post_init__(self) -> None:
        source_parts(self.url)


@dataclass(frozen=True)
class Manifest(Source):
    """One item per line of a JSON Lines object, or per row of a CSV object.

    `format` is taken from the name (`.jsonl`, `.ndjson`, `.json` lines; `.csv`) unless
    given. A CSV row is a dict by the header (`header=True`) or a list of its cells.
    Blank lines are skipped.
    """

    url: str
    """`s3://bucket/key` or `file:///absolute/path`."""
    format: Literal["jsonl", "csv"] | None = None
    """The manifest's format (None: from the name)."""
    header: bool = True
    """CSV: the first row names the columns."""

    def __post_init__(self) -> None:
        source_parts(self.url)
        if self.format not in (None, "jsonl", "csv"):
            raise InvalidArgument(f"format must be 'jsonl' or 'csv', not {described(self.format)}")
        if self.kind not in ("jsonl", "csv"):
            raise InvalidArgument(
                "a manifest's format is jsonl or csv: name it .jsonl or .csv, or say format="
            )

    @property
    def kind(self) -> str | None:
        """The manifest's format, given or from its name."""
        if self.format is not None:
            return self.format
        name = self.url.rsplit("/", 1)[-1].lower()
        if name.endswith((".jsonl", ".ndjson", ".json")):
            return "jsonl"
        if name.endswith(".csv"):
            return "csv"
        return None


def read_items(source: Source) -> Steps[tuple[list[Any], dict[str, Any]]]:
    """Return a source's items and how the plan describes the source."""
    if isinstance(source, Prefix):
        return (yield from _prefix_items(source))
    if isinstance(source, Manifest):
        return (yield from _manifest_items(source))
    raise InvalidArgument(f"not a source: {described(source)}")


def _prefix_items(source: Prefix) -> Steps[tuple[list[Any], dict[str, Any]]]:
    scheme, bucket, _ = source_parts(source.url)
    base = f"s3://{bucket}/" if scheme == "s3" else source.url.rstrip("/") + "/"
    items: list[Any] = []
    token = None
    while True:
        page = yield from ask(ListSource(source.url, token))
        for index, key in enumerate(page.keys):
            if key.endswith("/"):
                continue
            item: dict[str, Any] = {"url": base + key}
            if page.sizes is not None:
                item["size"] = page.sizes[index]
            if page.etags is not None and page.etags[index]:
                item["etag"] = page.etags[index]
            items.append(item)
        token = page.next_token
        if token is None:
            return items, {"kind": "prefix", "url": source.url, "objects": len(items)}


def _manifest_items(source: Manifest) -> Steps[tuple[list[Any], dict[str, Any]]]:
    first = yield from ask(ReadSource(source.url, 0, PART_BYTES))
    if first is None:
        raise InvalidArgument(f"no manifest at {source.url}", object_name=source.url)
    size = first.size if first.size is not None else len(first.body or b"")
    if size > MAX_MANIFEST_BYTES:
        raise LimitExceeded(
            f"the manifest is {size} bytes; at most {MAX_MANIFEST_BYTES} are planned at once",
            object_name=source.url,
        )
    parts = [first.body or b""]
    read = len(parts[0])
    while read < size:
        part = yield from ask(ReadSource(source.url, read, PART_BYTES, first.etag))
        if part is None or not part.body:
            raise InvalidPayload("the manifest ended before its size", object_name=source.url)
        parts.append(part.body)
        read += len(part.body)
    data = b"".join(parts)
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidPayload(
            f"the manifest is not UTF-8 (byte {exc.start})", object_name=source.url
        ) from None
    items = _jsonl(text, source.url) if source.kind == "jsonl" else _csv(text, source)
    described_source = {"kind": "manifest", "url": source.url, "etag": first.etag, "bytes": size}
    return items, described_source


def _jsonl(text: str, url: str) -> list[Any]:
    items = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            items.append(json.loads(line))
        except (json.JSONDecodeError, RecursionError):
            raise InvalidPayload(
                f"line {number} of the manifest is not JSON", object_name=url
            ) from None
    return items


def _csv(text: str, source: Manifest) -> list[Any]:
    rows = csv.reader(io.StringIO(text, newline=""))
    items: list[Any] = []
    header: list[str] | None = None
    try:
        for row in rows:
            if not row or all(not cell.strip() for cell in row):
                continue
            if source.header and header is None:
                header = row
                if len(set(header)) != len(header):
                    raise InvalidPayload(
                        "the manifest's header names a column twice", object_name=source.url
                    )
                continue
            if header is None:
                items.append(row)
            elif len(row) != len(header):
                raise InvalidPayload(
                    f"row {rows.line_num} of the manifest has {len(row)} cells, its header "
                    f"{len(header)}",
                    object_name=source.url,
                )
            else:
                items.append(dict(zip(header, row, strict=True)))
    except csv.Error as exc:
        raise InvalidPayload(
            f"the manifest is not CSV at row {rows.line_num} ({exc})", object_name=source.url
        ) from None
    return items
