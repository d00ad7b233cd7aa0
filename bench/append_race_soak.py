"""The 8-thread append race of issue 24, run as a soak: 8 threads append to fresh logs on
`memory://` through the public API for `--seconds`, switching threads every microsecond.

On 9676807 it raised `KeyError: 'w1-4117'` after 37,045 successful appends (an append
that landed was reported as failed). The soak counts appends, failures, and checks a sample
of the logs it wrote. Exit status 1 on any failure.

    .venv/bin/python -m bench.append_race_soak [--seconds 600]
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid

import stashpoint

ROUND = 30.0
"""Seconds of one round on one fresh stash (bounds the memory the objects take)."""


def soak(seconds: float, threads: int = 8) -> dict[str, object]:
    """Run the race for `seconds`, in rounds of `ROUND` on fresh stashes."""
    end = time.monotonic() + seconds
    appends = sampled = rounds = 0
    failures: list[str] = []
    while time.monotonic() < end and not failures:
        done, checked = _round(min(ROUND, end - time.monotonic()), threads, failures)
        appends, sampled, rounds = appends + done, sampled + checked, rounds + 1
    return {
        "seconds": seconds,
        "appends": appends,
        "sampled": sampled,
        "rounds": rounds,
        "failures": failures,
    }


def _round(seconds: float, threads: int, failures: list[str]) -> tuple[int, int]:
    """One round of the race on a fresh stash; returns (appends, logs checked)."""
    deadline = time.monotonic() + seconds
    counts = [0] * threads
    lock = threading.Lock()
    start = threading.Barrier(threads)
    with stashpoint.open(f"memory://soak-{uuid.uuid4().hex}") as stash:

        def work(n: int) -> None:
            start.wait()
            i = 0
            while time.monotonic() < deadline and i < 50_000_000:  # bounded either way
                log_id = f"w{n}-{i}"
                try:
                    stash.logs.append(log_id, [i], after=None, state={"n": i})
                except BaseException as exc:  # any failure is the finding
                    with lock:
                        failures.append(f"{log_id}: {type(exc).__name__}: {exc}")
                    return
                counts[n] += 1
                i += 1

        previous = sys.getswitchinterval()
        sys.setswitchinterval(1e-6)
        try:
            workers = [threading.Thread(target=work, args=(n,)) for n in range(threads)]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join()
        finally:
            sys.setswitchinterval(previous)
        sampled = 0
        for n in range(threads):
            for i in range(0, counts[n], 997):
                if stash.logs.records(f"w{n}-{i}") != [i]:
                    failures.append(f"w{n}-{i}: records differ")
                sampled += 1
    return sum(counts), sampled


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=600)
    args = parser.parse_args()
    result = soak(args.seconds)
    print(json.dumps(result, indent=2))
    sys.exit(1 if result["failures"] else 0)


if __name__ == "__main__":
    main()
