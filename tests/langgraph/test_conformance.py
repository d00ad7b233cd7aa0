"""LangGraph's own conformance suite, all 81 tests, for both savers on every backend."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

import stashpoint
from stashpoint.langgraph import AsyncStashpointSaver, StashpointSaver

conformance = pytest.importorskip("langgraph.checkpoint.conformance")
from langgraph.checkpoint.conformance.capabilities import ALL_CAPABILITIES  # noqa: E402

EXPECTED_TESTS = 81
"""58 base + 23 optional in langgraph-checkpoint-conformance 0.0.2 (pinned in `dev`)."""


def _fresh(url: str) -> str:
    """Return `url` with a new prefix: each capability suite starts on an empty stash
    (`delete_for_runs` and `list(None)` visit every thread of a stash)."""
    scheme, _, rest = url.partition("://")
    path, question, query = rest.partition("?")
    return f"{scheme}://{path}-{uuid.uuid4().hex[:6]}{question}{query}"


def _registered(kind: str, url: str, options: dict[str, Any]) -> Any:
    if kind == "sync":

        async def sync_saver() -> AsyncIterator[StashpointSaver]:
            with stashpoint.open(_fresh(url), **options) as stash:
                yield StashpointSaver(stash)

        return conformance.checkpointer_test(name=f"StashpointSaver {url}")(sync_saver)

    async def async_saver() -> AsyncIterator[AsyncStashpointSaver]:
        async with stashpoint.open_async(_fresh(url), **options) as stash:
            yield AsyncStashpointSaver(stash)

    return conformance.checkpointer_test(name=f"AsyncStashpointSaver {url}")(async_saver)


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_conformance_all_capabilities(kind: str, saver_url: tuple[str, dict[str, Any]]) -> None:
    url, options = saver_url
    report = asyncio.run(conformance.validate(_registered(kind, url, options)))
    failures = {name: r.failures for name, r in report.results.items() if r.failures}
    assert not failures, failures
    assert report.passed_all_base()
    # Every capability, optional ones included, was detected and run (not skipped).
    assert set(report.results) == {c.value for c in ALL_CAPABILITIES}
    assert all(r.detected and r.passed for r in report.results.values()), report.results
    ran = sum(r.tests_passed for r in report.results.values())
    assert ran == EXPECTED_TESTS
