"""Start-up of the command line: `stashpoint --version`, `--help` and a group's `--help`.

Each is a fresh interpreter, timed whole (median of 10 after a discarded round that writes
the bytecode cache), beside the baseline `python -c pass` and the command line of stop 33
(9676807's layout: one module importing every model) when `OLD_TREE` names its source.
Issue 25's goal: `--version` and `--help` <= 0.3 s on this machine.
Run: .venv/bin/python -m bench.cli_startup_bench  [OLD_TREE=/path/to/old/src]
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time

CASES = {
    "baseline: python -c pass": ["-c", "pass"],
    "stashpoint --version": ["-m", "stashpoint", "--version"],
    "stashpoint --help": ["-m", "stashpoint", "--help"],
    "stashpoint runs --help": ["-m", "stashpoint", "runs", "--help"],
    "stashpoint runs list --help": ["-m", "stashpoint", "runs", "list", "--help"],
}
_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _median(args: list[str], env: dict[str, str], rounds: int = 10) -> float:
    subprocess.run([sys.executable, *args], env=env, capture_output=True, check=True)
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run([sys.executable, *args], env=env, capture_output=True, check=True)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    old = os.environ.get("OLD_TREE")
    trees = {"now": dict(_ENV)}
    if old:
        trees["old"] = {**_ENV, "PYTHONPATH": old}
    print(f"{'case':32} " + " ".join(f"{name:>10}" for name in trees))
    for case, args in CASES.items():
        cells = [f"{_median(args, env):9.3f}s" for env in trees.values()]
        print(f"{case:32} " + " ".join(cells))


if __name__ == "__main__":
    main()
