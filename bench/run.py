"""Run every benchmark; each prints ratios against a baseline measured in the same run."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import async_bench, codec_bench, hostile_bench, import_bench, jsontext_bench, s3_bench

if __name__ == "__main__":
    import_bench.main()
    print()
    codec_bench.main()
    print()
    jsontext_bench.main()
    print()
    s3_bench.main()
    print()
    async_bench.main()
    print()
    hostile_bench.main()
