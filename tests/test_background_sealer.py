"""`Stash.seal_later`: sessions' appends never seal inside the caller's call.

The append that completes a range of 64 versions used to seal it before returning (a
segment PUT and the range's vacating writes). With `seal_later` (the OpenAI Agents and
Strands sessions) every append is its own request alone; the range is sealed on the
stash's background thread (a task of the loop for an `AsyncStash`), and the stash's close
waits for it.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from typing import Any

import pytest

import stashpoint
from stashpoint.steps import ask, run_sync
from stashpoint.stores.layout import OPENAI_SESSIONS, STRANDS_SESSIONS
from stashpoint.stores.objects import ListKeys


def _segments(stash: Any, namespace: str, log_id: str) -> list[str]:
    prefix = stash.log_steps(namespace).keys.segments_prefix(log_id)
    return list(run_sync(ask(ListKeys(prefix)), stash.driver).keys)


class _CallersRequests:
    """Counts the requests sent from the caller's threads (not the stash's own)."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.lock = threading.Lock()

    def __call__(self, request: Any, proceed: Any) -> Any:
        if not threading.current_thread().name.startswith("stashpoint-"):
            with self.lock:
                self.sent.append(type(request).__name__)
        return proceed()

    def take(self) -> list[str]:
        with self.lock:
            taken, self.sent = self.sent, []
        return taken


def test_an_openai_session_append_is_one_put_even_where_a_range_completes(
    local_url: tuple[str, dict[str, Any]],
) -> None:
    pytest.importorskip("agents")
    from stashpoint.openai_agents import StashSession

    address, options = local_url
    with stashpoint.open(address, **options) as stash:
        session = StashSession("s", stash)
        asyncio.run(session.get_items())  # the first read of the log: a listing
        counted = _CallersRequests()
        with stash.intercept(counted):
            for n in range(140):  # versions 0-139: ranges complete at 64 and 128
                asyncio.run(session.add_items([{"role": "user", "content": f"m{n}"}]))
                assert counted.take() == ["PutObject"], n
    with stashpoint.open(address, **options) as stash:  # the close waited for the seals
        assert len(_segments(stash, OPENAI_SESSIONS, "s")) == 2
        items = asyncio.run(StashSession("s", stash).get_items())
        assert [i["content"] for i in items] == [f"m{n}" for n in range(140)]


def test_an_async_stash_seals_on_a_task_of_its_loop_after_the_call() -> None:
    pytest.importorskip("agents")
    from stashpoint.openai_agents import StashSession
    from stashpoint.stores.objects import PutObject

    async def main() -> list[str]:
        async with stashpoint.open_async(f"memory://sealer-{uuid.uuid4().hex}") as stash:
            segments = stash.log_steps(OPENAI_SESSIONS).keys.segments_prefix("a")
            session = StashSession("a", stash)
            events: list[str] = []

            async def hook(request: Any, proceed: Any) -> Any:
                if isinstance(request, PutObject):
                    events.append("segment" if request.key.startswith(segments) else "put")
                return await proceed()

            with stash.intercept(hook):
                for n in range(70):  # version 64 completes the first range
                    await session.add_items([{"role": "user", "content": f"m{n}"}])
                    events.append(f"returned {n}")
                await stash.close()  # waits for the seal's task
            return events

    events = asyncio.run(main())
    assert events.count("segment") == 1  # sealed, by the time the close returned
    # The append of version 64 was one PUT and returned before the segment was written.
    assert events.index("segment") > events.index("returned 64")
    assert events[events.index("returned 63") + 1 : events.index("returned 64")] == ["put"]


def test_a_strands_message_is_one_put_even_where_a_range_completes(
    local_url: tuple[str, dict[str, Any]],
) -> None:
    pytest.importorskip("strands")
    from strands.types.session import Session, SessionAgent, SessionMessage, SessionType

    from stashpoint.strands_agents import StashSessionRepository

    address, options = local_url
    with stashpoint.open(address, **options) as stash:
        repository = StashSessionRepository(stash)
        repository.create_session(Session("f", SessionType.AGENT))
        repository.create_agent("f", SessionAgent("a", {}, {}))
        counted = _CallersRequests()
        with stash.intercept(counted):
            for n in range(130):
                message = {"role": "user", "content": [{"text": f"m{n}"}]}
                repository.create_message("f", "a", SessionMessage(message, n))
                assert counted.take() == ["PutObject"], n
    with stashpoint.open(address, **options) as stash:
        assert len(_segments(stash, STRANDS_SESSIONS, "f")) == 2
        stored = StashSessionRepository(stash).list_messages("f", "a")
        assert [m.message["content"][0]["text"] for m in stored] == [f"m{n}" for n in range(130)]


def test_a_sealer_leaves_other_log_steps_sealing_inline(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    address, options = memory_url
    with stashpoint.open(address, **options) as stash:
        mine = stash.log_steps(OPENAI_SESSIONS)
        stash.seal_later(mine)
        assert mine.seal_on_append is False
        assert stash.log_steps(OPENAI_SESSIONS).seal_on_append is True  # another part's


def test_a_long_lived_stash_holds_no_sealer_of_a_session_that_is_gone(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    """A session per request on one stash: what the stash keeps for its close stays
    bounded by the sessions alive (the weak references of those gone are dropped)."""
    import gc
    import weakref

    def held() -> int:
        gc.collect()
        return sum(isinstance(o, weakref.WeakMethod) for o in gc.get_objects())

    address, options = memory_url
    with stashpoint.open(address, **options) as stash:
        before = held()
        alive = [stash.seal_later(stash.log_steps(OPENAI_SESSIONS)) for _ in range(3)]
        for _ in range(500):
            stash.seal_later(stash.log_steps(OPENAI_SESSIONS))  # gone at once
        assert held() - before <= len(alive) + 64  # not 503
