"""LangGraph saver fixtures: every backend, both saver classes."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

SAVER_BACKENDS = ["memory_url", "local_url", "s3_seaweed_url", "s3_dynamo_url"]
"""Where the saver is tested: the embedded default, a folder, S3, S3 with its index."""


@pytest.fixture(params=SAVER_BACKENDS, ids=lambda name: name.removesuffix("_url"))
def saver_url(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """A fresh stash URL and options on one backend."""
    url, options = request.getfixturevalue(request.param)
    return url, options
