"""Purge (`stashpoint.maintenance.purge`): every object kind, crashes at every request, `kill -9`,
hostile objects and arguments, retention, age, and the engine's order of writes.

The contract suite (`tests/contract/test_purge_contract.py`) runs the common cases on
every backend and driver; SeaweedFS contention and the 1,000-turn transcript are in
`tests/maintenance/test_purge_seaweed.py`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import textwrap
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint import Envelope
from stashpoint.clock import FakeClock
from stashpoint.stores.objects import DeleteVersions, PutObject
from tests.crashes import Crash, crash_at
from tests.kills import kill_after_requests
from tests.purging import holding, pairs, plain, versions
from tests.purging import log as _log

SECRET = "s3cr3t-7f3a"
OTHER = "other-payload"


def _records(stash: Any, log_id: str) -> list[Any]:
    return [r for entry in stash.logs.entries(log_id) for r in entry.records]


def _memory(**options: Any) -> stashpoint.Stash:
    return stashpoint.open(f"memory://purge-{uuid.uuid4().hex}", **options)


# -- hostile arguments ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "arguments",
    [
        {"prefix": ""},
        {"prefix": "/"},
        {"prefix": ".."},
        {"prefix": "../other-tenant"},
        {"prefix": "a/b"},
        {"log": "t1", "checkpoint": "c1"},
        {"log": "t1", "prefix": "t"},
        {"log": "../t1"},
        {"prefix": "t", "namespace": "blobs"},
        {"prefix": "t", "older_than": timedelta(days=-1)},
        {"log": "t1", "namespace": "logs"},
        {"conversation": "c1"},
        {"log": "t1", "actor": 5},
        {"log": "t1", "blob_min_age": 3600},
        {},
    ],
)
def test_a_hostile_or_unclear_purge_is_refused_before_any_request(arguments: Any) -> None:
    with _memory() as stash:
        _log(stash, "t1", SECRET, 3)
        sent: list[Any] = []
        with (
            stash.intercept(lambda request, proceed: sent.append(request) or proceed()),
            pytest.raises(stashpoint.StashpointError) as refused,
        ):
            stash.admin.purge(**arguments)
        assert sent == []
        assert refused.value.kind.value in ("invalid_argument", "invalid_id")
        assert len(_records(stash, "t1")) == 3


def test_an_empty_prefix_needs_all_of_namespace_and_then_takes_only_that_namespace() -> None:
    with _memory() as stash:
        _log(stash, "t1", SECRET, 2)
        stash.checkpoints.compare_and_swap(Envelope.initial("c1", None, "d", 1, {"n": 1}), None)
        receipt = stash.admin.purge(prefix="", namespace="logs", all_of_namespace=True)
        assert [str(t) for t in receipt.targets] == ["logs/t1"]
        assert stash.checkpoints.load("c1").payload == {"n": 1}


# -- every object kind ---------------------------------------------------------------------

BIG_OWN = {"document": "own " + SECRET + "x" * 4096}
BIG_SHARED = {"document": "shared " + "y" * 4096}


def test_a_run_loses_its_index_items_and_blobs_only_it_referenced(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path / 's'}?blob_threshold=1024") as stash:
        purged = stash.runs.create_run("etl")
        attempt = stash.runs.record_attempt(purged, "extract", 1, BIG_OWN)
        stash.runs.complete_attempt(attempt, BIG_SHARED)
        kept = stash.runs.create_run("etl")
        stash.runs.complete_attempt(stash.runs.record_attempt(kept, "x", 1, BIG_SHARED), None)
        blobs_before = {v.key for v in versions(stash, "blobs/")}
        assert len(blobs_before) == 2

        receipt = stash.admin.purge(run=purged, blob_min_age=timedelta(0))

        own = hashlib.sha256(json.dumps(BIG_OWN, separators=(",", ":")).encode()).hexdigest()
        assert receipt.index_items >= 2 and receipt.verified
        assert len(receipt.blobs) == 1 and len(receipt.kept_blobs) == 1
        assert {v.key for v in versions(stash, "blobs/")} == blobs_before - {
            k for k in blobs_before if k.endswith(receipt.blobs[0])
        }
        assert holding(stash, SECRET) == [], own
        assert [r.run_id for r in stash.runs.list_runs().items] == [kept]
        with pytest.raises(stashpoint.Purged):
            stash.runs.load_run(purged)
        with pytest.raises(stashpoint.Purged):
            stash.runs.record_attempt(purged, "late", 1, {"n": 1})
        assert stash.runs.load_run(kept).attempts[0].input == BIG_SHARED


def test_a_young_blob_stays_for_a_writer_about_to_reference_it(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path / 's'}?blob_threshold=1024") as stash:
        run_id = stash.runs.create_run("etl")
        stash.runs.record_attempt(run_id, "extract", 1, BIG_OWN)
        receipt = stash.admin.purge(run=run_id)  # blobs younger than an hour stay
        assert receipt.blobs == [] and len(receipt.kept_blobs) == 1
        assert len(versions(stash, "blobs/")) == 1


def test_an_agent_checkpoint_is_purged_whole(tmp_path: Path) -> None:
    from tests.cli.test_cli_logs import _agent

    url = f"local://{tmp_path / 's'}"
    _agent(url, "agent-1", 3)
    _agent(url, "agent-2", 1)
    with stashpoint.open(url) as stash:
        receipt = stash.admin.purge(agent="agent-1")
        assert [str(t) for t in receipt.targets] == ["agents/agent-1"]
        assert holding(stash, "sk-secret", "agents/agent-1") == []
        # agent-1's third answer, nowhere (quoted: a random write id may hold r2)
        assert holding(stash, '"r2"') == []
        with pytest.raises(stashpoint.Purged):
            stash.logs_in("agents").head("agent-1")
        assert stash.logs_in("agents").head("agent-2").version >= 1


def test_a_conversation_is_named_by_its_namespace_and_id() -> None:
    from stashpoint.agent.conversation_log import conversation_key

    with _memory() as stash:
        logs = stash.logs_in("conversations")
        key = conversation_key("support", "c-9")
        logs.append(key, [{"text": SECRET}], after=None)
        receipt = stash.admin.purge(conversation=("support", "c-9"))
        assert [str(t) for t in receipt.targets] == [f"conversations/{key}"]
        assert holding(stash, SECRET) == []


def test_a_langgraph_thread_loses_its_large_values_and_refuses_its_saver() -> None:
    pytest.importorskip("langgraph")
    from langgraph.checkpoint.base import empty_checkpoint

    from stashpoint.langgraph import StashpointSaver

    with _memory() as stash:
        saver = StashpointSaver(stash)
        config = {"configurable": {"thread_id": "user/7", "checkpoint_ns": ""}}
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"notes": SECRET + "z" * 300_000}
        checkpoint["channel_versions"] = {"notes": 1}
        saved = saver.put(config, checkpoint, {"source": "input", "step": -1}, {"notes": 1})
        assert versions(stash, "langgraph-values/")  # the large value is an object
        other = {"configurable": {"thread_id": "user-8", "checkpoint_ns": ""}}
        saver.put(other, empty_checkpoint(), {"source": "input", "step": -1}, {})

        receipt = stash.admin.purge(thread="user/7")

        assert receipt.verified and holding(stash, SECRET) == []
        assert versions(stash, "langgraph-values/") == []
        with pytest.raises(stashpoint.Purged):
            saver.get_tuple(config)
        with pytest.raises(stashpoint.Purged):
            saver.put(saved, empty_checkpoint(), {"source": "loop", "step": 0}, {})
        saver.delete_thread("user/7")  # erased already: nothing to do
        assert saver.get_tuple(other) is not None
        # Listings of every thread pass a purged one over; asking for it by id says why.
        assert [t.config["configurable"]["thread_id"] for t in saver.list(None)] == ["user-8"]
        saver.delete_for_runs(["no-such-run"])
        with pytest.raises(stashpoint.Purged):
            list(saver.list(config))


# -- hostile objects -------------------------------------------------------------------------


def test_objects_planted_under_a_purged_id_are_erased_and_its_neighbours_kept() -> None:
    with _memory() as stash:
        _log(stash, "t1", SECRET, 70)
        _log(stash, "t10", OTHER, 2)  # shares the start of t1's name, not its folder
        planted = {
            "logs/t1/not-an-entry": SECRET,
            "logs/t1/00000000000000009999": SECRET,  # far above the top
            "sealed/logs/t1/garbage": SECRET,
            "quarantine/logs/t1/00000000000000000003.etag": SECRET,
        }
        for key, text in planted.items():
            stash.driver(PutObject(key, text.encode(), None, content_encoding=None))
        receipt = stash.admin.purge(log="t1")
        assert receipt.verified and holding(stash, SECRET) == []
        assert {k for k in planted} <= {v.key for v in receipt.removed}
        assert [r["message"] for r in _records(stash, "t10")] == [f"{OTHER} 0", f"{OTHER} 1"]


def test_a_log_whose_top_is_damaged_is_purged_all_the_same() -> None:
    with _memory() as stash:
        _log(stash, "t1", SECRET, 5)
        top = "logs/t1/00000000000000000004"
        stash.driver(PutObject(top, b"\x28\xb5\x2f\xfd garbage " + SECRET.encode(), None))
        with pytest.raises(stashpoint.StashpointError):
            stash.logs.head("t1")
        receipt = stash.admin.purge(log="t1")
        assert receipt.verified and holding(stash, SECRET) == []
        with pytest.raises(stashpoint.Purged):
            stash.logs.head("t1")


# -- crashes ---------------------------------------------------------------------------------


def _scenario(stash: Any) -> None:
    _log(stash, "t1", SECRET, 70)
    _log(stash, "t2", OTHER, 3)
    first = Envelope.initial("c1", None, "d", 1, {"note": SECRET})
    stash.checkpoints.compare_and_swap(first, None)
    stash.checkpoints.compare_and_swap(first.next({"note": SECRET + "!"}), 0)


def _purge_requests(purge: Callable[[Any], Any]) -> int:
    with _memory() as stash:
        _scenario(stash)
        sent: list[Any] = []
        with stash.intercept(lambda request, proceed: sent.append(request) or proceed()):
            purge(stash)
        return len(sent)


@pytest.mark.parametrize(
    "purge",
    [
        lambda s: s.admin.purge(log="t1"),
        lambda s: s.admin.purge(prefix="c", namespace="checkpoints"),
    ],
    ids=["log", "checkpoint-by-prefix"],
)
def test_a_crash_at_every_request_leaves_whole_or_purged_and_resumes_complete(
    purge: Callable[[Any], Any],
) -> None:
    total = _purge_requests(purge)
    assert total > 10
    for step in range(total):
        for after in (False, True):
            with _memory() as stash:
                _scenario(stash)
                with crash_at(stash, step, after), pytest.raises(Crash):
                    purge(stash)
                # Never half-readable: the whole transcript, or Purged.
                with contextlib.suppress(stashpoint.Purged):
                    assert [r["message"] for r in _records(stash, "t1")] == [
                        f"{SECRET} {i}" for i in range(70)
                    ]
                with contextlib.suppress(stashpoint.Purged):
                    assert stash.checkpoints.load("c1").payload == {"note": SECRET + "!"}
                finished = stash.admin.resume_purges()
                if not finished:
                    # The crash came before the receipt was opened, or after it was closed.
                    opened = stash.logs_in("purges").list_ids()
                    finished = [stash.admin.purge_receipt(p) for p in opened] or [purge(stash)]
                [receipt] = finished
                assert receipt.status == "complete" and receipt.verified, (step, after)
                targets = [str(t) for t in receipt.targets]
                erased = "logs/t1/" if targets == ["logs/t1"] else "checkpoints/c1"
                assert holding(stash, SECRET, erased) == [], (step, after)
                assert [r["message"] for r in _records(stash, "t2")] == [
                    f"{OTHER} {i}" for i in range(3)
                ]
                # The receipt lists what this crash's removals took too (intents first).
                assert all(v.key.startswith(erased[:-1]) or "sealed/" in v.key
                           for v in receipt.removed)  # fmt: skip
                assert receipt.objects > 0, (step, after)


def test_engine_writes_each_version_into_the_receipt_before_deleting_it() -> None:
    with _memory() as stash:
        _scenario(stash)
        intended: set[str] = set()
        deleted: list[tuple[str, str]] = []

        def hook(request: Any, proceed: Callable[[], Any]) -> Any:
            if isinstance(request, PutObject) and request.key.startswith("purges/"):
                intended.add(plain(request.body).decode())
            if isinstance(request, DeleteVersions):
                for key, version_id in request.targets:
                    assert any(key in text and version_id in text for text in intended), (
                        f"{key}@{version_id} deleted before the receipt named it"
                    )
                deleted.extend(request.targets)
            return proceed()

        with stash.intercept(hook):
            receipt = stash.admin.purge(log="t1")
        assert set(deleted) == {(v.key, v.version_id) for v in receipt.removed}
        assert deleted


def test_purge_process_killed_with_sigkill_resumes_to_a_complete_receipt(tmp_path: Path) -> None:
    child = textwrap.dedent(
        """
        import sys, stashpoint
        with stashpoint.open(sys.argv[1]) as stash:
            def hook(request, proceed):
                print(".", end="", flush=True)
                return proceed()
            with stash.intercept(hook):
                stash.admin.purge(log="t1")
        print("done", flush=True)
        """
    )
    for kill_after in (1, 12, 40, 90, 160):
        url = f"local://{tmp_path / f's-{kill_after}'}"
        with stashpoint.open(url) as stash:
            _log(stash, "t1", SECRET, 130)
            _log(stash, "t2", OTHER, 2)
        kill_after_requests(child, [url], kill_after)
        with stashpoint.open(url) as stash:
            with contextlib.suppress(stashpoint.Purged):
                assert len(_records(stash, "t1")) == 130
            finished = stash.admin.resume_purges() or [stash.admin.purge(log="t1")]
            assert [r.status for r in finished] == ["complete"]
            assert holding(stash, SECRET) == [], kill_after
            assert [r["message"] for r in _records(stash, "t2")] == [f"{OTHER} 0", f"{OTHER} 1"]


# -- gc and age ----------------------------------------------------------------------------


def test_gc_finishes_a_purge_a_crash_left_open_once_it_has_been_idle() -> None:
    clock = FakeClock()
    with _memory(clock=clock) as stash:
        _scenario(stash)
        with crash_at(stash, 12, True), pytest.raises(Crash):
            stash.admin.purge(log="t1")
        [open_purge] = stash.logs_in("purges").list_ids()
        report = stash.admin.collect_garbage(dry_run=False, min_age=timedelta(hours=1))
        assert report.purges_resumed == 0 and report.open_purges == [open_purge]
        clock.advance(2 * 3600)
        report = stash.admin.collect_garbage(dry_run=False, min_age=timedelta(hours=1))
        assert report.purges_resumed == 1 and report.open_purges == []
        assert stash.admin.purge_receipt(open_purge).status == "complete"
        assert holding(stash, SECRET, "logs/") == []


def test_an_age_purge_takes_whole_ids_last_written_before_the_bound() -> None:
    clock = FakeClock()
    with _memory(clock=clock) as stash:
        _log(stash, "old", SECRET, 3)
        clock.advance(300 * 86400)
        _log(stash, "touched", OTHER, 1)  # old start, written since
        clock.advance(101 * 86400)
        stash.logs.append("touched", [{"message": "recent"}], after=stash.logs.head("touched"))
        _log(stash, "new", OTHER, 1)
        receipt = stash.admin.purge(older_than=timedelta(days=400), namespace="logs")
        assert [str(t) for t in receipt.targets] == ["logs/old"]
        assert receipt.selector == {"namespace": "logs", "older_than_seconds": 400 * 86400.0}
        assert holding(stash, SECRET) == []
        assert len(_records(stash, "touched")) == 2 and len(_records(stash, "new")) == 1


# -- Object Lock (moto) ----------------------------------------------------------------------


def test_a_retained_transcript_refuses_purge_naming_its_retain_until_date(
    retained_bucket: Any,
) -> None:
    with stashpoint.open("s3://locked-bucket/p?index=none") as stash:
        _log(stash, "t1", SECRET, 3)
        before = pairs(versions(stash))
        with pytest.raises(stashpoint.RetentionLocked) as refused:
            stash.admin.purge(log="t1")
        assert refused.value.kind.value == "retention_locked"
        assert len(refused.value.locked) == 3 and all(
            until for _, _, until, _ in refused.value.locked
        )
        assert "until 20" in str(refused.value) and "logs/t1/" in str(refused.value)
        assert pairs(versions(stash)) == before  # nothing written, nothing erased
        assert len(_records(stash, "t1")) == 3


def test_a_legal_hold_set_and_cleared_from_the_cli_governs_the_purge(locked_bucket: Any) -> None:
    from typer.testing import CliRunner

    from stashpoint.cli.app import app

    url = "s3://locked-bucket/p?index=none"
    with stashpoint.open(url) as stash:
        _log(stash, "t1", SECRET, 2)
    runner = CliRunner()
    held = runner.invoke(app, ["hold", "set", "--log", "t1", "--url", url, "--json"])
    assert held.exit_code == 0, held.output
    assert json.loads(held.output) == {"legal_hold": True, "versions": 2}
    with stashpoint.open(url) as stash:
        with pytest.raises(stashpoint.RetentionLocked) as refused:
            stash.admin.purge(log="t1")
        assert "(legal hold)" in str(refused.value)
    cleared = runner.invoke(app, ["hold", "clear", "--log", "t1", "--url", url])
    assert cleared.exit_code == 0 and "cleared from 2 version(s)" in cleared.output
    with stashpoint.open(url) as stash:
        assert stash.admin.purge(log="t1").verified
        assert holding(stash, SECRET) == []


def test_a_legal_hold_needs_object_lock() -> None:
    with _memory() as stash:
        _log(stash, "t1", SECRET, 1)
        with pytest.raises(stashpoint.ConfigurationError):
            stash.admin.legal_hold(True, log="t1")


def test_gc_sweeps_what_a_crashed_stale_writer_left_beside_a_purged_thread() -> None:
    pytest.importorskip("langgraph")
    with _memory() as stash:
        _log(stash, "t1", SECRET, 3)
        receipt = stash.admin.purge(log="t1")
        # A seal that raced the purge's last listing (or a stale put that crashed before
        # its refused append could clean up) left an object beside the purged log.
        late = "sealed/logs/t1/00000000000000000000-00000000000000000063"
        stash.driver(PutObject(late, SECRET.encode(), None, content_encoding=None))
        report = stash.admin.collect_garbage(dry_run=True)
        assert report.purge_leftovers == 0 and holding(stash, SECRET)
        report = stash.admin.collect_garbage(dry_run=False)
        assert report.purge_leftovers == 1 and holding(stash, SECRET) == []
        kept = stash.admin.purge_receipt(receipt.purge_id)
        assert late in {v.key for v in kept.removed} and kept.status == "complete"
        assert stash.admin.collect_garbage(dry_run=False).purge_leftovers == 0


def test_a_stale_langgraph_put_refused_after_a_purge_leaves_no_large_value() -> None:
    pytest.importorskip("langgraph")
    from langgraph.checkpoint.base import empty_checkpoint

    from stashpoint.langgraph import StashpointSaver

    with _memory() as stash:
        saver = StashpointSaver(stash)
        config = {"configurable": {"thread_id": "t", "checkpoint_ns": ""}}
        saved = saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
        stash.admin.purge(thread="t")
        late = empty_checkpoint()
        late["channel_values"] = {"notes": SECRET + "z" * 300_000}
        late["channel_versions"] = {"notes": 1}
        with pytest.raises(stashpoint.Purged):
            saver.put(saved, late, {"source": "loop", "step": 0}, {"notes": 1})
        assert versions(stash, "langgraph-values/") == []
        assert holding(stash, SECRET) == []


def test_a_retention_rule_locks_sealed_segments_and_the_purge_names_them(
    locked_bucket: Any,
) -> None:
    from stashpoint.stores.objects import HeadObject

    url = "s3://locked-bucket/p?index=none&retention=sealed:GOVERNANCE:30"
    with stashpoint.open(url) as stash:
        _log(stash, "t1", SECRET, 70)
        segment = "p/sealed/logs/t1/00000000000000000000-00000000000000000063"
        held = stash.driver(HeadObject(segment))
        assert held is not None and held.lock_mode == "GOVERNANCE" and held.retain_until
        assert (held.retain_until - held.last_modified).days in (29, 30)
        entry = stash.driver(HeadObject("p/logs/t1/00000000000000000069"))
        assert entry is not None and entry.lock_mode is None  # hot entries stay free
        [check] = [c for c in stash.admin.doctor() if c.name == "object lock"]
        assert "sealed GOVERNANCE 30 days" in check.detail
        with pytest.raises(stashpoint.RetentionLocked) as refused:
            stash.admin.purge(log="t1")
        assert [key for key, *_ in refused.value.locked] == [segment]
        assert len(_records(stash, "t1")) == 70


def test_a_retention_rule_is_checked_and_refused_where_there_is_no_object_lock() -> None:
    with pytest.raises(stashpoint.ConfigurationError):
        stashpoint.open("s3://b/p?retention=sealed:FOREVER:30")
    with pytest.raises(stashpoint.ConfigurationError):
        stashpoint.open("s3://b/p?retention=hot:GOVERNANCE:30")
    with pytest.raises(stashpoint.ConfigurationError):
        stashpoint.open("memory://x?retention=sealed:GOVERNANCE:30")
