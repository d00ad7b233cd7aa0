"""Tables the command line (and the demo) print with rich."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.table import Table

from stashpoint.cli.safe import safe


def when(value: datetime | None) -> str:
    """Return a timestamp as the tables show it (UTC, to the second)."""
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def runs_table(rows: list[Any]) -> Table:
    """Return a table of run rows."""
    table = Table(title="runs")
    table.add_column("run", no_wrap=True)
    for column in ("graph", "status", "attempts", "failed", "running", "created", "updated"):
        table.add_column(column)
    colours = {
        "completed": "green", "failed": "red", "running": "cyan", "interrupted": "yellow",
        "waiting": "magenta",
    }  # fmt: skip
    for r in rows:
        colour = colours.get(r.status.value, "white")
        table.add_row(
            safe(r.run_id), safe(r.graph_name), f"[{colour}]{r.status.value}[/]",
            str(r.attempts), str(r.failed_attempts), str(r.running_attempts), when(r.created_at),
            when(r.updated_at),
        )  # fmt: skip
    return table
