"""The lives of an id (issue 47, items 1-3): what a purge and `gc` may touch.

A purge owns a log's versions up to its tombstone. After a reusable purge a create starts a
new life above it; nothing of that life (its entries, sealed segments, packs, large values)
is ever swept, by the purge itself, by its resumption after a crash, or by `gc`'s sweep of
the purge's leftovers. A retention purge (`older_than`) erases an id only if it is still old
enough when its tombstone is written: a save acknowledged after the purge chose the id
spares it. Each is tried on the local backend and on SeaweedFS, versioned and unversioned.
"""

from __future__ import annotations

import shutil
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint.clock import FakeClock
from tests.crashes import Crash, crash_at
from tests.purging import holding, versions

OLD = "oldlife-5ec7"
NEW = "newlife"


def _append(stash: Any, log_id: str, text: str, count: int) -> None:
    head = None
    try:
        head = stash.logs.head(log_id)
    except stashpoint.CheckpointNotFound:
        head = None
    for turn in range(count):
        head = stash.logs.append(log_id, [{"text": f"{text} {turn}"}], after=head)


def _texts(stash: Any, log_id: str) -> list[str]:
    return [r["text"] for e in stash.logs.entries(log_id) for r in e.records]


# -- item 1: gc never sweeps a reusable id's later life ------------------------------------


def test_gc_after_a_reusable_purge_keeps_the_new_lifes_segments(erasure_url: str) -> None:
    with stashpoint.open(erasure_url, vacate_sealed_entries=True) as stash:
        _append(stash, "L", OLD, 10)
        assert stash.admin.purge(log="L", reusable=True).status == "complete"
        _append(stash, "L", NEW, 140)  # versions 11-150: segment 64-127 of the new life
        stash.logs.seal("L")
        assert any("sealed/" in v.key for v in versions(stash, "sealed/"))
        report = stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
        assert report.purge_leftovers == 0
        assert _texts(stash, "L") == [f"{NEW} {turn}" for turn in range(140)]
        assert holding(stash, OLD) == []
    with stashpoint.open(erasure_url) as cold:
        assert _texts(cold, "L") == [f"{NEW} {turn}" for turn in range(140)]


def test_gc_pack_after_a_reusable_purge_keeps_the_new_lifes_packs(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url, vacate_sealed_entries=True) as stash:
        _append(stash, "L", OLD, 5)
        stash.admin.purge(log="L", reusable=True)
        _append(stash, "L", NEW, 1100)  # versions 6-1105: the pack 1024-2047 needs more
        _append(stash, "L", NEW + "2", 1000)
        stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0), pack=True)
        packs = [v.key for v in versions(stash, "sealed/") if "-00000000000000002047" in v.key]
        assert packs, "the new life was packed"
        report = stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0), pack=True)
        assert report.purge_leftovers == 0
        texts = _texts(stash, "L")
        assert len(texts) == 2100 and texts[0] == f"{NEW} 0" and texts[-1] == f"{NEW}2 999"


