"""`StashStorage`: Strands' `Storage` protocol on heads written by compare-and-swap, under
`SnapshotSessionManager` with a fake model, two writers, crashes at every request, the
fault proxy, `kill -9`, hostile objects and purges.

A value is acknowledged when `write` returns; it must read back byte for byte, and a value
another writer stored after this one read is never replaced unnoticed.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("strands")

from strands import Agent
from strands.session.snapshot_session_manager import SnapshotSessionManager
from strands.types.exceptions import StorageError

import stashpoint
from stashpoint.envelope import Envelope
from stashpoint.errors import InvalidPayload, Purged, StashpointError
from stashpoint.stores.layout import STRANDS_STORAGE
from stashpoint.strands_agents import (
    InvalidKey,
    StashStorage,
    StorageConflict,
    storage_id,
    storage_key,
)
from tests import servers
from tests.crashes import Crash, crash_at
from tests.faultproxy import FaultProxy, everyday_faults
from tests.kills import kill_after_lines
from tests.strands_agents.fake_model import ScriptedModel


@pytest.fixture(params=["local_url", "s3_seaweed_url"])
def url(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, Any]]]:
    return request.getfixturevalue(request.param)


def test_values_round_trip_and_list_as_the_protocol_says(url: tuple[str, dict[str, Any]]) -> None:
    address, options = url

    async def script(storage: StashStorage) -> None:
        binary = bytes(range(256))
        await storage.write("a/b/c.bin", binary)
        await storage.write("//a//x.json/", b'{"k": "v \\u00e9"}')
        await storage.write("a/b/\u00e9t\u00e9 #1.txt", "\u00e9t\u00e9".encode())
        await storage.write("z", b"")
        assert await storage.read("a/b/c.bin") == binary
        assert await storage.read("a/x.json") == b'{"k": "v \\u00e9"}'
        assert await storage.read("missing") is None
        assert await storage.list("a/") == ["a/b/c.bin", "a/b/\u00e9t\u00e9 #1.txt", "a/x.json"]
        assert await storage.list("") == [*(await storage.list("a")), "z"]
        scoped = storage.namespace("a").namespace("b")
        assert await scoped.list("") == ["c.bin", "\u00e9t\u00e9 #1.txt"]
        assert await scoped.read("c.bin") == binary
        await scoped.delete("c.bin")
        await scoped.delete("c.bin")  # absent: nothing happens
        assert await storage.read("a/b/c.bin") is None
        for bad in ("", "///", "a/../b", "a\\b"):
            with pytest.raises(InvalidKey) as raised:
                await storage.write(bad, b"x")
            assert isinstance(raised.value, StorageError)
        with pytest.raises(StashpointError):
            await storage.write("k", "not bytes")  # type: ignore[arg-type]
        hits = await storage.search("\u00e9t\u00e9")
        assert [h.key for h in hits] == ["a/b/\u00e9t\u00e9 #1.txt"]

    with stashpoint.open(address, **options) as stash:
        asyncio.run(script(StashStorage(stash)))


def test_ids_are_one_to_one_and_keep_prefixes() -> None:
    keys = ["a/b", "a:b", "a:2fb", "\u00e9", "a b", "a_b-c.d"]
    ids = [storage_id(k) for k in keys]
    assert len(set(ids)) == len(keys) and [storage_key(i) for i in ids] == keys
    assert storage_id("session/s1/x").startswith(storage_id("session/s1"))


def test_a_writer_never_replaces_a_value_it_did_not_see(
    s3_seaweed_url: tuple[str, dict[str, Any]],
) -> None:
    address, options = s3_seaweed_url

    async def script(stash: Any) -> None:
        first, second, blind = StashStorage(stash), StashStorage(stash), StashStorage(stash)
        await first.write("k", b"v0")
        assert await second.read("k") == b"v0"
        await first.write("k", b"v1")
        with pytest.raises(StorageConflict) as raised:
            await second.write("k", b"v2")  # read v0, v1 stored since
        assert isinstance(raised.value, StorageError) and raised.value.kind == "conflict"
        with pytest.raises(StorageConflict):
            await blind.write("k", b"v3")  # never read it: only a create, and it exists
        await blind.write("k", b"v1")  # the same bytes: this write is what is there
        assert await second.read("k") == b"v1"
        await second.write("k", b"v4")  # read again: goes on from what is there
        with pytest.raises(StorageConflict):
            await first.delete("k")  # saw v1: a delete of v4 is refused
        assert await first.read("k") == b"v4"

    with stashpoint.open(address, **options) as stash:
        asyncio.run(script(stash))


def test_snapshot_session_manager_on_the_stash_and_two_invocations(
    url: tuple[str, dict[str, Any]],
) -> None:
    address, options = url

    def agent(stash: Any) -> Agent:
        manager = SnapshotSessionManager("snap", storage=StashStorage(stash))
        return Agent(model=ScriptedModel(), session_manager=manager, callback_handler=None)

    with stashpoint.open(address, **options) as stash:
        first = agent(stash)
        first("hello")
        first.state.set("n", 1)
        first("again")
    with stashpoint.open(address, **options) as stash:  # a cold process restores the snapshot
        resumed = agent(stash)
        assert [b["text"] for m in resumed.messages for b in m["content"]] == [
            "hello", "echo: hello", "again", "echo: again",
        ]  # fmt: skip
        assert resumed.state.get("n") == 1
        other = agent(stash)  # a second invocation of the same session, at once
        resumed("from one")
        with pytest.raises(StorageConflict):
            other("from the other")  # its snapshot would replace the first's turn
        assert [b["text"] for m in agent(stash).messages for b in m["content"]][-1] == (
            "echo: from one"
        )


def test_a_crash_at_any_request_leaves_the_old_or_the_new_value(
    local_url: tuple[str, dict[str, Any]],
) -> None:
    address, options = local_url
    with stashpoint.open(address, **options) as stash:
        asyncio.run(StashStorage(stash).write("k", b"v0"))
    for step in range(3):
        for after in (False, True):
            with stashpoint.open(address, **options) as stash:
                storage = StashStorage(stash)
                before = asyncio.run(storage.read("k"))
                new = f"s{step}{after}".encode()
                with crash_at(stash, step, after), contextlib.suppress(Crash):
                    asyncio.run(storage.write("k", new))
            with stashpoint.open(address, **options) as stash:
                now = asyncio.run(StashStorage(stash).read("k"))
            assert now in (before, new), (step, after)


def test_the_fault_proxy_on_every_request_loses_no_acknowledged_value(
    seaweedfs: servers.S3Server,
) -> None:
    plan, config = everyday_faults()
    prefix = f"t-{uuid.uuid4().hex}"
    acknowledged: dict[str, bytes] = {}
    failed: list[str] = []
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        with stashpoint.open(url, client_config=config) as stash:
            for n in range(40):  # bounded
                storage = StashStorage(stash)  # each write a new invocation: read, then write
                key = f"k{n % 4}"
                try:
                    asyncio.run(storage.read(key))
                    asyncio.run(storage.write(key, f"v{n}".encode()))
                    acknowledged[key] = f"v{n}".encode()
                except StashpointError as exc:  # told it failed
                    failed.append(exc.kind.value)
    assert plan.injected["drop_response"] > 0 and plan.injected["drop_request"] > 0
    assert len(acknowledged) == 4, failed
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        storage = StashStorage(clean)
        for key, value in acknowledged.items():
            stored = asyncio.run(storage.read(key))
            # The last acknowledged value, or a later write that failed to say it landed.
            assert stored is not None
            assert int(stored[1:]) >= int(value[1:]), (key, stored, value)


KILLED_WRITER = """
import asyncio
import sys
import stashpoint
from stashpoint.strands_agents import StashStorage

