"""Purges of owned content: a Temporal workflow's payloads, a durable execution's values.

Content namespaces whose objects live under an owner's id (`Namespace.owned`) are purged
by that id, or by a prefix of owners, with a receipt naming every version removed; Object
Lock refuses the purge before anything is erased; a retention purge (`older_than`) erases
whole owners, never half of one.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from typing import Any

import pytest

import stashpoint
from stashpoint.errors import InvalidArgument, InvalidId, InvalidPayload
from stashpoint.steps import run_sync
from stashpoint.stores.layout import DURABLE_VALUES, NAMESPACES, TEMPORAL_PAYLOADS
from stashpoint.stores.named_values import NamedValues
from tests.kills import counting_child
from tests.purging import holding, pairs, versions

SECRET = "card 4111-1111-1111-1111"


def _values(stash: Any, namespace: str) -> NamedValues:
    return NamedValues(stash.layout, stash.codec, namespace, "test.value", stash.retry)


def _holds(text: str) -> Any:
    return lambda document: document.get("text") == text


def _store(stash: Any, namespace: str, owner: str, *texts: str) -> None:
    values = _values(stash, namespace)
    for n, text in enumerate(texts):
        run_sync(values.store(f"{owner}/v{n}", {"text": text}, _holds(text), what="value"),
                 stash.driver)  # fmt: skip


def _fetch(stash: Any, namespace: str, name: str, text: str) -> Any:
    return run_sync(_values(stash, namespace).fetch(name, _holds(text), what="value"), stash.driver)


def test_only_content_namespaces_with_owners_are_owned() -> None:
    owned = sorted(n.name for n in NAMESPACES.values() if n.owned)
    assert owned == [DURABLE_VALUES, TEMPORAL_PAYLOADS]  # blobs and thread values are shared


@pytest.mark.parametrize("namespace", [TEMPORAL_PAYLOADS, DURABLE_VALUES])
def test_an_owners_values_are_purged_with_a_receipt_and_no_one_elses(
    erasure_url: str, namespace: str
) -> None:
    with stashpoint.open(erasure_url) as stash:
        _store(stash, namespace, "w1", SECRET, "second of w1")
        _store(stash, namespace, "w10", "w10 keeps this")  # w1 is a prefix of it: untouched
        before = pairs(versions(stash))
        dry = stash.admin.purge(values=(namespace, "w1"), dry_run=True)
        assert dry.status == "dry_run" and len(dry.removed) == 2
        assert pairs(versions(stash)) == before  # a dry run writes nothing
        receipt = stash.admin.purge(values=(namespace, "w1"))
        assert receipt.verified
        assert {str(t) for t in receipt.targets} == {f"{namespace}/w1"}
        assert {v.key for v in receipt.removed} == {
            stash.layout.key(namespace, "w1/v0"),
            stash.layout.key(namespace, "w1/v1"),
        }
        assert holding(stash, SECRET) == []  # every stored version, not only the current
        with pytest.raises(InvalidPayload):  # a reference to it is refused, never empty
            _fetch(stash, namespace, "w1/v0", SECRET)
        assert _fetch(stash, namespace, "w10/v0", "w10 keeps this")["text"] == "w10 keeps this"
        assert stash.admin.purge_receipt(receipt.purge_id).verified  # the receipt reads back


def _memory(**options: Any) -> Any:
    return stashpoint.open(f"memory://content-{uuid.uuid4().hex}", **options)


def test_a_prefix_purge_reaches_owned_content_beside_logs_and_heads() -> None:
    with _memory() as stash:
        _store(stash, TEMPORAL_PAYLOADS, "acme.w1", SECRET)
        _store(stash, DURABLE_VALUES, "acme.e1", SECRET)
        _store(stash, TEMPORAL_PAYLOADS, "globex.w1", "globex's")
        stash.logs.append("acme.notes", [{"text": SECRET}], after=None)
        receipt = stash.admin.purge(prefix="acme.")
        assert {str(t) for t in receipt.targets} == {
            f"{TEMPORAL_PAYLOADS}/acme.w1",
            f"{DURABLE_VALUES}/acme.e1",
            "logs/acme.notes",
        }
        assert holding(stash, SECRET) == []
        assert _fetch(stash, TEMPORAL_PAYLOADS, "globex.w1/v0", "globex's")
        only = stash.admin.purge(prefix="globex.", namespace="temporal-payloads")
        assert [str(t) for t in only.targets] == [f"{TEMPORAL_PAYLOADS}/globex.w1"]


def test_a_retention_purge_takes_whole_owners_written_before_the_cutoff(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Owners' ages are their values' storage times (no envelope holds one): the memory
    backend's clock is moved 40 days on between the old writes and the new."""
    from datetime import UTC, datetime

    from stashpoint._backends import memory
    from stashpoint.clock import FakeClock

    later = datetime.now(UTC) + timedelta(days=40)
    with _memory(clock=FakeClock(later)) as stash:
        _store(stash, TEMPORAL_PAYLOADS, "old", SECRET)
        _store(stash, TEMPORAL_PAYLOADS, "mixed", "old half")

        class Later(datetime):
            @classmethod
            def now(cls, tz: Any = None) -> Any:
                return later

        monkeypatch.setattr(memory, "datetime", Later)
        _store(stash, TEMPORAL_PAYLOADS, "new", "recent")
        run_sync(_values(stash, TEMPORAL_PAYLOADS).store(
            "mixed/v9", {"text": "recent half"}, _holds("recent half"), what="value"
        ), stash.driver)  # fmt: skip
        receipt = stash.admin.purge(
            prefix="", namespace="temporal-payloads", older_than=timedelta(days=30)
        )
        assert [str(t) for t in receipt.targets] == [f"{TEMPORAL_PAYLOADS}/old"]
        assert holding(stash, SECRET) == []
        assert _fetch(stash, TEMPORAL_PAYLOADS, "mixed/v0", "old half")  # never half an owner
        assert _fetch(stash, TEMPORAL_PAYLOADS, "new/v0", "recent")


