"""The index at fleet scale, simulated: write units per partition key per second.

Drives the real index request builder (`RunIndex.items`, the items each transition writes,
fed by the real pure transitions) with millions of transitions across namespaces, graphs
and statuses, at a fixed rate (1,000 transitions/s by default), and counts DynamoDB write
units per partition key, per second, in the base table and every GSI, for two layouts in
the same run:

- layout 1 (the schema before this change): unsharded GSI keys (`runs#{ns}`,
  `status#{ns}#{status}` sorted by update time, `attempt-status#{ns}#{status}`,
  `lease#{ns}`), projection ALL, the run's item written on every transition, every
  attempt in a status GSI;
- layout 2 (today): GSI keys sharded over `SHARDS`, sorted by creation, keys-only
  projections, graph + status by key, completed attempts in no GSI, leased running
  attempts by expiry only, the run's item skipped when it lists nothing new (heartbeats).

Write units follow DynamoDB's rules: a base write is ceil(item size / 1 KB); a GSI write
happens when the item enters or leaves the index (1), when its GSI key changes (a delete
and a put, 2), or, with key unchanged, when a projected attribute changes (1: so with
projection ALL every change of the item is one GSI write, with keys only none). Item size
is approximated by attribute names plus values as text (DynamoDB's own rule, near enough).

The workload (a fixed seed; `--help` for the knobs): 4 namespaces (70/20/7/3 % of runs),
10 graphs each (Zipf), 2,000 runs in flight at once, each transition taken by a random
run; run shapes: agent (6 nodes: record, snapshot, complete; 5% interrupted once), leased
batch (20 items: record with a lease, 2 heartbeats, complete), and short (1 attempt);
5% of attempts fail and are retried; 3% of runs end failed.

    .venv/bin/python -m bench.index_scale [--transitions 10000000] [--rate 1000]
"""

from __future__ import annotations

import argparse
import math
import random
import time
from collections import Counter, defaultdict
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

from stashpoint.index.schema import SECONDARY_INDEXES, SHARDS
from stashpoint.runs import transitions
from stashpoint.runs.index import RunIndex
from stashpoint.runs.indexing import run_item
from stashpoint.runs.models import AttemptRow, Interrupt, RunHead, RunStatus
from tests.index_items import legacy_item

LIMIT = 1000
"""DynamoDB's write units per second on one partition."""

_LEGACY = (("by_graph", "gpk"), ("by_status", "spk"), ("by_namespace", "npk"))
_LAYOUT_2 = tuple((g.name, g.partition_key) for g in SECONDARY_INDEXES)


def _size(item: dict[str, Any]) -> int:
    # Strings count their length, numbers about 8 bytes (DynamoDB: up to 21).
    return sum(len(k) + (len(v) if type(v) is str else 8) for k, v in item.items())


def _units(size: int) -> int:
    return max(1, math.ceil(size / 1024))


class Layout:
    """Write units of one layout: per transition, and per partition key per second."""

    def __init__(self, name: str, gsis: tuple[tuple[str, str], ...], keys_only: bool) -> None:
        self.name, self.gsis, self.keys_only = name, gsis, keys_only
        self.stored: dict[tuple[str, str], dict[str, Any]] = {}
        self.second = 0
        self.this_second: Counter[tuple[str, str]] = Counter()
        self.peak: dict[str, tuple[int, str]] = defaultdict(lambda: (0, ""))
        self.units = 0
        self.by_kind: Counter[str] = Counter()
        self.kinds: Counter[str] = Counter()

    def write(self, item: dict[str, Any], second: int, kind: str) -> None:
        """Count one conditional put of `item`."""
        if second != self.second:
            self._close_second()
            self.second = second
        key = (item["pk"], item["sk"])
        old = self.stored.get(key)
        self.stored[key] = item
        size = _units(_size(item))
        units = size
        self.this_second[("table", item["pk"])] += units
        for name, attr in self.gsis:
            sort_attr = attr[:-2] + "sk"
            before = None if old is None else old.get(attr)
            after = item.get(attr)
            if before is None and after is None:
                continue
            same_key = before == after and (old or {}).get(sort_attr) == item.get(sort_attr)
            if same_key:
                if not self.keys_only and old != item:  # a projected attribute changed
                    self.this_second[(name, str(after))] += size
                    units += size
                continue
            projected = 1 if self.keys_only else size
            if before is not None:
                self.this_second[(name, before)] += 1
                units += 1
            if after is not None:
                self.this_second[(name, after)] += projected
                units += projected
        self.units += units
        self.by_kind[kind] += units

    def transition(self, kind: str) -> None:
        """Count one transition of `kind`."""
        self.kinds[kind] += 1

    def forget(self, run_id: str, attempt_ids: list[str]) -> None:
        """Drop a finished run's items (never written again)."""
        self.stored.pop((f"run#{run_id}", "run"), None)
        for attempt_id in attempt_ids:
            self.stored.pop((f"run#{run_id}", f"attempt#{attempt_id}"), None)

    def _close_second(self) -> None:
        for (where, partition), units in self.this_second.items():
            if units > self.peak[where][0]:
                self.peak[where] = (units, partition)
        self.this_second.clear()

    def close(self) -> None:
        """Fold the last second in."""
        self._close_second()


