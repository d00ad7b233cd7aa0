"""What a durable run's steps are made of: their promises, retries, outcomes and names.

`Semantics` and `Retry` are what a caller chooses per step; an `Outcome` is how a step's
latest attempt ended; the errors a run records for steps it ended itself
(`TAKEN_OVER`, `RESOLVED_RETRY`, `TIMED_OUT`); the names of steps and mapped items; and
calling a step's function so that its exception is a value (`captured`, `submitted`), for
the blocking and the asyncio twin alike. Pure: no requests.
"""

from __future__ import annotations

from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from stashpoint.errors import InvalidArgument, described
from stashpoint.status import AttemptStatus

__all__ = [
    "CLAIM_POLL",
    "MAX_WAIT_SECONDS",
    "RESOLVED_RETRY",
    "TAKEN_OVER",
    "TIMED_OUT",
    "Outcome",
    "Retry",
    "Semantics",
    "captured",
    "checked_wait",
    "checked_map",
    "checked_step",
    "checked_timeout",
    "check_name",
    "iso",
    "item_name",
    "moment_of",
    "recorded_event",
    "step_of",
    "submitted",
]


class Semantics(StrEnum):
    """What a step promises about running its function."""

    AT_LEAST_ONCE = "at_least_once"
    """A step cut off mid-function runs again on replay (make it idempotent: `key`)."""
    AT_MOST_ONCE = "at_most_once"
    """A step cut off mid-function is reported (`StepInterrupted`), never run again."""


@dataclass(frozen=True)
class Retry:
    """How often a failed step runs again, and how long it waits first (durably).

    The wait before try n+1 is `delay * backoff**(n-1)`, at most `max_delay`, counted from
    when try n failed as recorded in the run: a crash during the wait does not shorten it
    or start it over. A wait longer than `sleep_up_to` (or than a deadline leaves) suspends
    the run (`RunSuspended`, `list_due` finds it when due) instead of sleeping.
    """

    attempts: int = 3
    """Tries in all, the first included."""
    delay: float = 1.0
    """Seconds before the second try."""
    backoff: float = 2.0
    """Factor each later delay grows by."""
    max_delay: float = 300.0
    """Longest delay between two tries, in seconds."""
    sleep_up_to: float = 60.0
    """Longest delay slept in the process; a longer one suspends the run."""

    def __post_init__(self) -> None:
        if type(self.attempts) is not int or self.attempts < 1:
            raise InvalidArgument(f"retry attempts must be an int >= 1, not {self.attempts!r}")
        if not (self.delay >= 0 and self.backoff >= 1 and self.max_delay >= 0):
            raise InvalidArgument("retry delay and max_delay must be >= 0, backoff >= 1")

    def delay_after(self, tries: int) -> float:
        """Return the seconds to wait after `tries` failed tries."""
        return min(self.max_delay, self.delay * self.backoff ** max(0, tries - 1))


@dataclass(frozen=True)
class Outcome:
    """How a step's latest attempt ended (or that it did not)."""

    status: AttemptStatus
    """The attempt's status."""
    output: Any
    """What the step returned (stored), if it completed."""
    error: str | None
    """Why it failed, if it did."""
    finished_at: datetime | None = None
    """When it ended, as recorded."""


TAKEN_OVER = "interrupted: the run was taken over"
"""The error of a step a crash (or another worker) left running, ended by the takeover."""
RESOLVED_RETRY = "resolved: run it again"
"""The error of the attempt `resolve(name, retry=True)` records: the step may run again."""


MAX_WAIT_SECONDS = 10**9
"""The longest wait (about 31 years): a longer one is a mistake, and past datetime's range."""

CLAIM_POLL = 1.0
"""Seconds between looks at a run another worker holds (`claim_wait`)."""


def step_of(node_id: str) -> str:
    """Return the step a node belongs to: a mapped item `name[3]` belongs to `name`."""
    return node_id[: node_id.index("[")] if node_id.endswith("]") and "[" in node_id else node_id


def item_name(name: str, index: int) -> str:
    """Return the node id of item `index` of mapped step `name`."""
    return f"{name}[{index}]"


def captured(fn: Any, *args: Any) -> Any:
    """Call `fn`, returning (True, result) or (False, exception) instead of raising."""
    try:
        result = fn(*args)
    except Exception as exc:
        return False, exc
    if isinstance(result, Awaitable):

        async def settle() -> tuple[bool, Any]:
            try:
                return True, await result
            except Exception as exc:
                return False, exc

        return settle()
    return True, result


