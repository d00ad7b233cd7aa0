"""The main job, end to end on the embedded default: crash a batch worker, resume, verify.

A worker process works through a few hundred items, committing each batch's results together
with its cursor in one compare-and-swap save. The demo kills it with SIGKILL partway (a
reclaimed spot instance), starts a new worker that resumes from the last checkpoint, and then
checks that every item's result was committed exactly once. It exits non-zero otherwise.

    python -m stashpoint.demo [--url local://./.stashpoint] [--items 300]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import signal
import subprocess
import sys
import time

import stashpoint
import stashpoint.url
from stashpoint import CheckpointConflict, CheckpointNotFound, Envelope

KIND = "stashpoint.demo.batch"
"""The kind of the demo's checkpoint."""
BATCH = 10
"""Items committed per save."""


def work(item: int) -> str:
    """Do the per-item work: deterministic, so a resumed run can be checked."""
    return hashlib.sha256(f"item-{item}".encode()).hexdigest()[:12]


def worker(url: str, checkpoint_id: str, items: int, delay: float) -> None:
    """Process items from the last checkpoint on, saving after every batch."""
    with stashpoint.open(url) as stash:
        store = stash.checkpoints
        try:
            current = store.load(checkpoint_id)
        except CheckpointNotFound:
            current = Envelope.initial(
                checkpoint_id, checkpoint_id, KIND, 1, {"cursor": 0, "results": {}, "commits": 0}
            )
            store.compare_and_swap(current, None)
        while current.payload["cursor"] < items:
            state = current.payload
            start = state["cursor"]
            batch = range(start, min(start + BATCH, items))
            results = dict(state["results"])
            for item in batch:
                time.sleep(delay)
                results[str(item)] = work(item)
            nxt = current.next(
                {"cursor": batch.stop, "results": results, "commits": state["commits"] + 1}
            )
            store.compare_and_swap(nxt, current.revision)  # a zombie twin would conflict here
            current = nxt
            print(f"checkpoint revision={current.revision} cursor={batch.stop}", flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run the demo; return 0 when every item was processed exactly once."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--url", default=None, help="stash URL (default: embedded local folder)")
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--kill-after", type=int, default=8, help="checkpoints before SIGKILL")
    parser.add_argument("--worker", nargs=2, metavar=("ID", "DELAY"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    url = args.url or stashpoint.url.resolve_url(None)
    if args.worker:
        worker(url, args.worker[0], args.items, float(args.worker[1]))
        return 0

    checkpoint_id = f"demo-{stashpoint.new_id()}"
    print(f"stash: {url}\ncheckpoint: {checkpoint_id}\nitems: {args.items}")
    command = [sys.executable, "-m", "stashpoint.demo", "--url", url, "--items", str(args.items)]

    first = subprocess.Popen(
        [*command, "--worker", checkpoint_id, "0.002"], stdout=subprocess.PIPE, text=True
    )
    assert first.stdout is not None
    for _ in range(args.kill_after):
        print("  worker 1:", first.stdout.readline().strip())
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    print(f"  worker 1: killed with SIGKILL (exit {first.returncode}), like a reclaimed spot VM")

    with stashpoint.open(url) as stash:
        at_kill = stash.checkpoints.load(checkpoint_id)
    print(f"  resuming from revision {at_kill.revision}, cursor {at_kill.payload['cursor']}")

    second = subprocess.run(
        [*command, "--worker", checkpoint_id, "0"], capture_output=True, text=True, check=False
    )
    lines = second.stdout.strip().splitlines()
    print(f"  worker 2: {len(lines)} checkpoints, last: {lines[-1] if lines else '-'}")
    if second.returncode != 0:
        print(second.stderr, file=sys.stderr)
        return 1

    with stashpoint.open(url) as stash:
        final = stash.checkpoints.load(checkpoint_id)
        history = stash.checkpoints.history(checkpoint_id)
    results = final.payload["results"]
    expected = {str(i): work(i) for i in range(args.items)}
    batches = -(-args.items // BATCH)
    ok = (
        results == expected
        and final.payload["commits"] == batches
        and final.revision == batches
        and len(history) == batches
    )
    print(
        f"\nrevision {final.revision}, {len(results)}/{args.items} items, "
        f"{final.payload['commits']} commits for {batches} batches, {len(history)} older revisions"
    )
    print("every item processed exactly once: " + ("YES" if ok else "NO"))
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    except CheckpointConflict as exc:
        print(f"conflict: {exc}", file=sys.stderr)
        sys.exit(2)
