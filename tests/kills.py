"""`kill -9` of a real process at a chosen point: the one harness the kill tests share.

The child prints one `.` per storage request (through `Stash.intercept`) and flushes; the
parent reads them and sends SIGKILL after the `kill_after`-th, or lets a child that finished
first end. The child dies with no chance to clean up, as a reclaimed spot worker does.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from typing import Any

from tests.zygote import Child, zygote


def counting_child(call: str, imports: str = "") -> str:
    """A child for `kill_after_requests`: open the stash at `sys.argv[1]`, print a dot per
    request while running `call` (Python, with `stash` in scope), then `done`."""
    return (
        f"import sys, stashpoint\n{imports}\n"
        "with stashpoint.open(sys.argv[1]) as stash:\n"
        "    def hook(request, proceed):\n"
        "        print('.', end='', flush=True)\n"
        "        return proceed()\n"
        "    with stash.intercept(hook):\n"
        f"        {call}\n"
        "print('done', flush=True)\n"
    )


def kill_after_requests(child: str, args: list[str], kill_after: int) -> int:
    """Run `python -c child *args`, SIGKILL it after `kill_after` requests; return how many
    it had made (fewer when it finished first)."""
    process = _start(child, args, None, text=False)
    assert process.stdout is not None
    made = 0
    while made < kill_after:
        dot = process.stdout.read(1)
        if dot != b".":
            break  # finished before the kill point
        made += 1
    _kill(process.pid)
    process.wait(timeout=60)
    process.stdout.close()
    if process.stderr is not None:
        process.stderr.close()
    return made


def _kill(pid: int) -> None:
    """SIGKILL a child; one that ended first may be gone already.

    The zygote's children are reaped as they end; a cold one stays until waited for.
    """
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _start(
    child: str, args: list[str], env: dict[str, str] | None, *, text: bool
) -> subprocess.Popen[Any] | Child:
    """Start `python -c child *args` with piped stdout and stderr.

    Forked from this process's zygote (`tests.zygote`: the imports made once), else cold.
    """
    warm = zygote()
    if warm is not None:
        return warm.spawn(child, args, env, text=text)
    return subprocess.Popen(
        [sys.executable, "-c", child, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=text,
        env=env,
    )


def whole_lines(text: str) -> list[str]:
    """The non-blank lines of what a killed child printed, without a last line the kill cut
    short (the part after the last newline)."""
    *whole, _cut = text.split("\n")
    return [line for line in whole if line.strip()]


def kill_after_lines(
    child: str,
    args: list[str],
    lines: int,
    *,
    pause: float = 0.0,
    env: dict[str, str] | None = None,
) -> tuple[list[str], list[str]]:
    """Run `python -c child *args`, SIGKILL it once it printed `lines` lines (and `pause`
    seconds more: a later point in what it does next).

    Returns the lines read before the kill (fewer if it ended first) and those it had
    printed by then that were not read yet, newlines stripped. A line is printed when its
    newline is: the kill can cut one short (an unbuffered child writes `print`'s parts
    one by one, as under `PYTHONUNBUFFERED`), and what it cut was never acknowledged.
    """
    import time

    process = _start(child, args, env, text=True)
    assert process.stdout is not None
    before: list[str] = []
    for _ in range(lines):
        line = process.stdout.readline()
        if not line.endswith("\n"):
            break  # ended before the kill point
        before.append(line.rstrip("\n"))
    if pause:
        time.sleep(pause)  # where in the next step the kill lands; not waited on for a result
    _kill(process.pid)
    process.wait(timeout=60)
    after = whole_lines(process.stdout.read())
    process.stdout.close()
    if process.stderr is not None:
        process.stderr.close()
    return before, after