def submitted(executor: Any, fn: Any, item: Any, awaiting: bool) -> Any:
    """Run `fn(item)` on `executor`; (True, result) or (False, exception), as `captured`.

    Blocking: waits on the executor's future (on the step's own thread). `awaiting` (the
    asyncio twin): returns a coroutine wrapping the future, which the driver awaits
    without blocking the loop.
    """
    try:
        future = executor.submit(fn, item)
    except Exception as exc:  # a shut-down executor, a function it cannot send
        return False, exc
    if awaiting:

        async def settle() -> tuple[bool, Any]:
            import asyncio

            try:
                return True, await asyncio.wrap_future(future)
            except Exception as exc:
                return False, exc

        return settle()
    try:
        return True, future.result()
    except Exception as exc:
        return False, exc


TIMED_OUT = "WaitTimedOut: the wait ran out at"
"""How a timed-out `wait_for` is recorded (the error of its failed attempt)."""


def iso(moment: datetime | None) -> str | None:
    """Return a moment as ISO 8601 text (None: None)."""
    return None if moment is None else moment.isoformat()


def moment_of(text: str) -> datetime | None:
    """Parse a recorded timezone-aware moment; None if it is not one."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    return moment if moment.tzinfo is not None else None


def check_name(name: object) -> str:
    """Return a step name, checked: a non-empty str without `[`."""
    if not isinstance(name, str) or not name or "[" in name:
        raise InvalidArgument(f"a step name is a non-empty str without '[', not {described(name)}")
    return name


def checked_step(fn: object, semantics: Any, retry: object) -> Semantics:
    """Check a step's function, semantics and retry; return the semantics as a member."""
    if not callable(fn):
        raise InvalidArgument(f"a step runs a function, not {described(fn)}")
    try:
        checked = Semantics(semantics)
    except ValueError:
        raise InvalidArgument(f"unknown step semantics {semantics!r}") from None
    if retry is not None and not isinstance(retry, Retry):
        raise InvalidArgument(f"retry must be a stashpoint.Retry, not {described(retry)}")
    return checked


def checked_timeout(timeout: Any) -> float | None:
    """Return a wait's timeout in seconds (a timedelta's too); None: no timeout.

    Checked: from 0 to `MAX_WAIT_SECONDS`.
    """
    if isinstance(timeout, timedelta):
        timeout = timeout.total_seconds()
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not 0 <= timeout <= MAX_WAIT_SECONDS
    ):
        raise InvalidArgument(f"timeout must be seconds >= 0, not {described(timeout)}")
    return timeout


def checked_map(
    name: object, items: Any, fn: object, max_concurrency: object, executor: object
) -> list[Any]:
    """Check a map's arguments; return its items as a list."""
    check_name(name)
    if type(max_concurrency) is not int or not 1 <= max_concurrency <= 256:
        raise InvalidArgument(
            f"max_concurrency must be an int from 1 to 256, not {described(max_concurrency)}"
        )
    if not callable(fn):
        raise InvalidArgument(f"fn must be callable, not {described(fn)}")
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise InvalidArgument(
            f"executor must be a concurrent.futures.Executor, not {described(executor)}"
        )
    try:
        return list(items)
    except TypeError:
        raise InvalidArgument(f"items must be iterable, not {described(items)}") from None


def checked_wait(until: Any, seconds: Any) -> None:
    """Check a wait's moment: a timezone-aware `until`, or `seconds` (not both)."""
    if (until is None) == (seconds is None):
        raise InvalidArgument("wait for either until= or seconds=")
    if until is not None and (not isinstance(until, datetime) or until.tzinfo is None):
        raise InvalidArgument(f"until must be a timezone-aware datetime, not {described(until)}")
    if seconds is not None and (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 0 <= seconds <= MAX_WAIT_SECONDS
    ):
        raise InvalidArgument(f"seconds must be a number >= 0, not {described(seconds)}")


def recorded_event(name: str, last: Outcome) -> tuple[str, Any] | None:
    """Return what a recorded `wait_for` step says; None: it is not one.

    ("delivered", None), ("timed_out", when), ("waiting", its timeout or None), or
    ("new", None) for a failed or cut-off record of the step (wait anew).
    """
    output = last.output if isinstance(last.output, dict) else {}
    error = last.error or ""
    if last.status is AttemptStatus.FAILED and error.startswith(TIMED_OUT):
        at = moment_of(error[len(TIMED_OUT) :].strip())
        return None if at is None else ("timed_out", at)
    if last.status is not AttemptStatus.COMPLETED:
        return "new", None
    if output.get("event") == name:
        return "delivered", None
    if output.get("waiting_for") == name:
        return _waiting(output.get("timeout_at"))
    return None


def _waiting(raw: Any) -> tuple[str, Any] | None:
    """Return a recorded wait's ("waiting", its timeout or None).

    None if the timeout recorded is not a moment.
    """
    if raw is None:
        return "waiting", None
    at = moment_of(str(raw))
    return None if at is None else ("waiting", at)
