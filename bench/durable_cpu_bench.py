"""A durable step's CPU early and late in a long run, and a run transition's CPU, on
`memory://` (issue 24 #7 and its transition figure).

One run of `--steps` small steps; the CPU time (`time.process_time`) per step over steps
100-1,100 and over the last 1,000, and the late/early ratio (flat is 1.0). Then 1,000 run
transitions (500 `record_attempt` + `complete_attempt` pairs on one run, after 100 to warm
up): CPU per transition. With `--against PATH` the same is measured, in the same run, for
the source tree at PATH (a worktree of the code before), each in a fresh process.

    .venv/bin/python -m bench.durable_cpu_bench [--steps 6000] [--against /path/to/old/src]
"""

from __future__ import annotations

import argparse

from bench.common import measure_in_fresh_process

MEASURE = """
import json, sys, time
import stashpoint
steps = int(sys.argv[1])
cpu = []
with stashpoint.open("memory://") as stash:
    run = stash.runs.durable("bench")
    for n in range(steps):
        start = time.process_time()
        run.step(f"s{n}", lambda n=n: {"n": n, "square": n * n})
        cpu.append(time.process_time() - start)
early = cpu[100:1100]
late = cpu[-1000:]
with stashpoint.open("memory://") as stash:
    run_id = stash.runs.create_run("bench")
    def pairs(count):
        for n in range(count):
            attempt = stash.runs.record_attempt(run_id, f"n{n}", 1, {"n": n})
            stash.runs.complete_attempt(attempt, {"rows": n})
    pairs(50)
    start = time.process_time()
    pairs(500)
    transition = (time.process_time() - start) / 1000
print(json.dumps({
    "early_ms": 1000 * sum(early) / len(early), "late_ms": 1000 * sum(late) / len(late),
    "transition_ms": 1000 * transition,
}))
"""


def _measure(steps: int, source: str | None) -> dict[str, float]:
    result: dict[str, float] = measure_in_fresh_process(MEASURE, str(steps), source=source)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=6000)
    parser.add_argument("--against", default=None, help="src folder of the code before")
    args = parser.parse_args()
    rows = [("this tree", _measure(args.steps, None))]
    if args.against:
        rows.append((args.against, _measure(args.steps, args.against)))
    print(f"{'code':<32} {'early ms/step':>14} {'late ms/step':>13} {'late/early':>11} "
          f"{'transition ms':>14}")  # fmt: skip
    for name, row in rows:
        ratio = row["late_ms"] / row["early_ms"]
        print(f"{name:<32} {row['early_ms']:>14.2f} {row['late_ms']:>13.2f} {ratio:>11.2f} "
              f"{row['transition_ms']:>14.3f}")  # fmt: skip
    if len(rows) == 2:
        print(f"transition CPU, this tree / before: "
              f"{rows[0][1]['transition_ms'] / rows[1][1]['transition_ms']:.2f}")  # fmt: skip


if __name__ == "__main__":
    main()
