"""A fleet map on an AWS Batch array job: every child of the array is a worker.

Submit one array job (`--array-properties size=50`) whose command is this script; each
child finds its index in `AWS_BATCH_JOB_ARRAY_INDEX`. Child 0 plans the map from a
manifest (or a prefix); every child, 0 included, then takes batches until the map has
ended. Starting is idempotent, so a retried child 0 plans nothing twice, and a child that
starts before the plan exists waits for it. A child on a spot instance that gets its
two-minute notice finishes the batch in hand and exits 0; one that dies loses its batch
to another child once its lease runs out, and if it was only frozen it is fenced.

    python examples/fleet_batch.py --url s3://bucket/jobs --map thumbs-2026-12-03 \\
        --manifest s3://bucket/manifests/2026-12-03.jsonl

Locally, N processes as the array's children (the items are numbers, the work a square):

    python examples/fleet_batch.py --url local://./.stashpoint --map demo --local 4
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import stashpoint
from stashpoint.spot import SpotWatcher


def work_on(item: object) -> object:
    """The work of one item (replace with yours: it must be idempotent)."""
    if isinstance(item, dict) and "url" in item:
        return {"url": item["url"], "size": item.get("size")}  # e.g. read, resize, write back
    time.sleep(0.002)
    return int(item) ** 2  # type: ignore[call-overload]


def child(url: str | None, map_id: str, source: str | None, items: int) -> int:
    index = int(os.environ.get("AWS_BATCH_JOB_ARRAY_INDEX", "0"))
    with stashpoint.open(url) as stash, SpotWatcher() as watcher:
        fleet = stash.runs.fleet(map_id)
        if index == 0:
            if source is None:
                what: object = range(items)
            elif source.endswith("/"):
                what = stashpoint.Prefix(source)
            else:
                what = stashpoint.Manifest(source)
            fleet.start(what, batch_size=100, lease=120, tolerated_failure_percentage=1.0,  # type: ignore[arg-type]
                        tolerated_failure_count=None)  # fmt: skip
        report = fleet.work(work_on, wait_for_plan=600, stop=watcher.stopping.is_set)
    print(json.dumps({"child": index, "batches": report.batches, "status": report.status}))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default=None, help="The stash (default: $STASHPOINT_URL).")
    parser.add_argument("--map", required=True, help="The map's id (its run id).")
    parser.add_argument("--manifest", default=None, help="s3://... .jsonl/.csv, or a prefix/")
    parser.add_argument("--items", type=int, default=2000, help="Without --manifest: 0..N-1.")
    parser.add_argument("--local", type=int, default=0, help="Run N children here.")
    args = parser.parse_args(argv)
    if not args.local:
        return child(args.url, args.map, args.manifest, args.items)
    children = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--map",
                args.map,
                "--items",
                str(args.items),
                *(["--url", args.url] if args.url else []),
                *(["--manifest", args.manifest] if args.manifest else []),
            ],
            env={
                **os.environ,
                "AWS_BATCH_JOB_ARRAY_INDEX": str(n),
                "AWS_EC2_METADATA_DISABLED": "true",
            },
        )
        for n in range(args.local)
    ]
    codes = [c.wait() for c in children]
    with stashpoint.open(args.url) as stash:
        progress = stash.runs.fleet(args.map).progress()
    print(f"{progress.status}: {progress.ok} ok, {progress.failed} failed of {progress.items}")
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
