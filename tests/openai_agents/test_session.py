"""`StashSession`: the SDK's session protocol on a log, beside `SQLiteSession`, under races,
crashes, cancellation, hostile objects and purges.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("agents")

import contextlib

from agents import SQLiteSession

import stashpoint
from stashpoint.errors import InvalidArgument, InvalidId, InvalidPayload, Purged
from stashpoint.openai_agents import StashSession
from stashpoint.stores.layout import OPENAI_SESSIONS
from tests.crashes import Crash, crash_at


def _msg(n: int) -> dict[str, Any]:
    return {"role": "user", "content": f"message {n}"}


@pytest.fixture(params=["local_url", "s3_seaweed_url"])
def url(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, Any]]]:
    return request.getfixturevalue(request.param)


def test_the_same_operations_give_what_sqlite_session_gives(
    url: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    async def script(session: Any) -> list[Any]:
        seen: list[Any] = [await session.get_items(), await session.pop_item()]
        await session.add_items([_msg(1), _msg(2), _msg(3)])
        seen.append(await session.pop_item())
        await session.add_items([_msg(4)])
        seen += [await session.get_items(), await session.get_items(limit=2)]
        await session.clear_session()
        seen += [await session.get_items(), await session.pop_item()]
        await session.add_items([_msg(5), _msg(6)])
        seen += [await session.get_items(limit=1), await session.get_items(limit=0)]
        seen.append(await session.pop_item())
        seen.append(await session.get_items())
        return seen

    sqlite = SQLiteSession("s-1", tmp_path / "sdk.db")
    expected = asyncio.run(script(sqlite))
    sqlite.close()
    address, options = url
    with stashpoint.open(address, **options) as stash:
        assert asyncio.run(script(StashSession("s-1", stash))) == expected
    with stashpoint.open(address, **options) as stash:  # a cold process reads the same
        assert asyncio.run(StashSession("s-1", stash).get_items()) == expected[-1]


def test_an_add_is_one_request_and_a_cold_read_is_a_few(
    local_url: tuple[str, dict[str, Any]],
) -> None:
    address, options = local_url
    with stashpoint.open(address, **options) as stash:
        session = StashSession("s", stash)
        for n in range(100):
            asyncio.run(session.add_items([_msg(n), _msg(n + 1000)]))
        sent: list[str] = []
        with stash.intercept(lambda r, go: (sent.append(type(r).__name__), go())[1]):
            asyncio.run(session.add_items([_msg(-1)]))
        assert sent == ["PutObject"]
    with stashpoint.open(address, **options) as stash:
        sent.clear()
        with stash.intercept(lambda r, go: (sent.append(type(r).__name__), go())[1]):
            items = asyncio.run(StashSession("s", stash).get_items())
        assert len(items) == 201 and items[-1] == _msg(-1)
        # A listing or two, the sealed segment of versions 0-63, the entries after it (sent
        # in parallel): bounded by one seal span whatever the session's length.
        assert sent.count("ListKeys") <= 2 and len(sent) <= 2 + 1 + 64, sent
        assert sent.count("GetObject") < 101


def test_two_writers_never_interleave_or_lose_a_batch(
    s3_seaweed_url: tuple[str, dict[str, Any]],
) -> None:
    address, options = s3_seaweed_url
    errors: list[BaseException] = []

    def writer(w: int) -> None:
        try:
            with stashpoint.open(address, **options) as stash:
                session = StashSession("shared", stash)
                for b in range(10):
                    batch = [{"role": "user", "content": f"w{w} b{b} i{i}"} for i in range(3)]
                    asyncio.run(session.add_items(batch))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    with stashpoint.open(address, **options) as stash:
        items = asyncio.run(StashSession("shared", stash).get_items())
    contents = [i["content"] for i in items]
    assert len(contents) == 120 and len(set(contents)) == 120
    for start in range(0, 120, 3):  # every batch whole and in order
        batch = contents[start : start + 3]
        prefix = batch[0].rsplit(" ", 1)[0]
        assert batch == [f"{prefix} i{i}" for i in range(3)], batch


def test_racing_pops_remove_distinct_items(s3_seaweed_url: tuple[str, dict[str, Any]]) -> None:
    address, options = s3_seaweed_url
    with stashpoint.open(address, **options) as stash:
        asyncio.run(StashSession("pops", stash).add_items([_msg(n) for n in range(8)]))
    popped: list[Any] = []

    def popper() -> None:
        with stashpoint.open(address, **options) as stash:
            session = StashSession("pops", stash)
            for _ in range(2):
                popped.append(asyncio.run(session.pop_item()))

    threads = [threading.Thread(target=popper) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert sorted(p["content"] for p in popped) == [f"message {n}" for n in range(2, 8)]
    with stashpoint.open(address, **options) as stash:
        assert asyncio.run(StashSession("pops", stash).get_items()) == [_msg(0), _msg(1)]


def test_a_crash_at_any_request_of_an_add_leaves_the_batch_whole_or_absent(
    local_url: tuple[str, dict[str, Any]],
) -> None:
    address, options = local_url
    with stashpoint.open(address, **options) as stash:
        asyncio.run(StashSession("c", stash).add_items([_msg(0)]))
    for step in range(3):
        for after in (False, True):
            with stashpoint.open(address, **options) as stash:
                before = asyncio.run(StashSession("c", stash).get_items())
            with (
                stashpoint.open(address, **options) as stash,
                crash_at(stash, step, after) as calls,
                contextlib.suppress(Crash),
            ):
                asyncio.run(StashSession("c", stash).add_items([_msg(1), _msg(2)]))
            with stashpoint.open(address, **options) as stash:
                now = asyncio.run(StashSession("c", stash).get_items())
            assert now in (before, [*before, _msg(1), _msg(2)]), (step, after, calls)


def test_a_cancelled_add_is_awaited_to_its_outcome(local_url: tuple[str, dict[str, Any]]) -> None:
    address, options = local_url
    with stashpoint.open(address, **options) as stash:
        session = StashSession("cancel", stash)
        landed = threading.Event()
        release = threading.Event()

        def slow(request: Any, go: Any) -> Any:
            result = go()
            landed.set()
            release.wait(10)
            return result

        async def main() -> None:
            with stash.intercept(slow):
                task = asyncio.create_task(session.add_items([_msg(1)]))
                await asyncio.to_thread(landed.wait, 10)
                task.cancel()
                await asyncio.sleep(0.05)
                assert not task.done()  # waits for the write it started
                release.set()
                with pytest.raises(asyncio.CancelledError):
                    await task

        asyncio.run(main())
        assert asyncio.run(session.get_items()) == [_msg(1)]


def test_hostile_records_bad_input_and_purge(local_url: tuple[str, dict[str, Any]]) -> None:
    address, options = local_url
    with stashpoint.open(address, **options) as stash:
        with pytest.raises(InvalidId):
            StashSession("a/b", stash)
        with pytest.raises(InvalidArgument):
            StashSession("s", "not a stash")  # type: ignore[arg-type]
        session = StashSession("s", stash)
        with pytest.raises(InvalidArgument):
            asyncio.run(session.add_items("not a list"))  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            asyncio.run(session.get_items(limit=-1))
        asyncio.run(session.add_items([_msg(1)]))
        logs = stash.logs_in(OPENAI_SESSIONS)
        head = logs.head("s")
        logs.append("s", [{"planted": True}], after=head, state=head.state)  # a hostile writer
        with pytest.raises(InvalidPayload):
            asyncio.run(session.get_items())
        with pytest.raises(InvalidPayload):
            asyncio.run(session.pop_item())
        other = StashSession("t", stash)
        asyncio.run(other.add_items([_msg(2)]))
        receipt = stash.admin.purge(prefix="t", namespace="sessions")
        assert receipt.verified
        with pytest.raises(Purged):
            asyncio.run(other.get_items())
        with pytest.raises(Purged):
            asyncio.run(other.add_items([_msg(3)]))


def test_an_async_stash_drives_it_on_the_loop(local_url: tuple[str, dict[str, Any]]) -> None:
    address, options = local_url

    async def main() -> list[Any]:
        async with stashpoint.open_async(address, **options) as stash:
            session = StashSession("a", stash)
            await session.add_items([_msg(1), _msg(2)])
            assert await session.pop_item() == _msg(2)
            return await session.get_items()

    assert asyncio.run(main()) == [_msg(1)]


KILLED_WRITER = """
import asyncio
import sys
import stashpoint
from stashpoint.openai_agents import StashSession

