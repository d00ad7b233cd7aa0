"""Codec throughput: encode+decode of 1 MB and 10 MB transcripts vs raw to_json + zstd.

The baseline does the least any envelope codec must do (serialise, compress, decompress,
parse); the ratio is what stashpoint's checks (format, limits, checksum, field validation)
cost on top. Run: .venv/bin/python bench/codec_bench.py
"""

from __future__ import annotations

import json

import pydantic_core
import zstandard

from bench.common import interleaved, transcript
from stashpoint import Envelope
from stashpoint.codec import Codec


def main() -> None:
    codec = Codec()
    print("codec encode+decode vs raw pydantic_core.to_json + zstandard (same run)")
    print(
        f"{'payload':>8} {'raw ms':>8} {'ours ms':>8} {'ratio':>6} {'ours MB/s':>9} {'zstd x':>7}"
    )
    for megabytes in (1, 10):
        payload = transcript(megabytes * 1024 * 1024)
        envelope = Envelope.initial("bench", None, "bench", 1, payload)
        raw_json = pydantic_core.to_json(payload)

        def baseline() -> object:
            data = zstandard.ZstdCompressor(
                level=3, write_checksum=True, write_content_size=True
            ).compress(pydantic_core.to_json(payload))
            return pydantic_core.from_json(zstandard.ZstdDecompressor().decompress(data))

        def ours() -> object:
            return codec.decode(codec.encode(envelope))

        rounds = 15 if megabytes == 1 else 5
        times = interleaved({"raw": baseline, "ours": ours}, rounds)
        size_mb = len(raw_json) / 1e6
        compressed = len(codec.encode(envelope))
        print(
            f"{megabytes:>6}MB {times['raw'] * 1e3:8.1f} {times['ours'] * 1e3:8.1f} "
            f"{times['ours'] / times['raw']:6.2f} {size_mb / times['ours']:9.0f} "
            f"{len(raw_json) / compressed:7.1f}"
        )
        assert json.loads(raw_json) == codec.decode(codec.encode(envelope)).payload


if __name__ == "__main__":
    main()
