"""Checkpoint commands: list, show, history, diff, export, restore.

A checkpoint id names one of three things, looked for in this order: an agent checkpoint
(a log in `agents`), a log of `stash.logs`, or an envelope checkpoint (`stash.checkpoints`).
`locate` finds which by reading the logs' heads, and the command goes on from that head.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from stashpoint.cli.options import (
    AsJson,
    Cursor,
    Limit,
    NoRedact,
    Redact,
    Url,
    Wide,
    open_stash,
)

if TYPE_CHECKING:
    import stashpoint
    from stashpoint.envelope import CheckpointInfo

app = typer.Typer()
"""The checkpoint commands (registered at the top level)."""

Where = Literal["agent", "checkpoint", "log"]


@dataclass(frozen=True)
class Located:
    """Where an id lives, with the head read to find out."""

    where: Where
    """`agent` (an agent checkpoint's log), `checkpoint` (an envelope) or `log`."""
    head: stashpoint.LogHead | None
    """The log's head (None for an envelope checkpoint)."""


def _agent_logs(stash: stashpoint.Stash) -> stashpoint.LogStore:
    from stashpoint.stores.layout import AGENTS

    return stash.logs_in(AGENTS)


def _head(logs: stashpoint.LogStore, log_id: str) -> stashpoint.LogHead | None:
    import stashpoint

    try:
        return logs.head(log_id)
    except stashpoint.Purged:
        raise  # erased: said so, rather than looked for elsewhere
    except stashpoint.CheckpointNotFound:
        return None


def locate(stash: stashpoint.Stash, checkpoint_id: str) -> Located:
    """Return where `checkpoint_id` lives (an envelope checkpoint when no log has it).

    An id that is none of the three is left to the envelope read to report (`not_found`).
    """
    from stashpoint.ids import validate_id

    validate_id(checkpoint_id)  # "invalid id", whichever of the three it was meant for
    head = _head(_agent_logs(stash), checkpoint_id)
    if head is not None:
        return Located("agent", head)
    head = _head(stash.logs, checkpoint_id)
    return Located("checkpoint", None) if head is None else Located("log", head)


def _document(envelope: stashpoint.Envelope, hide: tuple[str, ...] = ()) -> dict[str, Any]:
    from stashpoint.cli.output import rfc3339
    from stashpoint.cli.redact import redact
    from stashpoint.codec import FORMAT

    document = {"format": FORMAT, **envelope.fields()}
    document["payload"] = redact(document["payload"], hide)
    # Output's times are RFC 3339 with `Z` (the stored form says `+00:00`).
    document["created_at"] = rfc3339(envelope.created_at)
    document["updated_at"] = rfc3339(envelope.updated_at)
    return document


@app.command()
def show(
    checkpoint_id: Annotated[str, typer.Argument(metavar="ID", help="Checkpoint id.")],
    revision: Annotated[int | None, typer.Option(help="An older revision.", min=0)] = None,
    url: Url = None,
    as_json: AsJson = False,
    hide: Redact = None,
    no_redact: NoRedact = False,
) -> None:
    """Show a checkpoint, decoded, as pretty JSON (secret fields hidden).

    An agent checkpoint or an envelope shows its envelope; a log of `stash.logs` shows its
    head (version, state, when written).
    """
    from stashpoint.cli.output import Output
    from stashpoint.cli.redact import parse, redact
    from stashpoint.cli.safe import safe

    output = Output(as_json=as_json)
    names = parse(hide, defaults=not no_redact)
    with open_stash(url, existing=True) as stash:
        found = locate(stash, checkpoint_id)
        if found.where == "log" and found.head is not None:
            document = _log_version(stash.logs, found.head, revision)
            document["state"] = redact(document["state"], names)
            title = f"[bold]{safe(checkpoint_id)}[/] version {document['revision']} (a log)"
        else:
            if found.where == "agent":
                from stashpoint.agent import AgentCheckpoint

                handle = AgentCheckpoint.existing(checkpoint_id, stash.checkpoints)
                envelope = handle.load(revision)[0]
            else:
                envelope = stash.checkpoints.load(checkpoint_id, revision)
            document = _document(envelope, names)
            document.pop("log", None)  # where the cursor stands in the log: not the checkpoint's
            title = (
                f"[bold]{safe(envelope.id)}[/] revision {envelope.revision} ({safe(envelope.kind)})"
            )
    if not as_json:
        output.say(title)
    output.emit(document)


def _log_version(
    logs: stashpoint.LogStore, head: stashpoint.LogHead, version: int | None
) -> dict[str, Any]:
    """Return what a log says at `version` (default: its head): its state, when written."""
    import stashpoint

    if version is None:
        return {"id": head.log_id, "kind": head.kind, "revision": head.version,
                "write_id": head.write_id, "updated_at": head.written_at,
                "state": head.state}  # fmt: skip
    entries = logs.entries(head.log_id, version, version) if version <= head.version else []
    if not entries:
        raise stashpoint.CheckpointNotFound(
            f"no version {version} (the log is at {head.version})", object_name=head.log_id
        )
    entry = entries[0]
    return {"id": head.log_id, "kind": entry.kind, "revision": entry.version,
            "write_id": entry.write_id, "updated_at": entry.written_at,
            "state": entry.state}  # fmt: skip


@app.command("list")
def list_checkpoints(
    prefix: Annotated[
        str, typer.Argument(metavar="PREFIX", help="Only ids starting with this.")
    ] = "",
    limit: Limit = 100,
    cursor: Cursor = None,
    url: Url = None,
    as_json: AsJson = False,
    wide: Wide = False,
) -> None:
    """List checkpoints and logs, a page at a time: id, kind, revision, run, size, time.

    Agent checkpoints, envelope checkpoints and the logs of `stash.logs` are listed
    together by id (`where` says which). No payload is read: one HEAD per envelope, one
    head read per log. One that cannot be read is listed apart (the rest still are).
    """
    import stashpoint
    from stashpoint import StashpointError
    from stashpoint.cli.output import Column, Output, when
    from stashpoint.url import without_credentials

    output = Output(as_json=as_json, wide=wide)
    with open_stash(url, existing=True) as stash:
        agent_logs = _agent_logs(stash)  # one store for the listing and every head
        agents = set(agent_logs.list_ids(prefix))
        plain_logs = set(stash.logs.list_ids(prefix)) - agents
        envelopes = set(stash.checkpoints.list_ids(prefix)) - agents - plain_logs
        ids = sorted(agents | envelopes | plain_logs)
        start = bisect.bisect_right(ids, cursor) if cursor else 0
        chosen = ids[start : start + limit]
        next_cursor = chosen[-1] if start + limit < len(ids) else None
        items: list[dict[str, Any]] = []
        unreadable: list[dict[str, str]] = []
        for checkpoint_id in chosen:
            try:
                if checkpoint_id in agents:
                    item = _log_item(agent_logs.head(checkpoint_id), "agent")
                elif checkpoint_id in plain_logs:
                    item = _log_item(stash.logs.head(checkpoint_id), "log")
                else:
                    item = _envelope_item(stash.checkpoints.describe(checkpoint_id))
            except stashpoint.CheckpointNotFound:
                continue  # deleted since it was listed
            except StashpointError as exc:
                unreadable.append({"id": checkpoint_id, "kind": exc.kind.value, "error": str(exc)})
                continue
            items.append(item)
        where_url = without_credentials(stash.url)
    if as_json:
        output.page(items, next_cursor, unreadable=unreadable)
        return
    columns = [
        Column("id"), Column("kind", 2), Column("rev", 1, justify="right"), Column("where", 4),
        Column("run", 5), Column("bytes", 6, justify="right"), Column("updated", 3),
    ]  # fmt: skip
    rows = [
        [
            i["id"], i["kind"], str(i["revision"]), i["where"], i["run_id"] or "-",
            "-" if i["stored_bytes"] is None else str(i["stored_bytes"]), when(i["updated_at"]),
        ]
        for i in items
    ]  # fmt: skip
    title = f"checkpoints ({len(items)} of {len(ids)})" if next_cursor or start else "checkpoints"
    output.table(title, columns, rows, stash=where_url, cursor=next_cursor)
    for bad in unreadable:
        output.warn(f"[yellow]unreadable[/] {_safe(bad['id'])}: {_safe(bad['error'])}")


def _safe(text: str) -> str:
    from stashpoint.cli.safe import safe

    return safe(text)


def _envelope_item(info: CheckpointInfo) -> dict[str, Any]:
    return {
        "id": info.id, "where": "checkpoint", "kind": info.kind, "revision": info.revision,
        "run_id": info.run_id, "stored_bytes": info.stored_bytes, "updated_at": info.updated_at,
    }  # fmt: skip


def _log_item(head: stashpoint.LogHead, where: Where) -> dict[str, Any]:
    run_id = head.extra.get("run_id")
    return {
        "id": head.log_id, "where": where, "kind": head.kind, "revision": head.version,
        "run_id": run_id if isinstance(run_id, str) else None, "stored_bytes": None,
        "updated_at": head.written_at,
    }  # fmt: skip


@app.command()
def history(
    checkpoint_id: Annotated[str, typer.Argument(metavar="ID", help="Checkpoint id.")],
    limit: Limit = 100,
    cursor: Annotated[
        str | None, typer.Option(metavar="REVISION", help="List revisions below this one.")
    ] = None,
    url: Url = None,
    as_json: AsJson = False,
    wide: Wide = False,
) -> None:
    """List a checkpoint's revisions, newest first (older ones even if the head is damaged).

    For an agent checkpoint or a log, each version is one append (`records` it added).
    """
    from stashpoint.cli.output import Column, Output, when
    from stashpoint.url import without_credentials

    output = Output(as_json=as_json, wide=wide)
    below = _revision_cursor(cursor)
    with open_stash(url, existing=True) as stash:
        found = locate(stash, checkpoint_id)
        if found.head is not None:
            logs = _agent_logs(stash) if found.where == "agent" else stash.logs
            items = _log_revisions(logs, found.head, limit, below)
        else:
            items = _envelope_revisions(stash, checkpoint_id, limit, below, output)
        where_url = without_credentials(stash.url)
    last = items[-1]["revision"] if items else 0
    next_cursor = str(last) if len(items) == limit and last > 0 else None
    if as_json:
        output.page(items, next_cursor)
        return
    columns = [
        Column("revision", justify="right"), Column("written", 1), Column("write id", 3),
        Column("records", 2, justify="right"), Column("bytes", 2, justify="right"),
    ]  # fmt: skip
    rows = [
        [
            str(i["revision"]), when(i["updated_at"]), i["write_id"],
            "-" if i["records"] is None else str(i["records"]), str(i["bytes"]),
        ]
        for i in items
    ]  # fmt: skip
    output.table(f"history of {checkpoint_id}", columns, rows, stash=where_url, cursor=next_cursor)


def _revision_cursor(cursor: str | None) -> int | None:
    import stashpoint

    if cursor is None:
        return None
    if not cursor.isdigit():
        raise stashpoint.InvalidArgument(
            f"--cursor {cursor!r} is not a revision (use the `more: --cursor` a page printed)"
        )
    return int(cursor)


def _log_revisions(
    logs: stashpoint.LogStore, head: stashpoint.LogHead, limit: int, below: int | None
) -> list[dict[str, Any]]:
    import pydantic_core

    top = head.version if below is None else min(head.version, below - 1)
    if top < 0:
        return []
    start = max(0, top - limit + 1)
    return [
        {
            "revision": e.version, "write_id": e.write_id, "updated_at": e.written_at,
            "records": len(e.records), "bytes": len(pydantic_core.to_json(e.records)),
        }
        for e in reversed(logs.entries(head.log_id, start, top))
    ]  # fmt: skip


def _envelope_revisions(
    stash: stashpoint.Stash, checkpoint_id: str, limit: int, below: int | None, output: Any
) -> list[dict[str, Any]]:
    import pydantic_core

    import stashpoint
    from stashpoint.cli.safe import safe

    revisions: list[stashpoint.Envelope] = []
    try:
        revisions = [stash.checkpoints.load(checkpoint_id)]
    except (stashpoint.InvalidPayload, stashpoint.UnsupportedFormat) as exc:
        output.warn(f"[yellow]the head cannot be read[/] ({safe(str(exc))}); older revisions:")
    wanted = limit
    if below is not None and revisions:
        wanted += max(0, revisions[0].revision - below + 1)  # the newer ones are skipped
    if len(revisions) < wanted:
        revisions += stash.checkpoints.history(checkpoint_id, wanted - len(revisions))
    if below is not None:
        revisions = [e for e in revisions if e.revision < below]
    return [
        {
            "revision": e.revision, "write_id": e.write_id, "updated_at": e.updated_at,
            "records": None, "bytes": len(pydantic_core.to_json(e.payload)),
        }
        for e in revisions[:limit]
    ]  # fmt: skip


@app.command()
def diff(
    checkpoint_id: Annotated[str, typer.Argument(metavar="ID", help="Checkpoint id.")],
    rev_a: Annotated[int, typer.Argument(metavar="FROM", help="Older revision.")],
    rev_b: Annotated[int, typer.Argument(metavar="TO", help="Newer revision.")],
    url: Url = None,
    as_json: AsJson = False,
    hide: Redact = None,
    no_redact: NoRedact = False,
) -> None:
    """Show what changed in a checkpoint's payload between two revisions (secrets hidden).

    Paths are JSON Pointers (RFC 6901) into the envelope: `/payload/items/3`. Exit status
    0 whether or not the revisions differ (unlike `git diff --exit-code`): test with
    `--json` and the length of `changes`; 3 when a revision is not found.
    """
    import json

    from stashpoint.cli.output import Output
    from stashpoint.cli.redact import parse, redact
    from stashpoint.cli.safe import safe

    output = Output(as_json=as_json)
    names = parse(hide, defaults=not no_redact)
    with open_stash(url, existing=True) as stash:
        a = stash.checkpoints.load(checkpoint_id, rev_a)
        b = stash.checkpoints.load(checkpoint_id, rev_b)
    lines = changes(redact(a.payload, names), redact(b.payload, names))
    if as_json:
        output.emit({"id": checkpoint_id, "from": rev_a, "to": rev_b, "changes": lines})
        return
    output.say(f"[bold]{safe(checkpoint_id)}[/]: revision {rev_a} -> {rev_b}")
    if not lines:
        output.say("no changes")
    styles = {"+": "green", "-": "red", "~": "yellow"}
    for line in lines:
        if line["op"] == "~":
            value = f"{json.dumps(line['old'])} -> {json.dumps(line['new'])}"
        else:
            value = json.dumps(line.get("new", line.get("old")))
        output.say(
            f"[{styles[line['op']]}]{safe(line['op'] + ' ' + line['path'] + ': ' + value)}[/]"
        )


def pointer(parts: list[Any]) -> str:
    """Return a JSON Pointer (RFC 6901) to `parts` under `/payload`."""
    escaped = (str(p).replace("~", "~0").replace("/", "~1") for p in parts)
    return "/payload" + "".join(f"/{p}" for p in escaped)


def changes(old: Any, new: Any) -> list[dict[str, Any]]:
    """Return the changes from `old` to `new`: `{op: + - ~, path: JSON Pointer, old, new}`."""
    from deepdiff import DeepDiff

    lines: list[dict[str, Any]] = []
    tree = DeepDiff(old, new, view="tree")
    for kind, levels in tree.items():
        for level in levels:
            path = pointer(level.path(output_format="list"))
            if kind in ("dictionary_item_added", "iterable_item_added"):
                lines.append({"op": "+", "path": path, "new": level.t2})
            elif kind in ("dictionary_item_removed", "iterable_item_removed"):
                lines.append({"op": "-", "path": path, "old": level.t1})
            else:
                lines.append({"op": "~", "path": path, "old": level.t1, "new": level.t2})
    return sorted(lines, key=lambda line: line["path"])


@app.command()
def export(
    out_file: Annotated[
        Path,
        typer.Option(
            "--out", metavar="FILE", help="JSONL file to write (zstd-compressed if it ends .zst)."
        ),
    ],
    prefix: Annotated[
        str | None,
        typer.Option(metavar="PREFIX", help="Checkpoints and logs whose id starts with this."),
    ] = None,
    run: Annotated[
        list[str] | None, typer.Option(metavar="RUN_ID", help="A run id (repeatable).")
    ] = None,
    with_history: Annotated[
        bool, typer.Option("--history", help="Older revisions of envelope checkpoints too.")
    ] = False,
    hide: Annotated[
        str | None,
        typer.Option(
            "--redact",
            metavar="NAMES",
            help="Field names to hide, comma-separated (none by default).",
        ),
    ] = None,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Export checkpoints, logs (agent transcripts) and runs as JSON Lines, streamed.

    A log (an agent checkpoint's transcript, or one of `stash.logs`) is read a window of
    sealed segments at a time, one line per version, so memory stays bounded however long
    it is. `--out x.jsonl.zst` compresses. The file is created readable by its owner only
    (0600) and appears whole or not at all: it is written beside its destination and
    renamed over it at the end, so a failed or empty export never truncates an existing
    file. Unreadable objects are skipped and listed (exit status 1).
    """
    from stashpoint.cli.export import run_export

    if prefix is None and not run:
        raise typer.BadParameter("give --prefix and/or --run")
    with open_stash(url, existing=True) as stash:
        code = run_export(
            stash, out_file.expanduser(), prefix=prefix, runs=run or [],
            with_history=with_history, hide=hide, as_json=as_json, document=_document,
        )  # fmt: skip
    if code:
        raise typer.Exit(code)


@app.command()
def restore(
    checkpoint_id: Annotated[str, typer.Argument(metavar="ID", help="Checkpoint, run or log id.")],
    days: Annotated[int, typer.Option(help="Days the restored copies stay.", min=1)] = 7,
    tier: Annotated[
        str, typer.Option(metavar="TIER", help="Retrieval tier: expedited, standard or bulk.")
    ] = "standard",
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Restore a checkpoint's or log's archived objects (S3 Glacier tiers) so they read.

    Requests a restore of every archived sealed segment of an agent checkpoint, run or log
    (or of every archived old revision of an envelope checkpoint); run it again to see how
    far the restores are. Objects still in the standard tier are left alone.
    """
    import dataclasses

    from stashpoint.cli.output import Column, Output
    from stashpoint.stores.layout import RUN_LOGS
    from stashpoint.stores.objects import RESTORE_TIERS
    from stashpoint.url import without_credentials

    output = Output(as_json=as_json)
    chosen = next((t for t in RESTORE_TIERS if t.lower() == tier.lower()), tier)
    with open_stash(url) as stash:
        found = locate(stash, checkpoint_id)
        run_logs = stash.logs_in(RUN_LOGS)
        if found.where == "agent":
            what, report = (
                "agent checkpoint log",
                _agent_logs(stash).restore(checkpoint_id, days, chosen),
            )
        elif found.where == "log":
            what, report = "log", stash.logs.restore(checkpoint_id, days, chosen)
        elif _head(run_logs, checkpoint_id) is not None:
            what, report = "run log", run_logs.restore(checkpoint_id, days, chosen)
        else:
            what = "checkpoint revisions"
            report = stash.checkpoints.restore(checkpoint_id, days, chosen)
        where_url = without_credentials(stash.url)
    if as_json:
        output.emit({"id": checkpoint_id, "what": what, "readable": report.readable,
                     **dataclasses.asdict(report)})  # fmt: skip
        return
    columns = [
        Column(h, justify="right")
        for h in ("objects", "not archived", "restored", "in progress", "requested now")
    ]
    row = [str(report.objects), str(report.not_archived), str(report.restored),
           str(report.in_progress), str(report.started)]  # fmt: skip
    output.table(f"restore {checkpoint_id} ({what})", columns, [row], stash=where_url)
    if report.readable:
        output.say("every object is readable now")
    else:
        output.say(
            f"{report.started + report.in_progress} restore(s) under way ({chosen}: Glacier "
            "takes minutes to hours, Deep Archive up to 48 hours); run this again to see "
            "progress"
        )
