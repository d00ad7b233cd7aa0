"""A finished agent transcript at rest, before and after archive packing (issue 26 #4).

The coding-agent conversation of `bench.log_bench` (each turn an assistant message with a
tool call and a 1-3 KB tool result of real source text) is run to `--turns` turns with
`AgentRunner.run`, then `stashpoint gc --pack` packs it. Printed, from a listing of every
object of the stash (what a bill counts; noncurrent versions of vacated entries are
expired by the template's lifecycle rule and not counted):

- bytes at rest / the zstd size (level 3) of the final transcript, before and after;
- objects under `sealed/` and those a lifecycle rule moves (128 KB and more: S3 skips
  smaller ones), and the Glacier per-object overhead (40 KB x objects moved) / bytes moved;
- requests and seconds the packing took, and `load()` requests and round trips after it.

    .venv/bin/python -m bench.packing_bench [--turns 10000] [--where seaweedfs|local]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
import uuid
from collections import Counter
from datetime import timedelta
from pathlib import Path
from typing import Any

import stashpoint
from bench.log_bench import MODEL, _final_size, _Meter, _sources, _turn_messages
from stashpoint.agent import (
    AgentCheckpoint,
    AgentCheckpointState,
    AgentRunner,
    Message,
    ModelResponse,
    TurnResult,
)
from stashpoint.stores.objects import ListVersionPage, StoredVersion
from tests import servers

GLACIER_OVERHEAD = 40 * 1024
"""Bytes S3 adds per object in Glacier Flexible Retrieval / Deep Archive (8 KB of them
billed at Standard)."""
LIFECYCLE_MIN = 128 * 1024
"""Objects smaller than this are not transitioned by default (S3, since September 2024)."""


def _at_rest(stash: stashpoint.Stash) -> dict[str, Any]:
    """List every stored version of the stash: current objects, and noncurrent ones."""
    prefix = stash.layout.prefix + "/" if stash.layout.prefix else ""
    found: list[StoredVersion] = []
    marker = None
    while True:
        page = stash.driver(ListVersionPage(prefix, marker))
        found += page.versions
        marker = page.next_marker
        if marker is None:
            break
    current = [v for v in found if v.is_latest and not v.is_delete_marker]
    sealed = [v for v in current if "/sealed/" in f"/{v.key}"]
    moved = [v for v in sealed if v.size >= LIFECYCLE_MIN]
    return {
        "objects": len(current),
        "bytes": sum(v.size for v in current),
        "noncurrent_bytes": sum(v.size for v in found if not v.is_latest),
        "sealed_objects": len(sealed),
        "sealed_bytes": sum(v.size for v in sealed),
        "moved_objects": len(moved),
        "moved_bytes": sum(v.size for v in moved),
    }


def run(url: str, turns: int) -> dict[str, Any]:
    source = _sources()
    with stashpoint.open(url) as stash:
        handle = AgentCheckpoint.new(stash.checkpoints)
        runner = AgentRunner(handle)
        final = Message(role="assistant", content="Done.")

        def turn(state: AgentCheckpointState, number: int) -> TurnResult:
            if number == turns:
                return TurnResult(messages=[final], response=ModelResponse(message=final))
            return TurnResult(messages=_turn_messages(number, source))

        started = time.perf_counter()
        runner.run(turn, agent="coder", model=MODEL, max_turns=turns + 1)
        run_seconds = time.perf_counter() - started
        transcript = handle.load()[1].transcript
        floor = _final_size(transcript)
        before = _at_rest(stash)
        meter = _Meter(stash)
        started = time.perf_counter()
        report = stash.admin.collect_garbage(dry_run=False, min_age=timedelta(hours=1), pack=True)
        pack_seconds = time.perf_counter() - started
        pack_requests: Counter[str] = Counter(meter.requests)
        after = _at_rest(stash)
        meter.reset()
        assert handle.load()[1].transcript == transcript
        load = (sum(meter.requests.values()), meter.rounds())
    return {
        "turns": turns,
        "run_seconds": round(run_seconds, 1),
        "transcript_zstd_bytes": floor,
        "before": before,
        "after": after,
        "before_over_floor": round(before["bytes"] / floor, 2),
        "after_over_floor": round(after["bytes"] / floor, 2),
        "glacier_overhead_over_moved": round(
            GLACIER_OVERHEAD * after["moved_objects"] / max(1, after["moved_bytes"]), 3
        ),
        "glacier_overhead_if_every_sealed_object_moved": round(
            GLACIER_OVERHEAD * after["sealed_objects"] / max(1, after["sealed_bytes"]), 3
        ),
        "glacier_overhead_before_packing": round(
            GLACIER_OVERHEAD * before["sealed_objects"] / max(1, before["sealed_bytes"]), 3
        ),
        "packs": report.packs,
        "entries_vacated": report.entries_vacated,
        "segments_deleted": report.segments_deleted,
        "pack_requests": dict(pack_requests),
        "pack_seconds": round(pack_seconds, 1),
        "load_after_packing_requests_rounds": load,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=10_000)
    parser.add_argument("--where", choices=("seaweedfs", "local"), default="seaweedfs")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as data:
        if args.where == "local":
            result = run(f"local://{data}/stash?fsync=false", args.turns)
        else:
            os.environ.setdefault("AWS_ACCESS_KEY_ID", servers.ACCESS_KEY)
            os.environ.setdefault("AWS_SECRET_ACCESS_KEY", servers.SECRET_KEY)
            server = servers.start_seaweedfs(Path(data))
            try:
                result = run(server.url(f"bench-{uuid.uuid4().hex}"), args.turns)
            finally:
                servers.stop(server)
    print(json.dumps({"where": args.where, **result}, indent=2))


if __name__ == "__main__":
    main()
