"""The command on agent checkpoints kept as logs: list, show, history, streamed export."""

from __future__ import annotations

import json
import shutil
import subprocess
import tracemalloc
from pathlib import Path

import pytest

import stashpoint
from examples import fake_model
from stashpoint.agent import AgentCheckpoint, AgentRunner, Message, TurnResult
from stashpoint.logs import SEGMENT_SPAN
from tests.cli.test_cli import cli


def _agent(url: str, checkpoint_id: str, turns: int) -> list[Message]:
    with stashpoint.open(url) as stash:
        runner = AgentRunner(AgentCheckpoint.existing(checkpoint_id, stash.checkpoints))
        cursor, state = runner.start(
            agent="a", model=fake_model.MODEL,
            transcript=[Message(role="user", content="hi", api_key="sk-secret")],
        )  # fmt: skip
        for _ in range(turns):
            state = runner.run_turn(
                cursor, state,
                lambda s, n: TurnResult(messages=[Message(role="assistant", content=f"r{n}")]),
            )  # fmt: skip
        return state.transcript


def test_list_show_and_history_read_an_agent_log(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    transcript = _agent(url, "agent-1", 3)
    listed = json.loads(cli("list", "--json", url=url).stdout)
    assert [(c["id"], c["kind"], c["revision"], c["where"]) for c in listed["items"]] == [
        ("agent-1", "stashpoint.agent", 6, "agent")
    ]
    shown = json.loads(cli("show", "agent-1", "--json", url=url).stdout)
    assert shown["revision"] == 6 and len(shown["payload"]["transcript"]) == len(transcript)
    assert shown["payload"]["transcript"][0]["api_key"] == "[redacted]"
    older = json.loads(cli("show", "agent-1", "--revision", "2", "--json", url=url).stdout)
    assert [m["content"] for m in older["payload"]["transcript"]] == ["hi", "r1"]
    rows = json.loads(cli("history", "agent-1", "--json", url=url).stdout)["items"]
    assert [r["revision"] for r in rows] == [6, 5, 4, 3, 2, 1, 0]
    assert [r["records"] for r in rows] == [1, 0, 1, 0, 1, 0, 1]
    first = json.loads(cli("history", "agent-1", "--limit", "2", "--json", url=url).stdout)
    assert [r["revision"] for r in first["items"]] == [6, 5] and first["cursor"] == "5"
    rest = json.loads(cli("history", "agent-1", "--cursor", "5", "--json", url=url).stdout)
    assert [r["revision"] for r in rest["items"]] == [4, 3, 2, 1, 0]


def test_export_streams_a_log_to_zstd_jsonl_one_line_per_version(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    transcript = _agent(url, "agent-1", SEGMENT_SPAN)  # past a sealed segment
    target = tmp_path / "out.jsonl.zst"
    result = cli("export", "--prefix", "agent-", "--out", str(target), "--redact", "api_key",
                 "--json", url=url)  # fmt: skip
    versions = 2 * SEGMENT_SPAN + 1
    assert json.loads(result.stdout)["records"] == versions
    if shutil.which("zstd") is None:
        pytest.skip("the zstd command-line tool is not installed")
    text = subprocess.run(["zstd", "-dc", str(target)], check=True, capture_output=True).stdout
    lines = [json.loads(line) for line in text.decode().splitlines()]
    assert [line["version"] for line in lines] == list(range(versions))
    assert {line["format"] for line in lines} == {"stashpoint.log-export/1"}
    records = [r for line in lines for r in line["records"]]
    assert [r["content"] for r in records] == [m.content for m in transcript]
    assert records[0]["api_key"] == "[redacted]"
    assert oct(target.stat().st_mode & 0o777) == "0o600"


def test_export_memory_stays_bounded_however_long_the_log(tmp_path: Path) -> None:
    """24 sealed segments of 8 KB records (12 MB): the export holds two at a time."""
    from stashpoint.cli.export import Sink, Tally, export_logs

    url = f"local://{tmp_path / 'stash'}?fsync=false"
    versions = 24 * SEGMENT_SPAN
    with stashpoint.open(url) as stash:
        head = None
        for v in range(versions):
            head = stash.logs.append("big", [f"{v}:" + "x" * 8000], after=head, state={"v": v})
        # What an export imports lazily (rich, the CLI's output) is not the log's memory:
        # a first, one-version export imports it before the measured one.
        stash.logs.append("warm", [0], after=None)
        export_logs(Sink(tmp_path / "warm.jsonl"), stash.logs, "logs", ["warm"], (), Tally(),
                    lambda n: None)  # fmt: skip
        sink = Sink(tmp_path / "big.jsonl")
        tally = Tally()
        tracemalloc.start()
        try:
            export_logs(sink, stash.logs, "logs", ["big"], (), tally, lambda n: None)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        sink.commit()
    assert tally.lines == versions and not tally.unreadable
    exported = (tmp_path / "big.jsonl").stat().st_size
    assert exported > 12_000_000
    assert peak < exported / 4, (peak, exported)  # a window at a time, not the whole log


def test_gc_seals_what_an_interrupted_append_left_unsealed(tmp_path: Path) -> None:
    from stashpoint.stores.objects import DeleteObject

    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        head = None
        for v in range(SEGMENT_SPAN + 3):
            head = stash.logs.append("unsealed", [v], after=head)
        # As if the process died between the append and its seal.
        stash.driver(DeleteObject(stash.logs.steps.keys.segment("unsealed", 0)))
    dry = json.loads(cli("gc", "--dry-run", "--json", url=url).stdout)
    assert dry["logs"] == 1 and dry["segments_sealed"] == 0
    done = json.loads(cli("gc", "--json", url=url).stdout)
    assert done["segments_sealed"] == 1
    with stashpoint.open(url) as stash:
        assert stash.logs.records("unsealed") == list(range(SEGMENT_SPAN + 3))