def test_a_planted_segment_of_the_purged_life_is_still_swept(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        _append(stash, "L", OLD, 70)
        stash.admin.purge(log="L", reusable=True)
        _append(stash, "L", NEW, 3)
        from stashpoint.stores.objects import PutObject

        planted = f"sealed/logs/L/{0:020d}-{63:020d}"
        stash.driver(PutObject(planted, b"left by a stale sealer " + OLD.encode(), None))
        report = stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
        assert report.purge_leftovers == 1
        assert holding(stash, OLD) == []
        assert _texts(stash, "L") == [f"{NEW} {turn}" for turn in range(3)]


@pytest.mark.parametrize("after", [False, True])
def test_a_reusable_purge_crashed_at_any_request_never_erases_the_life_after_it(
    tmp_path: Path, after: bool
) -> None:
    """Crash the purge at each request; a writer then starts the new life if the id reads
    as free; a resume (gc) finishes the purge. The new life is whole, the old one gone."""
    for step in range(200):  # bounded: the purge makes fewer requests than this
        url = f"local://{tmp_path / f's{step}-{after}'}"
        with stashpoint.open(url, vacate_sealed_entries=True) as stash:
            _append(stash, "L", OLD, 10)
            with crash_at(stash, step, after) as calls:
                try:
                    stash.admin.purge(log="L", reusable=True)
                    crashed = False
                except Crash:
                    crashed = True
            if not crashed:
                assert step >= len(calls)
                break
        with stashpoint.open(url, vacate_sealed_entries=True) as writer:
            try:
                writer.logs.head("L")
                started = False  # the tombstone is not there yet: the old life goes on
            except stashpoint.CheckpointNotFound:
                _append(writer, "L", NEW, 70)
                writer.logs.seal("L")
                started = True
        with stashpoint.open(url) as maintainer:
            maintainer.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
            maintainer.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
            assert maintainer.admin.resume_purges() == []
            if not maintainer.logs_in("purges").list_ids():
                # Died before its receipt was opened: nothing was asked of anyone yet.
                assert not started and len(_texts(maintainer, "L")) == 10
                continue
            assert holding(maintainer, OLD) == []
            if started:
                assert _texts(maintainer, "L") == [f"{NEW} {turn}" for turn in range(70)]
            else:
                with pytest.raises(stashpoint.CheckpointNotFound):
                    maintainer.logs.head("L")
    else:
        pytest.fail("the purge never finished")


@pytest.mark.parametrize("after", [False, True])
def test_gc_crashed_at_any_request_never_erases_a_reusable_ids_new_life(
    tmp_path: Path, after: bool
) -> None:
    # The scene (a purged life, then a new one, sealed) is written once and copied for
    # each crash: a closed local stash is its folder.
    scene = tmp_path / "scene"
    with stashpoint.open(f"local://{scene}", vacate_sealed_entries=True) as stash:
        _append(stash, "L", OLD, 10)
        stash.admin.purge(log="L", reusable=True)
        _append(stash, "L", NEW, 70)
        stash.logs.seal("L")
    for step in range(200):  # bounded
        folder = tmp_path / f"s{step}-{after}"
        shutil.copytree(scene, folder, symlinks=True)
        url = f"local://{folder}"
        with (
            stashpoint.open(url, vacate_sealed_entries=True) as stash,
            crash_at(stash, step, after) as calls,
        ):
            try:
                stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
                crashed = False
            except Crash:
                crashed = True
        with stashpoint.open(url) as again:
            again.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
            assert _texts(again, "L") == [f"{NEW} {turn}" for turn in range(70)]
            assert holding(again, OLD) == []
        if not crashed:
            assert step >= len(calls)
            break
    else:
        pytest.fail("gc never finished")


def test_a_reusable_purge_through_the_fault_proxy_keeps_the_new_life(seaweedfs: Any) -> None:
    from tests.faultproxy import FaultProxy, everyday_faults

    prefix = f"t-{uuid.uuid4().hex}"
    with stashpoint.open(seaweedfs.url(prefix), vacate_sealed_entries=True) as clean:
        _append(clean, "L", OLD, 20)
    plan, config = everyday_faults()
    failures: list[str] = []
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        with stashpoint.open(url, client_config=config, vacate_sealed_entries=True) as stash:
            for _ in range(20):  # bounded: each try gets further
                try:
                    if not stash.admin.resume_purges():
                        stash.admin.purge(log="L", reusable=True)
                    break
                except stashpoint.StashpointError as exc:
                    failures.append(exc.kind.value)
    with stashpoint.open(seaweedfs.url(prefix), vacate_sealed_entries=True) as clean:
        _append(clean, "L", NEW, 70)
        clean.logs.seal("L")
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        with stashpoint.open(url, client_config=config) as stash:
            for _ in range(20):  # bounded
                try:
                    stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
                    break
                except stashpoint.StashpointError as exc:
                    failures.append(exc.kind.value)
    assert set(failures) <= {"storage_unavailable", "conflict"}, failures
    assert sum(plan.injected.values()) > 0
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        assert _texts(clean, "L") == [f"{NEW} {turn}" for turn in range(70)]
        assert holding(clean, OLD) == []


# -- item 3: a retention purge spares an id saved after it chose it -------------------------


def test_a_retention_purge_spares_a_log_saved_after_it_was_chosen(erasure_url: str) -> None:
    clock = FakeClock()
    with (
        stashpoint.open(erasure_url, clock=clock) as stash,
        stashpoint.open(erasure_url, clock=clock) as writer,
    ):
        _append(stash, "old-a", OLD, 3)
        _append(stash, "old-b", OLD, 3)
        clock.advance(400 * 86400)
        saved: list[int] = []

        def hook(request: Any, proceed: Any) -> Any:
            # The purge's first write (its receipt) comes after it chose its ids: a user
            # saves to one of them then, and that save is acknowledged.
            if (
                not saved
                and type(request).__name__ == "PutObject"
                and "/purges/" in ("/" + request.key)
            ):
                head = writer.logs.head("old-b")
                saved.append(writer.logs.append("old-b", [{"text": "kept"}], after=head).version)
            return proceed()

        with stash.intercept(hook):
            receipt = stash.admin.purge(
                prefix="old-", older_than=timedelta(days=30), namespace="logs"
            )
        assert saved
        assert [str(t) for t in receipt.targets] == ["logs/old-a", "logs/old-b"]
        assert receipt.spared == ["logs/old-b"]
        assert _texts(stash, "old-b") == [f"{OLD} 0", f"{OLD} 1", f"{OLD} 2", "kept"]
        with pytest.raises(stashpoint.Purged):
            stash.logs.head("old-a")
        stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
        assert _texts(stash, "old-b") == [f"{OLD} 0", f"{OLD} 1", f"{OLD} 2", "kept"]


def test_a_retention_purge_spares_a_head_saved_after_it_was_chosen(tmp_path: Path) -> None:
    from stashpoint import Envelope

    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash, stashpoint.open(url) as writer:
        stash.checkpoints.compare_and_swap(Envelope.initial("c-a", None, "d", 1, {"n": 1}), None)
        stash.checkpoints.compare_and_swap(Envelope.initial("c-b", None, "d", 1, {"n": 1}), None)
        saved: list[bool] = []

        def hook(request: Any, proceed: Any) -> Any:
            if not saved and type(request).__name__ == "PutObject" and "purges/" in request.key:
                old = writer.checkpoints.load("c-b")
                writer.checkpoints.compare_and_swap(old.next({"n": 2}), old.revision)
                saved.append(True)
            return proceed()

        # Storage times are the server's: every id is older than a bound of 0 seconds
        # when chosen, and the save made after the choice is not.
        import time

        time.sleep(0.05)  # the two heads' storage times lie before the bound
        with stash.intercept(hook):
            receipt = stash.admin.purge(
                prefix="c-", older_than=timedelta(milliseconds=20), namespace="checkpoints"
            )
        assert saved
        assert receipt.spared == ["checkpoints/c-b"]
        assert stash.checkpoints.load("c-b").payload == {"n": 2}
        with pytest.raises(stashpoint.Purged):
            stash.checkpoints.load("c-a")


def test_a_reusable_purge_killed_with_sigkill_never_erases_the_life_after_it(
    tmp_path: Path,
) -> None:
    """`kill -9` of a real process mid-purge; a writer starts the new life if the id reads
    as free; a resumed purge and two gcs keep all of it and nothing of the old life."""
    import textwrap

    from tests.kills import kill_after_requests

    child = textwrap.dedent(
        """
        import sys, stashpoint
        with stashpoint.open(sys.argv[1], vacate_sealed_entries=True) as stash:
            def hook(request, proceed):
                print(".", end="", flush=True)
                return proceed()
            with stash.intercept(hook):
                stash.admin.purge(log="L", reusable=True)
        print("done", flush=True)
        """
    )
    for kill_after in (3, 9, 20, 45):
        url = f"local://{tmp_path / f's-{kill_after}'}"
        with stashpoint.open(url) as stash:
            _append(stash, "L", OLD, 30)
        kill_after_requests(child, [url], kill_after)
        with stashpoint.open(url, vacate_sealed_entries=True) as writer:
            try:
                writer.logs.head("L")
                started = False
            except stashpoint.CheckpointNotFound:
                _append(writer, "L", NEW, 70)
                writer.logs.seal("L")
                started = True
        with stashpoint.open(url) as maintainer:
            maintainer.admin.resume_purges()
            maintainer.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
            if not maintainer.logs_in("purges").list_ids():
                assert not started  # killed before its receipt: nothing was done
                continue
            maintainer.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
            assert holding(maintainer, OLD) == [], kill_after
            if started:
                assert _texts(maintainer, "L") == [f"{NEW} {turn}" for turn in range(70)]


@pytest.mark.parametrize("after", [False, True])
def test_a_retention_purge_crashed_at_any_request_never_erases_a_save_made_after_the_choice(
    tmp_path: Path, after: bool
) -> None:
    for step in range(200):  # bounded: the purge makes fewer requests than this
        url = f"local://{tmp_path / f's{step}-{after}'}"
        clock = FakeClock()
        with stashpoint.open(url, clock=clock) as stash, stashpoint.open(url, clock=clock) as other:
            _append(stash, "old-a", OLD, 2)
            _append(stash, "old-b", OLD, 2)
            clock.advance(400 * 86400)
            saved: list[int] = []

            def hook(
                request: Any, proceed: Any, saved: list[int] = saved, other: Any = other
            ) -> Any:
                if not saved and type(request).__name__ == "PutObject" and "purges/" in request.key:
                    head = other.logs.head("old-b")
                    saved.append(other.logs.append("old-b", [{"text": "kept"}], after=head).version)
                return proceed()

            with stash.intercept(hook), crash_at(stash, step, after) as calls:
                try:
                    stash.admin.purge(
                        prefix="old-", older_than=timedelta(days=30), namespace="logs"
                    )
                    crashed = False
                except Crash:
                    crashed = True
        with stashpoint.open(url, clock=clock) as again:
            again.admin.resume_purges()
            again.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
            if saved:
                assert _texts(again, "old-b")[-1] == "kept", (step, after)
        if not crashed:
            assert step >= len(calls)
            break
    else:
        pytest.fail("the purge never finished")


def test_a_retention_purge_through_the_fault_proxy_spares_a_save_made_after_the_choice(
    seaweedfs: Any,
) -> None:
    from tests.faultproxy import FaultProxy, everyday_faults

    prefix = f"t-{uuid.uuid4().hex}"
    clock = FakeClock()
    with stashpoint.open(seaweedfs.url(prefix), clock=clock) as clean:
        for n in range(6):
            _append(clean, f"old-{n}", OLD, 3)
    clock.advance(400 * 86400)
    plan, config = everyday_faults()
    saved: list[str] = []
    failures: list[str] = []
    with (
        FaultProxy(seaweedfs.endpoint, plan) as proxy,
        stashpoint.open(seaweedfs.url(prefix), clock=clock) as writer,
    ):
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        with stashpoint.open(url, client_config=config, clock=clock) as stash:

            def hook(request: Any, proceed: Any) -> Any:
                if not saved and type(request).__name__ == "PutObject" and "purges/" in request.key:
                    head = writer.logs.head("old-3")
                    writer.logs.append("old-3", [{"text": "kept"}], after=head)
                    saved.append("old-3")
                return proceed()

            with stash.intercept(hook):
                for _ in range(20):  # bounded: each try gets further
                    try:
                        if not stash.admin.resume_purges():
                            stash.admin.purge(
                                prefix="old-", older_than=timedelta(days=30), namespace="logs"
                            )
                        break
                    except stashpoint.StashpointError as exc:
                        failures.append(exc.kind.value)
    assert set(failures) <= {"storage_unavailable", "conflict"}, failures
    assert saved and sum(plan.injected.values()) > 0
    with stashpoint.open(seaweedfs.url(prefix), clock=clock) as clean:
        assert _texts(clean, "old-3")[-1] == "kept"
        for n in (0, 1, 2, 4, 5):
            with pytest.raises(stashpoint.Purged):
                clean.logs.head(f"old-{n}")
