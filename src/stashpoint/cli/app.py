"""The `stashpoint` command: look around a stash, repair its index, check a deployment.

Every command takes `--url` (else `STASHPOINT_URL`, else the embedded default) and `--json`
for machine-readable output. Errors print one line (what, which object, what to do) and
exit non-zero; `--debug` shows the traceback.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import pydantic_core
import typer
from rich.console import Console
from rich.table import Table

import stashpoint
from stashpoint import AttemptStatus, RunStatus, StashpointError
from stashpoint.cli.redact import parse, redact
from stashpoint.cli.safe import safe
from stashpoint.cli.tables import runs_table, when
from stashpoint.codec import FORMAT
from stashpoint.errors import ErrorKind
from stashpoint.runs.store import summary_of
from stashpoint.url import parse_url, resolve_url

app = typer.Typer(
    name="stashpoint",
    help="Durable, versioned checkpoints for batch jobs and AI agents.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
runs_app = typer.Typer(help="Graph runs: list and inspect.", no_args_is_help=True)
app.add_typer(runs_app, name="runs")
agent_app = typer.Typer(help="Agent checkpoints: settle interrupted turns.", no_args_is_help=True)
app.add_typer(agent_app, name="agent")
threads_app = typer.Typer(
    help="LangGraph threads (stashpoint.langgraph): list and inspect.", no_args_is_help=True
)
app.add_typer(threads_app, name="threads")

# Pipes and CI logs get wide tables rather than ids cut at 80 columns.
out = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
err = Console(stderr=True, highlight=False, soft_wrap=True)

Url = Annotated[
    str | None,
    typer.Option("--url", help="Stash URL (else the global --url, STASHPOINT_URL, local folder)."),
]
AsJson = Annotated[bool, typer.Option("--json", help="Machine-readable JSON output.")]
Redact = Annotated[
    str | None,
    typer.Option(
        "--redact",
        help="More field names to hide, comma-separated (api_key, authorization, password, "
        "secret, token... are hidden by default).",
    ),
]
NoRedact = Annotated[bool, typer.Option("--no-redact", help="Show every field, secrets included.")]

EXIT_CODES = {
    ErrorKind.NOT_FOUND: 3,
    ErrorKind.CONFLICT: 4,
    ErrorKind.STORAGE_UNAVAILABLE: 5,
    ErrorKind.CONFIGURATION: 6,
}
"""Exit status per error kind (1 for the others)."""

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
}
"""What to do next, per error kind."""

_state: dict[str, Any] = {"debug": False, "url": None}


def _version(value: bool) -> None:
    if value:
        out.print(f"stashpoint {stashpoint.__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False,
    url: Annotated[
        str | None,
        typer.Option("--url", envvar="STASHPOINT_URL", help="Stash URL for every command."),
    ] = None,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    _state["debug"] = debug
    _state["url"] = url


def _emit(data: Any) -> None:
    out.print_json(pydantic_core.to_json(data).decode(), indent=2)


def _open(url: str | None, *, existing: bool = False) -> stashpoint.Stash:
    """Open the stash named by `url` (else `--url` / `STASHPOINT_URL` / the default).

    `existing` (read commands): a local stash whose folder is missing is `not_found`
    naming the URL, rather than an empty stash (a typo, or another folder).
    """
    resolved = resolve_url(url or _state["url"])
    if existing:
        parsed = parse_url(resolved)
        if parsed.scheme == "local" and not Path(parsed.location).expanduser().exists():
            raise stashpoint.CheckpointNotFound(
                f"no stash at {resolved}: its folder does not exist (check --url or "
                "STASHPOINT_URL; the default is ./.stashpoint in the current folder)"
            )
    return stashpoint.open(resolved)


def _since(value: str | None) -> datetime | None:
    """Parse `--since`: an ISO date/time, or a duration like 30m, 12h, 7d."""
    if value is None:
        return None
    units = {"m": "minutes", "h": "hours", "d": "days"}
    if value[-1:] in units and value[:-1].isdigit():
        return datetime.now(UTC) - timedelta(**{units[value[-1]]: int(value[:-1])})
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(f"{value!r}: use an ISO date/time or 30m, 12h, 7d") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _agent_logs(stash: stashpoint.Stash) -> stashpoint.LogStore:
    """Return the logs agent checkpoints keep their transcripts in (namespace `agents`)."""
    from stashpoint.stores.layout import AGENTS

    return stash.logs_in(AGENTS)


def _conversation_logs(stash: stashpoint.Stash) -> stashpoint.LogStore:
    """Return the logs durable conversations live in (namespace `conversations`)."""
    from stashpoint.stores.layout import CONVERSATIONS

    return stash.logs_in(CONVERSATIONS)


def _run_logs(stash: stashpoint.Stash) -> stashpoint.LogStore:
    """Return the logs graph runs live in (namespace `run-logs`)."""
    from stashpoint.stores.layout import RUN_LOGS

    return stash.logs_in(RUN_LOGS)


def _thread_logs(stash: stashpoint.Stash) -> stashpoint.LogStore:
    """Return the logs LangGraph threads live in (namespace `langgraph`)."""
    from stashpoint.stores.layout import LANGGRAPH

    return stash.logs_in(LANGGRAPH)


def _has_log(logs: stashpoint.LogStore, log_id: str) -> bool:
    try:
        logs.head(log_id)
    except stashpoint.CheckpointNotFound:
        return False
    return True


def _document(envelope: stashpoint.Envelope, hide: tuple[str, ...] = ()) -> dict[str, Any]:
    document = {"format": FORMAT, **envelope.fields()}
    document["payload"] = redact(document["payload"], hide)
    return document


@app.command()
def demo(
    url: Url = None,
    items: Annotated[int, typer.Option(help="Items in the batch.", min=11)] = 300,
    kill_after: Annotated[int, typer.Option(help="Checkpoints before the SIGKILL.")] = 8,
) -> None:
    """Run the main job: a batch killed with SIGKILL partway, resumed, checked exactly-once."""
    from stashpoint.cli import demo as demo_module

    raise typer.Exit(demo_module.run_demo(url, items=items, kill_after=kill_after))


@app.command()
def show(
    checkpoint_id: Annotated[str, typer.Argument(help="Checkpoint id.")],
    revision: Annotated[int | None, typer.Option(help="An older revision.")] = None,
    url: Url = None,
    as_json: AsJson = False,
    hide: Redact = None,
    no_redact: NoRedact = False,
) -> None:
    """Show a checkpoint's envelope, decoded, as pretty JSON (secret fields hidden)."""
    with _open(url, existing=True) as stash:
        if _has_log(_agent_logs(stash), checkpoint_id):
            from stashpoint.agent import AgentCheckpoint

            handle = AgentCheckpoint.existing(checkpoint_id, stash.checkpoints)
            envelope = handle.load(revision)[0]
        else:
            envelope = stash.checkpoints.load(checkpoint_id, revision)
    document = _document(envelope, parse(hide, defaults=not no_redact))
    document.pop("log", None)  # where the cursor stands in the log: not the checkpoint's
    if as_json:
        _emit(document)
        return
    out.print(f"[bold]{safe(envelope.id)}[/] revision {envelope.revision} ({safe(envelope.kind)})")
    _emit(document)


