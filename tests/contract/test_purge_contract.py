"""The purge contract, on every backend and driver: nothing of a purged id stays readable.

After a purge, no stored version anywhere in the bucket holds the id's payload (found by
a byte search of every version, decompressed); what stays under its keys is one tombstone
and payload-free markers; other ids read as before; the receipt lists exactly the
versions that went; reads and writes of the id are `Purged`.
"""

from __future__ import annotations

from typing import Any

import pytest

import stashpoint
from stashpoint import Envelope
from tests.purging import holding, pairs, versions
from tests.purging import log as _log

SECRET = "s3cr3t-of-t1"
OTHER = "payload-of-t2"


def test_a_purged_log_leaves_no_payload_and_refuses_every_writer(stash: Any) -> None:
    stale = _log(stash, "t1", SECRET, 70)  # a sealed segment and a tail
    other = _log(stash, "t2", OTHER, 3)
    prefixes = ("logs/t1/", "sealed/logs/t1/")
    before = {v for p in prefixes for v in pairs(versions(stash, p))}
    assert holding(stash, SECRET)

    receipt = stash.admin.purge(log="t1", actor="tester")

    assert receipt.status == "complete" and receipt.verified
    assert receipt.actor == "tester" and [str(t) for t in receipt.targets] == ["logs/t1"]
    after = {v for p in prefixes for v in pairs(versions(stash, p))}
    assert {(v.key, v.version_id) for v in receipt.removed} == before - after
    assert receipt.objects == len(before - after) > 0
    assert receipt.kept == len(after) == 71  # a marker per version and the tombstone
    assert stash.admin.purge_receipt(receipt.purge_id).removed == receipt.removed
    with pytest.raises(stashpoint.Purged) as read:
        stash.logs.head("t1")
    assert read.value.purge_id == receipt.purge_id and read.value.kind.value == "purged"
    with pytest.raises(stashpoint.Purged):
        stash.logs.entries("t1")
    with pytest.raises(stashpoint.Purged):
        stash.logs.append("t1", [{"message": "late"}], after=stale)  # a zombie's head
    with pytest.raises(stashpoint.Purged):
        stash.logs.append("t1", [{"message": "again"}], after=None)
    assert holding(stash, ("late", "again", SECRET)) == []
    assert stash.logs.head("t2") == other
    assert [r["message"] for e in stash.logs.entries("t2") for r in e.records] == [
        f"{OTHER} {i}" for i in range(3)
    ]


def test_a_purged_checkpoint_leaves_a_tombstone_and_no_revision(stash: Any) -> None:
    first = Envelope.initial("c1", None, "demo", 1, {"note": SECRET})
    stash.checkpoints.compare_and_swap(first, None)
    second = stash.checkpoints.update("c1", lambda e: {"note": SECRET + "-2"})
    kept = Envelope.initial("c2", None, "demo", 1, {"note": OTHER})
    stash.checkpoints.compare_and_swap(kept, None)

    receipt = stash.admin.purge(checkpoint="c1")

    assert receipt.verified and holding(stash, SECRET) == []
    assert len(versions(stash, "checkpoints/c1")) == 1  # the tombstone
    for read in (
        lambda: stash.checkpoints.load("c1"),
        lambda: stash.checkpoints.load("c1", revision=0),
        lambda: stash.checkpoints.describe("c1"),
        lambda: stash.checkpoints.history("c1"),
        lambda: stash.checkpoints.update("c1", lambda e: {"x": 1}),
        lambda: stash.checkpoints.compare_and_swap(second.next({"x": 1}), second.revision),
        lambda: stash.checkpoints.compare_and_swap(Envelope.initial("c1", None, "d", 1, {}), None),
    ):
        with pytest.raises(stashpoint.Purged):
            read()
    stash.checkpoints.delete("c1")  # a no-op: the tombstone keeps the key occupied
    assert len(versions(stash, "checkpoints/c1")) == 1
    assert stash.checkpoints.load("c2").payload == {"note": OTHER}


def test_a_reusable_purge_lets_the_id_start_afresh(stash: Any) -> None:
    _log(stash, "t1", SECRET, 5)
    stash.checkpoints.compare_and_swap(Envelope.initial("c1", None, "d", 1, {"n": SECRET}), None)
    stash.admin.purge(log="t1", reusable=True)
    stash.admin.purge(checkpoint="c1", reusable=True)
    with pytest.raises(stashpoint.CheckpointNotFound) as gone:
        stash.logs.head("t1")
    assert not isinstance(gone.value, stashpoint.Purged)
    head = stash.logs.append("t1", [{"message": "new life"}], after=None)
    assert [r for e in stash.logs.entries("t1") for r in e.records] == [{"message": "new life"}]
    assert head.version == 6 and holding(stash, SECRET) == []
    stash.checkpoints.compare_and_swap(Envelope.initial("c1", None, "d", 1, {"n": 2}), None)
    assert stash.checkpoints.load("c1").payload == {"n": 2}


def test_a_dry_run_plans_and_writes_nothing(stash: Any) -> None:
    _log(stash, "t1", SECRET, 70)
    before = pairs(versions(stash))
    plan = stash.admin.purge(log="t1", dry_run=True)
    assert plan.status == "dry_run" and not plan.verified
    assert pairs(versions(stash)) == before  # not even a receipt
    assert {(v.key, v.version_id) for v in plan.removed} <= before
    assert plan.objects == len([k for k, _ in before if "/t1/" in k])
    assert stash.logs.head("t1").version == 69


def test_a_prefix_purge_takes_every_namespace_and_leaves_other_ids(stash: Any) -> None:
    _log(stash, "acme.t1", SECRET, 3)
    stash.checkpoints.compare_and_swap(
        Envelope.initial("acme.c1", None, "d", 1, {"n": SECRET}), None
    )
    _log(stash, "globex.t1", OTHER, 3)
    receipt = stash.admin.purge(prefix="acme.")
    assert {str(t) for t in receipt.targets} == {"logs/acme.t1", "checkpoints/acme.c1"}
    assert holding(stash, SECRET) == [] and holding(stash, OTHER)
    again = stash.admin.purge(prefix="acme.")  # purged ids are not purged twice
    assert again.targets == [] and again.verified
