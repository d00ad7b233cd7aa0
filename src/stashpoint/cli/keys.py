"""Client-side encryption: `keys list`, `keys rotate`, and `decrypt` (an object to JSON)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from stashpoint.cli.options import AsJson, Url, open_stash

app = typer.Typer(
    no_args_is_help=True,
    help="Client-side encryption keys: list tenants, rotate master keys (?encryption=FILE).",
)
"""The `keys` group."""
commands = typer.Typer()
"""`decrypt` (registered at the top level)."""


def _encryption(stash: Any) -> Any:
    from stashpoint.errors import ConfigurationError

    if stash.encryption is None:
        raise ConfigurationError(
            "this stash is opened without encryption: add ?encryption=FILE to the URL or set "
            "STASHPOINT_ENCRYPTION"
        )
    return stash.encryption


@app.command("list")
def list_keys(url: Url = None, as_json: AsJson = False) -> None:
    """List the encryption tenants: which ids each covers, and its master key."""
    from stashpoint.cli.output import Column, Output

    output = Output(as_json=as_json)
    from stashpoint.url import without_credentials

    with open_stash(url) as stash:
        encryption = _encryption(stash)
        shown = without_credentials(stash.url)
    tenants = [
        {"tenant": r.tenant, "prefix": r.prefix, "namespaces": list(r.namespaces), "key": r.key}
        for r in encryption.rules
    ]
    if as_json:
        output.emit({"tenants": tenants})
        return
    rows = [
        [t["tenant"], t["prefix"] or "*", ",".join(t["namespaces"]) or "*", t["key"]]
        for t in tenants
    ]
    columns = [Column("tenant"), Column("ids"), Column("namespaces", 1), Column("master key")]
    output.table("encryption tenants", columns, rows, stash=shown, empty="no tenant")


@app.command("rotate")
def rotate(
    tenant: Annotated[
        str | None, typer.Option(metavar="NAME", help="Only this tenant (default: every one).")
    ] = None,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Give master keys new material and re-wrap data keys under it (no data rewritten)."""
    from stashpoint.cli.output import Output
    from stashpoint.cli.safe import safe

    output = Output(as_json=as_json)
    with open_stash(url) as stash:
        _encryption(stash)
        done = stash.admin.rotate_keys(tenant)
    if as_json:
        rotated = [{"tenant": r.tenant, "master": r.master, "rewrapped": r.rewrapped} for r in done]
        output.emit({"rotated": rotated})
        return
    for rotation in done:
        output.say(
            f"{safe(rotation.tenant)}: {safe(rotation.master)}; {rotation.rewrapped} data "
            "key(s) re-wrapped"
        )


@commands.command()
def decrypt(
    key: Annotated[
        str | None,
        typer.Argument(metavar="KEY", help="An object key under the stash prefix."),
    ] = None,
    file: Annotated[
        Path | None,
        typer.Option("--file", metavar="PATH", help="An encrypted object copied out of storage."),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", metavar="PATH", help="Write the zstd frame there (zstd -d | jq)."),
    ] = None,
    url: Url = None,
) -> None:
    """Print the JSON an encrypted object holds (or write its zstd frame with --out).

    KEY is read from the stash (checkpoints/ID, agents/ID/00000000000000000003, ...);
    --file reads a copied object, checked against the key its header names.
    """
    import json

    from stashpoint.errors import InvalidArgument
    from stashpoint.stores.objects import GetObject

    if (key is None) == (file is None):
        raise InvalidArgument("give an object KEY or --file PATH (one of them)")
    with open_stash(url, existing=True) as stash:
        _encryption(stash)
        if file is not None:
            try:
                body = file.read_bytes()
            except OSError as exc:
                raise InvalidArgument(
                    f"cannot read {file.name}: {type(exc).__name__}", object_name=str(file)
                ) from None
            plaintext = stash.admin.decrypt(body)
        else:
            assert key is not None
            full = f"{stash.layout.prefix}/{key}" if stash.layout.prefix else key
            info = stash.driver(GetObject(full))
            if info is None or info.body is None:
                from stashpoint.errors import CheckpointNotFound

                raise CheckpointNotFound("no object under this key", object_name=key)
            plaintext = info.body
        if out is not None:
            out.write_bytes(plaintext)
            return
        document = json.loads(stash.codec.unwrap(plaintext, name=key or str(file)))
    sys.stdout.write(json.dumps(document, indent=2, sort_keys=False, default=str) + "\n")
