"""A batch worker on a spot instance: it flushes its checkpoint when SIGTERM arrives.

EC2 sends a two-minute reclaim notice and then SIGTERM; Batch and ECS send SIGTERM before
SIGKILL. The worker checkpoints every `--every` items anyway, and on SIGTERM finishes the
item in hand, saves at once and exits 0, so the next worker resumes exactly there.

    python examples/spot_worker.py --id nightly --items 1000
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from typing import Any

import stashpoint
from stashpoint import CheckpointNotFound, Envelope


def process(item: int) -> int:
    return item * item


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", default=None)
    parser.add_argument("--id", required=True)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args(argv)
    stopping = False

    def on_sigterm(signum: int, frame: Any) -> None:
        nonlocal stopping
        stopping = True  # finish the item in hand, then flush

    signal.signal(signal.SIGTERM, on_sigterm)
    with stashpoint.open(args.url) as stash:
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

        while state["cursor"] < args.items:
            state["sums"] += process(state["cursor"])
            state["cursor"] += 1
            time.sleep(args.delay)
            if stopping:
                flush()
                print(f"SIGTERM: flushed at item {state['cursor']}", flush=True)
                return 0
            if state["cursor"] % args.every == 0:
                flush()
                print(f"checkpoint at item {state['cursor']}", flush=True)
        flush()
        print(f"done: {state['cursor']} items, sum {state['sums']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
