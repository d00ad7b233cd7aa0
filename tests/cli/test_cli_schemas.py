"""Every command's `--json` output validates against its schema in `docs/cli/schemas/`.

One stash holds something of every kind (an envelope checkpoint with revisions, an agent
checkpoint, a log of `stash.logs`, finished, failed, waiting and abandoned runs, a
LangGraph thread); each command runs on it as a user would, in a subprocess, and what it
prints is checked. A command that gains `--json` without a schema fails the census.
"""

from __future__ import annotations

import importlib.util
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import stashpoint
from stashpoint import Envelope
from tests.cli.test_cli import cli
from tests.cli.test_cli_logs import _agent

SCHEMAS = Path(__file__).parents[2] / "docs" / "cli" / "schemas"


def _schema(name: str) -> dict[str, Any]:
    return json.loads((SCHEMAS / f"{name}.schema.json").read_text())


def _valid(name: str, output: str) -> dict[str, Any]:
    document = json.loads(output)
    jsonschema.Draft202012Validator(
        _schema(name), format_checker=jsonschema.FormatChecker()
    ).validate(document)
    return dict(document)


@pytest.fixture(scope="module")
def stash_url(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    url = f"local://{tmp_path_factory.mktemp('schemas') / 'stash'}"
    _agent(url, "agent-1", 2)
    with stashpoint.open(url) as stash:
        env = Envelope.initial("job-1", None, "stashpoint.job", 1, {"cursor": 0, "a/b": [1]})
        stash.checkpoints.compare_and_swap(env, None)
        stash.checkpoints.compare_and_swap(env.next({"cursor": 5, "a/b": [1, 2]}), 0)
        stash.logs.append("events", [{"n": 1}], after=None, state={"n": 1})
        done = stash.runs.create_run("etl")
        attempt = stash.runs.record_attempt(done, "extract", 1, {"rows": 3})
        stash.runs.complete_attempt(attempt, {"ok": True})
        stash.runs.complete_run(done)
        failed = stash.runs.create_run("etl")
        stash.runs.fail_attempt(stash.runs.record_attempt(failed, "load", 1, None), "disk full")
        stash.runs.fail_run(failed, "disk full")
        waiting = stash.runs.create_run("nightly")
        stash.runs.suspend_run(waiting, until=datetime(2030, 1, 1, tzinfo=UTC))
        stuck = stash.runs.create_run("spot")
        stash.runs.record_attempt(stuck, "item-1", 1, lease=0.01)
        durable = stash.runs.create_run("durable", run_id="pay")
        fleet = stash.runs.fleet("thumbs")
        fleet.start(range(30), batch_size=10, tolerated_failure_count=None)
        fleet.work(lambda i: 1 // (i % 10 - 3), max_batches=2)  # a failure a batch, one left
    try:
        from langgraph.checkpoint.base import empty_checkpoint

        from stashpoint.langgraph import StashpointSaver
    except ImportError:  # pragma: no cover - the dev extra has it
        pass
    else:
        with stashpoint.open(url) as stash:
            saver = StashpointSaver(stash)
            config = {"configurable": {"thread_id": "t-1", "checkpoint_ns": ""}}
            saver.put(config, empty_checkpoint(), {"source": "input", "step": -1}, {})
    return {"url": url, "done": done, "stuck": stuck, "durable": durable}


def test_every_command_with_json_has_a_schema() -> None:
    import typer.main

    from stashpoint.cli.app import app

    def commands(group: Any, path: tuple[str, ...]) -> list[tuple[str, ...]]:
        found = []
        for name, command in group.commands.items():
            if hasattr(command, "commands"):
                found += commands(command, (*path, name))
            elif any("--json" in getattr(p, "opts", ()) for p in command.params):
                found.append((*path, name))
        return found

    with_json = {"-".join(c) for c in commands(typer.main.get_command(app), ())}
    assert with_json == {p.name.removesuffix(".schema.json") for p in SCHEMAS.iterdir()} - {"error"}
    assert {"list", "history", "runs-list", "threads-list", "demo", "threads-show"} <= with_json


def test_listings_shows_and_reports_validate(stash_url: dict[str, str]) -> None:
    url = stash_url["url"]
    listed = _valid("list", cli("list", "--json", url=url).stdout)
    assert {(i["id"], i["where"]) for i in listed["items"]} == {
        ("agent-1", "agent"), ("events", "log"), ("job-1", "checkpoint"),
    }  # fmt: skip
    _valid("show", cli("show", "job-1", "--json", url=url).stdout)
    shown_log = _valid("show", cli("show", "events", "--json", url=url).stdout)
    assert shown_log["state"] == {"n": 1}
    _valid("show", cli("show", "agent-1", "--json", url=url).stdout)
    for checkpoint_id in ("job-1", "agent-1", "events"):
        _valid("history", cli("history", checkpoint_id, "--json", url=url).stdout)
    changes = _valid("diff", cli("diff", "job-1", "0", "1", "--json", url=url).stdout)
    assert {c["path"] for c in changes["changes"]} == {"/payload/cursor", "/payload/a~1b/1"}
    _valid("runs-list", cli("runs", "list", "--json", url=url).stdout)
    due = cli("runs", "due", "--at", "2030-01-02T00:00:00Z", "--json", url=url).stdout
    assert len(_valid("runs-due", due)["items"]) == 1
    stuck = _valid(
        "runs-stuck", cli("runs", "stuck", "--clock-skew", "0", "--json", url=url).stdout
    )
    assert [i["run_id"] for i in stuck["items"]] == [stash_url["stuck"]]
    _valid("runs-show", cli("runs", "show", stash_url["done"], "--json", url=url).stdout)
    shown = _valid("runs-show", cli("runs", "show", "thumbs", "--json", url=url).stdout)
    assert (shown["fleet"]["done"], shown["fleet"]["failed"], shown["fleet"]["left"]) == (20, 2, 10)
    text = cli("runs", "show", "thumbs", url=url).stdout
    assert "20 of 30 items done (18 ok, 2 failed)" in text and "1 left of 3" in text
    threads = _valid("threads-list", cli("threads", "list", "--json", url=url).stdout)
    assert [t["thread_id"] for t in threads["items"]] == ["t-1"]
    _valid("threads-show", cli("threads", "show", "t-1", "--json", url=url).stdout)
    _valid("doctor", cli("doctor", "--json", url=url).stdout)
    _valid("gc", cli("gc", "--dry-run", "--json", url=url).stdout)
    _valid("reindex", cli("reindex", "--json", url=url).stdout)
    _valid("repair", cli("repair", "logs", "events", "--dry-run", "--json", url=url).stdout)
    _valid("restore", cli("restore", "job-1", "--json", url=url).stdout)
    if importlib.util.find_spec("pyarrow") and importlib.util.find_spec("duckdb"):
        projected = _valid("project", cli("project", "--json", url=url).stdout)
        assert projected["rows"] >= 1 and projected["unreadable"] == []
        sql = "select log_id, written_at, day, record from records"
        asked = _valid("query", cli("query", sql, "--json", url=url).stdout)
        assert asked["rows"] and asked["columns"] == ["log_id", "written_at", "day", "record"]


def test_reports_of_changes_validate(stash_url: dict[str, str], tmp_path: Path) -> None:
    url = stash_url["url"]
    out = tmp_path / "all.jsonl"
    _valid("export", cli("export", "--prefix", "", "--out", str(out), "--json", url=url).stdout)
    resolved = cli("runs", "resolve", "pay", "charge", "--retry", "--json", url=url).stdout
    assert _valid("runs-resolve", resolved)["resolved"] is False  # never run: nothing to do
    taken = cli("runs", "takeover", stash_url["stuck"], "--json", url=url).stdout
    assert _valid("runs-takeover", taken)["epoch"] >= 1
    agent = cli("agent", "resolve", "agent-1", "--retry-turn", "--json", url=url).stdout
    assert _valid("agent-resolve", agent)["resolved"] is False


def test_errors_validate_and_times_are_rfc3339_z(stash_url: dict[str, str]) -> None:
    url = stash_url["url"]
    expected = {("show", "nope"): 3, ("runs", "show", "nope"): 3,
                ("history", "job-1", "--cursor", "abc"): 1, ("list", "--limit", "0"): 2,
                ("runs", "list", "--status", "sleeping"): 2}  # fmt: skip
    for command, status in expected.items():
        result = cli(*command, "--json", url=url, check=False)
        assert result.returncode == status, result
        kind = _valid("error", result.stdout)["error"]["kind"]
        assert kind in ("not_found", "invalid_argument", "usage"), (command, kind)
        assert (kind == "usage") == (status == 2)
    shown = json.loads(cli("runs", "show", stash_url["done"], "--json", url=url).stdout)
    times = [shown["run"]["created_at"], shown["run"]["attempts"][0]["started_at"]]
    history = json.loads(cli("history", "job-1", "--json", url=url).stdout)["items"]
    times += [h["updated_at"] for h in history]
    for value in times:
        assert value.endswith("Z") and "+00:00" not in value
        assert datetime.fromisoformat(value) > datetime.now(UTC) - timedelta(hours=1)


def test_the_demo_reports_in_json(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'demo'}"
    report = _valid("demo", cli("demo", "--items", "40", "--json", url=url).stdout)
    assert report["ok"] and report["processed"] == 40


def test_signals_and_callback_redemptions_validate(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        run = stash.runs.durable("approve-1")
        token = run.callback("approval")
        with pytest.raises(stashpoint.RunSuspended):
            run.wait_for("approval")
        stash.runs.create_run("durable", run_id="early")
    sent = cli(
        "runs", "signal", "early", "go", "--payload", '{"n": 1}', "--id", "d1", "--json", url=url
    ).stdout
    assert _valid("runs-signal", sent) == {
        "run_id": "early", "name": "go", "signal_id": "d1", "duplicate": False, "woke": False,
    }  # fmt: skip
    redeemed = _valid("runs-redeem", cli("runs", "redeem", token, "--json", url=url).stdout)
    assert (redeemed["run_id"], redeemed["woke"]) == ("approve-1", True)
    due = cli("runs", "due", "--json", url=url).stdout
    assert "approve-1" in due
    assert "delivered before" in cli("runs", "redeem", token, url=url).stdout
    with stashpoint.open(url) as stash:
        again = stash.runs.durable("approve-1")
        assert again.callback("approval") == token  # replayed in order
        assert again.wait_for("approval") is None  # no payload: null
