"""How far a long operation has come, for whoever shows it (the command line's bars).

An operation that may run longer than a second (`collect_garbage`, `reindex`) takes an
`on_progress` callback and calls it with a `Progress` as it goes; the callback must be
quick and must not raise. The default does nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Progress:
    """`done` of `total` things of one phase of an operation."""

    phase: str
    """What is being counted: `heads`, `logs`, `blobs`, `runs`..."""
    done: int
    """How many are done so far."""
    total: int | None = None
    """How many there are (None while not yet known, as in a paged listing)."""


OnProgress = Callable[[Progress], None]
"""A callback told of progress."""


def silent(progress: Progress) -> None:
    """Do nothing with `progress` (the default callback)."""
