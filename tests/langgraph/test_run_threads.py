"""`delete_for_runs` and `list(None, filter={"run_id": ...})` through the index.

Which threads may hold which runs (`stashpoint.langgraph.run_threads`): items written ahead
of the appends that store a run's checkpoints, read instead of walking every thread.
"""

from __future__ import annotations

import contextlib
import uuid
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langgraph.checkpoint.base import empty_checkpoint

import stashpoint
from stashpoint.index.requests import GetPartition, PutItems
from stashpoint.langgraph import StashpointSaver
from stashpoint.langgraph.run_threads import RunThreads
from tests.meter import Meter

INDEXED = ["memory_url", "local_url", "s3_dynamo_url"]
"""Every backend with an index: in-memory SQLite, a SQLite file, DynamoDB Local."""


@pytest.fixture(params=INDEXED, ids=lambda name: name.removesuffix("_url"))
def indexed(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    url, options = request.getfixturevalue(request.param)
    return url, options


def _put(saver: Any, thread_id: str, run_id: str | None, value: Any,
         parent: str | None = None) -> dict[str, Any]:  # fmt: skip
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"v": value}
    checkpoint["channel_versions"] = {"v": saver.get_next_version(None, None)}
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
    if parent is not None:
        configurable["checkpoint_id"] = parent
    metadata: dict[str, Any] = {"source": "loop", "step": 0}
    if run_id is not None:
        metadata["run_id"] = run_id
    result: dict[str, Any] = saver.put(
        {"configurable": configurable}, checkpoint, metadata, checkpoint["channel_versions"]
    )
    return result


def _runs(saver: Any, thread_id: str) -> list[Any]:
    return [
        t.metadata.get("run_id") for t in saver.list({"configurable": {"thread_id": thread_id}})
    ]


def _items(stash: Any, run_id: str) -> list[str]:
    """The thread keys the index names for a run (read through the stash's own driver)."""
    threads = RunThreads(stash.layout.prefix)
    pages = stash.driver(GetPartition(threads.run_partition(run_id)))
    return sorted(str(item["sk"]).removeprefix("thread#") for item in pages)


def test_a_put_writes_its_runs_item_once_per_thread_and_run(
    indexed: tuple[str, dict[str, Any]],
) -> None:
    """The first put of a run in a thread writes one index item, ahead of its append; the
    next puts of that run write none, from this process or from a new one (the head names
    the run); a put without a run id writes none."""
    url, options = indexed
    with stashpoint.open(url, **options) as stash:
        saver = StashpointSaver(stash)
        meter = Meter(stash)
        first = _put(saver, "t", "r1", 1)
        assert meter.sent.index("PutItems") < meter.sent.index("Create" if "Create" in
                                                               meter.sent else "PutObject")  # fmt: skip
        assert meter.index_items == 1
        meter.reset()
        second = _put(saver, "t", "r1", 2, parent=first["configurable"]["checkpoint_id"])
        assert meter.index_items == 0
        _put(saver, "plain", None, 0)
        assert meter.index_items == 0
        assert _items(stash, "r1") == ["t"]
    with stashpoint.open(url, **options) as stash:  # a new process: the head says r1
        saver = StashpointSaver(stash)
        meter = Meter(stash)
        third = _put(saver, "t", "r1", 3, parent=second["configurable"]["checkpoint_id"])
        assert meter.index_items == 0
        _put(saver, "t", "r2", 4, parent=third["configurable"]["checkpoint_id"])
        assert meter.index_items == 1
        assert _items(stash, "r2") == ["t"]


