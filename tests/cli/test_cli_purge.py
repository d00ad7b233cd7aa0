"""`stashpoint purge`, `receipts` and `hold`: what an operator types, and what it prints."""

from __future__ import annotations

import json
from pathlib import Path

import stashpoint
from tests.cli.test_cli import cli
from tests.cli.test_cli_schemas import _valid
from tests.purging import holding


def _stash(tmp_path: Path) -> str:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        head = None
        for turn in range(70):
            head = stash.logs.append("acme.t1", [{"m": f"erase-me {turn}"}], after=head)
        stash.logs.append("globex.t1", [{"m": "keep-me"}], after=None)
    return url


def test_purge_plans_erases_and_its_receipt_is_listed_and_shown(tmp_path: Path) -> None:
    url = _stash(tmp_path)
    plan = _valid("purge", cli("purge", "--log", "acme.t1", "--dry-run", "--json", url=url).stdout)
    assert plan["status"] == "dry_run" and plan["objects"] == 71  # 70 entries and a segment
    done = _valid("purge", cli("purge", "--prefix", "acme.", "--json", url=url).stdout)
    assert done["status"] == "complete" and done["verified"]
    assert done["targets"] == [{"namespace": "logs", "id": "acme.t1"}]
    assert len(done["removed"]) == done["objects"] == 71 and done["kept"] == 71
    listed = _valid("receipts-list", cli("receipts", "list", "--json", url=url).stdout)
    assert [r["purge_id"] for r in listed["items"]] == [done["purge_id"]]
    shown = _valid(
        "receipts-show", cli("receipts", "show", done["purge_id"], "--json", url=url).stdout
    )
    assert shown["removed"] == done["removed"]
    text = cli("receipts", "show", done["purge_id"], "--versions", url=url).stdout
    assert "logs/acme.t1" in text and "verified" in text
    with stashpoint.open(url) as stash:
        assert holding(stash, "erase-me") == [] and holding(stash, "keep-me")
    read = cli("show", "acme.t1", "--json", url=url, check=False)
    assert read.returncode == 3
    error = _valid("error", read.stdout)["error"]
    assert error["kind"] == "purged" and "receipts show" in error["hint"]
    resumed = _valid("purge", cli("purge", "--resume", "--json", url=url).stdout)
    assert resumed["items"] == []


def test_purge_refuses_a_wide_or_hostile_selection_and_erases_nothing(tmp_path: Path) -> None:
    url = _stash(tmp_path)
    for arguments in (["--prefix", ""], ["--prefix", "/"], ["--prefix", ".."],
                      ["--log", "a", "--run", "b"], ["--older-than", "soon"]):  # fmt: skip
        result = cli("purge", *arguments, "--json", url=url, check=False)
        assert result.returncode in (1, 2), (arguments, result)
        assert _valid("error", result.stdout)["error"]["kind"] in (
            "invalid_argument",
            "invalid_id",
            "usage",
        )
    with stashpoint.open(url) as stash:
        assert len(holding(stash, "erase-me")) >= 70
        assert stash.logs_in("purges").list_ids() == []


def test_purge_by_age_and_hold_on_a_stash_without_object_lock(tmp_path: Path) -> None:
    url = _stash(tmp_path)
    young = _valid(
        "purge",
        cli("purge", "--older-than", "400d", "--namespace", "logs", "--json", url=url).stdout,
    )
    assert young["targets"] == [] and young["verified"]
    held = cli("hold", "set", "--log", "acme.t1", "--json", url=url, check=False)
    assert held.returncode == 6 and json.loads(held.stdout)["error"]["kind"] == "configuration"
    text = cli("purge", "--log", "acme.t1", url=url, columns=80).stdout
    assert "purged 1 id(s): 71 version(s)" in text and "verified" in text
