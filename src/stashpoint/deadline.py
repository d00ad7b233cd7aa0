"""Deadlines for agent runs: start a turn only if it is likely to finish before the end.

A Lambda invocation has a hard end (`context.get_remaining_time_in_millis()`); a turn cut
off there leaves `TurnInFlight` behind, which a careful resume policy must refuse. A fixed
margin fails as soon as one turn is slower than the margin (2 s, 2 s, then 4.5 s against
3 s). So the checkpoint keeps how long recent turns took (`turn_seconds`), and the runner
starts another turn only if the time left covers the slowest of them times `headroom`, plus
`margin` for the saves around it; the first turn of an invocation needs only the slowest
plus the margin (a later invocation would have no more time). Pure: the clock and the
time left are given.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from stashpoint.errors import InvalidArgument

RECENT = 10
"""Latest turn durations the plan looks at."""


@dataclass(frozen=True)
class Deadline:
    """How much time an invocation has left, and how cautiously to spend it."""

    remaining: Callable[[], float]
    """Seconds left now (Lambda: `context.get_remaining_time_in_millis() / 1000`)."""
    clock: Callable[[], float] = time.monotonic
    """Measures how long a turn takes (seconds; only differences count)."""
    headroom: float = 2.0
    """A turn is expected to take up to this many times the slowest recent one."""
    margin: float = 1.0
    """Seconds kept for the saves around a turn and the handler's own return."""
    first_turn: float | None = None
    """Expected duration of a turn when none was measured yet (None: start it)."""

    def __post_init__(self) -> None:
        if not self.headroom >= 1 or not self.margin >= 0:
            raise InvalidArgument("headroom must be >= 1 and margin >= 0")

    @classmethod
    def of_lambda(cls, context: Any, **options: Any) -> Deadline:
        """Return the deadline of a Lambda invocation from its context object."""
        return cls(lambda: context.get_remaining_time_in_millis() / 1000, **options)

    def needed(self, turn_seconds: Sequence[float], *, first: bool = False) -> float:
        """Return the time the next turn should be given, from recent turn durations.

        `first`: no turn ran in this invocation yet. Headroom is then left out: waiting
        for a later invocation would not give more time, only the same decision again, so
        the slowest recent turn (plus the margin) is enough to start.
        """
        recent = list(turn_seconds)[-RECENT:]
        slowest = max(recent) if recent else (self.first_turn or 0.0)
        return slowest * (1.0 if first else self.headroom) + self.margin
