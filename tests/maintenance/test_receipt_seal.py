"""Receipts are obeyed only when the erasing identity wrote them (issue 47, item 5).

A worker may write under `purges/` (the shipped WorkerPolicy may PutObject anywhere under
the stash's prefix). A receipt it plants, open or "finished", must never make the operator's
`gc` erase an id or sweep beside one, nor shred a tenant. Receipts are sealed with the
erasure key (`stashpoint.maintenance.receipt_seal`); without one, gc obeys none of them.
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint.maintenance.purge import RECEIPT_KIND
from tests import servers
from tests.crashes import Crash, crash_at

KEY = "k" * 40


def _plant(
    stash: Any, targets: list[list[str]], *, status: str = "in_progress", **more: Any
) -> None:
    state = {
        "purge_id": "purge-planted",
        "actor": "operator@example",
        "started_at": "2026-01-01T00:00:00+00:00",
        "selector": {"log": targets[0][1]},
        "targets": targets,
        "reusable": False,
        "status": status,
        **more,
    }
    stash.logs_in("purges").append("purge-planted", [], after=None, state=state, kind=RECEIPT_KIND)


def _victim(stash: Any) -> None:
    head = None
    for n in range(70):  # a sealed segment beside its entries
        head = stash.logs.append("victim", [{"n": n}], after=head)
    stash.logs.seal("victim")


def _count(stash: Any) -> int:
    return sum(len(e.records) for e in stash.logs.entries("victim"))


@pytest.fixture(params=["local", "seaweed-no-key", "seaweed-with-key"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, dict[str, Any]]:
    if request.param == "local":
        return f"local://{tmp_path / 's'}", {}
    seaweedfs = request.getfixturevalue("seaweedfs")
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}", servers.VERSIONED_BUCKET)
    return url, ({"erasure_key": KEY} if request.param == "seaweed-with-key" else {})


def test_gc_never_obeys_a_planted_open_receipt(where: tuple[str, dict[str, Any]]) -> None:
    url, options = where
    with stashpoint.open(url, **options) as stash:
        _victim(stash)
        _plant(stash, [["logs", "victim"]])
        report = stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
        assert report.unsealed_receipts == ["purge-planted"]
        assert report.purges_resumed == 0 and "purge-planted" in report.open_purges
        assert _count(stash) == 70


def test_gc_never_sweeps_beside_the_ids_of_a_planted_finished_receipt(
    where: tuple[str, dict[str, Any]],
) -> None:
    url, options = where
    with stashpoint.open(url, **options) as stash:
        _victim(stash)
        _plant(stash, [["logs", "victim"]], status="complete", verified=True)
        report = stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
        assert report.purge_leftovers == 0 and report.unsealed_receipts == ["purge-planted"]
    with stashpoint.open(url, **options) as cold:
        assert _count(cold) == 70  # its segment included


def test_a_forged_seal_is_refused_even_by_an_explicit_resume(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 's'}"
    with stashpoint.open(url, erasure_key=KEY) as stash:
        _victim(stash)
        _plant(stash, [["logs", "victim"]], seal="hmac-sha256:1:" + "0" * 64)
        assert stash.admin.resume_purges() == []  # the operator's own resume skips it too
        assert stash.admin.collect_garbage(
            dry_run=False, min_age=timedelta(0)
        ).unsealed_receipts == ["purge-planted"]
        assert _count(stash) == 70


def test_a_receipt_sealed_with_another_key_is_not_obeyed(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 's'}"
    with stashpoint.open(url, erasure_key="x" * 40) as other:
        _victim(other)
        with crash_at(other, 12, False), pytest.raises(Crash):
            other.admin.purge(log="victim")
    with stashpoint.open(url, erasure_key=KEY) as stash:
        report = stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
        assert report.unsealed_receipts and report.purges_resumed == 0


def test_a_genuine_crashed_purge_is_finished_by_gc_under_the_same_key(seaweedfs: Any) -> None:
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}", servers.VERSIONED_BUCKET)
    with stashpoint.open(url, erasure_key=KEY) as stash:
        _victim(stash)
        with crash_at(stash, 12, False), pytest.raises(Crash):
            stash.admin.purge(log="victim")
    with stashpoint.open(url, erasure_key=KEY) as stash:
        report = stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
        assert report.purges_resumed == 1 and report.unsealed_receipts == []
        with pytest.raises(stashpoint.Purged):
            stash.logs.head("victim")


def test_without_a_key_only_the_operator_resumes_an_unsealed_receipt(seaweedfs: Any) -> None:
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}", servers.VERSIONED_BUCKET)
    with stashpoint.open(url) as stash:
        _victim(stash)
        with crash_at(stash, 12, False), pytest.raises(Crash):
            stash.admin.purge(log="victim")
        report = stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
        assert report.purges_resumed == 0 and len(report.unsealed_receipts) == 1
        [done] = stash.admin.resume_purges()
        assert done.status == "complete"


def test_a_planted_shred_receipt_never_shreds_without_confirmation(tmp_path: Path) -> None:
    from stashpoint.encryption import Encryption

    encryption = Encryption.local(tmp_path / "keyring.json", ("acme", "acme-"))
    url = f"local://{tmp_path / 's'}"
    with stashpoint.open(url, encryption=encryption) as stash:
        stash.checkpoints.compare_and_swap(
            stashpoint.Envelope.initial("acme-1", None, "d", 1, {"n": 1}), None
        )
        _plant(stash, [["data-keys", "acme"]], selector={"tenant": "acme", "shred": True})
        stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
        assert stash.admin.resume_purges() == []
        assert stash.checkpoints.load("acme-1").payload == {"n": 1}


def test_erasure_keys_are_checked(tmp_path: Path) -> None:
    with pytest.raises(stashpoint.ConfigurationError):
        stashpoint.open(f"local://{tmp_path / 's'}", erasure_key=42)  # type: ignore[arg-type]
    with stashpoint.open(f"local://{tmp_path / 's'}", erasure_key="short") as stash:
        stash.logs.append("t", [1], after=None)
        with pytest.raises(stashpoint.ConfigurationError) as refused:
            stash.admin.purge(log="t")
        assert "short" not in str(refused.value)