def test_object_lock_refuses_the_purge_before_anything_is_erased(retained_bucket: Any) -> None:
    with stashpoint.open("s3://locked-bucket/p?index=none") as stash:
        _store(stash, TEMPORAL_PAYLOADS, "w1", SECRET, "two")
        before = pairs(versions(stash))
        with pytest.raises(stashpoint.RetentionLocked) as refused:
            stash.admin.purge(values=(TEMPORAL_PAYLOADS, "w1"))
        assert len(refused.value.locked) == 2
        assert pairs(versions(stash)) == before
        assert stash.admin.legal_hold(True, values=(TEMPORAL_PAYLOADS, "w1")) == 2


def test_bad_selectors_are_typed_errors() -> None:
    with _memory() as stash:
        for wrong in ("w1", ("blobs", "w1"), ("langgraph-values", "t"), (TEMPORAL_PAYLOADS,)):
            with pytest.raises(InvalidArgument):
                stash.admin.purge(values=wrong)  # type: ignore[arg-type]
        with pytest.raises(InvalidId):
            stash.admin.purge(values=(TEMPORAL_PAYLOADS, "a/b"))
        with pytest.raises(InvalidArgument):
            stash.admin.purge(values=(TEMPORAL_PAYLOADS, "w1"), log="x")


def test_the_cli_purges_an_owners_values(tmp_path: Any) -> None:
    from typer.testing import CliRunner

    from stashpoint.cli.app import app

    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        _store(stash, DURABLE_VALUES, "exec-1", SECRET)
    done = CliRunner().invoke(
        app, ["purge", "--values", "durable-values/exec-1", "--url", url, "--json"]
    )
    assert done.exit_code == 0, done.output
    receipt = json.loads(done.output)
    assert receipt["targets"] == [{"namespace": DURABLE_VALUES, "id": "exec-1"}]
    assert receipt["objects"] == 1 and receipt["verified"]
    with stashpoint.open(url) as stash:
        assert holding(stash, SECRET) == []


def test_a_crash_at_every_request_of_the_purge_resumes_to_a_complete_receipt() -> None:
    from tests.crashes import crash_everywhere

    def scenario(stash: Any) -> None:
        _store(stash, TEMPORAL_PAYLOADS, "w1", SECRET, SECRET + " again", "third")
        _store(stash, TEMPORAL_PAYLOADS, "w2", "kept")

    def check(stash: Any, step: int, after: bool) -> None:
        receipt = _receipt_of(stash, TEMPORAL_PAYLOADS, "w1")  # the next process finishes it
        assert receipt.status == "complete" and receipt.verified, (step, after)
        assert holding(stash, SECRET) == [], (step, after)
        assert _fetch(stash, TEMPORAL_PAYLOADS, "w2/v0", "kept"), (step, after)

    crash_everywhere(
        _memory,
        scenario,
        lambda s: s.admin.purge(values=(TEMPORAL_PAYLOADS, "w1")),
        check,
        at_least=5,
    )


def _receipt_of(stash: Any, namespace: str, owner: str) -> Any:
    """Finish the purge of an owner a fault or a kill cut short, or start it."""
    finished = stash.admin.resume_purges()
    if not finished:  # it never opened its receipt, or it had closed it
        opened = stash.logs_in("purges").list_ids()
        finished = [stash.admin.purge_receipt(p) for p in opened] or [
            stash.admin.purge(values=(namespace, owner))
        ]
    [receipt] = finished
    return receipt