@app.command("list")
def list_checkpoints(
    prefix: Annotated[str, typer.Argument(help="Only ids starting with this.")] = "",
    limit: Annotated[int, typer.Option(help="Most checkpoints to describe.", min=1)] = 100,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """List checkpoints: id, kind, revision, run, size, time (no payload is downloaded).

    A checkpoint that cannot be read is listed apart (and the rest still are).
    """
    with _open(url, existing=True) as stash:
        logs = _agent_logs(stash)
        in_logs = set(logs.list_ids(prefix))
        ids = sorted(in_logs | set(stash.checkpoints.list_ids(prefix)))
        infos = []
        unreadable: list[dict[str, str]] = []
        for checkpoint_id in ids[:limit]:
            try:
                if checkpoint_id in in_logs:
                    infos.append(_log_info(logs.head(checkpoint_id)))
                else:
                    infos.append(stash.checkpoints.describe(checkpoint_id))
            except stashpoint.CheckpointNotFound:
                continue  # deleted since it was listed
            except StashpointError as exc:
                unreadable.append({"id": checkpoint_id, "kind": exc.kind.value, "error": str(exc)})
    if as_json:
        _emit(
            {
                "total": len(ids),
                "checkpoints": [dataclasses.asdict(i) for i in infos],
                "unreadable": unreadable,
            }
        )
        return
    shown = f"{len(infos)} of {len(ids)}" if len(ids) > limit else str(len(infos))
    table = Table(title=f"checkpoints ({shown})")
    for column in ("id", "kind", "revision", "run", "stored bytes", "updated"):
        table.add_column(column)
    for i in infos:
        table.add_row(
            safe(i.id), safe(i.kind), str(i.revision), safe(i.run_id or "-"),
            "-" if i.stored_bytes is None else str(i.stored_bytes), when(i.updated_at),
        )  # fmt: skip
    out.print(table)
    for bad in unreadable:
        err.print(f"[yellow]unreadable[/] {safe(bad['id'])}: {safe(bad['error'])}")


def _log_info(head: stashpoint.LogHead) -> stashpoint.CheckpointInfo:
    run_id = head.extra.get("run_id")
    return stashpoint.CheckpointInfo(
        id=head.log_id,
        kind=head.kind,
        revision=head.version,
        run_id=run_id if isinstance(run_id, str) else None,
        stored_bytes=None,
        updated_at=head.written_at,
    )


@app.command()
def history(
    checkpoint_id: Annotated[str, typer.Argument(help="Checkpoint id.")],
    limit: Annotated[int | None, typer.Option(help="Most revisions to list.", min=1)] = None,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """List a checkpoint's revisions, newest first (older ones even if the head is damaged)."""
    with _open(url, existing=True) as stash:
        logs = _agent_logs(stash)
        if _has_log(logs, checkpoint_id):
            _log_history(logs, checkpoint_id, limit, as_json)
            return
        try:
            revisions = [stash.checkpoints.load(checkpoint_id)]
        except (stashpoint.InvalidPayload, stashpoint.UnsupportedFormat) as exc:
            err.print(f"[yellow]the head cannot be read[/] ({safe(str(exc))}); older revisions:")
            revisions = []
        if limit is None or len(revisions) < limit:
            left = None if limit is None else limit - len(revisions)
            revisions += stash.checkpoints.history(checkpoint_id, left)
    rows = [
        {
            "revision": e.revision,
            "write_id": e.write_id,
            "updated_at": e.updated_at.isoformat(),
            "payload_bytes": len(pydantic_core.to_json(e.payload)),
        }
        for e in revisions
    ]
    if as_json:
        _emit(rows)
        return
    table = Table(title=f"history of {checkpoint_id}")
    for column in ("revision", "written", "write id", "payload bytes"):
        table.add_column(column)
    for e, row in zip(revisions, rows, strict=True):
        table.add_row(str(e.revision), when(e.updated_at), e.write_id, str(row["payload_bytes"]))
    table.title = f"history of {safe(checkpoint_id)}"
    out.print(table)


def _log_history(logs: stashpoint.LogStore, log_id: str, limit: int | None, as_json: bool) -> None:
    """Print a log's versions, newest first: each a save (the log is its own history)."""
    top = logs.head(log_id).version
    start = 0 if limit is None else max(0, top - limit + 1)
    entries = list(reversed(logs.entries(log_id, start, top)))
    rows = [
        {
            "revision": e.version,
            "write_id": e.write_id,
            "updated_at": e.written_at.isoformat(),
            "records": len(e.records),
            "record_bytes": len(pydantic_core.to_json(e.records)),
        }
        for e in entries
    ]
    if as_json:
        _emit(rows)
        return
    table = Table(title=f"history of {safe(log_id)} (a log: each revision appended)")
    for column in ("revision", "written", "write id", "records", "record bytes"):
        table.add_column(column)
    for e, row in zip(entries, rows, strict=True):
        table.add_row(
            str(e.version), when(e.written_at), e.write_id, str(row["records"]),
            str(row["record_bytes"]),
        )  # fmt: skip
    out.print(table)


@app.command()
def diff(
    checkpoint_id: Annotated[str, typer.Argument(help="Checkpoint id.")],
    rev_a: Annotated[int, typer.Argument(help="Older revision.")],
    rev_b: Annotated[int, typer.Argument(help="Newer revision.")],
    url: Url = None,
    as_json: AsJson = False,
    hide: Redact = None,
    no_redact: NoRedact = False,
) -> None:
    """Show what changed in a checkpoint's payload between two revisions (secrets hidden)."""
    from deepdiff import DeepDiff

    names = parse(hide, defaults=not no_redact)
    with _open(url, existing=True) as stash:
        a = stash.checkpoints.load(checkpoint_id, rev_a)
        b = stash.checkpoints.load(checkpoint_id, rev_b)
    changes = DeepDiff(redact(a.payload, names), redact(b.payload, names), verbose_level=2)
    lines = _diff_lines(changes.to_dict())
    if as_json:
        _emit({"from": rev_a, "to": rev_b, "changes": lines})
        return
    out.print(f"[bold]{safe(checkpoint_id)}[/]: revision {rev_a} -> {rev_b}")
    if not lines:
        out.print("no changes")
    styles = {"+": "green", "-": "red", "~": "yellow"}
    for line in lines:
        style = styles[line["op"]]
        value = line.get("new", line.get("old"))
        if line["op"] == "~":
            value = f"{json.dumps(line['old'])} -> {json.dumps(line['new'])}"
        else:
            value = json.dumps(value)
        text = f"{line['op']} {line['path']}: {value}"
        out.print(f"[{style}]{safe(text)}[/]")


def _diff_lines(changes: dict[str, Any]) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for kind, entries in changes.items():
        for path, change in entries.items() if isinstance(entries, dict) else []:
            path = path.replace("root", "payload", 1)
            if kind in ("dictionary_item_added", "iterable_item_added"):
                lines.append({"op": "+", "path": path, "new": change})
            elif kind in ("dictionary_item_removed", "iterable_item_removed"):
                lines.append({"op": "-", "path": path, "old": change})
            else:
                old = change.get("old_value") if isinstance(change, dict) else None
                new = change.get("new_value") if isinstance(change, dict) else change
                lines.append({"op": "~", "path": path, "old": old, "new": new})
    return sorted(lines, key=lambda line: line["path"])


@app.command()
def export(
    out_file: Annotated[
        Path, typer.Option("--out", help="JSONL file to write (zstd-compressed if it ends .zst).")
    ],
    prefix: Annotated[
        str | None, typer.Option(help="Checkpoints and logs whose id starts with this.")
    ] = None,
    run: Annotated[list[str] | None, typer.Option(help="A run id (repeatable).")] = None,
    with_history: Annotated[
        bool, typer.Option("--history", help="Older revisions of envelope checkpoints too.")
    ] = False,
    hide: Annotated[
        str | None,
        typer.Option("--redact", help="Field names to hide, comma-separated (none by default)."),
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
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    from stashpoint.cli.export import RUN_EXPORT_FORMAT, Sink, Tally, export_logs

    if prefix is None and not run:
        raise typer.BadParameter("give --prefix and/or --run")
    names = parse(hide, defaults=False)
    tally = Tally()
    target = out_file.expanduser()
    sink = Sink(target)
    try:
        with _open(url, existing=True) as stash:
            agent_logs = _agent_logs(stash)
            logs_by_namespace: list[tuple[str, stashpoint.LogStore, list[str]]] = []
            envelope_ids: list[str] = []
            total = len(run or [])
            if prefix is not None:
                namespaces = (
                    ("agents", agent_logs), ("conversations", _conversation_logs(stash)),
                    ("logs", stash.logs), ("langgraph", _thread_logs(stash)),
                )  # fmt: skip
                for namespace, logs in namespaces:
                    ids = logs.list_ids(prefix)
                    logs_by_namespace.append((namespace, logs, ids))
                    total += sum(_versions(logs, i) for i in ids)
                in_logs = set(logs_by_namespace[0][2])
                envelope_ids = [i for i in stash.checkpoints.list_ids(prefix) if i not in in_logs]
                total += len(envelope_ids)
            progress = Progress(
                TextColumn("exporting"), BarColumn(), MofNCompleteColumn(),
                TextColumn("versions, envelopes and runs"), console=err, transient=True,
                disable=as_json or not err.is_terminal,
            )  # fmt: skip
            with progress:
                task = progress.add_task("exporting", total=total)

                def advance(count: int) -> None:
                    progress.advance(task, count)

                for namespace, logs, ids in logs_by_namespace:
                    export_logs(sink, logs, namespace, ids, names, tally, advance)
                for checkpoint_id in envelope_ids:
                    try:
                        envelopes = [stash.checkpoints.load(checkpoint_id)]
                        if with_history:
                            envelopes += stash.checkpoints.history(checkpoint_id)
                    except stashpoint.CheckpointNotFound:
                        envelopes = []  # deleted since it was listed
                    except StashpointError as exc:
                        tally.unreadable.append(f"{checkpoint_id}: {exc}")
                        envelopes = []
                    for envelope in envelopes:
                        sink.write(_document(envelope, names))
                        tally.lines += 1
                    advance(1)
                for run_id in run or []:
                    state = stash.runs.load_run(run_id)
                    if state is None:
                        raise stashpoint.RunNotFound("no run with this id", object_name=run_id)
                    dumped = redact(state.model_dump(mode="json"), names)
                    sink.write({"format": RUN_EXPORT_FORMAT, **dumped})
                    tally.lines += 1
                    advance(1)
        if tally.lines == 0 and target.exists():
            raise typer.BadParameter(f"nothing matched: {target} is left as it was")
        sink.commit()
    finally:
        sink.close()
    if as_json:
        _emit({"file": str(target), "records": tally.lines, "unreadable": tally.unreadable})
    else:
        out.print(f"wrote {tally.lines} records to {safe(str(target))}")
        for problem in tally.unreadable:
            err.print(f"[yellow]skipped, unreadable:[/] {safe(problem)}")
    if tally.unreadable:
        raise typer.Exit(1)


def _versions(logs: stashpoint.LogStore, log_id: str) -> int:
    try:
        return logs.head(log_id).version + 1
    except StashpointError:
        return 0  # reported when it is exported


@app.command()
def restore(
    checkpoint_id: Annotated[str, typer.Argument(help="Checkpoint, run or log id.")],
    days: Annotated[int, typer.Option(help="Days the restored copies stay.", min=1)] = 7,
    tier: Annotated[
        str, typer.Option(help="Retrieval tier: expedited, standard or bulk.")
    ] = "standard",
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Restore a checkpoint's or log's archived objects (S3 Glacier tiers) so they read.

    Requests a restore of every archived sealed segment of an agent checkpoint, run or log (or
    of every archived old revision of an envelope checkpoint); run it again to see how far
    the restores are. Objects still in the standard tier are left alone.
    """
    from stashpoint.stores.objects import RESTORE_TIERS

    chosen = next((t for t in RESTORE_TIERS if t.lower() == tier.lower()), tier)
    with _open(url) as stash:
        agent_logs = _agent_logs(stash)
        if _has_log(agent_logs, checkpoint_id):
            what, report = "agent checkpoint log", agent_logs.restore(checkpoint_id, days, chosen)
        elif _has_log(stash.logs, checkpoint_id):
            what, report = "log", stash.logs.restore(checkpoint_id, days, chosen)
        elif _has_log(run_logs := _run_logs(stash), checkpoint_id):
            what, report = "run log", run_logs.restore(checkpoint_id, days, chosen)
        else:
            what = "checkpoint revisions"
            report = stash.checkpoints.restore(checkpoint_id, days, chosen)
    if as_json:
        _emit({"id": checkpoint_id, "what": what, "readable": report.readable,
               **dataclasses.asdict(report)})  # fmt: skip
        return
    table = Table(title=f"restore {safe(checkpoint_id)} ({what}, {report.objects} objects)")
    for column in ("not archived", "restored", "in progress", "requested now"):
        table.add_column(column)
    table.add_row(
        str(report.not_archived), str(report.restored), str(report.in_progress),
        str(report.started),
    )  # fmt: skip
    out.print(table)
    if report.readable:
        out.print("every object is readable now")
    else:
        out.print(
            f"{report.started + report.in_progress} restore(s) under way ({chosen}: Glacier "
            "takes minutes to hours, Deep Archive up to 48 hours); run this again to see "
            "progress"
        )


@app.command()
def reindex(
    restart: Annotated[bool, typer.Option(help="Start over instead of resuming.")] = False,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Rebuild the run index from storage (idempotent; resumes an interrupted rebuild).

    The index is derived from storage: a table or file of an earlier pre-release layout is
    rebuilt this way (deploy infra/, or delete the SQLite file, then run this).
    """
    from rich.progress import Progress, SpinnerColumn, TextColumn

    spinner = Progress(
        SpinnerColumn(), TextColumn("reindexing runs"), console=err, transient=True,
        disable=as_json,
    )  # fmt: skip
    with _open(url) as stash, spinner:
        report = stash.runs.reindex(resume=not restart)
    if as_json:
        _emit({"runs_indexed": report.indexed, "unreadable": report.unreadable})
    else:
        out.print(f"indexed {report.indexed} runs")
    if report.unreadable:
        err.print(
            f"error: {len(report.unreadable)} run(s) could not be read and were skipped: "
            f"{', '.join(report.unreadable[:5])}"
        )
        raise typer.Exit(1)


@app.command()
def gc(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only report.")] = False,
    min_age_hours: Annotated[float, typer.Option(help="Keep blobs younger than this.")] = 1.0,
    with_history: Annotated[
        bool, typer.Option("--history", help="Also keep blobs older revisions reference.")
    ] = False,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Delete unreferenced blobs (--history: no revision references); tidy up logs.

    Every log (agent transcripts, conversations, graph runs, LangGraph threads,
    `stash.logs`) gets any segment an interrupted append left unsealed (not with
    --dry-run).
    """
    with _open(url) as stash:
        report = stash.collect_garbage(
            dry_run=dry_run, min_age=timedelta(hours=min_age_hours), history=with_history
        )
    if as_json:
        _emit({"dry_run": dry_run, **dataclasses.asdict(report)})
    else:
        out.print(f"{report.logs} logs; {report.segments_sealed} segments sealed")
        done = (
            f"would delete {len(report.unreferenced)}" if dry_run else f"deleted {report.deleted}"
        )
        out.print(
            f"{report.blobs} blobs, {report.referenced} referenced, {report.too_young} too "
            f"young; {done}"
        )
        for digest in report.unreferenced:
            out.print(f"  {digest}")
    if report.unreadable:
        err.print(
            f"error: nothing deleted: {len(report.unreadable)} object(s) could not be read, "
            f"so their blob references are unknown: {', '.join(report.unreadable[:5])}; "
            "repair or delete them (stashpoint show ID says why), then run gc again"
        )
        raise typer.Exit(1)


@app.command()
def repair(
    namespace: Annotated[
        str, typer.Argument(help="Log namespace the error names (agents, run-logs, ...).")
    ],
    log_id: Annotated[str, typer.Argument(help="Log, run, conversation or thread id.")],
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only report.")] = False,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Move the objects above a log's first missing version to quarantine.

    For a log whose reads stop at a missing version below objects planted or left by
    another tool (the error names both). The objects are copied to `quarantine/` under
    the stash's prefix, then deleted, so writers go on from below the gap; nothing is
    deleted for good. If the missing version was lost instead, restore it from the
    bucket's versions rather than repairing.
    """
    with _open(url) as stash:
        report = stash.repair_log(namespace, log_id, dry_run=dry_run)
    if as_json:
        _emit(dataclasses.asdict(report))
        return
    if report.gap is None:
        out.print(f"log {safe(log_id)} in {namespace} has no gap: nothing to repair")
        return
    verb = "would move" if dry_run else "moved"
    count = len(report.above) if dry_run else len(report.moved)
    out.print(
        f"log {safe(log_id)} in {namespace}: version {report.gap} is missing; {verb} "
        f"{count} object(s) above it to quarantine"
    )
    for key in report.above if dry_run else report.moved:
        out.print(f"  {safe(key)}")
    if report.kept:
        err.print(
            f"error: {len(report.kept)} object(s) changed while being moved and were left in "
            "place; run repair again"
        )
        raise typer.Exit(1)


@app.command()
def doctor(url: Url = None, as_json: AsJson = False) -> None:
    """Probe the bucket and index: conditional writes, versioning, GSIs, TTL, latency."""
    with _open(url) as stash:
        checks = stash.doctor()
        where = stash.url
    failed = any(c.status == "fail" for c in checks)
    if as_json:
        _emit({"url": where, "ok": not failed, "checks": [c.__dict__ for c in checks]})
    else:
        table = Table(title=f"stashpoint doctor: {where}")
        table.add_column("check")
        table.add_column("result")
        table.add_column("detail", overflow="fold")
        colours = {"pass": "green", "warn": "yellow", "fail": "bold red"}
        for c in checks:
            table.add_row(c.name, f"[{colours[c.status]}]{c.status.upper()}[/]", safe(c.detail))
        out.print(table)
    if failed:
        raise typer.Exit(1)


def _print_page(table: Table, cursor: str | None) -> None:
    """Print a page of a listing, and how to ask for the next one."""
    out.print(table)
    if cursor:
        out.print(f"more: --cursor {safe(cursor)}")


@runs_app.command("list")
def runs_list(
    graph: Annotated[str | None, typer.Option(help="Graph name.")] = None,
    status: Annotated[RunStatus | None, typer.Option(help="Run status.")] = None,
    since: Annotated[str | None, typer.Option(help="ISO time, or 30m / 12h / 7d.")] = None,
    namespace: Annotated[str, typer.Option(help="Namespace.")] = "default",
    limit: Annotated[int, typer.Option(help="Rows per page.")] = 20,
    cursor: Annotated[str | None, typer.Option(help="Cursor of the next page.")] = None,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """List runs, newest first, from the index."""
    with _open(url, existing=True) as stash:
        page = stash.runs.list_runs(
            graph_name=graph, status=status, since=_since(since), namespace=namespace,
            limit=limit, cursor=cursor,
        )  # fmt: skip
    if as_json:
        _emit(page.model_dump(mode="json"))
        return
    _print_page(runs_table(page.items), page.cursor)


@agent_app.command("resolve")
def agent_resolve(
    checkpoint_id: Annotated[str, typer.Argument(help="Agent checkpoint id.")],
    retry_turn: Annotated[
        bool, typer.Option("--retry-turn", help="Run the interrupted turn again.")
    ] = False,
    abandon_turn: Annotated[
        bool, typer.Option("--abandon-turn", help="Count it as done, add nothing, go on.")
    ] = False,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Settle a turn a dead process left in flight (resume refuses it as ambiguous).

    --retry-turn: its model calls and tools run again (they may repeat effects).
    --abandon-turn: it is counted and listed in `abandoned_turns`; nothing is added.
    """
    from stashpoint.agent import AgentCheckpoint, AgentRunner, TurnInFlight

    if retry_turn == abandon_turn:
        raise typer.BadParameter("pass exactly one of --retry-turn and --abandon-turn")
    with _open(url) as stash:
        runner = AgentRunner(AgentCheckpoint.existing(checkpoint_id, stash.checkpoints))
        _, before = AgentCheckpoint.existing(checkpoint_id, stash.checkpoints).load()
        resolved, _ = runner.resolve(retry=retry_turn)
    turn = before.phase.turn if isinstance(before.phase, TurnInFlight) else None
    how = "retried" if retry_turn else "abandoned"
    if as_json:
        _emit({"checkpoint_id": checkpoint_id, "resolved": resolved, "turn": turn,
               "how": how if resolved else None})  # fmt: skip
    elif resolved:
        out.print(f"{safe(checkpoint_id)}: turn {turn} {how}; resume it to go on")
    else:
        out.print(f"{safe(checkpoint_id)}: no turn in flight, nothing to resolve")


@runs_app.command("due")
def runs_due(
    at: Annotated[
        str | None, typer.Option("--at", help="ISO time to judge against (default: now).")
    ] = None,
    namespace: Annotated[str, typer.Option(help="Namespace.")] = "default",
    limit: Annotated[int, typer.Option(help="Rows per page.")] = 20,
    cursor: Annotated[str | None, typer.Option(help="Cursor of the next page.")] = None,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """List waiting runs whose wake time has come (the latest first): run each again.

    A durable run that waits (`run.wait`, a long retry delay) is `waiting` until then;
    drive this from a loop, a cron job or EventBridge Scheduler, and re-invoke each run.
    """
    moment = None
    if at is not None:
        try:
            moment = datetime.fromisoformat(at)
        except ValueError as exc:
            raise typer.BadParameter(f"not an ISO time: {at!r}") from exc
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
    with _open(url, existing=True) as stash:
        page = stash.runs.list_due(moment, namespace=namespace, limit=limit, cursor=cursor)
    if as_json:
        _emit(page.model_dump(mode="json"))
        return
    table = Table(title=f"due runs ({namespace})")
    for column in ("wake at", "run", "graph", "created"):
        table.add_column(column)
    for row in page.items:
        table.add_row(
            when(row.wake_at), safe(row.run_id), safe(row.graph_name), when(row.created_at)
        )
    _print_page(table, page.cursor)


@runs_app.command("resolve")
def runs_resolve(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    step: Annotated[str, typer.Argument(help="The step's name.")],
    retry: Annotated[bool, typer.Option("--retry", help="Let the step run again.")] = False,
    result: Annotated[
        str | None, typer.Option("--result", help="JSON result the step counts as done with.")
    ] = None,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Settle a durable step a crash left interrupted (at-most-once steps wait for this).

    --retry: it runs again on the next invocation (its effects may repeat).
    --result JSON: it counts as done with this result; its function is not called.
    Takes the run over: a worker still running it is fenced.
    """
    if retry == (result is not None):
        raise typer.BadParameter("pass exactly one of --retry and --result")
    value = None
    if result is not None:
        try:
            value = json.loads(result)
        except ValueError as exc:
            raise typer.BadParameter(f"--result is not JSON: {exc}") from exc
    with _open(url) as stash:
        resolved = stash.runs.durable(run_id).resolve(step, retry=retry, result=value)
    how = "retry" if retry else "result"
    if as_json:
        _emit({"run_id": run_id, "step": step, "resolved": resolved, "how": how})
    elif resolved:
        out.print(f"{safe(run_id)}: step {safe(step)} resolved ({how}); run it again")
    else:
        out.print(f"{safe(run_id)}: step {safe(step)} needs nothing (done or never run)")


@runs_app.command("stuck")
def runs_stuck(
    namespace: Annotated[str, typer.Option(help="Namespace.")] = "default",
    limit: Annotated[int, typer.Option(help="Rows per page.")] = 20,
    cursor: Annotated[str | None, typer.Option(help="Cursor of the next page.")] = None,
    clock_skew: Annotated[
        float, typer.Option(help="Seconds a lease must be past its expiry (clock skew).")
    ] = 5.0,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """List abandoned attempts: running, and their lease ran out (the latest first).

    Their workers stopped sending heartbeats (a reclaimed spot instance, a killed Lambda).
    Take the run over (`stashpoint runs takeover RUN_ID`, or `takeover()` in the library)
    to fence those workers and end their attempts as failed, then retry them.
    """
    with _open(url, existing=True) as stash:
        stash.runs.clock_skew = timedelta(seconds=clock_skew)
        page = stash.runs.list_attempts(
            abandoned=True, namespace=namespace, limit=limit, cursor=cursor
        )
    if as_json:
        _emit(page.model_dump(mode="json"))
        return
    table = Table(title=f"abandoned attempts ({namespace})")
    for column in ("lease ran out", "run", "node", "attempt", "started"):
        table.add_column(column)
    for row in page.items:
        table.add_row(
            when(row.lease_expires_at), safe(row.run_id), safe(row.node_id),
            str(row.attempt), when(row.started_at),
        )  # fmt: skip
    _print_page(table, page.cursor)


@runs_app.command("takeover")
def runs_takeover(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    reason: Annotated[str, typer.Option(help="Error recorded on the attempts it ends.")] = (
        "abandoned: the run was taken over"
    ),
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Take a run over: raise its owner epoch, fence earlier owners, fail their attempts."""
    with _open(url) as stash:
        epoch = stash.runs.takeover(run_id, reason=reason)
    if as_json:
        _emit({"run_id": run_id, "epoch": epoch})
    else:
        out.print(f"{safe(run_id)}: taken over, owner epoch {epoch}")


@runs_app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(help="Run id.")],
    url: Url = None,
    as_json: AsJson = False,
    hide: Redact = None,
    no_redact: NoRedact = False,
) -> None:
    """Show a run: attempt timeline, errors, interrupts, snapshot size (secrets hidden)."""
    with _open(url, existing=True) as stash:
        state = stash.runs.load_run(run_id, resolve_blobs=False)
    if state is None:
        raise stashpoint.RunNotFound("no run with this id", object_name=run_id)
    summary = summary_of(state)  # from the one read of every attempt
    snapshot_bytes = len(pydantic_core.to_json(state.state_snapshot))
    if as_json:
        run = redact(state.model_dump(mode="json"), parse(hide, defaults=not no_redact))
        _emit({"run": run, "summary": summary.model_dump(mode="json"),
               "snapshot_bytes": snapshot_bytes})  # fmt: skip
        return
    out.print(f"[bold]{safe(state.run_id)}[/] graph [bold]{safe(state.graph_name)}[/] "
              f"status [bold]{state.status.value}[/]")  # fmt: skip
    out.print(f"created {when(state.created_at)}, updated {when(state.updated_at)}, "
              f"{summary.total_attempts} attempts over {summary.total_nodes_executed} nodes, "
              f"{summary.failed_attempts} failed, snapshot {snapshot_bytes} bytes")  # fmt: skip
    if state.error:
        out.print(f"[red]error:[/] {safe(state.error)}")
    if state.wake_at is not None:
        out.print(f"waiting: due at {when(state.wake_at)} (`stashpoint runs due` lists it then)")
    if state.interrupted:
        out.print(
            f"[yellow]interrupted:[/] {safe(str(state.interrupted.reason))} "
            f"({safe(str(state.interrupted.node_id))})"
        )
    table = Table(title="attempts")
    for column in ("started", "node", "attempt", "status", "took", "error"):
        table.add_column(column)
    for a in state.attempts:
        took = (
            "-"
            if a.finished_at is None
            else f"{(a.finished_at - a.started_at).total_seconds():.3f}s"
        )
        colour = {AttemptStatus.COMPLETED: "green", AttemptStatus.FAILED: "red"}.get(
            a.status, "cyan"
        )
        table.add_row(when(a.started_at), safe(a.node_id), str(a.attempt),
                      f"[{colour}]{a.status.value}[/]", took, safe(a.error or ""))  # fmt: skip
    out.print(table)


@threads_app.command("list")
def threads_list(
    prefix: Annotated[str, typer.Option(help="Only thread keys starting with this.")] = "",
    limit: Annotated[int, typer.Option(help="Threads per page.", min=1, max=1000)] = 50,
    cursor: Annotated[str | None, typer.Option(help="Cursor of the next page.")] = None,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """List LangGraph threads (ascending by key), a page at a time, from the bucket listing."""
    from stashpoint.langgraph.thread import thread_id_of

    with _open(url, existing=True) as stash:
        keys, next_cursor = _thread_logs(stash).list_page(prefix, limit, cursor)
    rows = [{"thread_id": thread_id_of(k), "key": k} for k in keys]
    if as_json:
        _emit({"threads": rows, "cursor": next_cursor})
        return
    for row in rows:
        shown = row["thread_id"] if row["thread_id"] is not None else f"(hashed) {row['key']}"
        out.print(safe(shown))
    if next_cursor:
        out.print(f"more: --cursor {safe(next_cursor)}")


@threads_app.command("show")
def threads_show(
    thread_id: Annotated[str, typer.Argument(help="Thread id (as given to LangGraph).")],
    checkpoint_ns: Annotated[str, typer.Option("--ns", help="Checkpoint namespace.")] = "",
    checkpoint: Annotated[
        str | None, typer.Option(help="A checkpoint id (default: latest).")
    ] = None,
    url: Url = None,
    hide: Redact = None,
    no_redact: NoRedact = False,
) -> None:
    """Show a LangGraph checkpoint: config, metadata, channel values and pending writes."""
    try:
        from stashpoint.langgraph import StashpointSaver
    except ImportError as exc:
        raise typer.BadParameter(
            "install the langgraph extra: pip install stashpoint[langgraph]"
        ) from exc
    configurable = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint:
        configurable["checkpoint_id"] = checkpoint
    with _open(url, existing=True) as stash:
        found = StashpointSaver(stash).get_tuple({"configurable": configurable})
    if found is None:
        raise stashpoint.CheckpointNotFound("no such LangGraph checkpoint", object_name=thread_id)
    configurable = {k: v for k, v in found.config["configurable"].items() if not k.startswith("__")}
    document = {
        "config": configurable,
        "parent_checkpoint_id": (found.parent_config or {})
        .get("configurable", {})
        .get("checkpoint_id"),
        "metadata": found.metadata,
        "checkpoint": found.checkpoint,
        "pending_writes": [list(w) for w in found.pending_writes or []],
    }
    plain = json.loads(json.dumps(document, default=repr))
    _emit(redact(plain, parse(hide, defaults=not no_redact)))


def main() -> None:
    """Entry point of the `stashpoint` console script."""
    try:
        # Without standalone mode click hands back typer.Exit codes instead of exiting.
        code = app(standalone_mode=False)
    except StashpointError as exc:
        if _state["debug"]:
            raise
        hint = HINTS.get(exc.kind, "")
        if "--json" in sys.argv[1:]:
            error = {"kind": exc.kind.value, "message": exc.message, "object": exc.object_name}
            print(json.dumps({"error": {**error, "hint": hint or None}}))
        else:
            line = f"{exc}" + (f"; {hint}" if hint else "")
            err.print(f"[red]error[/] ({exc.kind.value}): {safe(line)}")
        sys.exit(EXIT_CODES.get(exc.kind, 1))
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except Exception as exc:  # usage errors (typer's own click) and the unexpected
        show, exit_code = getattr(exc, "show", None), getattr(exc, "exit_code", None)
        if callable(show) and isinstance(exit_code, int):
            show()
            sys.exit(exit_code)
        if _state["debug"]:
            raise
        err.print(f"[red]error[/]: {safe(f'{type(exc).__name__}: {exc}')} (--debug for details)")
        sys.exit(1)
    sys.exit(code if isinstance(code, int) else 0)