with stashpoint.open(sys.argv[1]) as stash:
    session = StashSession("killed", stash)
    for b in range(int(sys.argv[2]), 1000):
        asyncio.run(session.add_items(
            [{"role": "user", "content": f"b{b} i{i}"} for i in range(3)]
        ))
        print(b, flush=True)
"""


def test_kill_9_of_a_writer_loses_no_acknowledged_batch(
    s3_seaweed_url: tuple[str, dict[str, Any]],
) -> None:
    from tests.kills import kill_after_lines

    address, _ = s3_seaweed_url
    acknowledged: set[int] = set()
    start = 0
    for round_ in range(5):
        before, after = kill_after_lines(
            KILLED_WRITER, [address, str(start)], 2 + round_, pause=0.004 * round_
        )
        acknowledged |= {int(line) for line in before + after}
        start = max(acknowledged, default=-1) + 2  # the batch killed mid-write may be there
    with stashpoint.open(address) as stash:
        contents = [i["content"] for i in asyncio.run(StashSession("killed", stash).get_items())]
    batches = [contents[n : n + 3] for n in range(0, len(contents), 3)]
    for batch in batches:  # whole, never a part of one
        b = batch[0].split(" ")[0]
        assert batch == [f"{b} i{i}" for i in range(3)], batch
    stored = {int(batch[0].split(" ")[0][1:]) for batch in batches}
    assert acknowledged <= stored, sorted(acknowledged - stored)
    assert len(acknowledged) >= 10
