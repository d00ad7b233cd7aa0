"""Processes that race start together: each says it is ready, then waits for the word.

A race between processes is only a race if they overlap; started one by one on a busy
machine (or with a fast backend), each may finish before the next has imported anything.
A child runs `READY_THEN_WAIT` once it has opened its stash; the parent calls
`start_together` with every child before reading their results.
"""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

READY_THEN_WAIT = 'print("ready", flush=True); sys.stdin.readline()'
"""The child's side (Python, `sys` imported): say ready, wait for the word."""


def start_together(children: list[subprocess.Popen[str]]) -> None:
    """Wait until every child is ready, then tell them all to go (text pipes, stdin too)."""
    for child in children:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
    for child in children:
        assert child.stdin is not None
        child.stdin.write("go\n")
        child.stdin.flush()


def threads_at_once(count: int, action: Callable[[], T]) -> list[T]:
    """Run `action` on `count` threads that start together (a barrier); return its results.

    The first failure of any thread is raised once all have ended (each joined for at most
    two minutes: every load loop is bounded).
    """
    barrier = threading.Barrier(count)
    results: list[T] = []
    failures: list[BaseException] = []

    def run() -> None:
        barrier.wait()
        try:
            results.append(action())
        except BaseException as exc:  # raised below, in the caller's thread
            failures.append(exc)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    if failures:
        raise failures[0]
    return results
