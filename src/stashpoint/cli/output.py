"""What every command prints: one JSON shape, tables that fit the terminal, plain pipes.

- `--json`: a listing is `{"items": [...], "cursor": ...}` (the cursor names the next page,
  `null` at the end; a listing may add a key such as `unreadable`), anything else the
  object itself. Times are RFC 3339 in UTC with `Z`. An error is `{"error": {...}}` on
  stdout (`stashpoint.cli.exits`), with a non-zero exit status.
- A terminal gets a table that fits its width: columns are chosen by importance until the
  width is used, each shown whole (ids are never cut; free text folds onto more lines);
  the columns that do not fit go on a second line of each row (`name value`), so every
  column is shown at 80 columns too, and `--wide` puts each row on one line. The footer
  names the stash read.
- A pipe gets tab-separated values: a header row of every column, one row per item, each
  cell on one line with controls escaped; "more" goes to stderr, so `cut` and `sort`
  see only rows.

The JSON Schema of each command's output is in `docs/cli/schemas/`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import pydantic_core
from rich.cells import cell_len
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from stashpoint.cli.safe import printable, safe

_WRAPPED_WIDTH = 16
"""Width a free-text column is counted at when choosing columns (it folds beyond)."""


@dataclass(frozen=True)
class Column:
    """One column of a table."""

    header: str
    """Its heading (and its name in `--wide` and TSV output)."""
    priority: int = 0
    """0: always shown; the higher, the earlier it gives way on a narrow terminal."""
    wrap: bool = False
    """Free text (errors, details): folded onto more lines rather than widening the table."""
    justify: Literal["left", "right"] = "left"
    """Numbers read best right-aligned."""


@dataclass(frozen=True)
class Cell:
    """A table cell with a style (a status colour); plain strings need none."""

    text: str
    """What the cell says (stored text: controls are escaped when shown)."""
    style: str | None = None
    """A rich style such as `green`."""


Row = Sequence["str | Cell"]


def when(value: datetime | None) -> str:
    """Return a time as tables show it: UTC to the second, `-` for none."""
    return "-" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def rfc3339(value: datetime) -> str:
    """Return a time as JSON output carries it: RFC 3339, UTC, `Z`."""
    utc = value.astimezone(UTC)
    return utc.isoformat(timespec="microseconds" if utc.microsecond else "seconds").replace(
        "+00:00", "Z"
    )


def _jsonable(value: Any) -> Any:
    # Datetimes in plain containers come out as RFC 3339 `Z`; pydantic does the rest
    # (models and dataclasses, whose times are UTC and so `Z` too; enums); what JSON
    # cannot carry is shown as its repr.
    if isinstance(value, datetime):
        return rfc3339(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def to_json(value: Any) -> str:
    """Return `value` as the JSON a command prints (indented, times in `Z`)."""
    return pydantic_core.to_json(_jsonable(value), indent=2, fallback=repr).decode()


def _natural(columns: Sequence[Column], rows: Sequence[Row]) -> list[int]:
    """Return each column's width with nothing folded."""
    return [
        max([cell_len(column.header)] + [cell_len(_text(row[i])) for row in rows])
        for i, column in enumerate(columns)
    ]


def _fits(columns: Sequence[Column], rows: Sequence[Row], width: int) -> list[int]:
    """Return the indexes of the columns shown at `width`, in their order."""
    natural = [
        min(size, _WRAPPED_WIDTH) if column.wrap else size
        for column, size in zip(columns, _natural(columns, rows), strict=True)
    ]
    chosen: list[int] = []
    used = 0
    for i in sorted(range(len(columns)), key=lambda i: (columns[i].priority, i)):
        need = natural[i] + (2 if chosen else 0)
        if columns[i].priority == 0 or used + need <= width:
            chosen.append(i)
            used += need
    return sorted(chosen)


def _text(cell: str | Cell) -> str:
    return printable(cell.text if isinstance(cell, Cell) else cell)


def _cell(cell: str | Cell) -> Text:
    return Text(_text(cell), style=(cell.style if isinstance(cell, Cell) else None) or "")


