"""The `stashpoint` command: look around a stash, repair its index, check a deployment.

The commands live by group: `checkpoints` (list, show, history, diff, export, restore),
`runs`, `threads`, `agents`, `admin` (reindex, gc, repair, doctor, demo), `purges`
(purge, receipts, hold), `keys` (keys list/rotate, decrypt) and `archive` (project,
query). Modules load typer alone when they are imported; each command imports the library
when it runs, so `--help` and `--version` stay quick (`bench/cli_startup_bench.py`).

Every command takes `--url` (else the global `--url`, else `STASHPOINT_URL`, else
./.stashpoint) and `--json`. Errors print one line (what, which object, what to do) and
exit with the status of their kind (`stashpoint.cli.exits`); `--debug`, anywhere on the
line, adds the traceback.
"""

from __future__ import annotations

import json
import os
import sys

import typer

from stashpoint.cli import (
    admin,
    agents,
    archive,
    checkpoints,
    durable,
    keys,
    purges,
    runs,
    threads,
)
from stashpoint.cli.exits import HELP, USAGE, fail
from stashpoint.cli.options import settings

app = typer.Typer(
    name="stashpoint",
    epilog=HELP,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # plain click help: no rich import, flags shown as flags
    context_settings={"help_option_names": ["-h", "--help"]},
)
"""The root command."""
app.registered_commands += checkpoints.app.registered_commands
app.registered_commands += admin.app.registered_commands
app.add_typer(runs.app, name="runs")
app.add_typer(threads.app, name="threads")
app.add_typer(durable.app, name="durable")
app.add_typer(agents.app, name="agent")
app.registered_commands += purges.app.registered_commands
app.add_typer(purges.receipts, name="receipts")
app.add_typer(keys.app, name="keys")
app.registered_commands += keys.commands.registered_commands
app.registered_commands += archive.app.registered_commands


@app.callback()
def _root() -> None:
    """Durable, versioned checkpoints for batch jobs and AI agents.

    \b
    Options before the command:
      --url URL   stash URL for every command (else STASHPOINT_URL, else ./.stashpoint)
      --debug     show tracebacks on errors (also anywhere after the command)
      --version   print the version
    """


def _global_options(args: list[str]) -> list[str]:
    """Take the root options out of `args` (they are read here, not by typer).

    Typer would build a validator for each (it imports pydantic to do so), which would cost
    every command, `--help` included, a fifth of a second.
    """
    rest: list[str] = []
    words = iter(args)
    for word in words:
        if word == "--debug":
            settings.debug = True  # wherever it is given
        elif rest and not rest[0].startswith("-"):
            rest.append(word)  # after the command: the command's own
        elif word == "--version":
            from importlib.metadata import version

            print(f"stashpoint {version('stashpoint')}")
            sys.exit(0)
        elif word == "--url":
            settings.url = next(words, None)
        elif word.startswith("--url="):
            settings.url = word.removeprefix("--url=")
        else:
            rest.append(word)
    settings.url = settings.url or os.environ.get("STASHPOINT_URL") or None
    return rest


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `stashpoint` console script."""
    from stashpoint.errors import StashpointError

    args = _global_options(list(sys.argv[1:] if argv is None else argv))
    as_json = "--json" in args
    try:
        # Without standalone mode click hands back typer.Exit codes instead of exiting.
        code = app(args=args, prog_name="stashpoint", standalone_mode=False)
    except StashpointError as exc:
        fail(exc, as_json=as_json, debug=settings.debug)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("aborted", file=sys.stderr)
        sys.exit(130)
    except Exception as exc:  # usage errors (typer's own click) and the unexpected
        show, exit_code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(exit_code, int):
            message = getattr(exc, "format_message", None)
            if as_json and callable(message):  # the one error shape, usage errors too
                error = {"kind": "usage", "message": message(), "object": None,
                         "hint": "check the command's arguments (--help)"}  # fmt: skip
                print(json.dumps({"error": error}))
            else:
                show()
            sys.exit(exit_code or USAGE)
        if settings.debug:
            raise
        from stashpoint.cli.safe import printable

        print(f"error: {printable(f'{type(exc).__name__}: {exc}')} (--debug for details)",
              file=sys.stderr)  # fmt: skip
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
