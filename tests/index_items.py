"""Reading a run's index items directly: completed attempts are in no GSI (layout 2), so
tests that check the index agrees with storage read the run's own partition."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import stashpoint
from stashpoint.index.requests import GetPartition
from stashpoint.runs import indexing


def run_items(stash: stashpoint.Stash, run_id: str) -> dict[str, dict[str, Any]]:
    """Return a run's index items by sort key (its run item and its attempts' items)."""
    found = stash.driver(GetPartition(indexing.run_pk(run_id)))
    return {str(item["sk"]): item for item in found}


def attempt_ids(stash: stashpoint.Stash, run_ids: Iterable[str], status: str) -> list[str]:
    """Return the ids of the runs' indexed attempts in `status`, sorted."""
    return sorted(
        str(item["attempt_id"])
        for run_id in run_ids
        for sk, item in run_items(stash, run_id).items()
        if sk.startswith("attempt#") and item["status"] == status
    )


LEGACY_KEY_ATTRIBUTES = ("gpk", "gsk", "spk", "ssk", "npk", "nsk")
"""Key attributes of the pre-release index layout 1 (format v1 has layout 2 only)."""


def legacy_item(item: dict[str, Any]) -> dict[str, Any]:
    """Return a layout-2 item as layout 1 stored it: unsharded keys (a run's status keyed by
    update time, a leased attempt also in `lease#{ns}`), no namespace on attempts."""
    old = {k: v for k, v in item.items() if k[-2:] not in ("pk", "sk") or k in ("pk", "sk")}
    ns = item["namespace"]
    if item["sk"] == indexing.RUN_SORT:
        created = f"{item['created_at']}#{item['run_id']}"
        old |= {
            "gpk": f"graph#{ns}#{item['graph_name']}", "gsk": created,
            "spk": f"status#{ns}#{item['status']}", "ssk": f"{item['updated_at']}#{item['run_id']}",
            "npk": f"runs#{ns}", "nsk": created,
        }  # fmt: skip
        return old
    old.pop("namespace", None)
    old |= {
        "spk": f"attempt-status#{ns}#{item['status']}",
        "ssk": f"{item['started_at']}#{item['attempt_id']}",
    }
    if item.get("lease_expires_at") is not None:
        old |= {"npk": f"lease#{ns}", "nsk": f"{item['lease_expires_at']}#{item['attempt_id']}"}
    return old
