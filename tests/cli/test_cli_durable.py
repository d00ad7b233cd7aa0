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


def test_history_html_draws_the_operations_without_payloads(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        functions = DurableFunctions(stash)
        functions.register("approval", _approval)
        arn = functions.start("approval", {"secret": "s3cr3t-input"}, name="order-1")
        functions.run_due()
        (callback,) = functions.callbacks(arn)
        functions.send_callback_success(callback["CallbackId"], "s3cr3t-answer</script>")
        functions.run_due()
    page = tmp_path / "execution.html"
    said = _valid("durable-history", cli("durable", "history", arn, "--html", str(page),
                                         "--json", url=url).stdout)  # fmt: skip
    assert said["file"] == str(page) and said["operations"] >= 2
    text = page.read_text()
    assert "s3cr3t" not in text  # inputs and results are not on the page
    start = text.index('<script type="application/json" id="data">') + 42
    data = json.loads(text[start : text.index("</script>", start)])
    assert data["run"]["status"] == "completed" and data["run"]["graph"] == "approval"
    lanes = {a["lane"] for a in data["attempts"]}
    assert any("approve" in lane for lane in lanes)
    assert all(a["status"] == "completed" for a in data["attempts"])
    assert (page.stat().st_mode & 0o777) == 0o600


TRIES: list[int] = []


def _flaky(_: Any) -> int:
    TRIES.append(1)
    if len(TRIES) < 2:
        raise RuntimeError("the first try fails")
    return len(TRIES)


@durable_execution
def _retried(event: Any, ctx: DurableContext) -> Any:
    from aws_durable_execution_sdk_python.config import Duration, StepConfig
    from aws_durable_execution_sdk_python.retries import RetryStrategyConfig, create_retry_strategy

    retry = create_retry_strategy(
        RetryStrategyConfig(max_attempts=3, initial_delay=Duration.from_seconds(1))
    )
    ctx.step(lambda _: 1, name="count")
    ctx.wait(Duration.from_seconds(5), name="cool-down")
    return ctx.step(_flaky, name="flaky", config=StepConfig(retry_strategy=retry))


def test_chromium_draws_an_executions_operations(tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    from stashpoint.clock import FakeClock
    from tests.cli.test_cli_report import _browser, _opened

    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url, clock=FakeClock()) as stash:
        functions = DurableFunctions(stash)
        functions.register("retried", _retried)
        arn = functions.start("retried", None, name="run-1")
        TRIES.clear()
        assert functions.run(arn).state.status == "SUCCEEDED"
        operations = len(functions.service.read(arn).operations)
        assert operations == 4  # the execution itself, two steps and the wait
    page = tmp_path / "execution.html"
    cli("durable", "history", arn, "--html", str(page), url=url)
    browser = _browser()
    try:
        _opened(browser, page)
        canvas = browser.find_element(By.ID, "timeline")
        assert canvas.get_attribute("data-bars") == str(operations)
        rows = [r.text for r in browser.find_elements(By.CSS_SELECTOR, "#rows tr")]
        assert any("flaky" in r and " 2 " in f" {r} " for r in rows), rows  # its second try
        assert browser.title.startswith("durable execution arn:stashpoint:lambda-durable:retried")
        severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert severe == []
    finally:
        browser.quit()


def test_export_writes_executions_whole_with_their_payloads(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        functions = DurableFunctions(stash)
        functions.register("approval", _approval)
        arn = functions.start("approval", {"order": 7}, name="order-7")
        functions.run_due()
        (callback,) = functions.callbacks(arn)
        functions.send_callback_success(callback["CallbackId"], {"by": "ana"})
        functions.run_due()
        history = functions.history(arn)
    out = tmp_path / "executions.jsonl.zst"
    said = _valid("durable-export", cli(
        "durable", "export", arn, "--out", str(out), "--json", url=url
    ).stdout)  # fmt: skip
    assert said == {"file": str(out), "records": 1, "unreadable": []}
    assert out.stat().st_mode & 0o777 == 0o600
    import zstandard

    (line,) = zstandard.ZstdDecompressor().decompress(out.read_bytes(),
                                                      max_output_size=1 << 24).splitlines()  # fmt: skip
    document = json.loads(line)
    assert document["format"] == "stashpoint.durable-execution-export/1"
    assert document["status"] == "SUCCEEDED" and json.loads(document["input"]) == {"order": 7}
    assert json.loads(document["result"]) == {"approved": '{"by": "ana"}'}  # as the SDK gives it
    assert [e["EventType"] for e in document["events"]] == [e["EventType"] for e in history]
    callback_ops = [o for o in document["operations"] if o["Type"] == "CALLBACK"]
    assert json.loads(callback_ops[0]["CallbackDetails"]["Result"]) == {"by": "ana"}

    # An unknown ARN is a typed error and leaves an existing file as it was.
    before = out.read_bytes()
    bad = cli("durable", "export", arn + "x", "--out", str(out), url=url, check=False)
    assert bad.returncode != 0 and out.read_bytes() == before

    # `stashpoint export --prefix` takes the executions' logs too, version by version.
    logs = tmp_path / "logs.jsonl"
    cli("export", "--prefix", "approval:", "--out", str(logs), url=url)
    lines = [json.loads(x) for x in logs.read_text().splitlines()]
    assert {x["namespace"] for x in lines} == {"durable-executions"}
    assert [x["version"] for x in lines] == list(range(len(lines)))