class Output:
    """Prints one command's results: JSON, a table fitted to the terminal, or TSV."""

    def __init__(self, *, as_json: bool = False, wide: bool = False) -> None:
        self.as_json = as_json
        """Whether the command was asked for JSON."""
        self.wide = wide
        """Whether every column is shown whatever the terminal's width."""
        self.out = Console(highlight=False)
        """Standard output."""
        self.err = Console(stderr=True, highlight=False, soft_wrap=True)
        """Standard error: warnings, progress, "more" when piped."""

    @property
    def terminal(self) -> bool:
        """Whether standard output is a terminal (else tables become TSV)."""
        return self.out.is_terminal

    def emit(self, value: Any) -> None:
        """Print `value` as JSON."""
        print(to_json(value), flush=True)

    def page(self, items: Sequence[Any], cursor: str | None, **extra: Any) -> None:
        """Print a listing's page as JSON: `{"items": [...], "cursor": ..., **extra}`."""
        self.emit({"items": list(items), "cursor": cursor, **extra})

    def say(self, markup: str) -> None:
        """Print a line of rich markup (stored text in it must come through `safe`)."""
        self.out.print(markup)

    def warn(self, markup: str) -> None:
        """Print a line of rich markup on standard error."""
        self.err.print(markup)

    def table(
        self,
        title: str,
        columns: Sequence[Column],
        rows: Sequence[Row],
        *,
        stash: str,
        cursor: str | None = None,
        empty: str = "nothing to show",
    ) -> None:
        """Print rows as a table fitted to the terminal (TSV when piped), naming `stash`."""
        if not self.terminal:
            self._tsv(columns, rows, cursor)
            return
        shown = list(range(len(columns))) if self.wide else _fits(columns, rows, self.out.width)
        hidden = [i for i in range(len(columns)) if i not in shown]
        if not rows:
            self.out.print(Text(f"{printable(title)}: {empty}", style="bold"))
        elif hidden:
            self._stacked(title, columns, rows, shown, hidden)
        else:
            table = self._table(columns, shown, title=title)
            for row in rows:
                table.add_row(*(_cell(row[i]) for i in shown))
            # --wide: as wide as every column needs, the terminal wrapping what it must.
            needed = sum(_natural(columns, rows)) + 2 * (len(columns) - 1)
            console = self.out
            if self.wide and needed > console.width:
                console = Console(highlight=False, width=needed, force_terminal=True)
            console.print(table)
        self.out.print(Text(f"stash {printable(stash)}", style="dim"), soft_wrap=True)
        if hidden and rows:
            names = ", ".join(columns[i].header for i in hidden)
            self.out.print(Text(f"second line of each row: {names} (--wide: one line)", "dim"))
        if cursor:
            # On a line of its own and never wrapped: the token is copied as it is.
            self.out.print(f"more: --cursor {safe(cursor)}", soft_wrap=True)

    def _table(
        self, columns: Sequence[Column], shown: Sequence[int], *, title: str | None = None,
        widths: Sequence[int] | None = None, header: bool = True,
    ) -> Table:  # fmt: skip
        table = Table(
            title=None if title is None else Text(printable(title), style="bold"),
            title_justify="left", box=None, padding=(0, 1), pad_edge=False,
            header_style="bold underline", show_header=header,
        )  # fmt: skip
        for n, i in enumerate(shown):
            column = columns[i]
            table.add_column(
                column.header, justify=column.justify, no_wrap=not column.wrap, overflow="fold",
                width=None if widths is None else widths[n],
            )  # fmt: skip
        return table

    def _stacked(
        self, title: str, columns: Sequence[Column], rows: Sequence[Row], shown: list[int],
        hidden: list[int],
    ) -> None:  # fmt: skip
        """Print each row on two lines: the columns that fit, then the rest as `name value`.

        Every column is shown, whole, at any width (an 80-column terminal included); the
        first lines align because every row's table has the same fixed widths.
        """
        natural = _natural(columns, rows)
        fixed = [natural[i] for i in shown if not columns[i].wrap]
        wrapped = [i for i in shown if columns[i].wrap]
        room = self.out.width - sum(fixed) - 2 * (len(shown) - 1)
        share = max(_WRAPPED_WIDTH, room // len(wrapped)) if wrapped else 0
        widths = [min(natural[i], share) if columns[i].wrap else natural[i] for i in shown]
        self.out.print(self._table(columns, shown, title=title, widths=widths))
        for row in rows:
            table = self._table(columns, shown, widths=widths, header=False)
            table.add_row(*(_cell(row[i]) for i in shown))
            self.out.print(table)
            # Packed pair by pair, so no line breaks inside a value (a time's date and hour).
            pairs = [f"{columns[i].header} {_text(row[i])}" for i in hidden]
            lines = [pairs[0]]
            for pair in pairs[1:]:
                if cell_len(lines[-1]) + 3 + cell_len(pair) <= self.out.width - 2:
                    lines[-1] += f" · {pair}"
                else:
                    lines.append(pair)
            for line in lines:
                self.out.print(Padding(Text(line, style="dim"), (0, 0, 0, 2)))

    def _tsv(self, columns: Sequence[Column], rows: Sequence[Row], cursor: str | None) -> None:
        lines = ["\t".join(c.header for c in columns)]
        lines += ["\t".join(_text(cell) for cell in row) for row in rows]
        print("\n".join(lines))
        if cursor:
            self.err.print(f"more: --cursor {safe(cursor)}")
