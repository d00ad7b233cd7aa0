"""The command line with hostile or careless input: stored markup, secrets, bad options."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import stashpoint
from stashpoint import Envelope
from stashpoint.stores.objects import PutObject
from tests.cli.test_cli import cli


def _stash(tmp_path: Path) -> str:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        secret = {"user": "ana", "OPENAI_API_KEY": "sk-live-123", "nested": {"x-auth-token": "t"}}
        head = Envelope.initial("job", None, "k", 1, secret)
        stash.checkpoints.compare_and_swap(head, None)
        stash.checkpoints.compare_and_swap(head.next({**secret, "user": "bo"}), 0)
        run_id = stash.runs.create_run("[/bold]graph", run_id="r1")
        attempt = stash.runs.record_attempt(run_id, "[red]node", 1, {"password": "hunter2"})
        stash.runs.fail_attempt(attempt, "boom [/] [/bold] [link=x]")
        stash.runs.fail_run(run_id, "failed [/red] badly")
    return url


def test_runs_show_prints_stored_markup_as_text(tmp_path: Path) -> None:
    url = _stash(tmp_path)
    shown = cli("runs", "show", "r1", url=url)
    assert "[/bold]graph" in shown.stdout and "boom [/] [/bold]" in shown.stdout
    as_json = json.loads(cli("runs", "show", "r1", "--json", url=url).stdout)
    assert as_json["run"]["attempts"][0]["input"] == {"password": "[redacted]"}


def test_secrets_are_hidden_by_default_and_shown_on_request(tmp_path: Path) -> None:
    url = _stash(tmp_path)
    shown = json.loads(cli("show", "job", "--json", url=url).stdout)["payload"]
    assert (
        shown["OPENAI_API_KEY"] == "[redacted]" and shown["nested"]["x-auth-token"] == "[redacted]"
    )
    assert shown["user"] == "bo"
    extra = json.loads(cli("show", "job", "--json", "--redact", "user", url=url).stdout)
    assert extra["payload"]["user"] == "[redacted]"
    everything = json.loads(cli("show", "job", "--json", "--no-redact", url=url).stdout)
    assert everything["payload"]["OPENAI_API_KEY"] == "sk-live-123"
    diff = cli("diff", "job", "0", "1", url=url).stdout
    assert "sk-live-123" not in diff and "bo" in diff


def test_export_is_private_atomic_and_never_truncates_on_no_match(tmp_path: Path) -> None:
    url = _stash(tmp_path)
    target = tmp_path / "dump.jsonl"
    cli("export", "--prefix", "job", "--out", str(target), "--redact", "OPENAI_API_KEY", url=url)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    records = [json.loads(line) for line in target.read_text().splitlines()]
    assert records[0]["payload"]["OPENAI_API_KEY"] == "[redacted]"
    before = target.read_bytes()
    nothing = cli("export", "--prefix", "zzz", "--out", str(target), url=url, check=False)
    assert nothing.returncode != 0 and target.read_bytes() == before
    assert not list(tmp_path.glob(".dump.jsonl.*"))  # no partial file left behind


def test_export_and_list_skip_and_report_an_unreadable_head(tmp_path: Path) -> None:
    url = _stash(tmp_path)
    with stashpoint.open(url) as stash:
        stash._transport.execute(PutObject("checkpoints/broken", b"\x28\xb5\x2f\xfd junk", None))
    listed = cli("list", "--json", url=url)
    body = json.loads(listed.stdout)
    assert [c["id"] for c in body["checkpoints"]] == ["job"]
    assert [u["id"] for u in body["unreadable"]] == ["broken"]
    target = tmp_path / "all.jsonl"
    exported = cli("export", "--prefix", "", "--out", str(target), url=url, check=False)
    assert exported.returncode == 1 and "broken" in exported.stderr
    assert len(target.read_text().splitlines()) == 1  # job's head: everything readable


def test_limits_count_what_is_shown(tmp_path: Path) -> None:
    url = _stash(tmp_path)
    rows = json.loads(cli("history", "job", "--limit", "1", "--json", url=url).stdout)
    assert [r["revision"] for r in rows] == [1]
    assert cli("list", "--limit", "-1", url=url, check=False).returncode == 2
    assert cli("list", "--limit", "0", url=url, check=False).returncode == 2


def test_errors_with_json_are_json_and_global_options_work(tmp_path: Path) -> None:
    url = _stash(tmp_path)
    missing = cli("show", "nope", "--json", url=url, check=False)
    assert missing.returncode == 3
    assert json.loads(missing.stdout)["error"]["kind"] == "not_found"
    before = cli("--url", url, "show", "job", "--json")  # --url before the subcommand
    assert json.loads(before.stdout)["revision"] == 1
    assert cli("--version").stdout.strip() == f"stashpoint {stashpoint.__version__}"
