"""What the light JSON engine costs a warm process: write + parse vs the reference.

The light engine (the standard library) serves documents up to `jsontext.SMALL_TEXT` bytes
and `SMALL_NODES` values, and only until a process loads pydantic_core; it saves a cold
start the import (bench/import_bench.py). Here: its per-document price once warm, as
ratios to pydantic_core's `to_json` + `from_json` on the same documents in the same run.
Run: .venv/bin/python -m bench.jsontext_bench
"""

from __future__ import annotations

import pydantic_core

from bench.common import interleaved, transcript
from stashpoint import jsontext
from stashpoint.codec import check_json


def main() -> None:
    print("light engine (stdlib json) vs reference (pydantic_core), write + parse, same run")
    print(f"{'document':>9} {'nodes':>6} {'reference us':>13} {'light us':>9} {'ratio':>6}")
    for target in (256, 4 * 1024, jsontext.SMALL_TEXT):
        document = {"format": "bench/1", "payload": transcript(target)}
        nodes = check_json(document, jsontext.MAX_DEPTH)
        size = len(jsontext.write_reference(document))

        def reference(document: dict[str, object] = document) -> object:
            return pydantic_core.from_json(jsontext.write_reference(document))

        def light(document: dict[str, object] = document) -> object:
            return jsontext.parse_light(jsontext.write_light(document))

        rounds = 2000 if size < 10_000 else 300
        times = interleaved({"reference": reference, "light": light}, rounds)
        print(
            f"{size:>8}B {nodes:>6} {times['reference'] * 1e6:13.1f} "
            f"{times['light'] * 1e6:9.1f} {times['light'] / times['reference']:6.2f}"
        )


if __name__ == "__main__":
    main()
