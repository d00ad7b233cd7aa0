"""Progress with counts for commands that can take longer than a second.

Drawn on stderr, and only when stderr is a terminal and the output is not JSON: a pipe,
a CI log or `--json` sees nothing of it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console


@contextmanager
def counting(what: str, *, quiet: bool, total: int | None = None) -> Iterator[Callable[..., None]]:
    """Show `what` with a count (of `total` when known); yield `tick(done=None, total=None)`.

    `tick()` adds one; `tick(done=N)` sets the count, `tick(total=T)` the total (a phase
    that learns how much there is only once it has listed it).
    """
    console = Console(stderr=True)
    if quiet or not console.is_terminal:
        yield lambda *args, **kwargs: None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    bar = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=console, transient=True,
    )  # fmt: skip
    with bar:
        task = bar.add_task(what, total=total)

        def tick(
            done: int | None = None, total: int | None = None, what: str | None = None
        ) -> None:
            current = bar.tasks[0]
            new_phase = what is not None and what != current.description
            if new_phase:
                bar.update(task, description=what)
            if total is not None:
                bar.update(task, total=total)
            if done is None:
                bar.advance(task, 1)
            else:
                bar.update(task, completed=done)
            if new_phase or (current.total is not None and current.completed >= current.total):
                bar.refresh()  # each phase's start and end are drawn, however quick

        yield tick
