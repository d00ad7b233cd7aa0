"""What the write path acknowledges, the read path accepts: one limits object for both.

A payload nested deeper than the reader accepts, NaN/Infinity and values JSON cannot carry
without changing them are refused when saved, with the path of the offending value, and
nothing is stored.
"""

from __future__ import annotations

import datetime
import decimal
import enum
import math
import uuid
from typing import Any

import pytest

import stashpoint
from stashpoint import Envelope, InvalidPayload, LimitExceeded
from stashpoint.codec import PARSER_MAX_DEPTH, Codec


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


@pytest.mark.parametrize("depth", [PARSER_MAX_DEPTH, PARSER_MAX_DEPTH + 1, 254])
def test_too_deep_payload_is_refused_on_write_and_nothing_is_stored(depth: int) -> None:
    with stashpoint.open("memory://") as stash:
        envelope = Envelope.initial("deep", None, "k", 1, {"v": nested(depth)})
        with pytest.raises(LimitExceeded, match="nesting"):
            stash.checkpoints.compare_and_swap(envelope, None)
        with pytest.raises(stashpoint.CheckpointNotFound):
            stash.checkpoints.load("deep")


def test_the_deepest_payload_written_reads_back() -> None:
    codec = Codec()
    deepest = None
    for depth in range(PARSER_MAX_DEPTH + 5, 0, -1):
        try:
            data = codec.encode(Envelope.initial("d", None, "k", 1, nested(depth)))
        except LimitExceeded:
            continue
        deepest = depth
        assert codec.decode(data).payload == nested(depth)
        break
    assert deepest is not None and deepest >= PARSER_MAX_DEPTH - 2


def test_too_deep_run_output_leaves_the_run_readable(tmp_path: Any) -> None:
    with stashpoint.open(f"local://{tmp_path / 's'}") as stash:
        run_id = stash.runs.create_run("g")
        attempt = stash.runs.record_attempt(run_id, "n", 1, {"x": 1})
        with pytest.raises(LimitExceeded):
            stash.runs.complete_attempt(attempt, nested(230))
        state = stash.runs.load_run(run_id)
        assert state is not None and state.attempts[0].status.value == "running"
        assert stash.runs.reindex(resume=False).indexed == 1  # reindex and gc still work
        assert stash.admin.collect_garbage(dry_run=True).unreadable == []


class Colour(enum.Enum):
    RED = "red"


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        ({"a": [1, math.nan]}, "/payload/a/1:"),
        ({"a": {"b": math.inf}}, "/payload/a/b:"),
        ({1: "x"}, "/payload:"),
        ({None: "x"}, "/payload:"),
        ({(1, 2): "x"}, "/payload:"),
        ({True: "x"}, "/payload:"),
        ({"s": {1, 2}}, "/payload/s:"),
        ({"t": (1, 2)}, "/payload/t:"),
        ({"d": datetime.datetime(2026, 1, 1)}, "/payload/d:"),
        ({"d": decimal.Decimal("1.5")}, "/payload/d:"),
        ({"u": uuid.uuid4()}, "/payload/u:"),
        ({"e": Colour.RED}, "/payload/e:"),
        ({"b": b"bytes"}, "/payload/b:"),
        ({"a/b": {"c~d": [math.nan]}}, "/payload/a~1b/c~0d/0:"),  # RFC 6901 escapes
    ],
)
def test_values_json_would_change_are_refused_naming_their_path(payload: Any, where: str) -> None:
    with pytest.raises(InvalidPayload) as info:
        Codec().encode(Envelope.initial("x", None, "k", 1, payload))
    assert where in str(info.value)


@pytest.mark.parametrize("field", ["input", "output", "snapshot"])
def test_nan_in_runs_is_refused_like_in_checkpoints(field: str) -> None:
    with stashpoint.open("memory://") as stash:
        run_id = stash.runs.create_run("g")
        bad = {"score": math.nan}
        attempt = stash.runs.record_attempt(run_id, "n", 1, {})
        calls = {
            "input": lambda: stash.runs.record_attempt(run_id, "n", 2, bad),
            "output": lambda: stash.runs.complete_attempt(attempt, bad),
            "snapshot": lambda: stash.runs.save_state_snapshot(run_id, bad),
        }
        with pytest.raises(InvalidPayload, match="NaN"):
            calls[field]()
        big_bad = {"rows": [*range(20_000), math.inf]}  # large: would become a blob
        with pytest.raises(InvalidPayload):
            stash.runs.record_attempt(run_id, "n", 2, big_bad)
