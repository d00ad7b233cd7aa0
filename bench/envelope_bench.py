"""Envelope.next with a full lineage vs a copy through the checked constructor.

`next` skips re-checking fields that are valid by construction; the baseline is the same
copy made with `dataclasses.replace`, which checks every field (the previous `next`).
Run: .venv/bin/python -m bench.envelope_bench
"""

from __future__ import annotations

import dataclasses

from bench.common import interleaved
from stashpoint import Envelope
from stashpoint.envelope import LINEAGE_DEPTH, utc_now
from stashpoint.ids import new_write_id


def main() -> None:
    head = Envelope.initial("a", "r", "k", 1, {})
    for i in range(LINEAGE_DEPTH + 8):
        head = head.next({"i": i})

    def checked() -> object:
        return dataclasses.replace(
            head,
            revision=head.revision + 1,
            write_id=new_write_id(),
            lineage=(head.write_id, *head.lineage[: LINEAGE_DEPTH - 2]),
            updated_at=utc_now(),
            payload={},
        )

    def following() -> object:
        return head.next({})

    times = interleaved({"checked": checked, "next": following}, 20_000)
    print(
        f"Envelope.next, full lineage: checked copy {times['checked'] * 1e6:.1f} us, "
        f"next {times['next'] * 1e6:.1f} us, ratio {times['next'] / times['checked']:.2f}"
    )


if __name__ == "__main__":
    main()
