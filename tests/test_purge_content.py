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
        dry = stash.purge(values=(namespace, "w1"), dry_run=True)
        assert dry.status == "dry_run" and len(dry.removed) == 2
        assert pairs(versions(stash)) == before  # a dry run writes nothing
        receipt = stash.purge(values=(namespace, "w1"))
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
        assert stash.purge_receipt(receipt.purge_id).verified  # the receipt reads back


def _memory(**options: Any) -> Any:
    return stashpoint.open(f"memory://content-{uuid.uuid4().hex}", **options)


def test_a_prefix_purge_reaches_owned_content_beside_logs_and_heads() -> None:
    with _memory() as stash:
        _store(stash, TEMPORAL_PAYLOADS, "acme.w1", SECRET)
        _store(stash, DURABLE_VALUES, "acme.e1", SECRET)
        _store(stash, TEMPORAL_PAYLOADS, "globex.w1", "globex's")
        stash.logs.append("acme.notes", [{"text": SECRET}], after=None)
        receipt = stash.purge(prefix="acme.")
        assert {str(t) for t in receipt.targets} == {
            f"{TEMPORAL_PAYLOADS}/acme.w1",
            f"{DURABLE_VALUES}/acme.e1",
            "logs/acme.notes",
        }
        assert holding(stash, SECRET) == []
        assert _fetch(stash, TEMPORAL_PAYLOADS, "globex.w1/v0", "globex's")
        only = stash.purge(prefix="globex.", namespace="temporal-payloads")
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
        receipt = stash.purge(
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
            stash.purge(values=(TEMPORAL_PAYLOADS, "w1"))
        assert len(refused.value.locked) == 2
        assert pairs(versions(stash)) == before
        assert stash.legal_hold(True, values=(TEMPORAL_PAYLOADS, "w1")) == 2


def test_bad_selectors_are_typed_errors() -> None:
    with _memory() as stash:
        for wrong in ("w1", ("blobs", "w1"), ("langgraph-values", "t"), (TEMPORAL_PAYLOADS,)):
            with pytest.raises(InvalidArgument):
                stash.purge(values=wrong)  # type: ignore[arg-type]
        with pytest.raises(InvalidId):
            stash.purge(values=(TEMPORAL_PAYLOADS, "a/b"))
        with pytest.raises(InvalidArgument):
            stash.purge(values=(TEMPORAL_PAYLOADS, "w1"), log="x")


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
    from tests.crashes import Crash, crash_at

    def scenario(stash: Any) -> None:
        _store(stash, TEMPORAL_PAYLOADS, "w1", SECRET, SECRET + " again", "third")
        _store(stash, TEMPORAL_PAYLOADS, "w2", "kept")

    with _memory() as stash:
        scenario(stash)
        with crash_at(stash, 10**6, False) as calls:
            stash.purge(values=(TEMPORAL_PAYLOADS, "w1"))
    total = len(calls)
    assert total >= 5
    for step in range(total):
        for after in (False, True):
            with _memory() as stash:
                scenario(stash)
                with crash_at(stash, step, after), pytest.raises(Crash):
                    stash.purge(values=(TEMPORAL_PAYLOADS, "w1"))
                finished = stash.resume_purges()
                if not finished:  # crashed before the receipt opened, or after it closed
                    opened = stash.logs_in("purges").list_ids()
                    finished = [stash.purge_receipt(p) for p in opened] or [
                        stash.purge(values=(TEMPORAL_PAYLOADS, "w1"))
                    ]
                [receipt] = finished
                assert receipt.status == "complete" and receipt.verified, (step, after)
                assert holding(stash, SECRET) == [], (step, after)
                assert _fetch(stash, TEMPORAL_PAYLOADS, "w2/v0", "kept"), (step, after)
