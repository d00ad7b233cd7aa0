"""Stash-wide commands: reindex, gc, repair, doctor, and the demo."""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated, Any

import typer

from stashpoint.cli.options import AsJson, Url, Wide, open_stash

app = typer.Typer()
"""The stash-wide commands (registered at the top level)."""


def _ticker(tick: Any) -> Any:
    """Return an `on_progress` callback that moves a `counting` bar."""
    from stashpoint.progress import Progress

    def on_progress(progress: Progress) -> None:
        tick(done=progress.done, total=progress.total, what=progress.phase)

    return on_progress


@app.command()
def demo(
    url: Url = None,
    items: Annotated[int, typer.Option(help="Items in the batch.", min=11)] = 300,
    kill_after: Annotated[int, typer.Option(help="Checkpoints before the SIGKILL.")] = 8,
    as_json: AsJson = False,
) -> None:
    """Run the main job: a batch killed with SIGKILL partway, resumed, checked exactly-once."""
    from stashpoint.cli import demo as demo_module

    code = demo_module.run_demo(url, items=items, kill_after=kill_after, as_json=as_json)
    raise typer.Exit(code)


@app.command()
def reindex(
    restart: Annotated[bool, typer.Option(help="Start over instead of resuming.")] = False,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Rebuild the run index from storage (idempotent; resumes an interrupted rebuild).

    The index is derived from storage: a table or file of an earlier pre-release layout,
    or a damaged SQLite index (delete the file first), is rebuilt this way.
    """
    import stashpoint
    from stashpoint.cli.output import Output
    from stashpoint.cli.progress import counting

    output = Output(as_json=as_json)
    set_aside = None
    try:
        with open_stash(url) as stash, counting("reindexing runs", quiet=as_json) as tick:
            report = stash.runs.reindex(resume=not restart, on_progress=_ticker(tick))
    except stashpoint.IndexDamaged as exc:
        # Derived data: the damaged file is kept beside (for a post-mortem), then rebuilt.
        set_aside = _set_aside(exc.object_name)
        with open_stash(url) as stash, counting("reindexing runs", quiet=as_json) as tick:
            report = stash.runs.reindex(resume=False, on_progress=_ticker(tick))
    if as_json:
        output.emit({"runs_indexed": report.indexed, "unreadable": report.unreadable,
                     "damaged_index_kept_as": set_aside})  # fmt: skip
    else:
        if set_aside:
            output.warn(f"the index was damaged: kept as {set_aside}, rebuilt from storage")
        output.say(f"indexed {report.indexed} runs")
    if report.unreadable:
        output.warn(
            f"error: {len(report.unreadable)} run(s) could not be read and were skipped: "
            f"{', '.join(report.unreadable[:5])}"
        )
        raise typer.Exit(1)


def _set_aside(path: str | None) -> str:
    """Rename a damaged SQLite index (and its -wal, -shm) to `<path>.damaged-<time>`."""
    import os
    from datetime import UTC, datetime

    import stashpoint

    if not path or path == ":memory:" or not os.path.exists(path):
        raise stashpoint.IndexDamaged("the run index is damaged and not a file", object_name=path)
    kept = f"{path}.damaged-{datetime.now(UTC):%Y%m%dT%H%M%SZ}"
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(path + suffix):
            os.replace(path + suffix, kept + suffix)
    return kept


@app.command()
def gc(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Only report.")] = False,
    min_age_hours: Annotated[
        float, typer.Option(metavar="HOURS", help="Keep blobs younger than this.")
    ] = 1.0,
    with_history: Annotated[
        bool, typer.Option("--history", help="Also keep blobs older revisions reference.")
    ] = False,
    pack: Annotated[
        bool,
        typer.Option(
            "--pack", help="Pack old sealed segments into archive objects of 1,024 versions."
        ),
    ] = False,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Delete unreferenced blobs (--history: no revision references); tidy up logs.

    Every log (agent transcripts, conversations, graph runs, LangGraph threads,
    `stash.logs`) gets any segment an interrupted append left unsealed (not with
    --dry-run); with --pack, its old segments packed for archives and its sealed
    entries vacated.
    """
    import dataclasses

    from stashpoint.cli.output import Output
    from stashpoint.cli.progress import counting

    output = Output(as_json=as_json)
    with open_stash(url) as stash, counting("collecting", quiet=as_json) as tick:
        report = stash.admin.collect_garbage(
            dry_run=dry_run, min_age=timedelta(hours=min_age_hours), history=with_history,
            on_progress=_ticker(tick), pack=pack,
        )  # fmt: skip
        expired = _sweep_store(stash, dry_run)
        report = dataclasses.replace(report, store_items_expired=expired)
    if as_json:
        output.emit({"dry_run": dry_run, **dataclasses.asdict(report)})
    else:
        _say_gc(output, report, dry_run=dry_run, pack=pack)
    if report.unreadable:
        output.warn(
            f"error: nothing deleted: {len(report.unreadable)} object(s) could not be read, "
            f"so their blob references are unknown: {', '.join(report.unreadable[:5])}; "
            "repair or delete them (stashpoint show ID says why), then run gc again"
        )
        raise typer.Exit(1)


def _say_gc(output: Any, report: Any, *, dry_run: bool, pack: bool) -> None:
    """Say what a garbage collection found and did, a line per kind."""
    output.say(
        f"{report.logs} logs; {report.segments_sealed} segments sealed; "
        f"{report.lives_tidied} objects below deleted or rebased threads vacated"
    )
    if pack:
        output.say(
            f"{report.packs} packs; {report.entries_vacated} sealed entries vacated; "
            f"{report.segments_deleted} packed segments deleted"
        )
    if report.store_items_expired:
        verb = "would sweep" if dry_run else "swept"
        output.say(f"{verb} {report.store_items_expired} expired LangGraph store item(s)")
    if report.shredded:
        output.say(
            f"skipped {len(report.shredded)} object(s) of shredded tenants (unreadable for "
            "good: purge their prefix to erase them)"
        )
    _say_purges(output, report)
    done = f"would delete {len(report.unreferenced)}" if dry_run else f"deleted {report.deleted}"
    output.say(
        f"{report.blobs} blobs, {report.referenced} referenced, {report.too_young} too "
        f"young; {done}"
    )
    for digest in report.unreferenced:
        output.say(f"  {digest}")


def _say_purges(output: Any, report: Any) -> None:
    """Say what a garbage collection did of purges: receipts refused or skipped, resumed."""
    for unsealed in report.unsealed_receipts:
        output.say(
            f"did not obey purge receipt {unsealed}: its seal does not verify under this "
            "stash's erasure key, or it shreds (stashpoint purge --resume --confirm-shred)"
        )
    for unreadable in report.unreadable_receipts:
        output.say(f"skipped an unreadable purge receipt ({unreadable})")
    if report.purges_resumed or report.open_purges:
        output.say(
            f"{report.purges_resumed} open purge(s) finished; {len(report.open_purges)} still open"
        )


def _sweep_store(stash: Any, dry_run: bool) -> int:
    """Sweep the LangGraph store's expired items (none to sweep without the extra)."""
    from stashpoint.steps import run_sync
    from stashpoint.stores.layout import LANGGRAPH_STORE, LANGGRAPH_STORE_CATALOG
    from stashpoint.stores.objects import ListKeys

    first = stash.driver(ListKeys(stash.layout.namespace_prefix(LANGGRAPH_STORE), None, 1))
    if not first.keys:
        return 0  # no store here: LangGraph is not even imported
    try:
        from stashpoint.langgraph.store_steps import StoreSteps
    except ImportError:  # without the `langgraph` extra the items cannot be judged
        return 0
    # The sweep reads every item through the catalogs, and rewrites those that missed some.
    steps = StoreSteps(
        stash.head_steps(LANGGRAPH_STORE),
        catalogs=None if dry_run else stash.head_steps(LANGGRAPH_STORE_CATALOG),
        tenant=stash.tenant_of(LANGGRAPH_STORE),
    )
    return int(run_sync(steps.sweep(dry_run=dry_run), stash.driver))


@app.command()
def repair(
    namespace: Annotated[
        str,
        typer.Argument(
            metavar="NAMESPACE", help="Log namespace the error names (agents, run-logs, ...)."
        ),
    ],
    log_id: Annotated[
        str, typer.Argument(metavar="ID", help="Log, run, conversation or thread id.")
    ],
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
    import dataclasses

    from stashpoint.cli.output import Output
    from stashpoint.cli.safe import safe

    output = Output(as_json=as_json)
    with open_stash(url) as stash:
        report = stash.admin.repair_log(namespace, log_id, dry_run=dry_run)
    if as_json:
        output.emit(dataclasses.asdict(report))
        return
    if report.gap is None:
        output.say(f"log {safe(log_id)} in {safe(namespace)} has no gap: nothing to repair")
        return
    verb = "would move" if dry_run else "moved"
    count = len(report.above) if dry_run else len(report.moved)
    output.say(
        f"log {safe(log_id)} in {safe(namespace)}: version {report.gap} is missing; {verb} "
        f"{count} object(s) above it to quarantine"
    )
    for key in report.above if dry_run else report.moved:
        output.say(f"  {safe(key)}")
    if report.kept:
        output.warn(
            f"error: {len(report.kept)} object(s) changed while being moved and were left in "
            "place; run repair again"
        )
        raise typer.Exit(1)


@app.command()
def doctor(
    url: Url = None,
    as_json: AsJson = False,
    wide: Wide = False,
    conformance: Annotated[
        bool,
        typer.Option(
            "--conformance",
            help="Probe what the S3 endpoint really does (conditional writes and their races, "
            "conditional delete, versioning, listing order, StartAfter, multipart, ETags) and "
            "name the provider profile that matches.",
        ),
    ] = False,
) -> None:
    """Probe the bucket and index: conditional writes, versioning, GSIs, TTL, latency.

    Writes a probe object (and deletes it): on a read-only stash the write checks fail
    and say so. `--conformance` runs the conformance kit instead (`docs/providers.md`):
    thirteen probes under `{prefix}/.doctor/`, all removed after; it fails when the
    endpoint cannot keep compare-and-swap, or lacks what the stash's profile
    (`provider=` in the URL) says it has.
    """
    from stashpoint.cli.output import Cell, Column, Output, Row
    from stashpoint.url import without_credentials

    output = Output(as_json=as_json, wide=wide)
    if conformance:
        _conformance(url, output)
        return
    with open_stash(url) as stash:
        checks = stash.admin.doctor()
        where = without_credentials(stash.url)
    failed = any(c.status == "fail" for c in checks)
    if as_json:
        output.emit({"url": where, "ok": not failed, "checks": [c.__dict__ for c in checks]})
    else:
        colours = {"pass": "green", "warn": "yellow", "fail": "bold red"}
        columns = [Column("check"), Column("result"), Column("detail", wrap=True)]
        rows: list[Row] = [
            [c.name, Cell(c.status.upper(), colours[c.status]), c.detail] for c in checks
        ]
        output.table("stashpoint doctor", columns, rows, stash=where)
    if failed:
        raise typer.Exit(1)


def _conformance(url: str | None, output: Any) -> None:
    """Run the conformance kit; print its probes and its matrix row."""
    import dataclasses

    from stashpoint.cli.output import Cell, Column, Row
    from stashpoint.url import without_credentials

    with open_stash(url) as stash:
        report = stash.admin.conformance()
        in_use = stash.provider
        where = without_credentials(stash.url)
    missing = report.differences(in_use)
    ok = report.safe and not missing and report.cleaned
    if output.as_json:
        output.emit(
            {
                "url": where,
                "ok": ok,
                "safe": report.safe,
                "profile_in_use": in_use.name,
                "matches": report.matches,
                "missing": missing,
                "cleaned": report.cleaned,
                "probes": [dataclasses.asdict(p) for p in report.probes],
                "row": report.row(),
            }
        )
    else:
        marks = {True: Cell("PASS", "green"), False: Cell("NO", "yellow"), None: Cell("?", "")}
        columns = [Column("probe"), Column("result"), Column("detail", wrap=True)]
        rows: list[Row] = [[p.name, marks[p.passed], p.detail] for p in report.probes]
        output.table("stashpoint doctor --conformance", columns, rows, stash=where)
        found = ", ".join(report.matches) or "no known profile (a custom one)"
        output.say(f"matches: {found}; this stash uses the {in_use.name} profile")
        if not report.safe:
            output.say("[bold red]unsafe:[/] conditional writes do not hold here: no stash can")
        if missing:
            output.say(
                f"[bold red]the {in_use.name} profile claims what this endpoint lacks:[/] "
                f"{', '.join(missing)}; open the stash with provider= one of: {found}"
            )
        output.say(report.row())
    if not ok:
        raise typer.Exit(1)
