"""Erasure: `purge` (with its receipt), `receipts list/show`, `hold set|clear`."""

from __future__ import annotations

import re
from datetime import timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from stashpoint.cli.options import AsJson, Url, Wide, open_stash

if TYPE_CHECKING:
    from stashpoint.maintenance.purge import PurgeReceipt, Selector

app = typer.Typer()
"""`purge` and `hold` (registered at the top level)."""
receipts = typer.Typer(no_args_is_help=True, help="Erasure receipts: what purges removed.")
"""The `receipts` group."""

Checkpoint = Annotated[str | None, typer.Option(metavar="ID", help="A checkpoint id.")]
Agent = Annotated[str | None, typer.Option(metavar="ID", help="An agent checkpoint id.")]
Run = Annotated[str | None, typer.Option(metavar="ID", help="A run id.")]
Thread = Annotated[str | None, typer.Option(metavar="ID", help="A LangGraph thread id.")]
Conversation = Annotated[
    str | None, typer.Option(metavar="NS/ID", help="A durable conversation: namespace/id.")
]
Log = Annotated[str | None, typer.Option(metavar="ID", help="A log of stash.logs.")]
Values = Annotated[
    str | None,
    typer.Option(
        metavar="NS/OWNER",
        help="An owner's values: temporal-payloads/OWNER (a workflow's payloads) or "
        "durable-values/OWNER (an execution's values).",
    ),
]
Prefix = Annotated[str | None, typer.Option(metavar="PREFIX", help="Every id starting with it.")]
Namespace = Annotated[
    str | None,
    typer.Option(
        metavar="NAME",
        help="Only this namespace: checkpoints, agents, conversations, runs, threads, logs, "
        "temporal-payloads, durable-values, ...",
    ),
]

_AGE = re.compile(r"(\d+(?:\.\d+)?)([smhdw])")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def _age(text: str | None) -> timedelta | None:
    """Return `400d`, `12h`, `2w`, `90m`, `30s` as a duration."""
    if text is None:
        return None
    match = _AGE.fullmatch(text.strip())
    if match is None:
        raise typer.BadParameter(f"{text!r}: use a number and s, m, h, d or w (400d)")
    return timedelta(seconds=float(match[1]) * _UNITS[match[2]])


def _namespaced(text: str | None) -> tuple[str, str] | None:
    if text is None:
        return None
    namespace, slash, conversation_id = text.partition("/")
    if not slash:
        raise typer.BadParameter(f"{text!r}: use NAMESPACE/ID")
    return namespace, conversation_id


def _selector(**given: Any) -> Selector:
    """Return the library's selection from the options given (those not given left out)."""
    if given.get("conversation") is not None:
        given["conversation"] = _namespaced(given["conversation"])
    if given.get("values") is not None:
        given["values"] = _namespaced(given["values"])
    if given.get("older_than") is not None:
        given["older_than"] = _age(given["older_than"])
    chosen = {name: value for name, value in given.items() if value not in (None, False)}
    return cast("Selector", chosen)


def receipt_json(receipt: PurgeReceipt, *, versions: bool = True) -> dict[str, Any]:
    """Return a receipt as `--json` prints it (`docs/cli/schemas/purge.schema.json`)."""
    document: dict[str, Any] = {
        "purge_id": receipt.purge_id,
        "status": receipt.status,
        "actor": receipt.actor,
        "started_at": receipt.started_at,
        "finished_at": receipt.finished_at,
        "selector": receipt.selector,
        "targets": [{"namespace": t.namespace, "id": t.object_id} for t in receipt.targets],
        "objects": receipt.objects,
        "bytes": receipt.bytes,
        "index_items": receipt.index_items,
        "blobs": receipt.blobs,
        "kept_blobs": receipt.kept_blobs,
        "kept": receipt.kept,
        "verified": receipt.verified,
        "reusable": receipt.reusable,
        "unreadable": receipt.unreadable,
        "shredded": receipt.shredded,
        "spared": receipt.spared,
        "keyless": receipt.keyless,
        "beyond_reach": receipt.beyond_reach,
    }
    if versions:
        document["removed"] = [
            {"key": v.key, "version_id": v.version_id, "bytes": v.bytes} for v in receipt.removed
        ]
    return document


