"""`stashpoint durable ...`: list, history, answer a callback and stop, as a user would.

A handler waits for a callback; the commands list it, show its history, answer it from
the shell (the runner then completes it) and stop another; every `--json` output validates
against its schema, and a bad answer is a usage error that changes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("aws_durable_execution_sdk_python")

from aws_durable_execution_sdk_python import DurableContext, durable_execution

import stashpoint
from stashpoint.durable_functions import DurableFunctions
from tests.cli.test_cli import cli
from tests.cli.test_cli_schemas import _valid


@durable_execution
def _approval(event: Any, ctx: DurableContext) -> Any:
    answer = ctx.wait_for_callback(lambda callback_id, _: None, name="approve")
    return {"approved": answer}


def test_list_history_callback_and_stop(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        functions = DurableFunctions(stash)
        functions.register("approval", _approval)
        answered = functions.start("approval", {"order": 1}, name="order-1")
        stopped = functions.start("approval", {"order": 2}, name="order-2")
        functions.run_due()
        (callback,) = functions.callbacks(answered)

    listed = _valid("durable-list", cli("durable", "list", "--json", url=url).stdout)
    assert {(i["name"], i["status"]) for i in listed["items"]} == {
        ("order-1", "RUNNING"), ("order-2", "RUNNING"),
    }  # fmt: skip
    table = cli("durable", "list", url=url).stdout
    assert "order-1" in table and "RUNNING" in table

    bad = cli("durable", "callback", callback["CallbackId"], "--heartbeat", "--success", "x",
              url=url, check=False)  # fmt: skip
    assert bad.returncode != 0 and "exactly one" in bad.stderr
    unknown = cli("durable", "callback", "not-a-callback", "--heartbeat", url=url, check=False)
    assert unknown.returncode != 0

    said = _valid("durable-callback", cli(
        "durable", "callback", callback["CallbackId"], "--success", "yes", "--json", url=url
    ).stdout)  # fmt: skip
    assert said == {"callback_id": callback["CallbackId"], "outcome": "success"}
    _valid("durable-stop", cli("durable", "stop", stopped, "--json", url=url).stdout)

    with stashpoint.open(url) as stash:
        functions = DurableFunctions(stash)
        functions.register("approval", _approval)
        functions.run_due()
        assert functions.describe(answered)["Status"] == "SUCCEEDED"
        assert json.loads(functions.describe(answered)["Result"]) == {"approved": "yes"}

    history = _valid("durable-history", cli("durable", "history", answered, "--json", url=url)
                     .stdout)  # fmt: skip
    types = [e["type"] for e in history["events"]]
    assert history["status"] == "SUCCEEDED"
    assert types[0] == "ExecutionStarted" and types[-1] == "ExecutionSucceeded"
    assert "CallbackSucceeded" in types
    pending = _valid("durable-list", cli("durable", "list", "--pending", "--json", url=url).stdout)
    assert pending["items"] == []
    ended = cli("durable", "history", stopped, url=url).stdout
    assert "ExecutionStopped" in ended
