"""Hostile objects: time and peak memory to refuse each, in a fresh process per object.

The objects of issue #10, built at full size by streaming compression into files (never
held whole in memory), are loaded through a local stash in a subprocess that reports its
peak RSS (ru_maxrss). Baseline: the same subprocess loading a small genuine checkpoint, and
a genuine ~58 MB transcript envelope that must still load (under the 64 MiB default).

    .venv/bin/python -m bench.hostile_bench
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import zstandard

HEADER = (
    b'{"format":"stashpoint.envelope/1","id":"ID","run_id":null,"kind":"k","schema_version":1,'
    b'"revision":0,"write_id":"w","lineage":[],"created_at":"2026-01-01T00:00:00Z",'
    b'"updated_at":"2026-01-01T00:00:00Z","payload":'
)

LOAD = """
import json, sys, time, stashpoint
start = time.perf_counter()
try:
    with stashpoint.open("local://" + sys.argv[1], index="none") as stash:
        envelope = stash.checkpoints.load(sys.argv[2])
    outcome = f"loaded ({len(str(type(envelope.payload)))})"
except stashpoint.StashpointError as exc:
    outcome = f"{type(exc).__name__}"
elapsed = time.perf_counter() - start
# VmHWM is this process's own peak (ru_maxrss would carry the parent's over exec).
status = open("/proc/self/status").read()
peak_mb = int(status.split("VmHWM:")[1].split()[0]) / 1024
print(json.dumps({"outcome": outcome, "seconds": elapsed, "peak_mb": peak_mb}))
"""


def _frame(path: Path, parts: list[tuple[bytes, int]], *, declare: bool = True) -> None:
    size = sum(len(unit) * count for unit, count in parts)
    compressor = zstandard.ZstdCompressor(level=3, write_content_size=declare)
    with path.open("wb") as f:
        writer = compressor.stream_writer(f, size=size if declare else -1)
        for unit, count in parts:
            chunk = max(1, (1 << 20) // len(unit))
            while count:
                n = min(count, chunk)
                writer.write(unit * n)
                count -= n
        writer.flush(zstandard.FLUSH_FRAME)


def _build(root: Path) -> dict[str, str]:
    folder = root / "checkpoints"
    folder.mkdir(parents=True)
    objects = {
        "48 MB of [{},{},...], size declared": (
            "empties",
            [(b"[", 1), (b"{},", 16_000_000), (b"{}]}", 1)],
            True,
        ),
        "300 MB of [0,0,...], size declared": (
            "zeros",
            [(b"[", 1), (b"0,", 150_000_000), (b"0]}", 1)],
            True,
        ),
        '60 MB of [{"a":0},...] (22M values)': (
            "dense",
            [(b"[", 1), (b'{"a":0},', 7_500_000), (b"0]}", 1)],
            True,
        ),
        "a 1 GB string, size declared": (
            "string",
            [(b'"', 1), (b"a", 1_000_000_000), (b'"}', 1)],
            True,
        ),
        "1 GiB of zeros, no declared size": ("nulls", [(b"\0" * 1024, 1 << 20)], False),
    }
    names: dict[str, str] = {}
    for label, (name, parts, declare) in objects.items():
        header = HEADER.replace(b"ID", name.encode())
        body = parts if name == "nulls" else [(header, 1), *parts]
        _frame(folder / name, body, declare=declare)
        names[label] = name
    with (folder / "raw").open("wb") as f:  # a 700 MiB raw object: refused from its size
        f.truncate(700 * 1024 * 1024)
    names["700 MiB raw object"] = "raw"
    import random

    rng = random.Random(7)  # tool output with the entropy of real text: it compresses ~3x
    words = [rng.randbytes(rng.randint(2, 6)).hex() for _ in range(50_000)]
    messages = [
        {"role": "tool", "content": " ".join(rng.choices(words, k=12_000))} for _ in range(560)
    ]
    document = json.loads(HEADER.replace(b"ID", b"genuine").decode() + "0}")
    document["payload"] = {"transcript": messages}
    raw = json.dumps(document).encode()
    (folder / "genuine").write_bytes(zstandard.ZstdCompressor(level=3).compress(raw))
    names[f"genuine transcript, {len(raw) // 2**20} MB of JSON"] = "genuine"
    small = HEADER.replace(b"ID", b"small") + b'{"n":1}}'
    (folder / "small").write_bytes(zstandard.ZstdCompressor().compress(small))
    names["baseline: a small checkpoint"] = "small"
    return names


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "stash"
        names = _build(root)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        results = {}
        for label, name in names.items():
            done = subprocess.run(
                [sys.executable, "-c", LOAD, str(root), name], capture_output=True, text=True,
                check=True, env=env,
            )  # fmt: skip
            results[label] = json.loads(done.stdout)
    base = results["baseline: a small checkpoint"]["peak_mb"]
    print("hostile objects, local stash, fresh process each (peak RSS incl. the interpreter)")
    print(f"{'object':<44} {'outcome':<16} {'seconds':>8} {'peak MB':>8} {'over base':>10}")
    for label, r in results.items():
        print(
            f"{label:<44} {r['outcome']:<16} {r['seconds']:8.3f} {r['peak_mb']:8.1f} "
            f"{r['peak_mb'] - base:+9.1f}"
        )


if __name__ == "__main__":
    main()
