"""Receipts are parsed strictly (issue 47, item 9): a damaged, foreign or planted receipt is
reported by `gc` and skipped, never obeyed and never fatal to the collection."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint.maintenance.purge import RECEIPT_KIND
from stashpoint.stores.objects import PutObject

GOOD: dict[str, Any] = {
    "purge_id": "purge-x",
    "actor": "someone",
    "started_at": "2026-01-01T00:00:00+00:00",
    "selector": {"log": "victim"},
    "targets": [["logs", "victim"]],
    "reusable": False,
}

SHAPES: list[Any] = [
    {},
    "a string",
    ["a", "list"],
    {**GOOD, "targets": "logs/victim"},
    {**GOOD, "targets": [["logs"]]},
    {**GOOD, "targets": [["blobs", "victim"]]},
    {**GOOD, "targets": [["logs", "../victim"]]},
    {**GOOD, "swept": ["zero"]},
    {**GOOD, "swept": [7]},
    {**GOOD, "status": "who-knows"},
    {**GOOD, "started_at": "yesterday"},
    {**GOOD, "ends": {"5": 1}},
    {**GOOD, "unknown_field": 1},
    {**GOOD, "purge_id": "purge-other"},
]


@pytest.mark.parametrize("shape", range(len(SHAPES)))
def test_gc_skips_and_reports_a_planted_receipt_of_any_shape(tmp_path: Path, shape: int) -> None:
    with stashpoint.open(f"local://{tmp_path / 's'}") as stash:
        stash.logs.append("victim", [{"text": "kept"}], after=None)
        stash.logs_in("purges").append(
            "purge-x", [], after=None, state=SHAPES[shape], kind=RECEIPT_KIND
        )
        report = stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
        assert report.unreadable_receipts == ["purge-x: invalid_payload"]
        assert report.purges_resumed == 0
        assert [r for e in stash.logs.entries("victim") for r in e.records] == [{"text": "kept"}]
        with pytest.raises(stashpoint.StashpointError) as refused:
            stash.admin.purge_receipt("purge-x")
        assert refused.value.kind.value == "invalid_payload"


def test_a_receipt_whose_records_are_not_versions_reads_as_invalid(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path / 's'}") as stash:
        stash.logs_in("purges").append(
            "purge-x", [{"nokey": 1}], after=None, state={**GOOD, "status": "complete"},
            kind=RECEIPT_KIND,
        )  # fmt: skip
        with pytest.raises(stashpoint.InvalidPayload):
            stash.admin.purge_receipt("purge-x")


def test_gc_goes_on_past_an_object_planted_under_purges(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path / 's'}") as stash:
        stash.driver(PutObject("purges/purge-y/00000000000000000000", b"not zstd", None))
        stash.driver(PutObject("purges/stray", b"{}", None))
        report = stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
        assert [r.split(":")[0] for r in report.unreadable_receipts] == ["purge-y"]
        receipt = stash.admin.purge(log="nothing-here")
        assert receipt.status == "complete"
