"""Tables fit the terminal, pipes get TSV, JSON has one shape (`stashpoint.cli.output`)."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from stashpoint.cli.output import Cell, Column, Output, rfc3339, to_json

RUN_ID = "01a233ba-daa3-7000-9f97-5b248d04afd5"
COLUMNS = [
    Column("run"), Column("status"), Column("graph", 1, wrap=True),
    Column("attempts", 2, justify="right"), Column("updated", 3),
    Column("failed", 4, justify="right"), Column("running", 5, justify="right"),
    Column("created", 6),
]  # fmt: skip
ROW = [RUN_ID, Cell("interrupted", "yellow"), "nightly-etl-with-a-long-name", "12",
       "2026-12-01 22:21:50", "3", "1", "2026-12-01 22:20:00"]  # fmt: skip


def _terminal(monkeypatch: pytest.MonkeyPatch, width: int) -> None:
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("COLUMNS", str(width))
    monkeypatch.setenv("NO_COLOR", "1")


def _shown(capsys: pytest.CaptureFixture[str]) -> list[str]:
    return re.sub(r"\x1b\[[0-9;]*m", "", capsys.readouterr().out).splitlines()


def test_an_80_column_terminal_shows_every_column_whole(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _terminal(monkeypatch, 80)
    Output().table("runs", COLUMNS, [ROW, ROW], stash="local:///tmp/s")
    lines = _shown(capsys)
    assert all(len(line) <= 80 for line in lines), lines
    body = "\n".join(lines)
    assert body.count(RUN_ID) == 2 and "interrupted" in body and "…" not in body  # nothing cut
    header = lines[1].split()
    assert header[:4] == ["run", "status", "graph", "attempts"]
    # The columns that did not fit are on each row's second line, whole: "name value".
    for pair in (
        "updated 2026-12-01 22:21:50",
        "failed 3",
        "running 1",
        "created 2026-12-01 22:20:00",
    ):
        assert body.count(pair) == 2, (pair, body)
    assert lines[-2] == "stash local:///tmp/s"  # the stash it read
    assert (
        lines[-1] == "second line of each row: updated, failed, running, created (--wide: one line)"
    )


def test_wide_shows_every_column_and_a_wide_terminal_needs_no_wide(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    _terminal(monkeypatch, 80)
    Output(wide=True).table("runs", COLUMNS, [ROW], stash="s")
    assert _shown(capsys)[1].split() == [c.header for c in COLUMNS]
    _terminal(monkeypatch, 200)
    Output().table("runs", COLUMNS, [ROW], stash="s")
    lines = _shown(capsys)
    assert lines[1].split() == [c.header for c in COLUMNS] and lines[-1] == "stash s"


def test_a_pipe_gets_tsv_of_every_column_with_controls_escaped(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    hostile = [f"{RUN_ID}\t\x1b]0;pwned\x07", *ROW[1:]]
    Output().table("runs", COLUMNS, [ROW, hostile], stash="s", cursor="next-page")
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert lines[0].split("\t") == [c.header for c in COLUMNS]
    assert [len(line.split("\t")) for line in lines] == [8, 8, 8]
    assert lines[2].split("\t")[0] == f"{RUN_ID}\\t\\x1b]0;pwned\\x07"
    assert "more: --cursor next-page" in captured.err and "next-page" not in captured.out


def test_json_times_are_rfc3339_z_and_pages_have_one_shape(
    capsys: pytest.CaptureFixture[str],
) -> None:
    moment = datetime(2026, 12, 1, 22, 21, 50, 123456, tzinfo=UTC)
    assert rfc3339(moment) == "2026-12-01T22:21:50.123456Z"
    assert rfc3339(moment.replace(microsecond=0)) == "2026-12-01T22:21:50Z"
    other = moment.astimezone(timezone(timedelta(hours=2)))
    assert json.loads(to_json({"at": [other]})) == {"at": ["2026-12-01T22:21:50.123456Z"]}
    Output(as_json=True).page([{"at": moment}], None, unreadable=[])
    assert json.loads(capsys.readouterr().out) == {
        "items": [{"at": "2026-12-01T22:21:50.123456Z"}], "cursor": None, "unreadable": [],
    }  # fmt: skip
