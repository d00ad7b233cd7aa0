"""The `stashpoint` command: look around a stash, repair its index, check a deployment.

The commands live by group: `checkpoints` (list, show, history, diff, export, restore),
`runs`, `threads`, `agents` and `admin` (reindex, gc, repair, doctor, demo). Modules load
typer alone when they are imported; each command imports the library when it runs, so
`--help` and `--version` stay quick (`bench/cli_startup_bench.py`).

Every command takes `--url` (else the global `--url`, else `STASHPOINT_URL`, else
./.stashpoint) and `--json`. Errors print one line (what, which object, what to do) and
exit with the status of their kind (`stashpoint.cli.exits`); `--debug`, anywhere on the
line, adds the traceback.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from stashpoint.cli import admin, agents, checkpoints, runs, threads
from stashpoint.cli.exits import HELP, USAGE, fail
from stashpoint.cli.options import settings

app = typer.Typer(
    name="stashpoint",
    help="Durable, versioned checkpoints for batch jobs and AI agents.",
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
app.add_typer(agents.app, name="agent")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        print(f"stashpoint {version('stashpoint')}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: Annotated[
        bool, typer.Option("--debug", help="Show tracebacks on errors (anywhere on the line).")
    ] = False,
    url: Annotated[
        str | None,
        typer.Option(
            "--url", envvar="STASHPOINT_URL", metavar="URL", help="Stash URL for every command."
        ),
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    settings.debug = settings.debug or debug
    settings.url = url


def main(argv: list[str] | None = None) -> None:
    """Entry point of the `stashpoint` console script."""
    from stashpoint.errors import StashpointError

    args = list(sys.argv[1:] if argv is None else argv)
    if "--debug" in args:  # a global flag, wherever it is given
        args.remove("--debug")
        settings.debug = True
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
            show()
            sys.exit(exit_code or USAGE)
        if settings.debug:
            raise
        from stashpoint.cli.safe import printable

        print(f"error: {printable(f'{type(exc).__name__}: {exc}')} (--debug for details)",
              file=sys.stderr)  # fmt: skip
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
