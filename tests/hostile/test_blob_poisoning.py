"""A blob planted under the hash of a value we are about to store cannot poison the run."""

from __future__ import annotations

import hashlib
from typing import Any

import pydantic_core
import pytest

import stashpoint
from stashpoint.stores.layout import BLOBS


@pytest.fixture(params=["memory_url", "local_url", "s3_seaweed_url"])
def url(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return request.getfixturevalue(request.param)


def test_a_squatted_blob_is_verified_and_replaced(url: tuple[str, dict[str, Any]]) -> None:
    address, options = url
    value = {"rows": list(range(30_000))}  # large enough to become a blob
    digest = hashlib.sha256(pydantic_core.to_json(value)).hexdigest()
    with stashpoint.open(address, blob_threshold=1024, **options) as stash:
        from stashpoint.stores.objects import PutObject

        key = stash.checkpoints.steps.layout.key(BLOBS, digest)
        planted = stash.checkpoints.steps.codec.encode(
            stashpoint.Envelope.initial(digest, None, "stashpoint.blob", 1, {"rows": [666]})
        )
        stash.driver(PutObject(key, planted, None))  # the attacker's write
        run_id = stash.runs.create_run("g")
        attempt = stash.runs.record_attempt(run_id, "n", 1, value)
        state = stash.runs.load_run(run_id)
        assert state is not None
        assert state.attempts[0].input == value and state.attempts[0].attempt_id == attempt


def test_an_existing_genuine_blob_is_reused(url: tuple[str, dict[str, Any]]) -> None:
    address, options = url
    value = {"rows": list(range(30_000))}
    with stashpoint.open(address, blob_threshold=1024, **options) as stash:
        run_id = stash.runs.create_run("g")
        stash.runs.record_attempt(run_id, "n", 1, value)
        stash.runs.record_attempt(run_id, "n", 2, value)  # same value: same blob
        state = stash.runs.load_run(run_id)
        assert state is not None and [a.input for a in state.attempts] == [value, value]
