"""A run with thousands of attempts on SeaweedFS + DynamoDB Local: runs as logs against
whole-envelope runs.

Both paths run in the same process on the same servers:

- baseline: what every transition did before runs were logs, a whole-envelope
  optimistic update of the run state (every attempt inside), through the store's one
  `CompareAndSwap.update` loop, up to `--baseline-attempts` (it is quadratic);
- log: `stash.runs` as users call it, `record_attempt` then `complete_attempt` per item.

Printed per transition, in windows of 64 attempts (128 transitions, so sealing is
included) near attempt 10 and near the last attempt: requests (by type), bytes sent in PUT
bodies, index items written, and p50 time; and the late/early ratio of each.

    .venv/bin/python -m bench.runs_bench [--attempts 10000] [--baseline-attempts 1000]
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from typing import Any

import stashpoint
from bench.common import real_servers
from stashpoint.envelope import Envelope
from stashpoint.runs.models import (
    RUN_KIND,
    RUN_SCHEMA_VERSION,
    AttemptRecord,
    AttemptStatus,
    RunState,
)
from stashpoint.steps import run_sync
from tests.meter import Meter

WINDOW = 64
"""Attempts per measured window (two transitions each)."""


class _Meter(Meter):
    """Counts one stash's requests, PUT bytes and index items, per window, with times."""

    def __init__(self, stash: stashpoint.Stash) -> None:
        super().__init__(stash)
        self.times: list[float] = []

    def reset(self) -> None:
        super().reset()
        self.times = []

    def window(self) -> dict[str, Any]:
        transitions = len(self.times)
        return {
            "requests": sum(self.requests.values()) / transitions,
            "by_type": {k: round(v / transitions, 3) for k, v in sorted(self.requests.items())},
            "put_bytes": self.put_bytes / transitions,
            "index_items": self.index_items / transitions,
            "p50_ms": statistics.median(self.times) * 1000,
        }


def _log_path(stash: stashpoint.Stash, attempts: int) -> dict[str, dict[str, Any]]:
    meter = _Meter(stash)
    run_id = stash.runs.create_run("bench")
    found: dict[str, dict[str, Any]] = {}
    for n in range(attempts):
        if n % WINDOW == 0:
            meter.reset()
        start = time.perf_counter()
        attempt_id = stash.runs.record_attempt(
            run_id, f"item-{n}", 1, {"item": n, "path": "s3://in"}
        )
        meter.times.append(time.perf_counter() - start)
        start = time.perf_counter()
        stash.runs.complete_attempt(attempt_id, {"rows": n, "out": f"s3://out/{n}"})
        meter.times.append(time.perf_counter() - start)
        if n % WINDOW == WINDOW - 1 and (n < WINDOW or n >= attempts - WINDOW):
            found["early" if n < WINDOW else "late"] = meter.window()
        if n % 1000 == 999:
            print(f"  run log: attempt {n + 1}", flush=True)
    start = time.perf_counter()
    state = stash.runs.load_run(run_id)
    assert state is not None
    assert len(state.attempts) == attempts
    found["load_run_s"] = {"seconds": time.perf_counter() - start}
    return found


def _baseline(stash: stashpoint.Stash, attempts: int) -> dict[str, dict[str, Any]]:
    """The whole-envelope path: each transition rewrites the run with all its attempts."""
    meter = _Meter(stash)
    cas = stash.checkpoints.steps  # an envelope's one update loop, as runs had before
    run_id = f"envelope-{uuid.uuid4().hex}"
    state = RunState(run_id=run_id, graph_name="bench")
    envelope = Envelope.initial(
        run_id, run_id, RUN_KIND, RUN_SCHEMA_VERSION, state.model_dump(mode="json")
    )
    run_sync(cas.compare_and_swap(envelope, None), stash.driver)
    found: dict[str, dict[str, Any]] = {}

    def transition(change: Any) -> None:
        start = time.perf_counter()

        def mutate(current: Envelope) -> Any:
            run = RunState.model_validate(current.payload)
            return change(run).model_dump(mode="json")

        run_sync(cas.update(run_id, mutate, known=None), stash.driver)
        meter.times.append(time.perf_counter() - start)

    for n in range(attempts):
        if n % WINDOW == 0:
            meter.reset()
        attempt_id = f"{run_id}~{n}"
        record = AttemptRecord(
            attempt_id=attempt_id, run_id=run_id, node_id=f"item-{n}", attempt=1,
            input={"item": n, "path": "s3://in"},
        )  # fmt: skip
        transition(lambda run, r=record: run.model_copy(update={"attempts": (*run.attempts, r)}))
        done = record.model_copy(
            update={
                "status": AttemptStatus.COMPLETED,
                "output": {"rows": n, "out": f"s3://out/{n}"},
            }
        )
        transition(lambda run, d=done: run.model_copy(update={"attempts": (*run.attempts[:-1], d)}))
        if n % WINDOW == WINDOW - 1 and (n < WINDOW or n >= attempts - WINDOW):
            found["early" if n < WINDOW else "late"] = meter.window()
        if n % 250 == 249:
            print(f"  whole envelope: attempt {n + 1}", flush=True)
    return found


def _line(name: str, early: dict[str, Any], late: dict[str, Any], attempts: int) -> None:
    print(
        f"{name} (windows of {WINDOW} attempts: 1-{WINDOW} and {attempts - WINDOW + 1}-{attempts})"
    )
    for key in ("requests", "put_bytes", "index_items", "p50_ms"):
        ratio = late[key] / early[key] if early[key] else float("nan")
        print(
            f"  {key:12} early {early[key]:10.2f}  late {late[key]:10.2f}  late/early {ratio:6.2f}"
        )
    print(f"  requests by type, late: {late['by_type']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--attempts", type=int, default=10_000)
    parser.add_argument("--baseline-attempts", type=int, default=1_000)
    args = parser.parse_args()
    with real_servers("runs") as (url, options):
        with stashpoint.open(url, **options) as stash:
            base = _baseline(stash, args.baseline_attempts)
        with stashpoint.open(url, **options) as stash:
            log = _log_path(stash, args.attempts)
    _line("whole envelope (baseline)", base["early"], base["late"], args.baseline_attempts)
    _line("run log", log["early"], log["late"], args.attempts)
    print(
        f"at the baseline's last window, bytes per transition: envelope "
        f"{base['late']['put_bytes']:.0f} vs log {log['early']['put_bytes']:.0f}-"
        f"{log['late']['put_bytes']:.0f}"
    )
    print(f"load_run of {args.attempts} attempts: {log['load_run_s']['seconds']:.2f} s")


if __name__ == "__main__":
    main()
