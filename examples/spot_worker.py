"""A batch worker on a spot instance: it flushes its checkpoint before the instance goes.

EC2 posts a spot interruption notice in the instance metadata two minutes ahead, and may
post a rebalance recommendation earlier; Batch and ECS send SIGTERM before SIGKILL.
`stashpoint.spot.SpotWatcher` watches all three. The worker checkpoints every `--every`
items anyway, checkpoints at once on a rebalance recommendation, and on a notice or SIGTERM
finishes the item in hand, saves and exits 0, so the next worker resumes exactly there.

    python examples/spot_worker.py --id nightly --items 1000
"""

from __future__ import annotations

import argparse
import sys
import time

import stashpoint
from stashpoint import CheckpointNotFound, Envelope
from stashpoint.spot import SpotWatcher


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
    args = parser.parse_args(argv)
    with stashpoint.open(args.url) as stash, SpotWatcher(interval=args.poll) as watcher:
        store = stash.checkpoints
        try:
            saved = store.load(args.id)
        except CheckpointNotFound:
            saved = Envelope.initial(
                args.id, None, "example.spot", 1, {"cursor": 0, "sums": 0, "workers": 0}
            )
            store.compare_and_swap(saved, None)
        state = dict(saved.payload, workers=saved.payload["workers"] + 1)
        print(f"worker starts at item {state['cursor']}", flush=True)

        def flush() -> None:
            nonlocal saved
            following = saved.next(dict(state))
            store.compare_and_swap(following, saved.revision)  # a zombie twin would conflict
            saved = following

        rebalanced = False
        while state["cursor"] < args.items:
            state["sums"] += process(state["cursor"])
            state["cursor"] += 1
            time.sleep(args.delay)
            if watcher.stopping.is_set():  # finish the item in hand, then flush
                flush()
                notice = watcher.notice
                assert notice is not None
                why = "SIGTERM" if notice.source == "signal" else f"spot {notice.action} notice"
                print(f"{why}: flushed at item {state['cursor']}", flush=True)
                return 0
            if watcher.rebalance is not None and not rebalanced:
                rebalanced = True  # at elevated risk: a checkpoint now costs little
                flush()
                print(f"rebalance recommended: checkpoint at item {state['cursor']}", flush=True)
            if state["cursor"] % args.every == 0:
                flush()
                print(f"checkpoint at item {state['cursor']}", flush=True)
        flush()
        print(f"done: {state['cursor']} items, sum {state['sums']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
