"""Fleet maps beyond the contract: leases on a fake clock (takeover, fencing, heartbeats,
giving up), hostile objects in the bucket, item sources (folders, S3 prefixes,
manifests), and both twins' result iterators."""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import zstandard

import stashpoint
from stashpoint import (
    InvalidArgument,
    InvalidPayload,
    Manifest,
    Prefix,
    RunStatus,
    SourceChanged,
    StorageUnavailable,
    UnsupportedFormat,
)
from stashpoint.clock import FakeClock
from stashpoint.runs import sources
from stashpoint.stores.objects import PutObject, ReadSource
from tests import servers


def _frozen_hook(frozen: threading.Event) -> Callable[[Any, Callable[[], Any]], Any]:
    """A hook that drops every write while `frozen` is set: a worker cut off from storage."""

    def hook(request: Any, proceed: Callable[[], Any]) -> Any:
        if frozen.is_set() and isinstance(request, PutObject):
            raise StorageUnavailable("frozen (test)")
        return proceed()

    return hook


def test_a_worker_whose_lease_ran_out_is_fenced_and_the_batch_recorded_once(
    local_url: tuple[str, dict[str, Any]],
) -> None:
    url, _ = local_url
    clock = FakeClock()
    with stashpoint.open(url, clock=clock) as a_stash, stashpoint.open(url, clock=clock) as b_stash:
        a = a_stash.runs.fleet("m", worker_id="a")
        b = b_stash.runs.fleet("m", worker_id="b")
        a.start(range(4), batch_size=4, lease=30)
        frozen = threading.Event()
        b_reports = []

        def a_item(item: int) -> int:
            if item == 0:
                frozen.set()  # a cannot reach storage: its heartbeats fail
                clock.advance(40)  # its lease (30 s, one more of skew) runs out
                b_reports.append(b.work(lambda i: i * 10, max_batches=1))
                frozen.clear()  # and a wakes, its batch taken over
            return item * 100

        with a_stash.intercept(_frozen_hook(frozen)):
            a_report = a.work(a_item)
        assert a_report.fenced == 1 and a_report.batches == 0
        assert b_reports[0].takeovers == 1 and b_reports[0].batches == 1
        assert a_report.status == "completed"
        results = list(b.results())
        assert [r.value for r in results] == [0, 10, 20, 30]  # b's, once; a's nowhere
        records = a_stash.logs_in("fleet").records("m:b00000000")
        assert [(r["i"], r["result"]) for r in records] == [(0, 0), (1, 10), (2, 20), (3, 30)]


def test_a_batch_longer_than_its_lease_is_kept_by_heartbeats(
    local_url: tuple[str, dict[str, Any]],
) -> None:
    url, _ = local_url
    clock = FakeClock()
    with stashpoint.open(url, clock=clock) as stash:
        fleet = stash.runs.fleet("long", worker_id="a")
        fleet.start([1], lease=30)
        seen: list[int] = []

        def slow(item: int) -> int:
            for _ in range(12):  # 120 s of fake time: four leases
                clock.advance(10)
                _wait_for(lambda: _versions(stash, "long:b00000000") > len(seen))
                seen.append(_versions(stash, "long:b00000000"))
            return item

        report = fleet.work(slow)
        assert report.batches == 1 and report.fenced == 0
        assert seen[-1] >= 4  # the claim and a renewal every 10 s (lease / 3)
        heads = stash.logs_in("fleet").entries("long:b00000000")
        leases = [e.state["lease_until"] for e in heads]
        assert leases == sorted(leases) and len(set(leases)) >= 4


def _versions(stash: stashpoint.Stash, log_id: str) -> int:
    return len(stash.logs_in("fleet").entries(log_id))