class Run:
    """One simulated run: its head, and the transitions it has left."""

    def __init__(self, head: RunHead, plan: Iterator[str], rng: random.Random) -> None:
        self.head, self.plan, self.rng = head, plan, rng
        self.attempts: list[str] = []
        self.current: str | None = None


def _plan(shape: str, rng: random.Random) -> Iterator[str]:
    if shape == "agent":
        interrupt_at = rng.randrange(6) if rng.random() < 0.05 else -1
        for node in range(6):
            yield "record"
            yield "snapshot"
            if node == interrupt_at:
                yield "interrupt"
                yield "record"
            yield from _end(rng)
    elif shape == "batch":
        for _ in range(20):
            yield "record-leased"
            yield "heartbeat"
            yield "heartbeat"
            yield from _end(rng, leased=True)
    else:
        yield "record"
        yield from _end(rng)
    yield "finish-failed" if rng.random() < 0.03 else "finish"


def _end(rng: random.Random, leased: bool = False) -> Iterator[str]:
    while rng.random() < 0.05:
        yield "fail"
        yield "record-leased" if leased else "record"
    yield "complete"


def simulate(total: int, rate: int, in_flight: int, seed: int) -> tuple[Layout, Layout, float]:
    """Run `total` transitions through both layouts; return them and the seconds taken."""
    rng = random.Random(seed)
    index = RunIndex()
    new = Layout("layout 2", _LAYOUT_2, keys_only=True)
    old = Layout("layout 1", _LEGACY, keys_only=False)
    namespaces = rng.choices(["prod", "batch", "eval", "dev"], [70, 20, 7, 3], k=1 << 16)
    graph_weights = [1 / (n + 1) for n in range(10)]
    start = datetime(2026, 11, 30, tzinfo=UTC)
    runs: list[Run] = []
    made = 0

    def new_run(now: datetime) -> Run:
        nonlocal made
        made += 1
        ns = namespaces[made % len(namespaces)]
        graph = f"graph-{rng.choices(range(10), graph_weights)[0]}"
        shape = rng.choices(["agent", "batch", "short"], [50, 20, 30])[0]
        run_id = f"{made:012d}-{rng.getrandbits(32):08x}"
        head = RunHead(
            run_id=run_id, graph_name=graph, namespace=ns, created_at=now, updated_at=now
        )
        return Run(head, _plan(shape, rng), rng)

    began = time.perf_counter()
    for step in range(total):
        now = start + timedelta(microseconds=step * 1_000_000 // rate)
        second = step // rate
        if len(runs) < in_flight:
            run = new_run(now)
            runs.append(run)
            kind, head = "create", run.head
            touched: tuple[AttemptRow, ...] = ()
            before = None
        else:
            slot = rng.randrange(len(runs))
            run = runs[slot]
            kind = next(run.plan)
            before = run.head
            change = _apply(run, kind, now)
            head, touched = change.head, change.touched
            run.head = head
            if kind.startswith("finish"):
                runs[slot] = runs[-1]
                runs.pop()
        revision = step + 1
        written = index.items(head, touched, revision, before=before)
        for item in written:
            new.write(item, second, kind)
        if len(written) == len(touched):  # layout 1 wrote the run's item every time
            written = (run_item(head, revision, None), *written)
        for item in written:
            old.write(legacy_item(item), second, kind)
        new.transition(kind)
        old.transition(kind)
        if kind.startswith("finish"):
            new.forget(head.run_id, run.attempts)
            old.forget(head.run_id, run.attempts)
    new.close()
    old.close()
    return new, old, time.perf_counter() - began


def _apply(run: Run, kind: str, now: datetime) -> transitions.Change:
    head = run.head
    if kind.startswith("record"):
        attempt_id = f"{head.run_id}-{len(run.attempts)}"
        run.attempts.append(attempt_id)
        run.current = attempt_id
        lease = 60.0 if kind == "record-leased" else None
        return transitions.record_attempt(
            head, attempt_id=attempt_id, node_id=f"n{len(run.attempts)}", attempt=1,
            input=None, trace_ctx=None, now=now, lease_seconds=lease,
        )  # fmt: skip
    assert run.current is not None or kind in ("snapshot",) or kind.startswith("finish")
    if kind == "snapshot":
        return transitions.save_state_snapshot(head, {"step": now.second}, metadata=None, now=now)
    if kind == "heartbeat":
        return transitions.heartbeat(head, str(run.current), now=now)
    if kind == "complete":
        return transitions.complete_attempt(
            head, str(run.current), output={"ok": 1}, meta={}, now=now
        )
    if kind == "fail":
        return transitions.fail_attempt(head, str(run.current), error="boom", now=now)
    if kind == "interrupt":
        return transitions.record_interrupt(
            head, str(run.current), interrupt=Interrupt(node_id="n", value={"ask": 1}), now=now
        )
    status = RunStatus.FAILED if kind == "finish-failed" else RunStatus.COMPLETED
    error = "boom" if status is RunStatus.FAILED else None
    return transitions.finish_run(head, status, error=error, now=now)


def report(new: Layout, old: Layout, total: int, rate: int) -> None:
    """Print the side-by-side table."""
    print(f"\n{total:,} transitions at {rate:,}/s ({total // rate:,} s simulated), shards={SHARDS}")
    print(f"\n{'peak write units/s on one key':<44}{'layout 1':>16}{'layout 2':>16}")
    rows = [
        ("table", "table", "table"),
        ("graph", "by_graph", "runs_by_graph"),
        ("status (runs and attempts in layout 1)", "by_status", "runs_by_status"),
        ("namespace (and leases in layout 1)", "by_namespace", "runs_by_namespace"),
        ("attempts (layout 2)", "", "attempts_by_status"),
    ]
    for label, before, after in rows:
        o = old.peak.get(before, (0, "")) if before else (0, "-")
        n = new.peak.get(after, (0, ""))
        print(f"  {label:<42}{o[0]:>16,}{n[0]:>16,}")
    worst_old = max(old.peak.values())
    worst_new = max(new.peak.values())
    print(f"  {'hottest key anywhere':<42}{worst_old[0]:>16,}{worst_new[0]:>16,}")
    print(f"    layout 1: {worst_old[1]}   layout 2: {worst_new[1]}")
    print(f"  {'keys above ' + str(LIMIT) + ' WU/s':<42}"
          f"{sum(v[0] > LIMIT for v in old.peak.values()):>16}"
          f"{sum(v[0] > LIMIT for v in new.peak.values()):>16}")  # fmt: skip
    print(f"\n{'write units per transition':<44}{'layout 1':>16}{'layout 2':>16}")
    print(f"  {'all':<42}{old.units / total:>16.2f}{new.units / total:>16.2f}")
    for kind in sorted(new.kinds, key=lambda k: -new.kinds[k]):
        count = new.kinds[kind]
        print(f"  {kind + f' ({count / total:.1%})':<42}"
              f"{old.by_kind[kind] / count:>16.2f}{new.by_kind[kind] / count:>16.2f}")  # fmt: skip
    print(f"\nratio layout 2 / layout 1, write units per transition: {new.units / old.units:.2f}")


def main() -> None:
    """Simulate and print."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--transitions", type=int, default=10_000_000)
    parser.add_argument("--rate", type=int, default=1000, help="transitions per second")
    parser.add_argument("--in-flight", type=int, default=2000, help="runs open at once")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    new, old, seconds = simulate(args.transitions, args.rate, args.in_flight, args.seed)
    report(new, old, args.transitions, args.rate)
    print(f"(simulated in {seconds:.0f} s)")


if __name__ == "__main__":
    main()
