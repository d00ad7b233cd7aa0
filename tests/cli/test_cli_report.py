"""`stashpoint runs show RUN --html FILE`, rendered in a real headless Chromium.

A run of 10,004 attempts (a 10,000-item map, a retried step, a takeover by a second
worker, a wait) is written as a page; Chromium (Debian's, driven by Selenium and
chromedriver) loads it from disk with the network refused, and the test reads what the
page drew. The screenshot is kept in `.servers/artifacts/` (or `$STASHPOINT_TEST_ARTIFACTS`).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint import Retry
from tests.cli.test_cli import cli
from tests.cli.test_cli_schemas import _valid

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("STASHPOINT_TEST_ARTIFACTS", ROOT / ".servers" / "artifacts"))
HOSTILE = "flaky </script><script>document.title='pwned'</script>"


def _big_run(url: str) -> None:
    tries = {"n": 0}

    def flaky() -> str:
        tries["n"] += 1
        if tries["n"] < 2:
            raise RuntimeError(HOSTILE)
        return "ok"

    def work(run: Any) -> None:
        run.step("fetch", flaky, retry=Retry(attempts=3, delay=0))
        run.map("resize", range(10_000), lambda i: i * 2, max_concurrency=64)

    with stashpoint.open(url) as stash:
        work(stash.runs.durable("big", graph_name="thumbnails"))
        second = stash.runs.durable("big", graph_name="thumbnails")  # takes the run over
        work(second)
        second.step("publish", lambda: "done")
        second.wait("cool-down", seconds=0)
        second.complete()


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("report")
    url = f"local://{root / 'stash'}?fsync=false"
    _big_run(url)
    target = root / "big.html"
    said = _valid(
        "runs-show", cli("runs", "show", "big", "--html", str(target), "--json", url=url).stdout
    )
    assert said == {"file": str(target), "attempts": 10_004}
    return target


def test_the_page_is_self_contained_private_and_carries_data_not_markup(report: Path) -> None:
    page = report.read_text()
    assert stat.S_IMODE(report.stat().st_mode) == 0o600
    assert "default-src 'none'" in page  # the browser may fetch nothing
    assert "http://" not in page and "https://" not in page and " src=" not in page
    assert page.count("<script") == 2  # the data and the page's own script: no injected one
    assert "</script><script>document.title" not in page  # escaped inside the data


def _browser() -> Any:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.skip(
            "Debian's chromium and chromium-driver are not installed (make test installs them as root)"
        )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run", "--window-size=1400,1000",
                 "--proxy-server=127.0.0.1:9", "--disable-quic"):  # fmt: skip
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver), options=options)


def _opened(browser: Any, page: Path) -> None:
    """Load `page` and wait (bounded) until its script says it has drawn everything."""
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(page.as_uri())
    WebDriverWait(browser, 60).until(
        lambda b: b.execute_script("return document.body.dataset.ready") == "yes"
    )


def test_chromium_draws_every_attempt_and_the_table_filters(report: Path) -> None:
    from selenium.webdriver.common.by import By

    browser = _browser()
    try:
        _opened(browser, report)
        canvas = browser.find_element(By.ID, "timeline")
        assert canvas.get_attribute("data-bars") == "10004"
        assert int(canvas.get_attribute("data-rows")) >= 64  # the map's items, packed
        assert browser.title.startswith("run big")  # not "pwned": the error stayed text
        shown = browser.find_element(By.ID, "shown").text
        assert shown == "showing 500 of 10004 matching (10004 attempts)"
        errors = [c.text for c in browser.find_elements(By.CSS_SELECTOR, "#rows td:last-child")]
        assert f"RuntimeError: {HOSTILE}" in errors  # shown as the text it is
        browser.find_element(By.ID, "filter").send_keys("failed")
        assert browser.find_element(By.ID, "shown").text.startswith("showing 1 of 1 ")
        lanes = browser.find_element(By.ID, "lanes").text
        assert lanes.startswith(
            "4 step lane(s)"
        )  # fetch, resize (10,000 items), publish, cool-down
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        assert browser.save_screenshot(str(ARTIFACTS / "run-report.png"))
        severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        assert severe == []  # no script error, no refused fetch
    finally:
        browser.quit()


def test_an_agents_page_carries_its_transcript_with_tool_calls_redacted(tmp_path: Path) -> None:
    from examples import fake_model
    from stashpoint.agent import AgentCheckpoint, AgentRunner, Message

    url = f"local://{tmp_path / 'stash'}?fsync=false"
    with stashpoint.open(url) as stash:
        run_id = stash.runs.create_run("agent")
        runner = AgentRunner(
            AgentCheckpoint.existing("agent-1", stash.checkpoints), runs=stash.runs
        )
        transcript = [*fake_model.opening(), Message(role="user", content="hi", api_key="sk-1")]
        runner.run(fake_model.turn, agent="a", model=fake_model.MODEL, transcript=transcript,
                   run_id=run_id)  # fmt: skip
    target = tmp_path / "agent.html"
    cli("runs", "show", run_id, "--html", str(target), "--agent", "agent-1", url=url)
    page = target.read_text()
    data = page.split('<script type="application/json" id="data">', 1)[1].split("</script>", 1)[0]
    import json

    shown = json.loads(data)
    assert [a["node"] for a in shown["attempts"]] == [f"turn-{n}" for n in range(1, 5)]
    messages = shown["transcript"]
    assert any(m.get("tool_calls") for m in messages)  # the tool calls are on the page
    assert any(m.get("tool_call_id") for m in messages)  # and their results
    assert [m.get("api_key") for m in messages if m["role"] == "user"][-1] == "[redacted]"
    assert "sk-1" not in page