def test_a_purge_through_the_fault_proxy_finishes_and_loses_nothing_else(
    seaweedfs: Any,
) -> None:
    from tests.faultproxy import FaultProxy, everyday_faults

    prefix = f"t-{uuid.uuid4().hex}"
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        _store(clean, TEMPORAL_PAYLOADS, "w1", *(f"{SECRET} {n}" for n in range(40)))
        _store(clean, TEMPORAL_PAYLOADS, "w2", "kept 0", "kept 1")
        mine = f"{TEMPORAL_PAYLOADS}/w1/"
        before = set(pairs(versions(clean, mine)))
    plan, config = everyday_faults()
    receipt = None
    failures: list[str] = []
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        with stashpoint.open(url, client_config=config) as stash:
            for _ in range(20):  # bounded: each try gets further
                try:
                    receipt = _receipt_of(stash, TEMPORAL_PAYLOADS, "w1")
                    break
                except stashpoint.StashpointError as exc:
                    failures.append(exc.kind.value)
    assert set(failures) <= {"storage_unavailable", "conflict"}, failures
    assert sum(plan.injected.values()) > 0
    assert receipt is not None and receipt.status == "complete" and receipt.verified
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        assert versions(clean, mine) == []
        # Every version removed is in the receipt, whichever try removed it.
        assert {(v.key, v.version_id) for v in receipt.removed} >= before
        assert holding(clean, SECRET) == []
        assert _fetch(clean, TEMPORAL_PAYLOADS, "w2/v1", "kept 1")["text"] == "kept 1"


KILLED_PURGE = counting_child('stash.admin.purge(values=("temporal-payloads", "w1"))')


def test_a_purge_killed_with_sigkill_resumes_to_a_complete_receipt(tmp_path: Any) -> None:
    from tests.kills import kill_after_requests

    for kill_after in range(1, 12):  # the purge makes 12 requests: each one
        url = f"local://{tmp_path / f's-{kill_after}'}"
        with stashpoint.open(url) as stash:
            _store(stash, TEMPORAL_PAYLOADS, "w1", *(f"{SECRET} {n}" for n in range(12)))
            _store(stash, TEMPORAL_PAYLOADS, "w2", "kept")
        made = kill_after_requests(KILLED_PURGE, [url], kill_after)
        assert made == kill_after  # killed mid-purge, not after it
        with stashpoint.open(url) as stash:
            receipt = _receipt_of(stash, TEMPORAL_PAYLOADS, "w1")
            assert receipt.status == "complete" and receipt.verified, kill_after
            assert holding(stash, SECRET) == [], kill_after
            assert _fetch(stash, TEMPORAL_PAYLOADS, "w2/v0", "kept"), kill_after


def test_writers_racing_a_purge_keep_what_is_not_the_owners_and_what_follows_it(
    seaweedfs: Any,
) -> None:
    """Two writers store values while an owner is purged: every value of another owner
    stays, the purge completes, and a value of the owner stored after the purge returned is
    new data of the owner, kept (content has no tombstone: docs/purge.md)."""
    import threading

    url = seaweedfs.url(f"t-{uuid.uuid4().hex}")
    with stashpoint.open(url) as stash:
        _store(stash, TEMPORAL_PAYLOADS, "w1", *(f"{SECRET} {n}" for n in range(30)))
    stored: dict[str, list[str]] = {"w2": [], "w3": []}
    go = threading.Barrier(3)

    def writer(owner: str) -> None:
        with stashpoint.open(url) as mine:
            values = _values(mine, TEMPORAL_PAYLOADS)
            go.wait()
            for n in range(25):  # bounded
                text = f"{owner} value {n}"
                run_sync(values.store(f"{owner}/v{n}", {"text": text}, _holds(text),
                                      what="value"), mine.driver)  # fmt: skip
                stored[owner].append(text)

    threads = [threading.Thread(target=writer, args=(o,)) for o in stored]
    for thread in threads:
        thread.start()
    with stashpoint.open(url) as stash:
        go.wait()
        receipt = stash.admin.purge(values=(TEMPORAL_PAYLOADS, "w1"))
    for thread in threads:
        thread.join(timeout=120)
    assert receipt.status == "complete" and receipt.verified
    with stashpoint.open(url) as stash:
        assert holding(stash, SECRET) == []
        for owner, texts in stored.items():
            assert len(texts) == 25
            for n, text in enumerate(texts):
                assert _fetch(stash, TEMPORAL_PAYLOADS, f"{owner}/v{n}", text)["text"] == text
        _store(stash, TEMPORAL_PAYLOADS, "w1", "after the purge")
        assert _fetch(stash, TEMPORAL_PAYLOADS, "w1/v0", "after the purge")


def test_objects_planted_under_an_owner_are_erased_and_its_neighbours_kept() -> None:
    from stashpoint.stores.objects import PutObject

    with _memory() as stash:
        _store(stash, TEMPORAL_PAYLOADS, "w1", SECRET)
        _store(stash, TEMPORAL_PAYLOADS, "w10", "w10 keeps this")
        planted = {
            f"{TEMPORAL_PAYLOADS}/w1/not-a-value": SECRET.encode(),
            f"{TEMPORAL_PAYLOADS}/w1/deep/er/still": b"\x28\xb5\x2f\xfd garbage " + SECRET.encode(),
            f"{TEMPORAL_PAYLOADS}/w1/\u00e9\u0001": b"\xff\xfe" + SECRET.encode(),
        }
        for key, body in planted.items():
            stash.driver(PutObject(key, body, None, content_encoding=None))
        receipt = stash.admin.purge(values=(TEMPORAL_PAYLOADS, "w1"))
        assert receipt.verified and holding(stash, SECRET) == []
        assert set(planted) <= {v.key for v in receipt.removed}
        assert _fetch(stash, TEMPORAL_PAYLOADS, "w10/v0", "w10 keeps this")
