"""The local backend's path check: string operations against the pathlib version before it.

Every request of the embedded default checks each path it touches (below the root, no
symlink on the way): about 25 checks per write. This runs the same workload (log appends,
then a read of every entry) with the check as it is and with the pathlib one it replaced
(kept here as the baseline), interleaved, in one process, and prints process CPU per
entry and the ratios; then the same for a `gc` dry run, which lists every version.

    .venv/bin/python -m bench.local_paths_bench [--appends 300] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import stat
import statistics
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import stashpoint
from stashpoint._backends.local import LocalTransport
from stashpoint.errors import UnsafeStorage


def _pathlib_safe(self: Any, path: Path) -> Path:
    """The check as it was before (stop 61): pathlib's relative_to and joins."""
    try:
        relative = path.relative_to(self.root)
    except ValueError:
        relative = path
    if relative.is_absolute() or any(part in (".", "..") for part in relative.parts):
        raise UnsafeStorage("refusing a key or prefix that leaves the store")
    current = self.root
    for part in relative.parts:
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except (FileNotFoundError, NotADirectoryError):
            return path
        if stat.S_ISLNK(mode):
            raise UnsafeStorage(f"refusing to follow a symlink inside the store: {current}")
    return path


def _workload(folder: Path, appends: int) -> tuple[float, float]:
    """Process CPU seconds of `appends` log appends and a read of them all, and of a
    `gc` dry run over them (which lists every version of every key)."""
    with stashpoint.open(f"local://{folder}") as stash:
        start = time.process_time()
        head = None
        for turn in range(appends):
            head = stash.logs.append("L", [{"text": f"turn {turn}"}], after=head)
        assert sum(len(e.records) for e in stash.logs.entries("L")) == appends
        written = time.process_time() - start
        start = time.process_time()
        stash.collect_garbage(dry_run=True, min_age=timedelta(0))
        return written, time.process_time() - start


def main() -> None:
    """Run both checks, interleaved, and print the medians and their ratio."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--appends", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    current = LocalTransport._safe
    times: dict[str, list[tuple[float, float]]] = {"strings": [], "pathlib": []}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for name in ("pathlib", "strings"):
                LocalTransport._safe = _pathlib_safe if name == "pathlib" else current  # type: ignore[method-assign]
                try:
                    times[name].append(_workload(Path(tmp) / f"{name}-{round_}", args.appends))
                finally:
                    LocalTransport._safe = current  # type: ignore[method-assign]
    for what, column in (("append (and read)", 0), ("gc dry run", 1)):
        medians = {
            name: statistics.median(value[column] for value in values)
            for name, values in times.items()
        }
        for name, value in medians.items():
            per = value / args.appends * 1000
            print(f"{what}: {name:8} {per:.3f} ms CPU per entry (median of {args.rounds})")
        print(f"{what}: strings / pathlib {medians['strings'] / medians['pathlib']:.2f}x")


if __name__ == "__main__":
    main()
