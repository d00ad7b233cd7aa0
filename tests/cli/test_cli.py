"""The `stashpoint` command, driven as a user would: in a subprocess, on real backends."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint import Envelope
from stashpoint.stores.objects import PutObject
from tests.cli.fake_s3 import FakeS3


def cli(
    *args: str,
    url: str | None = None,
    check: bool = True,
    columns: int | None = None,
    process: bool = False,
) -> subprocess.CompletedProcess[str]:
    """Run the command; with `columns`, as on a terminal that wide (else stdout is a pipe).

    In this process (`stashpoint.cli.app.main`, its environment and output swapped for the
    call's): a new Python per command cost the suite minutes. `process`: as a real
    `python -m stashpoint` (the entry point, exit codes as the shell sees them).
    """
    env = dict(os.environ)
    if url is not None:
        env["STASHPOINT_URL"] = url
    if columns is not None:
        env.update(TTY_COMPATIBLE="1", COLUMNS=str(columns), NO_COLOR="1")
    if process:
        result = subprocess.run(
            [sys.executable, "-m", "stashpoint", *args], capture_output=True, text=True,
            env=env, timeout=180, check=False,
        )  # fmt: skip
    else:
        result = _in_process(list(args), env)
    if check:
        assert result.returncode == 0, f"{args}: {result.stdout}\n{result.stderr}"
    if columns is not None:  # what the terminal shows, without its styles
        result.stdout = re.sub(r"\x1b\[[0-9;]*m", "", result.stdout)
    return result


def _in_process(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run `stashpoint *args` here, as a new process would: its own environment, its own
    settings, its output captured (a pipe: not a terminal unless the environment says)."""
    import contextlib
    import io

    from stashpoint.cli.app import main
    from stashpoint.cli.options import settings

    saved_env, saved = dict(os.environ), (settings.url, settings.debug)
    out, err = io.StringIO(), io.StringIO()
    code = 0
    os.environ.clear()
    os.environ.update(env)
    settings.url, settings.debug = None, False
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                main(args)
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        os.environ.clear()
        os.environ.update(saved_env)
        settings.url, settings.debug = saved
    return subprocess.CompletedProcess(["stashpoint", *args], code, out.getvalue(), err.getvalue())


@pytest.fixture(params=["local_url", "s3_dynamo_url"], ids=["local", "s3-dynamodb"])
def url(request: pytest.FixtureRequest) -> str:
    base, options = request.getfixturevalue(request.param)
    if options:
        base += "".join(f"&{k}={v}" for k, v in options.items())
    return str(base)


@pytest.fixture
def populated(url: str) -> dict[str, Any]:
    """A stash with a checkpoint of three revisions and two runs, one failed."""
    with stashpoint.open(url) as stash:
        env = Envelope.initial("job-1", None, "stashpoint.job", 1, {"cursor": 0, "tags": ["a"]})
        stash.checkpoints.compare_and_swap(env, None)
        env2 = env.next({"cursor": 5, "tags": ["a", "b"]})
        stash.checkpoints.compare_and_swap(env2, 0)
        stash.checkpoints.compare_and_swap(env2.next({"cursor": 9, "tags": ["b"], "done": True}), 1)
        ok = stash.runs.create_run("etl")
        a = stash.runs.record_attempt(ok, "extract", 1, {"big": "x" * 100_000})
        stash.runs.complete_attempt(a, {"rows": 3})
        stash.runs.complete_run(ok)
        bad = stash.runs.create_run("etl")
        b = stash.runs.record_attempt(bad, "load", 1, None)
        stash.runs.fail_attempt(b, "disk full")
        stash.runs.fail_run(bad, "disk full")
    return {"url": url, "ok": ok, "bad": bad}


def test_show_history_and_diff(populated: dict[str, Any]) -> None:
    url = populated["url"]
    shown = json.loads(cli("show", "job-1", "--json", url=url).stdout)
    assert shown["format"] == "stashpoint.envelope/1" and shown["revision"] == 2
    assert shown["payload"] == {"cursor": 9, "tags": ["b"], "done": True}
    assert "job-1" in cli("show", "job-1", url=url).stdout
    history = json.loads(cli("history", "job-1", "--json", url=url).stdout)
    assert [h["revision"] for h in history["items"]] == [2, 1, 0] and history["cursor"] is None
    first = json.loads(cli("history", "job-1", "--limit", "2", "--json", url=url).stdout)
    assert [h["revision"] for h in first["items"]] == [2, 1] and first["cursor"] == "1"
    rest = json.loads(cli("history", "job-1", "--cursor", "1", "--json", url=url).stdout)
    assert [h["revision"] for h in rest["items"]] == [0]
    assert "history of job-1" in cli("history", "job-1", url=url, columns=80).stdout
    changes = json.loads(cli("diff", "job-1", "0", "2", "--json", url=url).stdout)["changes"]
    ops = {(c["op"], c["path"]) for c in changes}
    assert ("~", "/payload/cursor") in ops and ("+", "/payload/done") in ops
    assert ("-", "/payload/tags/0") in ops or ("~", "/payload/tags/0") in ops
    text = cli("diff", "job-1", "0", "2", url=url).stdout
    assert "/payload/cursor: 0 -> 9" in text


def test_list_describes_checkpoints(populated: dict[str, Any]) -> None:
    url = populated["url"]
    with stashpoint.open(url) as stash:
        for n in range(3):
            stash.checkpoints.compare_and_swap(
                Envelope.initial(f"agent-{n}", f"run-{n}", "stashpoint.agent", 1, {"n": n}), None
            )
    listed = json.loads(cli("list", "--json", url=url).stdout)
    rows = {c["id"]: c for c in listed["items"]}
    assert len(rows) == 4 and listed["cursor"] is None and listed["unreadable"] == []
    assert (rows["job-1"]["kind"], rows["job-1"]["revision"]) == ("stashpoint.job", 2)
    assert rows["job-1"]["where"] == "checkpoint"
    assert rows["agent-2"]["run_id"] == "run-2" and rows["agent-2"]["stored_bytes"] > 0
    limited = json.loads(cli("list", "agent-", "--limit", "2", "--json", url=url).stdout)
    assert [c["id"] for c in limited["items"]] == ["agent-0", "agent-1"]
    assert limited["cursor"] == "agent-1"
    rest = json.loads(cli("list", "agent-", "--cursor", "agent-1", "--json", url=url).stdout)
    assert [c["id"] for c in rest["items"]] == ["agent-2"] and rest["cursor"] is None
    table = cli("list", "agent-", "--limit", "2", url=url, columns=100).stdout
    assert "checkpoints (2 of 3)" in table and "stashpoint.agent" in table
    assert "agent-2" not in table and "more: --cursor agent-1" in table
    assert f"stash {url.split('?')[0]}" in table  # the table names the stash it read
    piped = cli("list", "agent-", url=url).stdout.splitlines()  # a pipe: TSV
    assert piped[0].split("\t") == ["id", "kind", "rev", "where", "run", "bytes", "updated"]
    assert [line.split("\t")[0] for line in piped[1:]] == ["agent-0", "agent-1", "agent-2"]


def test_runs_list_and_show(populated: dict[str, Any]) -> None:
    url = populated["url"]
    listed = json.loads(cli("runs", "list", "--json", url=url).stdout)
    assert [r["run_id"] for r in listed["items"]] == [populated["bad"], populated["ok"]]
    failed = json.loads(cli("runs", "list", "--status", "failed", "--json", url=url).stdout)
    assert [r["run_id"] for r in failed["items"]] == [populated["bad"]]
    paged = json.loads(cli("runs", "list", "--limit", "1", "--json", url=url).stdout)
    assert len(paged["items"]) == 1 and paged["cursor"]
    rest = json.loads(
        cli("runs", "list", "--limit", "1", "--cursor", paged["cursor"], "--json", url=url).stdout
    )
    assert [r["run_id"] for r in rest["items"]] == [populated["ok"]]
    assert json.loads(cli("runs", "list", "--since", "1m", "--json", url=url).stdout)["items"]
    table = cli("runs", "list", "--graph", "etl", url=url, columns=80).stdout
    assert populated["ok"] in table and "failed" in table  # ids whole at 80 columns
    shown = json.loads(cli("runs", "show", populated["bad"], "--json", url=url).stdout)
    assert shown["run"]["error"] == "disk full" and shown["summary"]["failed_attempts"] == 1
    text = cli("runs", "show", populated["ok"], url=url, columns=80).stdout
    assert "extract" in text and "completed" in text


def test_export_writes_jsonl_of_envelopes_and_runs(
    populated: dict[str, Any], tmp_path: Path
) -> None:
    target = tmp_path / "export.jsonl"
    result = cli("export", "--prefix", "job-", "--run", populated["ok"], "--history",
                 "--out", str(target), "--json", url=populated["url"])  # fmt: skip
    assert json.loads(result.stdout)["records"] == 4
    lines = [json.loads(line) for line in target.read_text().splitlines()]
    assert [line["format"] for line in lines] == ["stashpoint.envelope/1"] * 3 + [
        "stashpoint.run-export/1"
    ]
    assert lines[3]["attempts"][0]["input"] == {"big": "x" * 100_000}  # blobs resolved


def test_reindex_and_gc(populated: dict[str, Any]) -> None:
    url = populated["url"]
    assert json.loads(cli("reindex", "--json", url=url).stdout) == {
        "runs_indexed": 2,
        "unreadable": [],
        "damaged_index_kept_as": None,
    }
    assert "indexed 2 runs" in cli("reindex", url=url).stdout
    report = json.loads(cli("gc", "--dry-run", "--min-age-hours", "0", "--json", url=url).stdout)
    assert report["blobs"] == 1 and report["referenced"] == 1 and report["unreferenced"] == []


def test_gc_deletes_only_unreferenced_blobs(url: str) -> None:
    with stashpoint.open(url, blob_threshold=100) as stash:
        run_id = stash.runs.create_run("g")
        stash.runs.save_state_snapshot(run_id, {"v": "first" * 100})
        stash.runs.save_state_snapshot(run_id, {"v": "second" * 100})  # the first is now orphaned
    dry = json.loads(cli("gc", "--dry-run", "--min-age-hours", "0", "--json", url=url).stdout)
    assert dry["blobs"] == 2 and len(dry["unreferenced"]) == 1 and dry["deleted"] == 0
    young = json.loads(cli("gc", "--json", url=url).stdout)
    assert young["too_young"] == 1 and young["deleted"] == 0
    done = json.loads(cli("gc", "--min-age-hours", "0", "--json", url=url).stdout)
    assert done["deleted"] == 1
    with stashpoint.open(url) as stash:
        assert stash.runs.load_run(run_id).state_snapshot == {"v": "second" * 100}


def test_gc_sweeps_expired_langgraph_store_items(url: str) -> None:
    """The real-clock test of the store's TTL: an item past its TTL goes at the next gc."""
    pytest.importorskip("langgraph.store.base")
    from stashpoint.langgraph import StashpointStore

    with StashpointStore.from_url(url) as store:
        store.put(("memories", "u1"), "brief", {"v": 1}, ttl=0.001)  # 60 ms, 6 ms slack
        store.put(("memories", "u1"), "kept", {"v": 2})
    time.sleep(0.2)
    dry = json.loads(cli("gc", "--dry-run", "--json", url=url).stdout)
    assert dry["store_items_expired"] == 1
    assert "swept 1 expired LangGraph store item" in cli("gc", url=url).stdout
    with StashpointStore.from_url(url, ttl={"omit_expired": False}) as store:
        assert store.get(("memories", "u1"), "brief") is None  # deleted, not only hidden
        assert store.get(("memories", "u1"), "kept") is not None
    assert json.loads(cli("gc", "--json", url=url).stdout)["store_items_expired"] == 0


def test_gc_with_history_keeps_blobs_older_revisions_reference(url: str) -> None:
    with stashpoint.open(url, blob_threshold=100) as stash:
        run_id = stash.runs.create_run("g")
        stash.runs.save_state_snapshot(run_id, {"v": "first" * 100})
        stash.runs.save_state_snapshot(run_id, {"v": "second" * 100})
    kept = json.loads(
        cli("gc", "--history", "--min-age-hours", "0", "--json", url=url).stdout
    )  # fmt: skip
    assert kept["blobs"] == 2 and kept["unreferenced"] == [] and kept["deleted"] == 0
    with stashpoint.open(url) as stash:
        assert stash.admin.collect_garbage(dry_run=True, min_age=timedelta(0)).unreferenced


def test_gc_deletes_nothing_while_a_head_cannot_be_read(url: str) -> None:
    """A head in a newer format (or corrupt) may reference any blob: gc must not guess."""
    with stashpoint.open(url, blob_threshold=100) as stash:
        run_id = stash.runs.create_run("g")
        stash.runs.save_state_snapshot(run_id, {"v": "first" * 100})
        stash.runs.save_state_snapshot(run_id, {"v": "second" * 100})  # one orphan
        key = stash.checkpoints.steps.key("from-the-future")
        body = b'{"format": "stashpoint.envelope/9", "id": "from-the-future"}'
        stash.driver(PutObject(key, body, None))
    result = cli("gc", "--min-age-hours", "0", "--json", url=url, check=False)
    assert result.returncode == 1
    report = json.loads(result.stdout)
    assert report["deleted"] == 0 and len(report["unreferenced"]) == 1
    assert report["unreadable"] == [key]
    assert "nothing deleted" in result.stderr and key in result.stderr
    with stashpoint.open(url) as stash:
        stash.checkpoints.delete("from-the-future")
    assert json.loads(cli("gc", "--min-age-hours", "0", "--json", url=url).stdout)["deleted"] == 1


def test_doctor_passes_on_real_backends(url: str) -> None:
    report = json.loads(cli("doctor", "--json", url=url).stdout)
    assert report["ok"], report
    wanted = {
        "create (If-None-Match: *)", "second create refused (412)", "update (If-Match: ETag)",
        "stale ETag refused (412)", "versioning", "cleanup", "index",
    }  # fmt: skip
    if "dynamodb://" in url:
        wanted |= {"index GSIs", "index TTL"}  # SQLite has neither to check
    assert {c["name"] for c in report["checks"] if c["status"] == "pass"} >= wanted
    assert "PASS" in cli("doctor", url=url).stdout


def test_doctor_passes_on_moto_server(stashpoint_moto_url: str) -> None:
    report = json.loads(cli("doctor", "--json", url=stashpoint_moto_url).stdout)
    assert report["ok"], report


def test_doctor_fails_on_a_server_that_ignores_conditions() -> None:
    with FakeS3() as fake:
        url = f"s3://bucket/p?endpoint_url={fake.endpoint}&addressing_style=path"
        result = cli("doctor", "--json", url=url, check=False)
        assert result.returncode == 1
        report = json.loads(result.stdout)
        failed = {c["name"]: c["detail"] for c in report["checks"] if c["status"] == "fail"}
        assert "ignores If-None-Match" in failed["second create refused (412)"]
        assert "ignores If-Match" in failed["stale ETag refused (412)"]
        assert fake.objects == {}  # the probe was removed
        assert "FAIL" in cli("doctor", url=url, check=False, columns=80).stdout


def test_errors_are_one_line_with_a_kind_and_an_exit_code(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()  # an empty stash (a missing one is its own not_found)
    url = f"local://{tmp_path / 'empty'}"
    missing = cli("show", "nope", url=url, check=False, process=True)  # as the shell sees it
    assert missing.returncode == 3
    assert missing.stderr.strip().count("\n") == 0 and "not_found" in missing.stderr
    assert "Traceback" not in missing.stderr and "[nope]" in missing.stderr
    debug = cli("--debug", "show", "nope", url=url, check=False)
    assert debug.returncode == 3 and "Traceback" in debug.stderr  # the same status
    after = cli("show", "nope", "--debug", url=url, check=False)  # --debug anywhere
    assert after.returncode == 3 and "Traceback" in after.stderr
    as_json = cli("show", "nope", "--json", url=url, check=False)
    assert as_json.returncode == 3
    assert json.loads(as_json.stdout)["error"] == {
        "kind": "not_found", "message": "no checkpoint with this id", "object": "nope",
        "hint": "check the id (stashpoint list, stashpoint runs list)",
    }  # fmt: skip
    bad_url = cli("runs", "list", url="ftp://nowhere", check=False)
    assert bad_url.returncode == 6 and "unknown scheme" in bad_url.stderr
    usage = cli("diff", "job-1", check=False)
    assert usage.returncode == 2
    assert cli("diff", "job-1", check=False, process=True).returncode == 2


def test_demo_kills_resumes_and_verifies(tmp_path: Path) -> None:
    result = cli("demo", "--items", "80", "--kill-after", "3", "--url", f"local://{tmp_path / 'd'}")
    assert "killed with SIGKILL" in result.stdout
    assert "every item processed exactly once: YES" in result.stdout
    assert "1 killed mid-batch and retried" in result.stdout


def test_a_demo_run_again_shows_its_own_run_and_the_commands_to_look_at_it(
    tmp_path: Path,
) -> None:
    url = f"local://{tmp_path / 'd'}"
    cli("demo", "--items", "40", "--kill-after", "2", "--url", url)
    again = cli("demo", "--items", "40", "--kill-after", "2", "--url", url).stdout
    run_id = again.split("run: ", 1)[1].split()[0]
    assert again.count("demo-batch") == 1  # this run's row alone, not every earlier demo's
    suggested = [
        line.split("#")[0].split()
        for line in again.splitlines()
        if line.strip().startswith("stashpoint ")
    ]
    assert [words[1:3] for words in suggested] == [["--url", url]] * 2
    assert [words[3:] for words in suggested] == [["runs", "show", run_id], ["history", run_id]]
    shown, history = (cli(*words[1:]).stdout for words in suggested)  # each works as printed
    assert run_id in shown and "failed" in shown
    assert history.splitlines()[0].startswith("revision")


def test_runs_stuck_lists_abandoned_attempts_and_takeover_ends_them(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        run_id = stash.runs.create_run("spot")
        gone = stash.runs.record_attempt(run_id, "item-1", 1, lease=0.01)
        stash.runs.record_attempt(run_id, "item-2", 1, lease=3600)  # alive for an hour
    stuck = json.loads(cli("runs", "stuck", "--clock-skew", "0", "--json", url=url).stdout)
    assert [row["attempt_id"] for row in stuck["items"]] == [gone]
    assert stuck["items"][0]["lease_expires_at"] is not None
    table = cli("runs", "stuck", "--clock-skew", "0", url=url).stdout
    assert "item-1" in table and "item-2" not in table
    taken = json.loads(cli("runs", "takeover", run_id, "--json", url=url).stdout)
    assert taken == {"run_id": run_id, "epoch": 1}
    assert (
        json.loads(cli("runs", "stuck", "--clock-skew", "0", "--json", url=url).stdout)["items"]
        == []
    )
    with stashpoint.open(url) as stash:
        state = stash.runs.load_run(run_id)
        assert state is not None
        assert {a.node_id: a.status.value for a in state.attempts} == {
            "item-1": "failed",
            "item-2": "failed",
        }


def test_runs_due_lists_waiting_runs_once_their_wake_time_has_come(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    soon = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
    with stashpoint.open(url) as stash:
        early = stash.runs.create_run("nightly")
        stash.runs.suspend_run(early, until=soon)
        late = stash.runs.create_run("nightly")
        stash.runs.suspend_run(late, until=soon + timedelta(hours=1))
    due = json.loads(cli("runs", "due", "--at", "2030-01-01T12:30:00", "--json", url=url).stdout)
    assert [row["run_id"] for row in due["items"]] == [early]
    assert due["items"][0]["wake_at"].startswith("2030-01-01T12:00:00")
    table = cli("runs", "due", "--at", "2030-01-01T13:00:00+00:00", url=url).stdout
    assert early in table and late in table
    assert json.loads(cli("runs", "due", "--json", url=url).stdout)["items"] == []  # not yet
    refused = cli("runs", "due", "--at", "noon", url=url, check=False)
    assert refused.returncode == 2 and "not an ISO time" in refused.stderr


def test_runs_resolve_settles_an_interrupted_at_most_once_step(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        stash.runs.create_run("durable", run_id="pay")
        attempt = stash.runs.record_attempt("pay", "charge", 1)  # a crash left it running
        assert attempt
    for args in (("--retry", "--result", "1"), ()):
        assert cli("runs", "resolve", "pay", "charge", *args, url=url, check=False).returncode == 2
    settled = json.loads(
        cli(
            "runs", "resolve", "pay", "charge", "--result", '{"charged": 5}', "--json", url=url
        ).stdout
    )
    assert settled == {"run_id": "pay", "step": "charge", "resolved": True, "how": "result"}
    with stashpoint.open(url) as stash:
        run = stash.runs.durable("pay")
        step = run.step(
            "charge", lambda: {"charged": 999}, semantics=stashpoint.Semantics.AT_MOST_ONCE
        )
        assert step == {"charged": 5}  # the operator's result; the function never ran
    again = cli("runs", "resolve", "pay", "charge", "--retry", url=url).stdout
    assert "needs nothing" in again
    # A typo'd run id is not found (exit 3), and no run is created for it.
    typo = cli("runs", "resolve", "pya", "charge", "--retry", url=url, check=False)
    assert typo.returncode == 3 and "not_found" in typo.stderr
    with stashpoint.open(url) as stash:
        assert stash.runs.load_run("pya") is None


def test_runs_show_says_when_a_waiting_run_is_due(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        run_id = stash.runs.create_run("nightly")
        stash.runs.suspend_run(run_id, until=datetime(2030, 1, 1, 12, 0, tzinfo=UTC))
    shown = cli("runs", "show", run_id, url=url).stdout
    assert "waiting" in shown and "due at 2030-01-01 12:00:00" in shown
    listed = cli("runs", "list", "--status", "waiting", url=url).stdout
    assert run_id[:8] in listed


def test_long_commands_show_progress_with_counts_on_a_terminal_only(url: str) -> None:
    with stashpoint.open(url) as stash:
        for _ in range(3):
            stash.runs.create_run("etl")
    on_terminal = cli("gc", "--dry-run", url=url, columns=80)
    assert re.search(r"logs .*\b3/3\b", on_terminal.stderr), on_terminal.stderr
    piped = cli("gc", "--dry-run", url=url)
    assert piped.stderr == ""  # a pipe or a CI log sees no bar
    as_json = cli("gc", "--dry-run", "--json", url=url, columns=80)
    assert as_json.stderr == "" and json.loads(as_json.stdout)["logs"] == 3
    counted = cli("reindex", url=url, columns=80).stderr
    assert re.search(r"runs .*\b3/\?", counted), counted