def test_delete_for_runs_reads_only_the_threads_the_index_names(
    indexed: tuple[str, dict[str, Any]],
) -> None:
    """After `setup()`, `delete_for_runs` of a run no thread holds is the marker and one
    partition read, whatever the number of threads; of a run in one thread, that thread."""
    url, options = indexed
    with stashpoint.open(url, **options) as stash:
        saver = StashpointSaver(stash)
        saver.setup()
        for n in range(12):
            _put(saver, f"other-{n}", f"keep-{n}", n)
        doomed = _put(saver, "mixed", "doomed", "doomed")
        _put(saver, "mixed", "kept", "kept", parent=doomed["configurable"]["checkpoint_id"])
    with stashpoint.open(url, **options) as stash:  # a new process
        meter = Meter(stash)
        StashpointSaver(stash).delete_for_runs(["no-such-run"])
        assert meter.sent == ["GetItem", "GetPartition"]
        meter.reset()
        meter.sent.clear()
        StashpointSaver(stash).delete_for_runs(["doomed", "also-none"])
        assert meter.sent[:3] == ["GetItem", "GetPartition", "GetPartition"]
        assert "ListKeys" not in meter.sent[:3]
        assert meter.requests["DeleteItem"] == 1  # the item of the run it no longer holds
        saver = StashpointSaver(stash)
        assert _runs(saver, "mixed") == ["kept"]
        assert _runs(saver, "other-3") == ["keep-3"]
        assert _items(stash, "doomed") == []
        assert _items(stash, "kept") == ["mixed"]


def test_the_first_delete_for_runs_walks_once_and_writes_the_index(
    indexed: tuple[str, dict[str, Any]],
) -> None:
    """Threads stored before the index had their items (an older version, or a stash that
    got its index later): the first `delete_for_runs` walks every thread, deletes, and
    writes every thread's items and the marker; the next one reads the index."""
    url, options = indexed
    with stashpoint.open(f"{url}&index=none" if "?" in url else f"{url}?index=none",
                         **options) as unindexed:  # fmt: skip
        saver = StashpointSaver(unindexed)
        for n in range(5):
            _put(saver, f"old-{n}", "old-run" if n % 2 else f"run-{n}", n)
    with stashpoint.open(url, **options) as stash:
        meter = Meter(stash)
        saver = StashpointSaver(stash)
        saver.delete_for_runs(["run-0"])
        assert "ListKeys" in meter.sent  # walked
        assert _runs(saver, "old-0") == []
        assert _items(stash, "old-run") == ["old-1", "old-3"]
        meter.sent.clear()
        saver.delete_for_runs(["old-run"])
        assert "ListKeys" not in meter.sent[:2]
        assert _runs(saver, "old-1") == [] and _runs(saver, "old-3") == []
        assert _runs(saver, "old-2") == ["run-2"]


def test_setup_writes_the_index_once(indexed: tuple[str, dict[str, Any]]) -> None:
    """`setup()` walks the threads stored before it once; later calls are one request."""
    url, options = indexed
    with stashpoint.open(f"{url}&index=none" if "?" in url else f"{url}?index=none",
                         **options) as unindexed:  # fmt: skip
        _put(StashpointSaver(unindexed), "old", "old-run", 1)
    with stashpoint.open(url, **options) as stash:
        saver = StashpointSaver(stash)
        saver.setup()
        assert _items(stash, "old-run") == ["old"]
        meter = Meter(stash)
        saver.setup()
        assert meter.sent == ["GetItem"]


