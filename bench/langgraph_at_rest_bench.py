"""Where a LangGraph thread's bytes at rest go, after `gc --pack` (issue 52 #5).

The bench's messages agent (`bench.langgraph_bench`: each step a user message and an AI
message of 1-3 KB of real source text) runs `--steps` steps on a new stash (the embedded
default, or SeaweedFS with `--seaweedfs`), then `gc --pack` with nothing left to wait for
(`log_delete_after` and `min_age` 0). The floor is the bench's: the zstd (level 3) of the
final messages as LangGraph's serializer writes them, one frame.

Printed, each / the floor: the stored objects by kind (sealed segments and packs, the
markers written over vacated entries, the entries not sealed yet, list snapshots, tails,
other values), then what the segments would take if written otherwise, computed from the
stored segments themselves (nothing is written):

- as one zstd frame (level 9 and 19), not one frame per 64 versions;
- without each entry's copy of the thread's state;
- with every pending write's value replaced by its SHA-256 (each message stored once: the
  write that produced it is the copy LangGraph keeps beside the channel value).

    .venv/bin/python -m bench.langgraph_at_rest_bench [--steps 200] [--seaweedfs]
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import tempfile
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import zstandard
from langchain_core.messages import HumanMessage

import stashpoint
from bench.langgraph_bench import _graph
from bench.log_bench import _sources
from stashpoint.langgraph import StashpointSaver
from tests import servers

_MAX = 1 << 30


def _plain(body: bytes) -> bytes:
    return zstandard.ZstdDecompressor().decompress(body, max_output_size=_MAX)


def _kind(key: str, body: bytes) -> str:
    """The kind of a stored object, from its key and (for the log's keys) its content."""
    parts = key.split("/")
    if parts[0] == "sealed":
        first, last = (int(n) for n in parts[-1].split("-"))
        return "pack" if last - first + 1 > 64 else "segment"
    if parts[0] == "langgraph-values":
        name = parts[-1]
        return {"s-": "list snapshot", "t-": "list tail"}.get(name[:2], "large value")
    if parts[0] == "langgraph":
        vacated = json.loads(_plain(body)).get("type") == "vacated"
        return "marker (vacated entry)" if vacated else "entry (not sealed yet)"
    return f"other ({parts[0]})"


def _local_objects(folder: Path) -> Iterator[tuple[str, bytes]]:
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        # The local backend's own bookkeeping (old revisions, locks, its clock) is not data.
        if path.is_file() and not relative.parts[0].startswith(".") and relative.parts != (
            "clock",
        ):
            yield str(relative), path.read_bytes()


def _s3_objects(client: Any, bucket: str, prefix: str) -> Iterator[tuple[str, bytes]]:
    for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=bucket, Prefix=prefix + "/"
    ):
        for item in page.get("Contents", []):
            body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            yield item["Key"][len(prefix) + 1 :], body


def _frames(documents: list[dict[str, Any]], level: int) -> int:
    compressor = zstandard.ZstdCompressor(level=level)
    return sum(len(compressor.compress(json.dumps(d).encode())) for d in documents)


def _without_states(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    stripped = copy.deepcopy(documents)
    for document in stripped:
        for entry in document["entries"]:
            entry.pop("state", None)
    return stripped


def _writes_hashed(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    hashed = copy.deepcopy(documents)
    for document in hashed:
        for entry in document["entries"]:
            for record in entry.get("records", []):
                if record.get("op") == "writes":
                    for item in record["items"]:
                        value = json.dumps(item[-1]).encode()
                        item[-1] = hashlib.sha256(value).hexdigest()
    return hashed


def _run_agent(url: str, steps: int) -> int:
    """Run the agent on `url` for `steps` steps; return the floor (zstd of the messages)."""
    source = _sources()
    with stashpoint.open(url) as stash:
        saver = StashpointSaver(stash)
        graph = _graph(saver, source)
        config = {"configurable": {"thread_id": f"rest-{uuid.uuid4().hex[:6]}"}}
        for step in range(steps):
            message = HumanMessage(content=f"step {step}: {source()[:300]}")
            graph.invoke({"messages": [message]}, config)
        saver.flush()
        latest = saver.get_tuple(config)
        assert latest is not None
        _, messages = saver.serde.dumps_typed(latest.checkpoint["channel_values"]["messages"])
    with stashpoint.open(url, log_delete_after=timedelta(0)) as stash:
        stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0), pack=True)
    return len(zstandard.ZstdCompressor(level=3).compress(messages))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seaweedfs", action="store_true")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp())
    server = None
    if args.seaweedfs:
        os.environ.setdefault("AWS_ACCESS_KEY_ID", servers.ACCESS_KEY)
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", servers.SECRET_KEY)
        os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
        server = servers.start_seaweedfs(work)
    try:
        prefix = f"rest-{uuid.uuid4().hex[:6]}"
        url = server.url(prefix) if server else f"local://{work / prefix}"
        floor = _run_agent(url, args.steps)
        if server:
            stored = list(_s3_objects(server.client(), servers.VERSIONED_BUCKET, prefix))
        else:
            stored = list(_local_objects(work / prefix))
    finally:
        if server:
            servers.stop(server)
    sizes: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    segments: list[dict[str, Any]] = []
    for key, body in stored:
        kind = _kind(key, body)
        sizes[kind] += len(body)
        counts[kind] += 1
        if kind in ("segment", "pack"):
            segments.append(json.loads(_plain(body)))
    total = sum(sizes.values())
    where = "SeaweedFS" if args.seaweedfs else "the embedded default"
    print(f"{args.steps} steps on {where}; floor (zstd of the final messages) {floor:,} bytes")
    print(f"at rest after gc --pack: {total:,} bytes, {total / floor:.2f}x the floor")
    print("| kind | objects | bytes | / floor |")
    print("|---|---|---|---|")
    for kind, size in sorted(sizes.items(), key=lambda kv: -kv[1]):
        print(f"| {kind} | {counts[kind]:,} | {size:,} | {size / floor:.2f}x |")
    stored_segments = sizes["segment"] + sizes["pack"]
    print()
    print("The sealed segments written otherwise (computed from them, / floor):")
    print("| segments | / floor |")
    print("|---|---|")
    rows = [
        ("as stored", stored_segments),
        ("re-encoded, a frame each, level 9 (the stored level)", _frames(segments, 9)),
        ("all in one frame, level 9", _frames([{"all": segments}], 9)),
        ("all in one frame, level 19", _frames([{"all": segments}], 19)),
        ("a frame each, without each entry's state", _frames(_without_states(segments), 9)),
        (
            "a frame each, pending writes' values as their SHA-256",
            _frames(_writes_hashed(segments), 9),
        ),
        (
            "a frame each, without states and with writes hashed",
            _frames(_writes_hashed(_without_states(segments)), 9),
        ),
    ]
    for name, size in rows:
        print(f"| {name} | {size / floor:.2f}x |")


if __name__ == "__main__":
    main()
