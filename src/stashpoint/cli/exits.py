"""How a command ends: exit statuses, what to do next, and the one error shape.

An error prints one line on stderr (what, which object, what to do next), or with
`--json` one object on stdout: `{"error": {"kind", "message", "object", "hint"}}`. The exit
status says the kind (`EXIT_CODES`); `--debug` adds the traceback and keeps the status.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import NoReturn

from stashpoint.errors import ErrorKind, StashpointError

USAGE = 2
"""Exit status of a usage error (an unknown option, a bad value): click's own."""

EXIT_CODES = {
    ErrorKind.NOT_FOUND: 3,
    ErrorKind.PURGED: 3,
    ErrorKind.SHREDDED: 3,
    ErrorKind.CONFLICT: 4,
    ErrorKind.STORAGE_UNAVAILABLE: 5,
    ErrorKind.CONFIGURATION: 6,
}
"""Exit status per error kind (1 for the others)."""

HELP = (
    "Exit status: 0 done; 1 failed (an unreadable object, an unexpected error); 2 usage "
    "error; 3 not found; 4 conflict (another writer saved first); 5 storage unavailable; "
    '6 configuration. With --json an error is {"error": {...}} on stdout.'
)
"""The exit statuses, as `--help` says them."""

HINTS = {
    ErrorKind.NOT_FOUND: "check the id (stashpoint list, stashpoint runs list)",
    ErrorKind.CONFLICT: "another writer saved first: load the latest revision and retry",
    ErrorKind.STORAGE_UNAVAILABLE: "check the endpoint, credentials and network "
    "(stashpoint doctor)",
    ErrorKind.CONFIGURATION: "check --url / STASHPOINT_URL and the AWS environment",
    ErrorKind.UNSUPPORTED_FORMAT: "upgrade stashpoint to read this object",
    ErrorKind.INVALID_PAYLOAD: "the object is damaged or not a stashpoint envelope; older "
    "revisions may be intact (stashpoint history ID, stashpoint show ID --revision N)",
    ErrorKind.UNSAFE_STORAGE: "remove the symlink from the store folder",
    ErrorKind.INVALID_ARGUMENT: "check the command's arguments (--help)",
    ErrorKind.ARCHIVED: "restore it first: stashpoint restore ID (then run this again)",
    ErrorKind.PURGED: "it was erased on purpose: stashpoint receipts show PURGE_ID says what "
    "and by whom",
    ErrorKind.UNDECRYPTABLE: "open the stash with the encryption settings it was written "
    "with (?encryption=FILE); a tampered or moved object cannot be read",
    ErrorKind.SHREDDED: "its tenant's key was shredded on purpose: stashpoint receipts list",
    ErrorKind.KEY_UNAVAILABLE: "check the key's policy and state (aws kms describe-key) "
    "or the keyring file",
    ErrorKind.RETENTION_LOCKED: "wait until the retain-until date, or clear the legal hold "
    "(stashpoint hold clear ...); nothing was erased",
}
"""What to do next, per error kind (an error may carry a better hint of its own)."""


def fail(exc: StashpointError, *, as_json: bool, debug: bool, hint: str | None = None) -> NoReturn:
    """Report `exc` in the one error shape and exit with its kind's status."""
    from stashpoint.cli.safe import safe
    from stashpoint.errors import IndexDamaged

    if isinstance(exc, IndexDamaged):
        hint = hint or "run `stashpoint reindex` (nothing stored is lost)"
    hint = hint or HINTS.get(exc.kind)
    if debug:
        traceback.print_exception(exc)
    if as_json:
        error = {"kind": exc.kind.value, "message": exc.message, "object": exc.object_name}
        print(json.dumps({"error": {**error, "hint": hint}}))
    else:
        from rich.console import Console

        line = f"{exc}" + (f"; {hint}" if hint else "")
        Console(stderr=True, highlight=False, soft_wrap=True).print(
            f"[red]error[/] ({exc.kind.value}): {safe(line)}"
        )
    sys.exit(EXIT_CODES.get(exc.kind, 1))
