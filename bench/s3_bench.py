"""S3 save/load latency against SeaweedFS vs raw boto3 of the same bytes, and async fan-out.

- save: `compare_and_swap` of the next revision (encode + one conditional PUT, the ETag being
  known) vs raw boto3 `put_object` of the same encoded bytes, twice: plain (`raw`), and the
  same conditional request with the same metadata (`raw-cas`), which isolates what the
  library adds from what the server spends on checking the condition.
- load: `load` (GET + decode + validation) vs raw `get_object` + read (`raw`), and raw get
  + zstd decompress + JSON parse (`raw-dec`), the least any reader of the bytes must do.
- fan-out: 200 concurrent creates on one event loop (aiobotocore) vs 200 sequential sync
  creates.
- large fan-out: 16 concurrent 1 MB saves on one loop, with large (de)compression on worker
  threads (the default) vs all of it on the event loop (the baseline).

Starts SeaweedFS on 127.0.0.1 unless STASHPOINT_TEST_S3_ENDPOINT names a running server.
Run: .venv/bin/python -m bench.s3_bench
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
import uuid
from pathlib import Path

import pydantic_core
import zstandard

from bench.common import interleaved, transcript
from stashpoint import Envelope, open, open_async
from stashpoint.codec import Codec
from stashpoint.stores.head_facts import head_metadata
from tests import servers


def run(server: servers.S3Server) -> None:
    client = server.client(max_pool_connections=64)
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    url = server.url(prefix)
    codec = Codec()
    print("S3 latency vs raw boto3 of the same bytes, SeaweedFS on 127.0.0.1 (median, same run)")
    print(f"{'payload':>8} {'op':>5} {'raw ms':>8} {'raw-cas/dec':>11} {'ours ms':>8} "
          f"{'ours/raw':>8} {'ours/raw-cas|dec':>16}")  # fmt: skip
    bucket = servers.VERSIONED_BUCKET
    with open(url) as stash:
        store = stash.checkpoints
        for size in (1024, 100 * 1024, 1024 * 1024):
            payload = transcript(size) if size > 2048 else {"cursor": 1, "note": "x" * 900}
            current = Envelope.initial(f"ck-{size}", None, "bench", 1, payload)
            store.compare_and_swap(current, None)
            body = codec.encode(current)
            raw_key = f"{prefix}/raw/{size}"
            cas_key = f"{prefix}/rawcas/{size}"
            client.put_object(Bucket=bucket, Key=raw_key, Body=body)  # type: ignore[attr-defined]
            first = client.put_object(Bucket=bucket, Key=cas_key, Body=body)  # type: ignore[attr-defined]
            state = {"env": current, "etag": first["ETag"]}

            def ours_save() -> None:
                nxt = state["env"].next(payload)
                store.compare_and_swap(nxt, state["env"].revision)
                state["env"] = nxt

            def raw_save() -> None:
                client.put_object(Bucket=bucket, Key=raw_key, Body=body)  # type: ignore[attr-defined]

            def raw_cas_save() -> None:
                response = client.put_object(  # type: ignore[attr-defined]
                    Bucket=bucket, Key=cas_key, Body=body, IfMatch=state["etag"],
                    Metadata=head_metadata(current), ContentType="application/json",
                    ContentEncoding="zstd",
                )  # fmt: skip
                state["etag"] = response["ETag"]

            def ours_load() -> None:
                store.load(current.id)

            def raw_load() -> None:
                client.get_object(Bucket=bucket, Key=raw_key)["Body"].read()  # type: ignore[attr-defined]

            def raw_decoded_load() -> None:
                data = client.get_object(Bucket=bucket, Key=raw_key)["Body"].read()  # type: ignore[attr-defined]
                pydantic_core.from_json(zstandard.ZstdDecompressor().decompress(data))

            rounds = 40 if size < 1024 * 1024 else 15
            saves = interleaved({"raw": raw_save, "base": raw_cas_save, "ours": ours_save}, rounds)
            loads = interleaved(
                {"raw": raw_load, "base": raw_decoded_load, "ours": ours_load}, rounds
            )
            label = f"{size // 1024}KB"
            for op, t in (("save", saves), ("load", loads)):
                print(f"{label:>8} {op:>5} {t['raw'] * 1e3:8.2f} {t['base'] * 1e3:11.2f} "
                      f"{t['ours'] * 1e3:8.2f} {t['ours'] / t['raw']:8.2f} "
                      f"{t['ours'] / t['base']:16.2f}")  # fmt: skip

    n = 200
    small = {"cursor": 0, "note": "x" * 200}
    with open(url) as stash:
        start = time.perf_counter()
        for i in range(n):
            stash.checkpoints.compare_and_swap(
                Envelope.initial(f"seq-{i}", None, "b", 1, small), None
            )
        sequential = time.perf_counter() - start

    async def fan_out() -> float:
        async with open_async(url) as astash:
            await astash.checkpoints.compare_and_swap(
                Envelope.initial("warm", None, "b", 1, small), None
            )
            start = time.perf_counter()
            await asyncio.gather(*(
                astash.checkpoints.compare_and_swap(Envelope.initial(f"fan-{i}", None, "b", 1, small), None)
                for i in range(n)
            ))  # fmt: skip
            return time.perf_counter() - start

    concurrent = asyncio.run(fan_out())
    print(f"\n{n} saves: sequential sync {sequential * 1e3:.0f} ms, async fan-out on one loop "
          f"{concurrent * 1e3:.0f} ms, speed-up x{sequential / concurrent:.1f}")  # fmt: skip
    large_fan_out(url)


def large_fan_out(url: str, n: int = 16, rounds: int = 5) -> None:
    """Concurrent large saves, compression off the loop vs on it (alternating rounds)."""
    import stashpoint.steps as sansio

    payload = transcript(1 << 20)

    async def saves(tag: str) -> float:
        async with open_async(url) as astash:
            start = time.perf_counter()
            await asyncio.gather(*(
                astash.checkpoints.compare_and_swap(
                    Envelope.initial(f"{tag}-{uuid.uuid4().hex}", None, "b", 1, payload), None)
                for _ in range(n)
            ))  # fmt: skip
            return time.perf_counter() - start

    default = sansio.OFFLOAD_BYTES
    times: dict[str, list[float]] = {"on loop": [], "off loop": []}
    try:
        for _ in range(rounds):
            for name, threshold in (("on loop", 1 << 62), ("off loop", default)):
                sansio.OFFLOAD_BYTES = threshold
                times[name].append(asyncio.run(saves(name.replace(" ", "-"))))
    finally:
        sansio.OFFLOAD_BYTES = default
    on, off = (statistics.median(times[k]) for k in ("on loop", "off loop"))
    print(
        f"{n} concurrent 1MB saves (median of {rounds}): compression on the loop "
        f"{on * 1e3:.0f} ms, off the loop {off * 1e3:.0f} ms, ratio off/on {off / on:.2f}"
    )


def main() -> None:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", servers.ACCESS_KEY)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", servers.SECRET_KEY)
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    with tempfile.TemporaryDirectory() as data:
        server = servers.start_seaweedfs(Path(data))
        try:
            run(server)
        finally:
            servers.stop(server)


if __name__ == "__main__":
    main()
