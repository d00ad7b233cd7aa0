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
        stash.driver(PutObject("checkpoints/broken", b"\x28\xb5\x2f\xfd junk", None))
    listed = cli("list", "--json", url=url)
    body = json.loads(listed.stdout)
    assert [c["id"] for c in body["items"]] == ["job"]
    assert [u["id"] for u in body["unreadable"]] == ["broken"]
    target = tmp_path / "all.jsonl"
    exported = cli("export", "--prefix", "", "--out", str(target), url=url, check=False)
    assert exported.returncode == 1 and "broken" in exported.stderr
    assert len(target.read_text().splitlines()) == 1  # job's head: everything readable


def test_limits_count_what_is_shown(tmp_path: Path) -> None:
    url = _stash(tmp_path)
    rows = json.loads(cli("history", "job", "--limit", "1", "--json", url=url).stdout)["items"]
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


TERMINAL_ATTACKS = {
    "title": "\x1b]0;pwned\x07",
    "hyperlink": "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\",
    "clear": "\x1b[2J\x1b[H",
    "bidi": "admin\u202egnp.exe",
    "c1": "\x9b31m",
}


def test_stored_control_characters_never_reach_the_terminal(tmp_path: Path) -> None:
    """Issue 23 #16: an OSC title, a hyperlink or a clear-screen stored in a node id, a
    graph name or a thread id reached the terminal raw from `runs show`, `runs list` and
    `threads list`."""
    from langgraph.checkpoint.base import empty_checkpoint

    from stashpoint.langgraph import StashpointSaver

    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        run_id = stash.runs.create_run("graph" + TERMINAL_ATTACKS["title"], run_id="r1")
        for name, attack in TERMINAL_ATTACKS.items():
            attempt = stash.runs.record_attempt(run_id, f"{name}{attack}", 1)
            stash.runs.fail_attempt(attempt, f"error {attack}")
        saver = StashpointSaver(stash)
        for attack in TERMINAL_ATTACKS.values():
            saver.put({"configurable": {"thread_id": f"t{attack}", "checkpoint_ns": ""}},
                      empty_checkpoint(), {"source": "input", "step": -1}, {})  # fmt: skip
    for command in (("runs", "show", "r1"), ("runs", "list"), ("threads", "list")):
        out = cli(*command, url=url)
        for stream in (out.stdout, out.stderr):
            assert "\x1b" not in stream and "\x9b" not in stream and "\u202e" not in stream, command
            assert "\x07" not in stream
    shown = cli("runs", "show", "r1", url=url).stdout
    assert "\\x1b]0;pwned\\x07" in shown  # shown as text, escaped


def test_redaction_hides_secrets_in_values_and_keeps_token_counts(tmp_path: Path) -> None:
    """Issue 23 #22 and issue 25 #3: key heuristics missed secrets in values and keys
    such as `passphrase`, `dsn`, `jwt`, and hid `input_tokens`."""
    url = f"local://{tmp_path / 'stash'}"
    payload = {
        "usage": {"input_tokens": 1200, "output_tokens": 34, "max_tokens": 4096},
        "passphrase": "correct horse",
        "dsn": "postgres://app:s3cr3t@db/app",
        "jwt": "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
        "env": "AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG and HOME=/root",
        "header": "Authorization: Bearer abcdefghijklmnop",
        "note": "mirror at https://bob:hunter2@git.example.com/repo.git",
    }
    with stashpoint.open(url) as stash:
        stash.checkpoints.compare_and_swap(Envelope.initial("leaky", None, "k", 1, payload), None)
    shown = json.loads(cli("show", "leaky", "--json", url=url).stdout)["payload"]
    text = json.dumps(shown)
    for secret in (
        "correct horse",
        "s3cr3t",
        "eyJhbGci",
        "wJalrXUtnFEMI",
        "abcdefghijklmnop",
        "hunter2",
    ):
        assert secret not in text, secret
    assert shown["usage"] == payload["usage"]  # counts of tokens are not secrets
    assert "HOME=/root" in shown["env"] and "bob:" in shown["note"]


def test_a_damaged_sqlite_index_says_reindex_and_reindex_rebuilds_it(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        run_id = stash.runs.create_run("etl")
    index = tmp_path / "stash" / "index.sqlite3"
    index.write_bytes(b"this is not a database" * 200)
    broken = cli("runs", "list", url=url, check=False)
    assert broken.returncode == 1 and "invalid_payload" in broken.stderr
    assert "stashpoint reindex" in broken.stderr and "endpoint" not in broken.stderr
    rebuilt = json.loads(cli("reindex", "--json", url=url).stdout)
    assert rebuilt["runs_indexed"] == 1
    kept = Path(rebuilt["damaged_index_kept_as"])
    assert kept.read_bytes().startswith(b"this is not a database")  # kept, not deleted
    listed = json.loads(cli("runs", "list", "--json", url=url).stdout)
    assert [r["run_id"] for r in listed["items"]] == [run_id]


def test_a_bad_id_is_an_invalid_id_whatever_it_names(tmp_path: Path) -> None:
    url = _stash(tmp_path)
    for command in (("show", "bad/id"), ("history", "bad/id")):
        result = cli(*command, url=url, check=False)
        assert "invalid id 'bad/id'" in result.stderr and "log" not in result.stderr
