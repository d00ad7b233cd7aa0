"""The durable function the worker-process tests run, and the worker's main.

`pipeline` mixes at-most-once steps (each marks a file when its body starts: a second
mark means it ran twice), at-least-once steps, a wait and, when asked, a callback.
`python -m tests.durable_functions.worker_app URL WORKER_ID LEASE_S` works until every
execution has ended.
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.config import (
    CallbackConfig,
    Duration,
    StepConfig,
    StepSemantics,
)
from aws_durable_execution_sdk_python.exceptions import StepError
from aws_durable_execution_sdk_python.retries import RetryPresets

import stashpoint
from stashpoint.durable_functions import DurableFunctions

AT_MOST_ONCE = StepConfig(
    step_semantics=StepSemantics.AT_MOST_ONCE_PER_RETRY, retry_strategy=RetryPresets.none()
)


def _held_if_armed(folder: Path, step: str) -> None:
    """Wait inside the step while the test holds this round (it kills or freezes a holder).

    The test writes a round number to `armed`; every worker that enters an at-most-once
    step says so (`holding-ROUND-PID-STEP`) and waits while that round is armed, so the
    test's kill lands inside an invocation however slow the machine is. The test moves on
    by arming the next round (or removing `armed`): the holders it spared go on.
    """

    def armed() -> str | None:
        try:
            return (folder / "armed").read_text().strip() or None
        except FileNotFoundError:
            return None

    round_ = armed()
    if round_ is None:
        return
    (folder / f"holding-{round_}-{os.getpid()}-{step}").touch()
    deadline = time.monotonic() + 300  # bounded: a test that died leaves no worker stuck
    while armed() == round_ and time.monotonic() < deadline:
        time.sleep(0.01)


def _marked(marks: str, execution: str, index: int) -> Any:
    def body(step: Any) -> int:
        with Path(marks, f"{execution}-{index}").open("a") as out:
            out.write(f"{os.getpid()}\n")
        if os.environ.get("STASHPOINT_TEST_HOLDS"):
            _held_if_armed(Path(os.environ["STASHPOINT_TEST_HOLDS"]), f"{execution}-{index}")
        time.sleep(float(os.environ.get("STASHPOINT_TEST_STEP_S", "0.02")))
        return index * 10

    return body


@durable_execution
def pipeline(event: Any, ctx: DurableContext) -> Any:
    out: list[Any] = []
    for i in range(event["steps"]):
        try:
            out.append(
                ctx.step(
                    _marked(event["marks"], event["id"], i), name=f"amo{i}", config=AT_MOST_ONCE
                )
            )
        except StepError:
            out.append("interrupted")  # it started before a death: never run twice
        out.append(ctx.step(lambda _, i=i: i, name=f"alo{i}"))
        if i == 1:
            ctx.wait(Duration.from_seconds(1))
    if event.get("callback"):
        callback = ctx.create_callback(
            name="approval", config=CallbackConfig(timeout=Duration.from_seconds(600))
        )
        out.append(callback.result())
    return out


def functions(stash: stashpoint.Stash, worker: str, lease_s: float) -> DurableFunctions:
    """The runner the tests and the workers use."""
    runner = DurableFunctions(stash, worker_id=worker, lease=timedelta(seconds=lease_s))
    runner.register("pipeline", pipeline)
    return runner


def main() -> None:
    url, worker, lease_s = sys.argv[1], sys.argv[2], float(sys.argv[3])
    with stashpoint.open(url) as stash:
        runner = functions(stash, worker, lease_s)
        print("started", flush=True)
        while runner.pending():
            try:
                if not runner.run_due():
                    time.sleep(0.05)
            except stashpoint.StashpointError as exc:  # a worker told "unknown" goes on
                print(f"error {exc.kind.value}", flush=True)
    print("done", flush=True)


if __name__ == "__main__":
    main()
