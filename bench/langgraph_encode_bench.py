"""A LangGraph value's encoding CPU against LangGraph's own serializer (issue 24 #6).

100 LangChain messages (1.5 KB of real source text each, half human, half AI) serialized
by LangGraph's `JsonPlusSerializer.dumps_typed` (the baseline), then packed into the form
a thread entry stores (`stashpoint.langgraph.thread.pack`: readable JSON checked once, or
base64), then the entry's JSON text of it. Best of 5 rounds of 30, `process_time`. With
`--against PATH` the same is measured, in the same run, for the source tree at PATH (a
worktree of the code before), each in a fresh process.

    .venv/bin/python -m bench.langgraph_encode_bench [--against /path/to/old/src]
"""

from __future__ import annotations

import argparse
import os

from bench.common import measure_in_fresh_process

MEASURE = """
import json, sys, time
from pathlib import Path
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from stashpoint import jsontext
from stashpoint.codec import check_json
from stashpoint.langgraph.thread import pack

text = Path(sys.argv[1]).read_text()
messages = [
    (HumanMessage if n % 2 == 0 else AIMessage)(
        content=text[(n * 1500) % len(text):][:1500], id=f"m{n}"
    )
    for n in range(100)
]
serde = JsonPlusSerializer()

def best(work):
    rounds = []
    for _ in range(5):
        start = time.process_time()
        for _ in range(30):
            work()
        rounds.append((time.process_time() - start) / 30)
    return min(rounds)

type_, data = serde.dumps_typed(messages)
packed = pack(type_, data)
entry = {"records": [{"value": packed}]}
print(json.dumps({
    "serde_ms": 1000 * best(lambda: serde.dumps_typed(messages)),
    "pack_ms": 1000 * best(lambda: pack(type_, data)),
    "json_ms": 1000 * best(lambda: jsontext.write(entry, check_json(entry, 64))),
}))
"""


def _measure(source: str | None) -> dict[str, float]:
    text = os.path.join(os.path.dirname(__file__), "..", "src", "stashpoint", "logs", "log.py")
    result: dict[str, float] = measure_in_fresh_process(MEASURE, text, source=source)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--against", default=None, help="src folder of the code before")
    args = parser.parse_args()
    rows = [("this tree", _measure(None))]
    if args.against:
        rows.append((args.against, _measure(args.against)))
    print(f"{'code':<32} {'serde ms':>9} {'pack ms':>8} {'pack/serde':>11} {'entry JSON ms':>14} "
          f"{'all/serde':>10}")  # fmt: skip
    for name, row in rows:
        serde, packing, text = row["serde_ms"], row["pack_ms"], row["json_ms"]
        print(f"{name:<32} {serde:>9.2f} {packing:>8.2f} {packing / serde:>11.2f} "
              f"{text:>14.2f} {(serde + packing + text) / serde:>10.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
