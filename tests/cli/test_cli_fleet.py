"""`stashpoint runs show` of a fleet map: its progress, and `--watch` following it."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import stashpoint
from tests.cli.test_cli import cli


def test_watch_follows_a_running_map_to_its_end(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        fleet = stash.runs.fleet("slow-map")
        fleet.start(range(40), batch_size=4)
        worker = threading.Thread(target=fleet.work, args=(lambda i: time.sleep(0.15) or i,))
        worker.start()
        try:
            watched = cli("runs", "show", "slow-map", "--watch", url=url)
        finally:
            worker.join(timeout=60)
    lines = [line for line in watched.stdout.splitlines() if line.startswith("fleet map")]
    assert lines[0].startswith("fleet map running:")  # one line a poll, off a terminal
    assert lines[-1].startswith("fleet map completed: 40 of 40 items done (40 ok, 0 failed)")
    on_terminal = cli("runs", "show", "slow-map", "--watch", url=url, columns=120)
    assert "40/40" in on_terminal.stdout and "completed" in on_terminal.stdout
