"""Cold-start cost: `import stashpoint`, a first save and load, opening an S3 stash.

Each measurement is a fresh interpreter (what a Lambda cold start pays); medians of several
runs, as ratios to `import pydantic, zstandard` and to `import boto3` measured in the same
run. Issue #14's goals: `import stashpoint` <= 2.0x the first, "import, open local, save +
load once" <= 0.6x the second.
Run: .venv/bin/python -m bench.import_bench
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

CASES = {
    "baseline: import pydantic, zstandard": "import pydantic, zstandard",
    "import boto3 (for scale)": "import boto3",
    "import stashpoint": "import stashpoint",
    "open a local stash, save once": (
        "import stashpoint, tempfile; d = tempfile.mkdtemp()\n"
        "with stashpoint.open('local://' + d) as s:\n"
        "    s.checkpoints.compare_and_swap(stashpoint.Envelope.initial('a', None, 'k', 1, {}), None)"
    ),
    "import, open local, save + load once": (
        "import stashpoint, tempfile; d = tempfile.mkdtemp()\n"
        "with stashpoint.open('local://' + d) as s:\n"
        "    s.checkpoints.compare_and_swap(stashpoint.Envelope.initial('a', None, 'k', 1, {}), None)\n"
        "    s.checkpoints.load('a')"
    ),
    "open an S3 stash (imports boto3)": (
        "import stashpoint; stashpoint.open('s3://bucket/prefix').checkpoints.load"
    ),
}


# Deployed code runs from cached bytecode; without it every run would also compile our
# sources (this machine sets PYTHONDONTWRITEBYTECODE). A discarded first round writes it.
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _once(code: str) -> float:
    timed = f"import time; _t = time.perf_counter()\n{code}\nprint(time.perf_counter() - _t)"
    command = [sys.executable, "-c", timed]
    done = subprocess.run(command, capture_output=True, text=True, check=True, env=_ENV)
    return float(done.stdout)


def main(rounds: int = 15) -> None:
    # Cases alternate within each round, so a slow spell of the machine hits all alike.
    samples: dict[str, list[float]] = {label: [] for label in CASES}
    for code in CASES.values():
        _once(code)  # warm-up: bytecode caches and the OS page cache
    for _ in range(rounds):
        for label, code in CASES.items():
            samples[label].append(_once(code))
    print(f"cold start, fresh interpreter each time (median of {rounds}, interleaved)")
    medians = {label: statistics.median(values) for label, values in samples.items()}
    baseline = medians["baseline: import pydantic, zstandard"]
    boto3 = medians["import boto3 (for scale)"]
    print(f"{'':<40} {'':>10}  {'/baseline':>9}  {'/boto3':>6}")
    for label, seconds in medians.items():
        print(
            f"{label:<40} {seconds * 1e3:7.1f} ms  x{seconds / baseline:8.2f}  "
            f"x{seconds / boto3:5.2f}"
        )


if __name__ == "__main__":
    main()
