"""A batch worker on a spot instance: it flushes before the instance goes, and a worker
that was reclaimed but still runs (a zombie) can never overwrite the one that replaced it.

EC2 posts a spot interruption notice in the instance metadata two minutes ahead, and may
post a rebalance recommendation earlier; Batch and ECS send SIGTERM before SIGKILL.
`stashpoint.spot.SpotWatcher` watches all three. The worker checkpoints every `--every`
items anyway, checkpoints at once on a rebalance recommendation, and on a notice or SIGTERM
finishes the item in hand, saves and exits 0, so the next worker resumes exactly there.

The job is a run: its snapshot holds the cursor, each stretch of items between checkpoints
is an attempt with a lease (renewed by heartbeats) recording where it ran (Batch job, ECS
task, instance id). A worker starting on a run that exists takes it over: the run's owner
epoch goes up, the previous worker's open stretch ends as failed, and if that worker is
still alive its next write raises `Fenced` and stores nothing. `stashpoint runs stuck`
lists stretches whose worker vanished without a notice.

    python examples/spot_worker.py --id nightly --items 1000
"""

from __future__ import annotations

import argparse
import sys
import time

import stashpoint
from stashpoint import CheckpointConflict, Fenced
from stashpoint.spot import SpotWatcher, compute_identity


def process(item: int) -> int:
    return item * item


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default=None)
    parser.add_argument("--id", required=True)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--delay", type=float, default=0.0)
    parser.add_argument("--poll", type=float, default=5.0, help="Seconds between IMDS polls.")
    parser.add_argument("--lease", type=float, default=60.0, help="Seconds between heartbeats.")
    args = parser.parse_args(argv)
    with stashpoint.open(args.url) as stash, SpotWatcher(interval=args.poll) as watcher:
        runs = stash.runs
        try:
            runs.create_run("spot-batch", run_id=args.id)  # this worker owns epoch 0
        except CheckpointConflict:
            runs.takeover(args.id)  # the previous worker is gone, or must be stopped
        run = runs.load_run(args.id)
        assert run is not None
        state = {"cursor": 0, "sums": 0, "workers": 0, **run.state_snapshot}
        state["workers"] += 1
        print(f"worker starts at item {state['cursor']}", flush=True)
        where = {
            **compute_identity(),
            **({"instance_id": watcher.instance_id} if watcher.instance_id else {}),
        }

        def begin() -> str:
            return runs.record_attempt(
                args.id, "items", state["cursor"], {"from": state["cursor"]},
                lease=args.lease, worker=where,
            )  # fmt: skip

        stretch = begin()
        beat = time.monotonic()

        def flush(*, last: bool = False) -> None:
            nonlocal stretch, beat
            runs.save_state_snapshot(args.id, dict(state))
            runs.complete_attempt(stretch, {"to": state["cursor"]})
            if not last:
                stretch = begin()
            beat = time.monotonic()

        try:
            rebalanced = False
            while state["cursor"] < args.items:
                state["sums"] += process(state["cursor"])
                state["cursor"] += 1
                time.sleep(args.delay)
                if watcher.stopping.is_set():  # finish the item in hand, then flush
                    flush(last=True)
                    notice = watcher.notice
                    assert notice is not None
                    why = "SIGTERM" if notice.source == "signal" else f"spot {notice.action} notice"
                    print(f"{why}: flushed at item {state['cursor']}", flush=True)
                    return 0
                if watcher.rebalance is not None and not rebalanced:
                    rebalanced = True  # at elevated risk: a checkpoint now costs little
                    flush()
                    print(
                        f"rebalance recommended: checkpoint at item {state['cursor']}", flush=True
                    )
                if state["cursor"] % args.every == 0:
                    flush()
                    print(f"checkpoint at item {state['cursor']}", flush=True)
                elif time.monotonic() - beat > args.lease / 3:
                    runs.heartbeat(stretch)  # alive: the lease starts again
                    beat = time.monotonic()
            flush(last=True)
            runs.complete_run(args.id)
        except Fenced:
            print("fenced: another worker took this run over; stopping", flush=True)
            return 3
        print(f"done: {state['cursor']} items, sum {state['sums']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