def _wait_for(condition: Callable[[], bool], seconds: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "the heartbeat never came"
        time.sleep(0.01)


def test_a_batch_that_keeps_losing_its_workers_is_given_up_its_items_failed(
    local_url: tuple[str, dict[str, Any]],
) -> None:
    url, _ = local_url
    clock = FakeClock()
    with stashpoint.open(url, clock=clock) as a_stash, stashpoint.open(url, clock=clock) as b_stash:
        a = a_stash.runs.fleet("poison", worker_id="a")
        b = b_stash.runs.fleet("poison", worker_id="b")
        a.start(["x", "y"], lease=30, max_claims=1, tolerated_failure_count=5)
        frozen = threading.Event()
        b_reports = []

        def dies(item: str) -> str:
            frozen.set()
            clock.advance(40)
            b_reports.append(b.work(str.upper, max_batches=1))
            frozen.clear()
            return item

        with a_stash.intercept(_frozen_hook(frozen)):
            a_report = a.work(dies)
        assert b_reports[0].abandoned == 1 and b_reports[0].batches == 0
        assert a_report.fenced == 1
        results = list(a.results())
        assert [r.ok for r in results] == [False, False]
        assert results[0].error == "abandoned: claimed 1 times without finishing"
        assert a.progress().status == "completed"  # two failures, five tolerated


def test_async_twin_takes_coroutines_and_iterates_results(
    local_url: tuple[str, dict[str, Any]],
) -> None:
    url, _ = local_url

    async def main() -> list[Any]:
        async with stashpoint.open_async(url) as stash:
            fleet = stash.runs.fleet("async-map")
            await fleet.start(range(30), batch_size=7)

            async def triple(item: int) -> int:
                await asyncio.sleep(0)
                return item * 3

            report = await fleet.work(triple, max_concurrency=4)
            assert report.batches == 5 and report.status == "completed"
            return [r.value async for r in fleet.results(window=2)]

    assert asyncio.run(main()) == [i * 3 for i in range(30)]


def test_items_run_at_once_with_max_concurrency(memory_url: tuple[str, dict[str, Any]]) -> None:
    url, _ = memory_url
    with stashpoint.open(url) as stash:
        fleet = stash.runs.fleet("wide")
        fleet.start(range(8), batch_size=8)
        barrier = threading.Barrier(4, timeout=10)

        def meet(item: int) -> int:
            if item < 4:
                barrier.wait()  # only passes if four items run at once
            return item

        assert fleet.work(meet, max_concurrency=4).batches == 1
        assert [r.value for r in fleet.results()] == list(range(8))


def test_a_coroutine_function_on_the_blocking_twin_is_refused(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    async def coroutine(item: int) -> int:
        return item

    with stashpoint.open(memory_url[0]) as stash:
        fleet = stash.runs.fleet("wrong-api")
        fleet.start([1])
        with pytest.raises(TypeError, match="asyncio API"):
            fleet.work(coroutine)


# --- hostile objects planted in the bucket ----------------------------------------------------


def test_a_planted_mark_neither_skips_a_batch_nor_fails_the_map(
    local_url: tuple[str, dict[str, Any]],
) -> None:
    url, _ = local_url
    with stashpoint.open(url) as stash:
        fleet = stash.runs.fleet("planted")
        fleet.start(range(6), batch_size=2)  # no failure tolerated
        logs = stash.logs_in("fleet")
        for fake in ("planted:d00000001.2.0", "planted:d00000002.0.2"):  # a skip, two failures
            logs.append(fake, [], after=None, state={"batch": 1})
        report = fleet.work(lambda i: i + 1)
        assert report.batches == 3 and report.status == "completed"
        assert [r.value for r in fleet.results()] == [1, 2, 3, 4, 5, 6]
        assert stash.runs.summarize_run("planted").status is RunStatus.COMPLETED


def test_garbage_under_a_batch_key_is_a_typed_error_and_loses_nothing(
    local_url: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    url, _ = local_url
    with stashpoint.open(url) as stash:
        fleet = stash.runs.fleet("garbage")
        fleet.start(range(6), batch_size=2)
        key = f"{stash.layout.namespace_prefix('fleet')}garbage:b00000001/{0:020d}"
        root = Path(url.removeprefix("local://").split("?")[0])
        (root / key).parent.mkdir(parents=True)
        (root / key).write_bytes(zstandard.compress(b'{"format": "not ours"}'))
        with pytest.raises((InvalidPayload, UnsupportedFormat)):
            fleet.work(lambda i: i)
        results = list(fleet.results_page(0, 1)) + list(fleet.results_page(2, 1))
        assert [r.value for r in results] == [0, 1, 4, 5]  # the other batches, recorded


def test_a_plan_copied_from_another_map_is_refused(local_url: tuple[str, dict[str, Any]]) -> None:
    url, _ = local_url
    with stashpoint.open(url) as stash:
        stash.runs.fleet("source-map").start([1, 2])
        logs = stash.logs_in("fleet")
        plan = logs.head("source-map:plan")
        logs.append("copy:plan", [], after=None, state=plan.state, kind=plan.kind)
        with pytest.raises(InvalidPayload):
            stash.runs.fleet("copy").work(str)


# --- sources ------------------------------------------------------------------------------------


def test_a_folder_and_manifests_on_disk_are_sources(
    memory_url: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    folder = tmp_path / "in"
    (folder / "b").mkdir(parents=True)
    for name in ("a.txt", "b/c.txt", "b/d.txt"):
        (folder / name).write_text(name)
    jsonl = tmp_path / "jobs.jsonl"
    jsonl.write_text('{"id": 1}\n\n{"id": 2}\n[3]\n')
    table = tmp_path / "jobs.csv"
    table.write_text("id,name\n1,one\n2,two\n")
    with stashpoint.open(memory_url[0]) as stash:
        prefix = stash.runs.fleet("folder").start(Prefix(f"file://{folder}/"))
        assert prefix.source["kind"] == "prefix" and prefix.items == 3
        stash.runs.fleet("folder").work(lambda item: Path(item["url"][7:]).read_text())
        values = [r.value for r in stash.runs.fleet("folder").results()]
        assert values == ["a.txt", "b/c.txt", "b/d.txt"]
        assert stash.runs.fleet("lines").start(Manifest(f"file://{jsonl}")).items == 3
        stash.runs.fleet("lines").work(json.dumps)
        assert [r.item for r in stash.runs.fleet("lines").results()] == [{"id": 1}, {"id": 2}, [3]]
        rows = stash.runs.fleet("rows").start(Manifest(f"file://{table}"))
        assert rows.items == 2
        stash.runs.fleet("rows").work(lambda row: row["name"])
        assert [r.value for r in stash.runs.fleet("rows").results()] == ["one", "two"]
        plain = stash.runs.fleet("cells").start(Manifest(f"file://{table}", header=False))
        assert plain.items == 3


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("bad.jsonl", '{"id": 1}\n{"id": \n', "line 2"),
        ("bad.csv", "a,b\n1,2\n3\n", "row 3"),
        ("twice.csv", "a,a\n1,2\n", "twice"),
        ("latin.jsonl", None, "UTF-8"),
    ],
)
def test_a_malformed_manifest_is_refused_naming_where_and_plans_nothing(
    memory_url: tuple[str, dict[str, Any]], tmp_path: Path, name: str, text: str | None, says: str
) -> None:
    path = tmp_path / name
    if text is None:
        path.write_bytes(b'"caf\xe9"\n')
    else:
        path.write_text(text)
    with stashpoint.open(memory_url[0]) as stash:
        fleet = stash.runs.fleet("bad-manifest")
        with pytest.raises(InvalidPayload, match=says):
            fleet.start(Manifest(f"file://{path}"))
        assert fleet.progress().status == "not_started"


def test_source_urls_and_formats_are_checked(memory_url: tuple[str, dict[str, Any]]) -> None:
    for bad in ("bucket/key", "s3://", "file://relative/path", "http://x/y"):
        with pytest.raises(InvalidArgument):
            Prefix(bad)
    with pytest.raises(InvalidArgument):
        Manifest("s3://b/manifest.txt")  # no format from the name
    with pytest.raises(InvalidArgument):
        Manifest("s3://b/m.txt", format="xml")  # type: ignore[arg-type]
    assert Manifest("s3://b/m.txt", format="csv").kind == "csv"
    with stashpoint.open(memory_url[0]) as stash, pytest.raises(stashpoint.ConfigurationError):
        stash.runs.fleet("s3-on-memory").start(Prefix("s3://bucket/raw/"))


def test_an_s3_prefix_and_manifest_are_sources(seaweedfs: servers.S3Server) -> None:
    client: Any = seaweedfs.client()
    data = f"in-{uuid.uuid4().hex[:8]}"
    for n in range(5):
        client.put_object(
            Bucket=servers.VERSIONED_BUCKET, Key=f"{data}/raw/{n:02d}.txt", Body=b"x" * n
        )
    lines = "".join(json.dumps({"n": n}) + "\n" for n in range(2500))
    client.put_object(Bucket=servers.VERSIONED_BUCKET, Key=f"{data}/m.jsonl", Body=lines.encode())
    with stashpoint.open(seaweedfs.url(f"t-{uuid.uuid4().hex}")) as stash:
        plan = stash.runs.fleet("s3-prefix").start(
            Prefix(f"s3://{servers.VERSIONED_BUCKET}/{data}/raw/")
        )
        assert plan.items == 5
        stash.runs.fleet("s3-prefix").work(lambda item: item["size"])
        results = list(stash.runs.fleet("s3-prefix").results())
        assert [r.value for r in results] == [0, 1, 2, 3, 4]
        assert results[3].item["url"] == f"s3://{servers.VERSIONED_BUCKET}/{data}/raw/03.txt"
        assert results[3].item["etag"]
        manifest = Manifest(f"s3://{servers.VERSIONED_BUCKET}/{data}/m.jsonl")
        assert stash.runs.fleet("s3-manifest").start(manifest, batch_size=500).items == 2500


def test_a_manifest_that_changes_while_read_is_source_changed(
    seaweedfs: servers.S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    client: Any = seaweedfs.client()
    key = f"in-{uuid.uuid4().hex[:8]}/m.jsonl"
    client.put_object(Bucket=servers.VERSIONED_BUCKET, Key=key, Body=b'{"n": 1}\n' * 50)
    monkeypatch.setattr(sources, "PART_BYTES", 64)  # read in parts of 64 bytes
    reads: list[int] = []

    def rewrite_after_the_first_part(request: Any, proceed: Callable[[], Any]) -> Any:
        if isinstance(request, ReadSource):
            reads.append(request.start)
        result = proceed()
        if isinstance(request, ReadSource) and len(reads) == 1:
            changed = b'{"n": 2}\n' * 50
            client.put_object(Bucket=servers.VERSIONED_BUCKET, Key=key, Body=changed)
        return result

    with stashpoint.open(seaweedfs.url(f"t-{uuid.uuid4().hex}")) as stash:
        fleet = stash.runs.fleet("moving")
        with stash.intercept(rewrite_after_the_first_part), pytest.raises(SourceChanged):
            fleet.start(Manifest(f"s3://{servers.VERSIONED_BUCKET}/{key}"))
        assert reads == [0, 64] and fleet.progress().status == "not_started"
        # Read again once it stays put: planned from the one version it was read from.
        assert fleet.start(Manifest(f"s3://{servers.VERSIONED_BUCKET}/{key}")).items == 50


def test_one_listing_says_the_progress(seaweedfs: servers.S3Server) -> None:
    with stashpoint.open(seaweedfs.url(f"t-{uuid.uuid4().hex}")) as stash:
        fleet = stash.runs.fleet("watched")
        fleet.start(range(2000), batch_size=20)
        fleet.work(str, max_batches=30)
        fleet.progress()  # the plan, read once per handle
        sent: list[str] = []

        def count(request: Any, proceed: Callable[[], Any]) -> Any:
            sent.append(type(request).__name__)
            return proceed()

        with stash.intercept(count):
            progress = fleet.progress()
        assert sent == ["ListKeys"]  # 100 batches: one page
        assert (progress.done_batches, progress.left_batches, progress.ok) == (30, 70, 600)
        assert progress.status == "running" and progress.items_per_second


def test_one_purge_of_the_map_id_erases_the_map_and_its_run(
    local_url: tuple[str, dict[str, Any]],
) -> None:
    url, _ = local_url
    with stashpoint.open(url) as stash:
        fleet = stash.runs.fleet("erase-me")
        fleet.start([{"pad": "x" * 100_000, "n": n} for n in range(4)], batch_size=2)
        fleet.work(lambda item: item["n"])
        receipt = stash.admin.purge(prefix="erase-me", blob_min_age=timedelta(0))
        assert receipt.verified
        left = stash.logs_in("fleet").list_ids("erase-me")  # a tombstone each: keys stay taken
        assert [log_id.split(".")[0] for log_id in left] == [
            "erase-me:b00000000", "erase-me:b00000001", "erase-me:d00000000",
            "erase-me:d00000001", "erase-me:end", "erase-me:plan",
        ]  # fmt: skip
        with pytest.raises(stashpoint.Purged):
            fleet.progress()
        with pytest.raises(stashpoint.Purged):
            stash.runs.summarize_run("erase-me")
        blobs = Path(url.removeprefix("local://").split("?")[0]) / "blobs"
        assert not blobs.exists() or not any(blobs.iterdir())  # the item chunks went too


def test_a_worker_told_to_stop_finishes_its_batch_and_takes_no_other(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    with stashpoint.open(memory_url[0]) as stash:
        fleet = stash.runs.fleet("reclaimed")
        fleet.start(range(30), batch_size=10)
        notice = threading.Event()  # a spot interruption notice, as SpotWatcher.stopping

        def item(n: int) -> int:
            notice.set()  # arrives while the first batch runs
            return n

        report = fleet.work(item, stop=notice.is_set)
        assert (report.batches, report.status) == (1, "running")
        assert fleet.progress().done_batches == 1
        with pytest.raises(InvalidArgument):
            fleet.work(item, stop=True)  # type: ignore[arg-type]


def test_a_worker_sends_four_requests_a_batch_and_the_end_reads_no_vouched_batch(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    with stashpoint.open(memory_url[0]) as stash:
        fleet = stash.runs.fleet("frugal")
        fleet.start(range(4000), batch_size=100)
        sent: list[str] = []

        def count(request: Any, proceed: Callable[[], Any]) -> Any:
            sent.append(type(request).__name__)
            return proceed()

        with stash.intercept(count):
            report = fleet.work(lambda n: n)
        assert report.batches == 40 and report.status == "completed"
        # Per batch: a LIST, the claim, the results, the mark. Then the end (its marks name
        # the ETags the listing shows: no batch read), the run's end, and the last look.
        assert sent.count("PutObject") == 40 * 3 + 2  # + the end, + the run's completion
        assert sent.count("ListKeys") <= 40 + 4
        assert sent.count("GetObject") <= 3  # the plan, the end: never a batch
