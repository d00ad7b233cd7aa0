"""Issue 23 #20: a planted future entry wedged a log or run with an error naming only the
"missing" version, and no command repaired it. The error now names the planted object and
the command; `repair_log` (`stashpoint repair`) moves what is above the gap aside."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from typer.testing import CliRunner

import stashpoint
from stashpoint import InvalidPayload
from stashpoint.cli.app import app
from stashpoint.logs.log import LogListing
from stashpoint.logs.repair import first_gap
from stashpoint.stores.objects import DeleteObject, GetObject, PutObject


@pytest.fixture(params=["memory_url", "local_url", "s3_seaweed_url"])
def stash(request: pytest.FixtureRequest) -> Iterator[stashpoint.Stash]:
    url, options = request.getfixturevalue(request.param)
    with stashpoint.open(url, **options) as opened:
        yield opened


def _copy(stash: stashpoint.Stash, source: str, target: str) -> bytes:
    """Plant a genuine-looking object (another version's bytes) under `target`."""
    body = stash.driver(GetObject(source)).body
    stash.driver(PutObject(target, body, None))
    return body  # type: ignore[no-any-return]


def _entry_key(stash: stashpoint.Stash, namespace: str, log_id: str, version: int) -> str:
    return stash.layout.key(namespace, f"{log_id}/{version:020d}")


def test_a_planted_future_entry_is_named_and_repaired(stash: stashpoint.Stash) -> None:
    head = None
    for v in range(11):
        head = stash.logs.append("job", [f"r{v}"], after=head, state={"v": v})
    planted = _entry_key(stash, "logs", "job", 50)
    body = _copy(stash, _entry_key(stash, "logs", "job", 3), planted)

    with pytest.raises(InvalidPayload) as info:
        stash.logs.head("job")
    message = str(info.value)
    assert planted in message and info.value.object_name == planted
    assert "stashpoint repair logs job" in message and "version 48" in message

    dry = stash.admin.repair_log("logs", "job")  # the default only reports
    assert (dry.gap, dry.above, dry.moved, dry.dry_run) == (11, (planted,), (), True)
    with pytest.raises(InvalidPayload):
        stash.logs.head("job")

    report = stash.admin.repair_log("logs", "job", dry_run=False)
    assert report.gap == 11 and report.above == (planted,) and report.kept == ()
    (moved,) = report.moved
    assert moved.startswith(stash.layout.namespace_prefix("quarantine"))
    assert f"logs/job/{50:020d}." in moved  # named by the original key and its ETag
    assert stash.driver(GetObject(moved)).body == body  # kept, byte for byte
    assert stash.driver(GetObject(planted)) is None

    # Every acknowledged entry is there, and writers go on from below the gap.
    assert stash.logs.records("job") == [f"r{v}" for v in range(11)]
    after = stash.logs.append("job", ["r11"], after=stash.logs.head("job"), state={"v": 11})
    assert after.version == 11 and stash.logs.head("job").state == {"v": 11}
    again = stash.admin.repair_log("logs", "job", dry_run=False)
    assert again.gap is None and again.moved == ()


def test_a_planted_future_run_entry_is_named_and_repaired_from_the_cli(
    tmp_path: Any,
) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        run_id = stash.runs.create_run("graph")
        stash.runs.record_attempt(run_id, "a1", 1)
        planted = _entry_key(stash, "run-logs", run_id, 40)
        _copy(stash, _entry_key(stash, "run-logs", run_id, 1), planted)
        with pytest.raises(InvalidPayload) as info:
            stash.runs.load_run(run_id)
        assert f"stashpoint repair run-logs {run_id}" in str(info.value)

    runner = CliRunner()
    dry = runner.invoke(app, ["repair", "run-logs", run_id, "--dry-run", "--url", url])
    assert dry.exit_code == 0, dry.output
    assert "would move 1" in dry.output
    done = runner.invoke(app, ["repair", "run-logs", run_id, "--url", url, "--json"])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["gap"] == 2
    with stashpoint.open(url) as stash:
        assert stash.runs.load_run(run_id).run_id == run_id
        stash.runs.complete_run(run_id)
    bad = runner.invoke(app, ["repair", "checkpoints", run_id, "--url", url])
    assert isinstance(bad.exception, stashpoint.InvalidArgument)
    assert "log namespace" in str(bad.exception) and "'checkpoints'" in str(bad.exception)


def test_repair_leaves_an_object_rewritten_while_it_is_moved(stash: stashpoint.Stash) -> None:
    """The delete is conditional on the ETag copied: a rewrite meanwhile is left in place."""
    head = None
    for v in range(3):
        head = stash.logs.append("job", [f"r{v}"], after=head, state={"v": v})
    planted = _entry_key(stash, "logs", "job", 9)
    _copy(stash, _entry_key(stash, "logs", "job", 1), planted)

    def rewrite_before_delete(request: Any, proceed: Any) -> Any:
        if isinstance(request, DeleteObject) and request.key == planted:
            _copy(stash, _entry_key(stash, "logs", "job", 2), planted)
        return proceed()

    with stash.intercept(rewrite_before_delete):
        report = stash.admin.repair_log("logs", "job", dry_run=False)
    assert report.kept == (planted,) and report.moved == ()
    assert stash.driver(GetObject(planted)) is not None


def test_repair_never_moves_a_log_without_a_gap(stash: stashpoint.Stash) -> None:
    head = None
    for v in range(70):  # one sealed segment and entries beyond it
        head = stash.logs.append("job", [f"r{v}"], after=head, state={"v": v})
    report = stash.admin.repair_log("logs", "job", dry_run=False)
    assert report.gap is None and report.above == () and report.moved == ()
    assert stash.logs.records("job") == [f"r{v}" for v in range(70)]
    with pytest.raises(stashpoint.InvalidArgument):
        stash.admin.repair_log("checkpoints", "job")
    with pytest.raises(stashpoint.InvalidId):
        stash.admin.repair_log("logs", "../x")


@pytest.mark.parametrize(
    ("entries", "segments", "gap"),
    [
        ([], [], None),
        ([0, 1, 2], [], None),
        ([0, 1, 5], [], 2),
        ([64, 65], [0], None),
        ([70, 71], [0], 64),
        ([64, 200], [0], 65),
        ([3, 4, 9], [], 5),  # a life that began at 3 (older stashes freed below it)
        ([10], [0, 128], 64),
    ],
)
def test_the_first_gap_is_above_the_lowest_held_version(
    entries: list[int], segments: list[int], gap: int | None
) -> None:
    listing = LogListing("x")
    listing.entries.update({v: f"e{v}" for v in entries})
    listing.segments.update({first: f"s{first}" for first in segments})
    assert first_gap(listing) == gap