def _summary(receipt: PurgeReceipt) -> str:
    from stashpoint.cli.safe import safe

    if receipt.status == "dry_run":
        return (
            f"dry run: would purge {len(receipt.targets)} id(s): {receipt.objects} version(s), "
            f"{receipt.bytes} bytes; nothing was written"
        )
    check = "verified" if receipt.verified else "NOT verified: resume it (purge --resume)"
    if receipt.shredded:
        return (
            f"shredded: {'; '.join(safe(line) for line in receipt.shredded)}; "
            f"{receipt.objects} data-key version(s) removed; {check}; receipt "
            f"{safe(receipt.purge_id)}"
        )
    said = (
        f"purged {len(receipt.targets)} id(s): {receipt.objects} version(s), {receipt.bytes} "
        f"bytes, {receipt.index_items} index item(s), {len(receipt.blobs)} blob(s) removed; "
        f"{receipt.kept} tombstone(s) and marker(s) kept; {check}; receipt "
        f"{safe(receipt.purge_id)}"
    )
    if receipt.spared:
        said += f"; {len(receipt.spared)} id(s) written since they were chosen left whole"
    if receipt.beyond_reach:
        said += f"; not reached: {safe(receipt.beyond_reach)}"
    return said


@app.command()
def purge(
    checkpoint: Checkpoint = None,
    agent: Agent = None,
    run: Run = None,
    thread: Thread = None,
    conversation: Conversation = None,
    log: Log = None,
    values: Values = None,
    prefix: Prefix = None,
    namespace: Namespace = None,
    older_than: Annotated[
        str | None,
        typer.Option(metavar="AGE", help="Only ids last written longer ago (400d, 12h, 2w)."),
    ] = None,
    all_of_namespace: Annotated[
        bool,
        typer.Option("--all-of-namespace", help="Allow an empty prefix: every id (of NAME)."),
    ] = False,
    reusable: Annotated[
        bool, typer.Option("--reusable", help="Let the ids be created again afterwards.")
    ] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the plan; erase nothing.")] = (
        False
    ),
    resume: Annotated[
        bool, typer.Option("--resume", help="Finish every purge a crash left open.")
    ] = False,
    confirm_shred: Annotated[
        bool,
        typer.Option(
            "--confirm-shred",
            help="With --resume: also carry on open shreds (they retire a tenant's keys).",
        ),
    ] = False,
    actor: Annotated[
        str | None, typer.Option(metavar="WHO", help="Who asks (default: STS or user@host).")
    ] = None,
    tenant: Annotated[
        str | None, typer.Option(metavar="NAME", help="With --shred: an encryption tenant.")
    ] = None,
    shred: Annotated[
        bool,
        typer.Option(
            "--shred",
            help="Crypto-shred --tenant: retire its master key, erase its data keys; every "
            "object of it becomes unreadable, locked or not.",
        ),
    ] = False,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Erase ids for good: every version, segment, value, index item; write a receipt.

    One id (--checkpoint, --agent, --run, --thread, --conversation NS/ID, --log), or
    every id of a --prefix (in every namespace, or --namespace NAME), or --older-than AGE
    (a retention policy). An empty prefix needs --all-of-namespace. Versions S3 Object
    Lock keeps refuse the whole purge (exit 1, naming them). A tombstone stays per id:
    later writes to it are refused (unless --reusable). --tenant NAME --shred erases an
    encryption tenant by its keys instead (KMS deletion scheduled, or keyring entry gone).
    """
    from stashpoint.cli.output import Output

    output = Output(as_json=as_json)
    with open_stash(url) as stash:
        if resume:
            done = stash.admin.resume_purges(confirm_shred=confirm_shred)
            if as_json:
                output.page([receipt_json(r, versions=False) for r in done], None)
            else:
                output.say(f"resumed {len(done)} open purge(s)")
                for receipt in done:
                    output.say(_summary(receipt))
            return
        chosen = _selector(
            checkpoint=checkpoint, agent=agent, run=run, thread=thread,
            conversation=conversation, log=log, values=values, prefix=prefix, namespace=namespace,
            older_than=older_than, all_of_namespace=all_of_namespace, tenant=tenant,
            shred=shred,
        )  # fmt: skip
        receipt = stash.admin.purge(reusable=reusable, dry_run=dry_run, actor=actor, **chosen)
    if as_json:
        output.emit(receipt_json(receipt))
        return
    output.say(_summary(receipt))


@receipts.command("list")
def list_receipts(url: Url = None, as_json: AsJson = False, wide: Wide = False) -> None:
    """List the erasure receipts, oldest first."""
    from stashpoint.cli.output import Column, Output, when
    from stashpoint.url import without_credentials

    output = Output(as_json=as_json, wide=wide)
    with open_stash(url, existing=True) as stash:
        found = [
            stash.admin.purge_receipt(purge_id) for purge_id in stash.logs_in("purges").list_ids()
        ]
        shown = without_credentials(stash.url)
    if as_json:
        output.page([receipt_json(r, versions=False) for r in found], None)
        return
    columns = [
        Column("purge"), Column("status"), Column("started", 1), Column("ids", 2, justify="right"),
        Column("versions", 2, justify="right"), Column("actor", 3),
    ]  # fmt: skip
    rows = [
        [r.purge_id, r.status, when(r.started_at), str(len(r.targets)), str(r.objects), r.actor]
        for r in found
    ]
    output.table("receipts", columns, rows, stash=shown, empty="no purge yet")


@receipts.command("show")
def show_receipt(
    purge_id: Annotated[str, typer.Argument(metavar="PURGE_ID")],
    versions: Annotated[
        bool, typer.Option("--versions", help="List every version removed.")
    ] = False,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Show one erasure receipt: what was removed, when, by whom, verified or not."""
    from stashpoint.cli.output import Output, when
    from stashpoint.cli.safe import safe

    output = Output(as_json=as_json)
    with open_stash(url, existing=True) as stash:
        receipt = stash.admin.purge_receipt(purge_id)
    if as_json:
        output.emit(receipt_json(receipt))
        return
    output.say(_summary(receipt))
    output.say(f"by {safe(receipt.actor)}, {when(receipt.started_at)} to "
               f"{when(receipt.finished_at)}")  # fmt: skip
    for target in receipt.targets:
        output.say(f"  {safe(str(target))}")
    if versions:
        for version in receipt.removed:
            output.say(f"  {safe(version.key)} {safe(version.version_id)} {version.bytes}")


class HoldAction(StrEnum):
    """What `hold` does."""

    SET = "set"
    CLEAR = "clear"


@app.command()
def hold(
    action: Annotated[HoldAction, typer.Argument(metavar="set|clear", help="What to do.")],
    checkpoint: Checkpoint = None,
    agent: Agent = None,
    run: Run = None,
    thread: Thread = None,
    conversation: Conversation = None,
    log: Log = None,
    values: Values = None,
    prefix: Prefix = None,
    namespace: Namespace = None,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Set or clear a legal hold on every version of an id: no purge or delete removes it."""
    from stashpoint.cli.output import Output

    output = Output(as_json=as_json)
    on = action is HoldAction.SET
    chosen = _selector(
        checkpoint=checkpoint, agent=agent, run=run, thread=thread, conversation=conversation,
        log=log, values=values, prefix=prefix, namespace=namespace,
        all_of_namespace=prefix == "",
    )  # fmt: skip
    with open_stash(url) as stash:
        count = stash.admin.legal_hold(on, **chosen)
    if as_json:
        output.emit({"legal_hold": on, "versions": count})
    else:
        output.say(f"legal hold {'set on' if on else 'cleared from'} {count} version(s)")
