"""Cold-start cost: `import stashpoint` (and opening an S3 stash) vs importing its deps.

Each measurement is a fresh interpreter (what a Lambda cold start pays); medians of several
runs, as ratios to `import pydantic, zstandard` measured in the same run.
Run: .venv/bin/python -m bench.import_bench
"""

from __future__ import annotations

import statistics
import subprocess
import sys

CASES = {
    "baseline: import pydantic, zstandard": "import pydantic, zstandard",
    "pydantic.BaseModel + zstandard": "from pydantic import BaseModel; import zstandard",
    "import boto3 (for scale)": "import boto3",
    "import stashpoint": "import stashpoint",
    "open a local stash, save once": (
        "import stashpoint, tempfile; d = tempfile.mkdtemp()\n"
        "with stashpoint.open('local://' + d) as s:\n"
        "    s.checkpoints.compare_and_swap(stashpoint.Envelope.initial('a', None, 'k', 1, {}), None)"
    ),
    "open an S3 stash (imports boto3)": (
        "import stashpoint; stashpoint.open('s3://bucket/prefix').checkpoints.load"
    ),
}


def measure(code: str, runs: int = 7) -> float:
    timed = f"import time; _t = time.perf_counter()\n{code}\nprint(time.perf_counter() - _t)"
    command = [sys.executable, "-c", timed]
    samples = [
        float(subprocess.run(command, capture_output=True, text=True, check=True).stdout)
        for _ in range(runs)
    ]
    return statistics.median(samples)


def main() -> None:
    print("cold start, fresh interpreter each time (median of 7)")
    baseline = None
    for label, code in CASES.items():
        seconds = measure(code)
        baseline = baseline or seconds
        print(f"{label:<40} {seconds * 1e3:7.1f} ms  x{seconds / baseline:.2f}")


if __name__ == "__main__":
    main()
