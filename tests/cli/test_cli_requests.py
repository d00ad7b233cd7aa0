"""What a read command sends: counted in-process (typer's runner, the stash intercepted).

`list` reads no payload (a HEAD per envelope, a head read per log) and `show` reads its
object once; neither writes anything.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import stashpoint
from stashpoint import Envelope
from stashpoint.cli import options
from stashpoint.cli.app import app


@pytest.fixture
def counted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    url = f"local://{tmp_path / 'stash'}?fsync=false"
    with stashpoint.open(url) as stash:
        for n in range(5):
            env = Envelope.initial(f"job-{n}", None, "my.job", 1, {"n": 0, "big": "x" * 5000})
            stash.checkpoints.compare_and_swap(env, None)
            stash.checkpoints.update(f"job-{n}", lambda head: {**head.payload, "n": 1})
    sent: Counter[str] = Counter()
    opened = options.open_stash

    def open_counting(url_: str | None, *, existing: bool = False) -> Any:
        stash = opened(url, existing=existing)

        def hook(request: Any, proceed: Any) -> Any:
            sent[type(request).__name__] += 1
            return proceed()

        stash.intercept(hook)
        return stash

    for module in ("checkpoints", "runs", "threads", "admin"):
        monkeypatch.setattr(f"stashpoint.cli.{module}.open_stash", open_counting)
    return sent


def _run(*args: str) -> Any:
    result = CliRunner().invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_list_reads_no_payload_and_writes_nothing(counted: Counter[str]) -> None:
    listed = _run("list")
    assert [i["id"] for i in listed["items"]] == [f"job-{n}" for n in range(5)]
    assert counted["GetObject"] == 0 and counted["HeadObject"] == 5, counted
    assert not {k for k in counted if k.startswith(("Put", "Delete"))}, counted
    assert sum(counted.values()) <= 5 + 3 + 2, counted  # HEADs, three listings, log misses


def test_show_reads_its_checkpoint_once(counted: Counter[str]) -> None:
    shown = _run("show", "job-3")
    assert shown["revision"] == 1 and shown["payload"]["n"] == 1
    assert counted["GetObject"] <= 3, counted  # two log-head misses at most, then the head
    assert not {k for k in counted if k.startswith(("Put", "Delete"))}, counted
