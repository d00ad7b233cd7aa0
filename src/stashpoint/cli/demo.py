"""The main job, end to end on the embedded default: crash a batch worker, resume, verify.

A worker process works through a few hundred items in batches. Each batch is a recorded
attempt of a graph run, and its results are committed together with the cursor in one
compare-and-swap save. The demo kills the worker with SIGKILL partway (a reclaimed spot
instance), starts a new worker that marks the dead worker's attempt failed and resumes from
the last checkpoint, then checks that every item's result was committed exactly once and
prints the run table. It exits non-zero if anything is off.

    stashpoint demo            (or: python -m stashpoint.cli.demo)
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import stashpoint
from stashpoint import (
    AttemptStatus,
    CheckpointConflict,
    CheckpointNotFound,
    ConfigurationError,
    Envelope,
)
from stashpoint.url import resolve_url, without_credentials

KIND = "stashpoint.demo.batch"
"""The kind of the demo's checkpoint."""
BATCH = 10
"""Items committed per save."""
GRAPH = "demo-batch"
"""Graph name of the demo's runs."""


def work(item: int) -> str:
    """Do the per-item work: deterministic, so a resumed run can be checked."""
    return hashlib.sha256(f"item-{item}".encode()).hexdigest()[:12]


def worker(url: str, run_id: str, items: int, delay: float) -> None:
    """Process items from the last checkpoint on, one recorded attempt per batch."""
    with stashpoint.open(url) as stash:
        store, runs = stash.checkpoints, stash.runs
        state = runs.load_run(run_id)
        assert state is not None
        for attempt in state.attempts:
            if attempt.status is AttemptStatus.RUNNING:  # its worker is gone
                runs.fail_attempt(attempt.attempt_id, "worker killed (SIGKILL), batch retried")
        retries = {a.node_id: a.attempt for a in state.attempts}
        try:
            current = store.load(run_id)
        except CheckpointNotFound:
            current = Envelope.initial(run_id, run_id, KIND, 1, {"cursor": 0, "results": {}})
            store.compare_and_swap(current, None)
        while current.payload["cursor"] < items:
            start = current.payload["cursor"]
            batch = range(start, min(start + BATCH, items))
            node = f"batch-{start:04d}"
            attempt_id = runs.record_attempt(
                run_id, node, retries.get(node, 0) + 1, {"items": [batch.start, batch.stop]}
            )
            print(f"started {node}", flush=True)
            done: dict[str, str] = {}
            for item in batch:
                time.sleep(delay)
                done[str(item)] = work(item)

            def commit(head: Envelope, start: int = start, done: dict[str, str] = done) -> Any:
                if head.payload["cursor"] != start:  # a zombie twin got here first: abort
                    raise CheckpointConflict(run_id, expected_revision=head.revision - 1)
                return {"cursor": start + len(done), "results": head.payload["results"] | done}

            current = store.update(run_id, commit, known=current)  # one PUT, no GET
            runs.complete_attempt(attempt_id, {"committed": len(batch)})
            print(f"checkpoint revision={current.revision} cursor={batch.stop}", flush=True)


