"""Cold-start cost: `import stashpoint` (and opening an S3 stash) vs importing its deps.

Each measurement is a fresh interpreter (what a Lambda cold start pays); medians of several
runs, as ratios to `import pydantic, zstandard` measured in the same run.
Run: .venv/bin/python -m bench.import_bench
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

CASES = {
    "baseline: import pydantic, zstandard": "import pydantic, zstandard",
    "pydantic.BaseModel + zstandard": "from pydantic import BaseModel; import zstandard",
    "floor: one pydantic model built + zstandard": (
        "from pydantic import BaseModel; import zstandard\nclass M(BaseModel):\n    a: int\nM(a=1)"
    ),
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
    baseline = None
    for label, values in samples.items():
        seconds = statistics.median(values)
        baseline = baseline or seconds
        print(f"{label:<40} {seconds * 1e3:7.1f} ms  x{seconds / baseline:.2f}")


if __name__ == "__main__":
    main()
