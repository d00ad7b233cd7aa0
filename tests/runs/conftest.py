"""Fixtures of the run tests."""

from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(params=["local_url", "s3_dynamo_url"], ids=["sqlite", "dynamodb"])
def indexed(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """A stash with an index: the local default (SQLite) and SeaweedFS + DynamoDB Local."""
    url, options = request.getfixturevalue(request.param)
    return url, options