def test_a_warm_saver_that_puts_after_delete_for_runs_indexes_its_run_again(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    """A saver whose cached head names run r puts again after another process deleted r's
    checkpoints (and its item): its append finds the rewrite, it plans again on the new
    head (which names no run) and writes the item again, so a later `delete_for_runs`
    still finds that checkpoint."""
    url, _ = memory_url
    with stashpoint.open(url) as writing, stashpoint.open(url) as deleting:
        saver = StashpointSaver(writing)
        saver.setup()
        first = _put(saver, "t", "r", 1)
        StashpointSaver(deleting).delete_for_runs(["r"])
        assert _runs(StashpointSaver(deleting), "t") == []
        assert _items(deleting, "r") == []
        # LangGraph passes the config of the checkpoint it last read: the one now deleted.
        _put(saver, "t", "r", 2, parent=first["configurable"]["checkpoint_id"])
        assert _items(deleting, "r") == ["t"]
        StashpointSaver(deleting).delete_for_runs(["r"])
        assert _runs(StashpointSaver(deleting), "t") == []


def test_an_item_of_a_put_in_flight_is_kept(memory_url: tuple[str, dict[str, Any]]) -> None:
    """`delete_for_runs` removes an item naming a thread that does not hold the run only
    when it was written at or below the version it read: a put that wrote its item and has
    not appended yet (its revision is the next version) keeps it."""
    url, _ = memory_url
    with stashpoint.open(url) as stash:
        saver = StashpointSaver(stash)
        saver.setup()
        _put(saver, "t", "other", 1)  # version 0
        threads = RunThreads(stash.layout.prefix)
        stash.driver(PutItems((threads.thread_item("in-flight", "t", 1),)))
        stash.driver(PutItems((threads.thread_item("gone", "t", 0),)))
        saver.delete_for_runs(["in-flight", "gone"])
        assert _items(stash, "in-flight") == ["t"]
        assert _items(stash, "gone") == []


def test_planted_items_do_not_stop_delete_for_runs(memory_url: tuple[str, dict[str, Any]]) -> None:
    """Items planted in the index (no revision, a key that is no thread id, a thread that
    does not exist) are passed over or removed; the run's real checkpoints are deleted."""
    url, _ = memory_url
    with stashpoint.open(url) as stash:
        saver = StashpointSaver(stash)
        saver.setup()
        _put(saver, "real", "r", 1)
        threads = RunThreads(stash.layout.prefix)
        partition = threads.run_partition("r")
        stash.driver(PutItems(({"pk": partition, "sk": "thread#../../etc", "revision": 1},
                               {"pk": partition, "sk": "nothing-like-a-thread", "revision": 1},
                               {"pk": partition, "sk": "thread#ghost", "revision": 5})))  # fmt: skip
        saver.delete_for_runs(["r"])
        assert _runs(saver, "real") == []
        # No thread "ghost" exists: a put in flight there keeps its item.
        assert "ghost" in _items(stash, "r")


def test_list_across_threads_by_run_reads_the_named_threads(
    indexed: tuple[str, dict[str, Any]],
) -> None:
    """`list(None, filter={"run_id": r})` reads the threads the index names, not every
    thread; the same checkpoints as the walk of a stash without an index."""
    url, options = indexed
    with stashpoint.open(url, **options) as stash:
        saver = StashpointSaver(stash)
        saver.setup()
        for n in range(8):
            _put(saver, f"t-{n}", "wanted" if n in (2, 5) else "not", n)
    with stashpoint.open(url, **options) as stash:
        meter = Meter(stash)
        found = list(StashpointSaver(stash).list(None, filter={"run_id": "wanted"}))
        assert sorted(t.config["configurable"]["thread_id"] for t in found) == ["t-2", "t-5"]
        assert "ListKeys" not in meter.sent[:2] and meter.sent[:2] == ["GetItem", "GetPartition"]
    with stashpoint.open(f"{url}&index=none" if "?" in url else f"{url}?index=none",
                         **options) as unindexed:  # fmt: skip
        walked = list(StashpointSaver(unindexed).list(None, filter={"run_id": "wanted"}))
        assert [t.config for t in walked] == [t.config for t in found]


def test_a_copied_thread_is_indexed_under_the_source_runs(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    """`copy_thread` brings the source's runs into the target: their items are written
    before the copy, and `delete_for_runs` deletes them from both threads."""
    url, _ = memory_url
    with stashpoint.open(url) as stash:
        saver = StashpointSaver(stash)
        saver.setup()
        _put(saver, "source", "r", 1)
        saver.copy_thread("source", "target")
        assert _items(stash, "r") == ["source", "target"]
        saver.delete_for_runs(["r"])
        assert _runs(saver, "source") == [] and _runs(saver, "target") == []


async def test_the_async_saver_deletes_runs_through_the_index(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    """The async saver runs the same steps: `setup`, puts and `adelete_for_runs`."""
    from stashpoint.langgraph import AsyncStashpointSaver

    url, _ = memory_url
    async with stashpoint.open_async(url) as stash:
        saver = AsyncStashpointSaver(stash)
        await saver.setup()
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"v": 1}
        checkpoint["channel_versions"] = {"v": saver.get_next_version(None, None)}
        await saver.aput({"configurable": {"thread_id": "t", "checkpoint_ns": ""}}, checkpoint,
                         {"source": "loop", "step": 0, "run_id": "r"},
                         checkpoint["channel_versions"])  # fmt: skip
        sent: list[str] = []

        async def hook(request: Any, proceed: Any) -> Any:
            sent.append(type(request).__name__)
            return await proceed()

        with stash.intercept(hook):
            await saver.adelete_for_runs(["r"])
        assert sent[:2] == ["GetItem", "GetPartition"]  # the index, not a listing of threads
        assert [t async for t in saver.alist({"configurable": {"thread_id": "t"}})] == []


@pytest.mark.parametrize("after", [False, True], ids=["before", "after"])
def test_a_crash_at_any_request_leaves_every_checkpoint_of_the_run_deletable(
    local_url: tuple[str, dict[str, Any]], after: bool
) -> None:
    """A process dies at each request of a put of run r (the item, the append), then at each
    request of a `delete_for_runs(["r"])`: a new process's `delete_for_runs` always deletes
    every acknowledged checkpoint of r, and never one of another run."""
    from tests.crashes import Crash, crash_at

    url, options = local_url
    step = 0
    while True:
        base = f"{url.split('?')[0]}-{step}-{after}?{url.split('?')[1]}"
        with stashpoint.open(base, **options) as stash:
            saver = StashpointSaver(stash)
            saver.setup()
            kept = _put(saver, "t", "kept", 0)
            parent = _put(saver, "t", "r", 1, parent=kept["configurable"]["checkpoint_id"])
            with crash_at(stash, step, after) as calls:
                try:
                    _put(saver, "t", "r", 2, parent=parent["configurable"]["checkpoint_id"])
                    _put(saver, "u", "r", 3)
                    saver.delete_for_runs(["r"])
                except Crash:
                    crashed = True
                else:
                    crashed = False
        with stashpoint.open(base, **options) as stash:
            saver = StashpointSaver(stash)
            saver.delete_for_runs(["r"])
            assert _runs(saver, "t") == ["kept"], (step, calls)
            assert _runs(saver, "u") == [], (step, calls)
        if not crashed:
            break
        step += 1
        assert step < 200  # bounded: the work above is a few dozen requests


def test_puts_racing_delete_for_runs_on_real_servers_leave_nothing_unfound(
    s3_dynamo_url: tuple[str, dict[str, Any]],
) -> None:
    """Four processes put checkpoints of run r (each in two threads, beside a kept run)
    while another deletes r again and again (SeaweedFS + DynamoDB Local): whatever the
    interleaving, a last `delete_for_runs` finds and deletes every checkpoint of r, and
    every kept checkpoint stays."""
    import threading

    url, options = s3_dynamo_url
    with stashpoint.open(url, **options) as stash:
        StashpointSaver(stash).setup()
    errors: list[BaseException] = []
    stop = threading.Event()

    def writer(n: int) -> None:
        try:
            with stashpoint.open(url, **options) as stash:
                saver = StashpointSaver(stash)
                for thread_id in (f"w{n}-a", f"w{n}-b"):
                    parent = _put(saver, thread_id, "kept", 0)["configurable"]["checkpoint_id"]
                    for value in range(4):
                        parent = _put(saver, thread_id, "r", value, parent=parent)["configurable"][
                            "checkpoint_id"
                        ]
        except BaseException as exc:
            errors.append(exc)

    def deleter() -> None:
        try:
            with stashpoint.open(url, **options) as stash:
                saver = StashpointSaver(stash)
                for _ in range(6):  # bounded
                    if stop.is_set():
                        break
                    saver.delete_for_runs(["r"])
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    threads.append(threading.Thread(target=deleter))
    for thread in threads:
        thread.start()
    for thread in threads[:4]:
        thread.join(timeout=120)
    stop.set()
    threads[4].join(timeout=120)
    assert not errors, errors
    with stashpoint.open(url, **options) as stash:
        saver = StashpointSaver(stash)
        saver.delete_for_runs(["r"])
        for n in range(4):
            for thread_id in (f"w{n}-a", f"w{n}-b"):
                runs = _runs(saver, thread_id)
                assert "r" not in runs and runs.count("kept") == 1, (thread_id, runs)


def test_the_fault_proxy_leaves_no_checkpoint_of_a_run_undeletable(
    seaweedfs: Any, dynamodb_local: Any, dynamodb_table: str
) -> None:
    """Puts of runs through the fault proxy (answers dropped after the write landed,
    requests dropped, 503s, 409s) and `delete_for_runs` through it too: every checkpoint a
    put acknowledged is deleted by a clean process's `delete_for_runs` through the index,
    and every checkpoint of a kept run stays."""
    from botocore.config import Config

    from stashpoint import StashpointError
    from tests.faultproxy import FaultPlan, FaultProxy

    plan = FaultPlan(
        {"drop_response": 0.1, "drop_request": 0.05, "slowdown": 0.05, "conflict": 0.05}
    )
    config = Config(
        read_timeout=2, connect_timeout=2, retries={"mode": "standard", "max_attempts": 3}
    )
    prefix = f"t-{uuid.uuid4().hex}"
    index = f"&index=dynamodb://{dynamodb_table}"
    options = {"index_endpoint_url": dynamodb_local.endpoint}
    with stashpoint.open(seaweedfs.url(prefix) + index, **options) as stash:
        StashpointSaver(stash).setup()
    acknowledged: dict[str, list[str]] = {}
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint) + index
        with stashpoint.open(url, client_config=config, **options) as stash:
            saver = StashpointSaver(stash)
            for n in range(8):
                thread_id, parent = f"t{n}", None
                for run in ("kept", f"doomed-{n % 3}", "kept"):
                    try:
                        parent = _put(saver, thread_id, run, n, parent=parent)["configurable"][
                            "checkpoint_id"
                        ]
                    except StashpointError:
                        continue  # not acknowledged: may or may not be stored
                    acknowledged.setdefault(thread_id, []).append(run)
            for _ in range(5):  # bounded: a delete through the faults may fail
                try:
                    saver.delete_for_runs(["doomed-0", "doomed-1"])
                    break
                except StashpointError:
                    continue
    with stashpoint.open(seaweedfs.url(prefix) + index, **options) as clean:
        saver = StashpointSaver(clean)
        saver.delete_for_runs(["doomed-0", "doomed-1", "doomed-2"])
        for thread_id, runs in acknowledged.items():
            left = _runs(saver, thread_id)
            assert not any(r.startswith("doomed") for r in left), (thread_id, left)
            assert left.count("kept") >= runs.count("kept"), (thread_id, runs, left)
    assert sum(len(r) for r in acknowledged.values()) > 12
    assert plan.injected["drop_response"] > 0


def _index_runs(stash: Any) -> int:
    """What `setup()` does, returning how many threads this call walked."""
    from stashpoint.steps import run_sync

    saver = StashpointSaver(stash)
    walked: int = run_sync(saver.steps.index_runs(saver.serde), stash.driver)
    return walked


def test_setup_cut_short_is_taken_on_by_the_next_call(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    """A walk of every thread records how far it got after each page of threads: a
    `setup()` that dies partway (a Lambda's deadline) is continued by the next call, which
    walks only the threads after that point, and every thread ends up indexed."""
    from tests.crashes import Crash

    url, _ = memory_url
    with stashpoint.open(f"{url}?index=none") as unindexed:
        saver = StashpointSaver(unindexed)
        for n in range(250):
            _put(saver, f"t-{n:03d}", f"run-{n}", n)
    with stashpoint.open(url) as stash:
        recorded: list[int] = []

        def die_after_the_first_record(request: Any, proceed: Any) -> Any:
            result = proceed()
            progress = isinstance(request, PutItems) and any(
                str(item["sk"]).startswith("run-threads-walked:") for item in request.items
            )
            if recorded and len(recorded) >= 20:
                raise Crash("deadline")  # twenty requests after the first record
            if progress or recorded:
                recorded.append(1)
            return result

        with stash.intercept(die_after_the_first_record), contextlib.suppress(Crash):
            StashpointSaver(stash).setup()
        assert recorded, "the walk recorded no progress"
        assert _items(stash, "run-0") == ["t-000"]
        assert _items(stash, "run-249") == []
        walked = _index_runs(stash)
        assert 100 <= walked <= 150, walked  # from the recorded page on, not from the start
        assert _items(stash, "run-249") == ["t-249"]
        assert _items(stash, "run-120") == ["t-120"]
        assert _index_runs(stash) == 0


def test_a_planted_progress_record_starts_the_walk_over(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    url, _ = memory_url
    with stashpoint.open(f"{url}?index=none") as unindexed:
        _put(StashpointSaver(unindexed), "t", "r", 1)
    with stashpoint.open(url) as stash:
        threads = RunThreads(stash.layout.prefix)
        for position in ("../../x", 7, None):
            stash.driver(PutItems(({"pk": "meta#langgraph",
                                    "sk": f"run-threads-walked:{threads.scope}",
                                    "revision": 99, "position": position},)))  # fmt: skip
        assert _index_runs(stash) == 1
        assert _items(stash, "r") == ["t"]


def test_a_put_whose_item_cannot_be_written_stores_nothing(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    """The index refuses the (run, thread) item (unreachable): the put raises a typed error
    and no checkpoint is stored, so none exists that `delete_for_runs` could not find; the
    put made again once the index answers lands, with its item."""
    from stashpoint import StorageUnavailable

    url, _ = memory_url
    with stashpoint.open(url) as stash:
        saver = StashpointSaver(stash)
        saver.setup()

        def unreachable(request: Any, proceed: Any) -> Any:
            if isinstance(request, PutItems):
                raise StorageUnavailable("index unreachable (test)")
            return proceed()

        with stash.intercept(unreachable), pytest.raises(StorageUnavailable):
            _put(saver, "t", "r", 1)
        assert _runs(saver, "t") == []
        _put(saver, "t", "r", 1)
        assert _runs(saver, "t") == ["r"] and _items(stash, "r") == ["t"]


def _unindexed_url(url: str) -> str:
    return f"{url}&index=none" if "?" in url else f"{url}?index=none"


@pytest.mark.parametrize("backend", ["local_url", "s3_dynamo_url"])
def test_a_saver_without_the_index_refuses_run_puts_once_the_index_covers_every_thread(
    request: pytest.FixtureRequest, backend: str
) -> None:
    """Issue 47 item 11: a checkpoint written without the index would be missed by
    `delete_for_runs` through it; such a put is refused, and nothing is stored."""
    url, options = request.getfixturevalue(backend)
    with stashpoint.open(url, **options) as stash:
        saver = StashpointSaver(stash)
        _put(saver, "t-1", "r1", 1)
        saver.setup()  # every thread's runs are in the index from now on
    with stashpoint.open(_unindexed_url(url), **options) as unindexed:
        saver = StashpointSaver(unindexed)
        with pytest.raises(stashpoint.ConfigurationError) as refused:
            _put(saver, "t-2", "r2", 2)
        assert "index" in str(refused.value) and "r2" in str(refused.value)
        assert saver.get_tuple({"configurable": {"thread_id": "t-2"}}) is None
        _put(saver, "t-3", None, 3)  # no run id: nothing for delete_for_runs to miss
    with stashpoint.open(url, **options) as stash:
        saver = StashpointSaver(stash)
        saver.delete_for_runs(["r1"])
        assert saver.get_tuple({"configurable": {"thread_id": "t-1"}}) is None
        assert saver.get_tuple({"configurable": {"thread_id": "t-3"}}) is not None


def test_a_marker_written_before_the_mark_existed_is_announced_by_setup(
    local_url: tuple[str, dict[str, Any]],
) -> None:
    from stashpoint.langgraph.steps import RUN_INDEX_MARK
    from stashpoint.stores.objects import DeleteObject

    url, options = local_url
    with stashpoint.open(url, **options) as stash:
        saver = StashpointSaver(stash)
        saver.setup()
        stash.driver(DeleteObject(f"langgraph-values/{RUN_INDEX_MARK}"))  # an older version's
    with stashpoint.open(_unindexed_url(url), **options) as unindexed:
        _put(StashpointSaver(unindexed), "t-0", "r0", 0)  # not refused: nothing says so yet
    with stashpoint.open(url, **options) as stash:
        StashpointSaver(stash).setup()  # what the upgrade notes ask of older stashes
    with (
        stashpoint.open(_unindexed_url(url), **options) as unindexed,
        pytest.raises(stashpoint.ConfigurationError),
    ):
        _put(StashpointSaver(unindexed), "t-2", "r2", 2)