def run_demo(
    url: str | None, *, items: int = 300, kill_after: int = 8, as_json: bool = False
) -> int:
    """Run the demo; return 0 when every item was processed exactly once.

    `as_json`: no narration; one JSON object at the end says what was checked.
    """
    explicit = url is not None
    url, batches, kill_after = _checked(url, items, kill_after)
    with stashpoint.open(url) as stash:
        run_id = stash.runs.create_run(GRAPH)
    say: Callable[..., None] = (lambda *parts, **kw: None) if as_json else print
    say(f"stash: {url}\nrun: {run_id}\nitems: {items}")
    command = [sys.executable, "-m", "stashpoint.cli.demo", "--url", url, "--items", str(items)]
    checkpoints = _kill_first_worker(command, run_id, kill_after, say)
    with stashpoint.open(url) as stash:
        at_kill = stash.checkpoints.load(run_id)
    say(f"  resuming from revision {at_kill.revision}, cursor {at_kill.payload['cursor']}")
    if not _second_worker(command, run_id, max(1, (batches - checkpoints) // 10), say):
        return 1
    outcome = _verified(url, run_id, items, batches)
    if as_json:
        from stashpoint.cli.output import to_json

        print(to_json({
            "ok": outcome.ok, "run_id": run_id, "items": items, "processed": outcome.processed,
            "revision": outcome.revision, "batches": batches,
            "older_revisions": outcome.older_revisions,
            "attempts_completed": outcome.completed, "attempts_killed": outcome.killed,
        }))  # fmt: skip
        return 0 if outcome.ok else 1
    print(
        f"\ncheckpoint revision {outcome.revision}: {outcome.processed}/{items} items, "
        f"{batches} batch commits, {outcome.older_revisions} older revisions kept\n"
        f"run attempts: {outcome.completed} completed, {outcome.killed} killed mid-batch and "
        "retried"
    )
    # This run alone: the stash keeps every earlier demo's run, and a table that grows on
    # each rerun says nothing about this one.
    _print_runs([row for row in outcome.runs if row.run_id == run_id], outcome.where)
    print("every item processed exactly once: " + ("YES" if outcome.ok else "NO"))
    print(_next_commands(url if explicit else None, run_id))
    return 0 if outcome.ok else 1


def _next_commands(url: str | None, run_id: str) -> str:
    """Say what to look at next: the run's attempts, the checkpoint's revisions."""
    where = "" if url is None else f" --url {shlex.quote(without_credentials(url))}"
    return (
        "next:\n"
        f"  stashpoint{where} runs show {run_id}   # every attempt; the killed one failed\n"
        f"  stashpoint{where} history {run_id}     # the checkpoint's revisions, one a batch"
    )


def _checked(url: str | None, items: int, kill_after: int) -> tuple[str, int, int]:
    """Check the demo's options; return the stash's URL, the batches, the kill point."""
    url = resolve_url(url)
    if url.startswith("memory:"):
        raise ConfigurationError(
            "the demo kills and restarts worker processes, and memory:// lives in one "
            "process: use local://PATH or s3://BUCKET/PREFIX"
        )
    batches = -(-items // BATCH)
    if batches < 2:
        raise ConfigurationError(f"the demo needs at least {BATCH + 1} items (two batches)")
    return url, batches, max(1, min(kill_after, batches - 1))  # always some batches to resume


def _kill_first_worker(
    command: list[str], run_id: str, kill_after: int, say: Callable[..., None]
) -> int:
    """Start the first worker and SIGKILL it mid-batch; return the checkpoints it made.

    Killed after `kill_after` checkpoints, once the next batch starts.
    """
    first = subprocess.Popen(
        [*command, "--worker", run_id, "0.002"], stdout=subprocess.PIPE, text=True
    )
    assert first.stdout is not None
    checkpoints = 0
    while line := first.stdout.readline().strip():
        if line.startswith("checkpoint"):
            checkpoints += 1
            say("  worker 1:", line)
        elif checkpoints >= kill_after:
            say("  worker 1:", line)
            break
    os.kill(first.pid, signal.SIGKILL)
    first.wait()
    say(f"  worker 1: killed with SIGKILL (exit {first.returncode}), like a reclaimed spot VM")
    return checkpoints


def _second_worker(command: list[str], run_id: str, step: int, say: Callable[..., None]) -> bool:
    """Run the second worker to the end, saying every `step`-th checkpoint; True: it ended well."""
    second = subprocess.Popen(
        [*command, "--worker", run_id, "0"], stdout=subprocess.PIPE, text=True
    )
    assert second.stdout is not None
    lines = []
    for line in second.stdout:
        if line.startswith("checkpoint"):
            lines.append(line.strip())
            if len(lines) % step == 0:
                say(f"  worker 2: {line.strip()}", flush=True)
    if second.wait() != 0:
        return False
    say(f"  worker 2: {len(lines)} checkpoints, last: {lines[-1] if lines else '-'}")
    return True


@dataclass(frozen=True)
class _Outcome:
    """What the demo found once the second worker ended."""

    ok: bool
    """Every item processed exactly once, one commit per batch, one attempt killed."""
    processed: int
    """Items with a result."""
    revision: int
    """The checkpoint's final revision."""
    older_revisions: int
    """Older revisions kept."""
    completed: int
    """Attempts completed."""
    killed: int
    """Attempts killed mid-batch."""
    runs: list[stashpoint.runs.RunRow]
    """The demo's latest runs."""
    where: str
    """The stash's URL, credentials hidden."""


def _verified(url: str, run_id: str, items: int, batches: int) -> _Outcome:
    """Check the run's results and attempts; complete or fail the run accordingly."""
    with stashpoint.open(url) as stash:
        final = stash.checkpoints.load(run_id)
        history = stash.checkpoints.history(run_id)
        state = stash.runs.load_run(run_id)
        assert state is not None
        completed = [a for a in state.attempts if a.status is AttemptStatus.COMPLETED]
        killed = [a for a in state.attempts if a.status is AttemptStatus.FAILED]
        results = final.payload["results"]
        ok = (
            results == {str(i): work(i) for i in range(items)}
            and final.revision == batches == len(history)
            and _once_per_batch(completed, killed, batches)
        )
        stash.runs.complete_run(run_id) if ok else stash.runs.fail_run(run_id, "demo check failed")
        page = stash.runs.list_runs(graph_name=GRAPH, limit=5)
        return _Outcome(
            ok, len(results), final.revision, len(history), len(completed), len(killed),
            page.items, stash.url,
        )  # fmt: skip


def _once_per_batch(
    completed: list[stashpoint.runs.AttemptRecord],
    killed: list[stashpoint.runs.AttemptRecord],
    batches: int,
) -> bool:
    """Whether each batch has one completed attempt, and one attempt was killed."""
    return (
        len(completed) == batches
        and len({a.node_id for a in completed}) == batches
        and len(killed) == 1
    )


def _print_runs(rows: list[stashpoint.runs.RunRow], where: str) -> None:
    try:
        from stashpoint.cli.output import Output
        from stashpoint.cli.runs import show_runs
    except ImportError:
        for r in rows:
            print(f"{r.run_id}  {r.graph_name}  {r.status.value}  attempts={r.attempts}")
        return
    show_runs(Output(), "runs", rows, stash=without_credentials(where))


def main(argv: list[str] | None = None) -> int:
    """Command line of the demo and of its worker processes."""
    parser = argparse.ArgumentParser(description="stashpoint demo: kill a batch, resume it")
    parser.add_argument("--url", default=None, help="stash URL (default: embedded local folder)")
    parser.add_argument("--items", type=int, default=300)
    parser.add_argument("--kill-after", type=int, default=8, help="checkpoints before SIGKILL")
    parser.add_argument("--worker", nargs=2, metavar=("RUN_ID", "DELAY"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(resolve_url(args.url), args.worker[0], args.items, float(args.worker[1]))
        return 0
    return run_demo(args.url, items=args.items, kill_after=args.kill_after)


if __name__ == "__main__":
    sys.exit(main())
