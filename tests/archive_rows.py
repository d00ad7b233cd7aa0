"""Logs written for the archive's tests, and the rows a projection of them must hold."""

from __future__ import annotations

from collections import Counter
from typing import Any

Row = tuple[str, str, int, int]
"""A projected row's identity: namespace, log id, version, position."""


def write_log(stash: Any, log_id: str, turns: int, text: str = "turn", after: Any = None) -> Any:
    """Append `turns` turns (a user message with `text`, an answer) to `stash.logs`' log."""
    head = after
    for n in range(turns):
        head = stash.logs.append(
            log_id,
            [{"role": "user", "content": f"{text} {n}"}, {"role": "assistant", "content": "ok"}],
            after=head,
        )
    return head


def expected_rows(stash: Any, *log_ids: str) -> Counter[Row]:
    """Return the identity of every record of `stash.logs`' logs `log_ids`: each once."""
    wanted: Counter[Row] = Counter()
    for log_id in log_ids:
        for entry in stash.logs.entries(log_id):
            for offset in range(len(entry.records)):
                wanted[("logs", log_id, entry.version, entry.first_record + offset)] += 1
    return wanted
