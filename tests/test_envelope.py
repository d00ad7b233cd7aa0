"""Envelopes and ids: identity, revisions, lineage, validation."""

from __future__ import annotations

import dataclasses
import uuid

import pytest

from stashpoint import Envelope, InvalidId, LimitExceeded, new_id, validate_id
from stashpoint.envelope import LINEAGE_DEPTH, MAX_REVISION


def test_initial_starts_at_revision_zero_with_a_write_id() -> None:
    env = Envelope.initial("a", "run", "k", 2, {"x": 1})
    assert env.revision == 0 and env.lineage == () and env.write_id
    assert env.created_at == env.updated_at and env.created_at.tzinfo is not None


def test_next_keeps_identity_and_advances_revision() -> None:
    env = Envelope.initial("a", "run", "k", 2, {"x": 1})
    nxt = env.next({"x": 2})
    assert (nxt.id, nxt.run_id, nxt.kind, nxt.schema_version, nxt.created_at) == (
        env.id,
        env.run_id,
        env.kind,
        env.schema_version,
        env.created_at,
    )
    assert nxt.revision == 1 and nxt.payload == {"x": 2}
    assert nxt.write_id != env.write_id and nxt.lineage == (env.write_id,)
    assert nxt.updated_at >= env.updated_at
    assert env.payload == {"x": 1}  # envelopes are immutable


def test_lineage_is_bounded_and_pairs_count_back_from_revision() -> None:
    env = Envelope.initial("a", None, "k", 1, 0)
    written = [(0, env.write_id)]
    for n in range(1, 50):
        env = env.next(n)
        written.append((n, env.write_id))
    assert len(env.lineage) == LINEAGE_DEPTH - 1
    assert env.lineage_pairs() == list(reversed(written))[:LINEAGE_DEPTH]


def test_revision_overflow_is_an_error() -> None:
    env = dataclasses.replace(Envelope.initial("a", None, "k", 1, 0), revision=MAX_REVISION)
    with pytest.raises(LimitExceeded):
        env.next(1)


@pytest.mark.parametrize(
    "good", ["a", "A-z_0.9:x", "x" * 255, "...a", pytest.param(new_id(), id="uuid7")]
)
def test_valid_ids(good: str) -> None:
    assert validate_id(good) == good


@pytest.mark.parametrize("bad", ["", ".", "..", "a/b", "../x", "a\\b", "x" * 256, "sp ace", "ü"])
def test_invalid_ids_raise_invalid_id(bad: str) -> None:
    with pytest.raises(InvalidId):
        validate_id(bad)
    with pytest.raises(InvalidId):
        Envelope.initial(bad, None, "k", 1, {})


def test_new_id_is_a_time_ordered_uuid7() -> None:
    ids = [new_id() for _ in range(2000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    parsed = uuid.UUID(ids[0])
    assert parsed.version == 7 and parsed.variant == uuid.RFC_4122


def test_a_following_revision_is_as_valid_as_one_checked_field_by_field() -> None:
    env = Envelope.initial("a", "run", "k", 2, {"x": 0})
    for i in range(1, LINEAGE_DEPTH + 5):
        env = env.next({"x": i})
    # `next` skips re-checking; rebuilding it through the checked constructor changes nothing.
    assert dataclasses.replace(env) == env
    assert len(env.lineage) == LINEAGE_DEPTH - 1 and env.revision == LINEAGE_DEPTH + 4