with stashpoint.open(sys.argv[1]) as stash:
    storage = StashStorage(stash)
    asyncio.run(storage.read("counter"))
    for n in range(int(sys.argv[2]), 100000):
        asyncio.run(storage.write("counter", str(n).encode()))
        print(n, flush=True)
"""


def test_kill_9_of_a_writer_loses_no_acknowledged_value(
    s3_seaweed_url: tuple[str, dict[str, Any]],
) -> None:
    address, _ = s3_seaweed_url
    last = -1
    start = 0
    for round_ in range(4):
        before, after = kill_after_lines(
            KILLED_WRITER, [address, str(start)], 3 + round_, pause=0.004 * round_
        )
        acknowledged = [int(line) for line in before + after]
        assert acknowledged
        last = acknowledged[-1]
        with stashpoint.open(address) as stash:
            stored = int(asyncio.run(StashStorage(stash).read("counter")) or b"-1")
        assert stored in (last, last + 1)  # acknowledged, or the write it was killed in
        start = stored + 1
    assert last >= 8


def test_hostile_objects_and_purge(local_url: tuple[str, dict[str, Any]]) -> None:
    address, options = local_url
    with stashpoint.open(address, **options) as stash:
        storage = StashStorage(stash)
        heads = stash.head_steps(STRANDS_STORAGE)
        planted = Envelope.initial(storage_id("planted"), None, "other.kind", 1, {"text": "x"})
        stashpoint.steps.run_sync(heads.compare_and_swap(planted, None), stash.driver)
        with pytest.raises(InvalidPayload):
            asyncio.run(storage.read("planted"))
        odd = Envelope.initial(
            storage_id("odd"), None, "stashpoint.strands-storage", 1, {"base64": "%%%"}
        )
        stashpoint.steps.run_sync(heads.compare_and_swap(odd, None), stash.driver)
        with pytest.raises(InvalidPayload):
            asyncio.run(storage.read("odd"))
        asyncio.run(storage.write("session/gone/snapshot_latest.json", b"{}"))
        asyncio.run(storage.write("session/kept/snapshot_latest.json", b"{}"))
        receipt = stash.admin.purge(prefix=storage_id("session/gone/"), namespace="strands-storage")
        assert receipt.verified
        with pytest.raises(Purged):
            asyncio.run(StashStorage(stash).read("session/gone/snapshot_latest.json"))
        with pytest.raises(Purged):
            asyncio.run(StashStorage(stash).write("session/gone/snapshot_latest.json", b"{}"))
        assert asyncio.run(storage.read("session/kept/snapshot_latest.json")) == b"{}"


def test_an_async_stash_drives_it_on_the_loop(local_url: tuple[str, dict[str, Any]]) -> None:
    address, options = local_url

    async def main() -> bytes | None:
        async with stashpoint.open_async(address, **options) as stash:
            storage = StashStorage(stash)
            await storage.write("k", b"v")
            return await storage.read("k")

    assert asyncio.run(main()) == b"v"
