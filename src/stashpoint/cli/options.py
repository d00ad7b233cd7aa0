"""The options commands share, and the settings the whole command line shares.

Imports stay light (typer alone): `stashpoint --help` and `--version` must not load the
library's models or boto3 (`bench/cli_startup_bench.py`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from stashpoint.stash import Stash


@dataclass
class Settings:
    """What the root command's options set for the command that runs."""

    url: str | None = None
    """The global `--url` (else `STASHPOINT_URL`)."""
    debug: bool = False
    """Whether errors show their traceback (`--debug`, anywhere on the line)."""


settings = Settings()
"""The settings of this invocation (one per process)."""

Url = Annotated[
    str | None,
    typer.Option(
        "--url", metavar="URL",
        help="Stash URL: local://PATH or s3://BUCKET/PREFIX?index=dynamodb://TABLE (else the "
        "global --url, STASHPOINT_URL, ./.stashpoint).",
    ),
]  # fmt: skip
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON (docs/cli/schemas).")]
Wide = Annotated[bool, typer.Option("--wide", help="Show every column, whatever the width.")]
Limit = Annotated[int, typer.Option(help="Rows per page.", min=1, max=1000)]
Cursor = Annotated[
    str | None, typer.Option(metavar="CURSOR", help="Cursor of the next page (from `more:`).")
]
Redact = Annotated[
    str | None,
    typer.Option(
        "--redact", metavar="NAMES",
        help="More field names to hide, comma-separated (api_key, authorization, password, "
        "secret, token... are hidden by default).",
    ),
]  # fmt: skip
NoRedact = Annotated[bool, typer.Option("--no-redact", help="Show every field, secrets included.")]
Namespace = Annotated[str, typer.Option(metavar="NAME", help="Run namespace.")]


def open_stash(url: str | None, *, existing: bool = False) -> Stash:
    """Open the stash named by `url` (else `--url` / `STASHPOINT_URL` / the default).

    `existing` (read commands): a local stash whose folder is missing is `not_found`
    naming the URL, rather than an empty stash (a typo, or another folder).
    """
    import stashpoint
    from stashpoint.url import parse_url, resolve_url

    resolved = resolve_url(url or settings.url)
    if resolved.startswith("memory://"):
        import sys

        print(
            "warning: memory:// lives in this process alone: each command starts with an "
            "empty stash (use local://PATH to keep what a command writes)",
            file=sys.stderr,
        )
    if existing:
        parsed = parse_url(resolved)
        if parsed.scheme == "local" and not Path(parsed.location).expanduser().exists():
            raise stashpoint.CheckpointNotFound(
                f"no stash at {resolved}: its folder does not exist (check --url or "
                "STASHPOINT_URL; the default is ./.stashpoint in the current folder)"
            )
    return stashpoint.open(resolved)
