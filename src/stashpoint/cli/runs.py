"""Run commands (`stashpoint runs ...`): list, show, due, stuck, resolve, takeover."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from stashpoint.cli.options import (
    AsJson,
    Cursor,
    Limit,
    Namespace,
    NoRedact,
    Redact,
    Url,
    Wide,
    open_stash,
)
from stashpoint.status import RunStatus

if TYPE_CHECKING:
    from stashpoint.cli.output import Cell, Output, Row
    from stashpoint.runs.models import RunRow

app = typer.Typer(help="Graph runs and durable runs: list, inspect, settle.", no_args_is_help=True)
"""The `runs` command group."""

_COLOURS = {
    "completed": "green", "failed": "red", "running": "cyan", "interrupted": "yellow",
    "waiting": "magenta", "cancelled": "dim",
}  # fmt: skip


def _status(value: str) -> Cell:
    from stashpoint.cli.output import Cell

    return Cell(value, _COLOURS.get(value, ""))


def _moment(value: str | None, option: str) -> datetime | None:
    """Parse an ISO date/time, or a duration back from now like 30m, 12h, 7d."""
    if value is None:
        return None
    units = {"m": "minutes", "h": "hours", "d": "days"}
    if value[-1:] in units and value[:-1].isdigit():
        return datetime.now(UTC) - timedelta(**{units[value[-1]]: int(value[:-1])})
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise typer.BadParameter(
            f"{value!r}: use an ISO date/time or 30m, 12h, 7d", param_hint=option
        ) from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _stash_name(stash: Any) -> str:
    from stashpoint.url import without_credentials

    return without_credentials(stash.url)


@app.command("list")
def runs_list(
    graph: Annotated[str | None, typer.Option(metavar="NAME", help="Graph name.")] = None,
    status: Annotated[RunStatus | None, typer.Option(help="Run status.")] = None,
    since: Annotated[
        str | None, typer.Option(metavar="WHEN", help="ISO time, or 30m / 12h / 7d ago.")
    ] = None,
    namespace: Namespace = "default",
    limit: Limit = 20,
    cursor: Cursor = None,
    url: Url = None,
    as_json: AsJson = False,
    wide: Wide = False,
) -> None:
    """List runs, newest first, from the index."""
    from stashpoint.cli.output import Output

    output = Output(as_json=as_json, wide=wide)
    with open_stash(url, existing=True) as stash:
        page = stash.runs.list_runs(
            graph_name=graph, status=status, since=_moment(since, "--since"),
            namespace=namespace, limit=limit, cursor=cursor,
        )  # fmt: skip
        name = _stash_name(stash)
    if as_json:
        output.page(page.items, page.cursor)
        return
    show_runs(output, f"runs ({namespace})", page.items, stash=name, cursor=page.cursor)


def show_runs(
    output: Output, title: str, rows: list[RunRow], *, stash: str, cursor: str | None = None
) -> None:
    """Print index rows of runs as a table (the demo shows its runs this way too)."""
    from stashpoint.cli.output import Column, when

    columns = [
        Column("run"), Column("status"), Column("graph", 1, wrap=True),
        Column("attempts", 2, justify="right"), Column("updated", 3),
        Column("failed", 4, justify="right"), Column("running", 5, justify="right"),
        Column("created", 6),
    ]  # fmt: skip
    cells: list[Row] = [
        [
            r.run_id, _status(r.status.value), r.graph_name, str(r.attempts),
            when(r.updated_at), str(r.failed_attempts), str(r.running_attempts),
            when(r.created_at),
        ]
        for r in rows
    ]  # fmt: skip
    output.table(title, columns, cells, stash=stash, cursor=cursor, empty="none")


@app.command("show")
def runs_show(
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID", help="Run id.")],
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            metavar="FILE",
            help="Write the run as one self-contained HTML page (a timeline of its attempts).",
        ),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(
            metavar="ID", help="With --html: the agent checkpoint whose transcript to add."
        ),
    ] = None,
    watch: Annotated[
        bool,
        typer.Option(
            "--watch",
            help="A fleet map: redraw its progress bar every 2 s until the map has ended.",
        ),
    ] = False,
    url: Url = None,
    as_json: AsJson = False,
    wide: Wide = False,
    hide: Redact = None,
    no_redact: NoRedact = False,
) -> None:
    """Show a run: its attempts, errors, interrupts and snapshot size (secrets hidden).

    A fleet map (`stash.runs.fleet(...)`) also shows its progress: items done, failed and
    left, batches held by workers, items per second (`--watch` follows it to its end).
    `--html FILE` writes a page that needs no network: the attempts as a timeline (steps,
    map items, retries, waits, takeovers), a filterable table, the snapshot, and with
    `--agent ID` the agent's transcript with its tool calls.
    """
    import pydantic_core

    import stashpoint
    from stashpoint.cli.output import Column, Output, when
    from stashpoint.cli.redact import parse, redact
    from stashpoint.runs.fleet import FLEET_GRAPH
    from stashpoint.runs.store import summary_of

    output = Output(as_json=as_json, wide=wide)
    fleet = None
    with open_stash(url, existing=True) as stash:
        state = stash.runs.load_run(run_id, resolve_blobs=False)
        name = _stash_name(stash)
        if state is not None and state.graph_name == FLEET_GRAPH:
            fleet = stash.runs.fleet(run_id)
            if watch and not as_json and html is None:
                _watch(fleet, output)
            progress = fleet.progress()
    if state is None:
        raise stashpoint.RunNotFound("no run with this id", object_name=run_id)
    summary = summary_of(state)  # from the one read of every attempt
    snapshot_bytes = len(pydantic_core.to_json(state.state_snapshot))
    if html is not None:
        _write_html(html.expanduser(), state, url, name, agent, parse(hide, defaults=not no_redact))
        _said_written(output, html, run_id, len(state.attempts), as_json=as_json)
        return
    if as_json:
        run = redact(state.model_dump(mode="json"), parse(hide, defaults=not no_redact))
        shown = {"run": run, "summary": summary, "snapshot_bytes": snapshot_bytes}
        if fleet is not None:
            shown["fleet"] = _fleet_fields(progress)
        output.emit(shown)
        return
    _say_run(output, state, summary, snapshot_bytes, progress if fleet is not None else None)
    columns = [
        Column("started"), Column("node"), Column("attempt", 2, justify="right"),
        Column("status"), Column("took", 1, justify="right"), Column("error", 3, wrap=True),
    ]  # fmt: skip
    rows: list[Row] = [
        [when(a.started_at), a.node_id, str(a.attempt), _status(a.status.value), _took(a),
         a.error or ""]
        for a in state.attempts
    ]  # fmt: skip
    output.table(f"attempts of {run_id}", columns, rows, stash=name, empty="no attempts")


def _said_written(output: Any, html: Path, run_id: str, attempts: int, *, as_json: bool) -> None:
    """Say that a run's page was written."""
    from stashpoint.cli.safe import safe

    if as_json:
        output.emit({"file": str(html), "attempts": attempts})
    else:
        output.say(f"wrote {attempts} attempts of {safe(run_id)} to {safe(str(html))}")


def _took(attempt: Any) -> str:
    """Return how long an attempt took ("-" while it runs)."""
    if attempt.finished_at is None:
        return "-"
    return f"{(attempt.finished_at - attempt.started_at).total_seconds():.3f}s"


def _say_run(
    output: Any, state: Any, summary: Any, snapshot_bytes: int, progress: Any | None
) -> None:
    """Say a run's header lines: status, a fleet map's progress, counts, why it stopped."""
    from stashpoint.cli.output import when
    from stashpoint.cli.safe import safe

    output.say(f"[bold]{safe(state.run_id)}[/] graph [bold]{safe(state.graph_name)}[/] "
               f"status [bold]{state.status.value}[/]")  # fmt: skip
    if progress is not None:
        output.say(_fleet_line(progress))
    output.say(f"created {when(state.created_at)}, updated {when(state.updated_at)}, "
               f"{summary.total_attempts} attempts over {summary.total_nodes_executed} nodes, "
               f"{summary.failed_attempts} failed, snapshot {snapshot_bytes} bytes")  # fmt: skip
    if state.error:
        output.say(f"[red]error:[/] {safe(state.error)}")
    if state.wake_at is not None:
        output.say(f"waiting: due at {when(state.wake_at)} (`stashpoint runs due` lists it then)")
    if state.interrupted:
        output.say(
            f"[yellow]interrupted:[/] {safe(str(state.interrupted.reason))} "
            f"({safe(str(state.interrupted.node_id))})"
        )


def _fleet_fields(progress: Any) -> dict[str, Any]:
    """Return a fleet map's progress as `--json` shows it."""
    import dataclasses

    return {**dataclasses.asdict(progress), "done": progress.done, "left": progress.left}


def _fleet_line(progress: Any) -> str:
    """Return a fleet map's progress as one line."""
    rate = progress.items_per_second
    line = (
        f"fleet map [bold]{progress.status}[/]: {progress.done:,} of {progress.items:,} items "
        f"done ({progress.ok:,} ok, {progress.failed:,} failed), batches: "
        f"{progress.done_batches:,} done, {progress.leased_batches:,} held, "
        f"{progress.left_batches:,} left of {progress.batches:,}"
    )
    if rate:
        line += f"; {rate:,.1f} items/s"
    if progress.reason:
        from stashpoint.cli.safe import safe

        line += f"\n[red]failed:[/] {safe(progress.reason)}"
    return line


def _watch(fleet: Any, output: Output) -> None:
    """Follow a fleet map to its end: a progress bar on a terminal, a line a poll elsewhere."""
    import time

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    console = Console()
    progress = fleet.progress()
    if not console.is_terminal:
        while progress.status in ("running", "not_started"):
            output.say(_fleet_line(progress))
            time.sleep(2)
            progress = fleet.progress()
        return
    bar = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[detail]}"), console=console,
    )  # fmt: skip
    with bar:
        task = bar.add_task("items", total=progress.items or None, detail="")
        while True:
            rate = progress.items_per_second or 0.0
            detail = (
                f"{progress.failed:,} failed, {progress.leased_batches:,} batches held, "
                f"{rate:,.1f}/s"
            )
            bar.update(task, completed=progress.done, total=progress.items or None, detail=detail)
            if progress.status not in ("running", "not_started"):
                break
            time.sleep(2)
            progress = fleet.progress()


def _write_html(
    target: Path,
    state: Any,
    url: str | None,
    name: str,
    agent: str | None,
    names: tuple[str, ...],
) -> None:
    """Write the run's page; with `agent`, add that agent checkpoint's transcript."""
    from stashpoint.cli.redact import redact
    from stashpoint.cli.report import report_data, write_report

    transcript = None
    if agent is not None:
        from stashpoint.agent import AgentCheckpoint

        with open_stash(url, existing=True) as stash:
            _, agent_state = AgentCheckpoint.existing(agent, stash.checkpoints).load()
        transcript = redact([m.model_dump(mode="json") for m in agent_state.transcript], names)
    redacted = redact(state.model_dump(mode="json"), names)
    write_report(target, report_data(state, stash=name, redacted=redacted, transcript=transcript))


@app.command("due")
def runs_due(
    at: Annotated[
        str | None,
        typer.Option("--at", metavar="WHEN", help="ISO time to judge by (default: now)."),
    ] = None,
    namespace: Namespace = "default",
    limit: Limit = 20,
    cursor: Cursor = None,
    url: Url = None,
    as_json: AsJson = False,
    wide: Wide = False,
) -> None:
    """List waiting runs whose wake time has come (the latest first): run each again.

    A durable run that waits (`run.wait`, a long retry delay) is `waiting` until then;
    drive this from a loop, a cron job or EventBridge Scheduler, and re-invoke each run.
    """
    from stashpoint.cli.output import Column, Output, when

    output = Output(as_json=as_json, wide=wide)
    moment = None
    if at is not None:
        try:
            moment = datetime.fromisoformat(at)
        except ValueError:
            raise typer.BadParameter(f"not an ISO time: {at!r}", param_hint="--at") from None
        moment = moment if moment.tzinfo else moment.replace(tzinfo=UTC)
    with open_stash(url, existing=True) as stash:
        page = stash.runs.list_due(moment, namespace=namespace, limit=limit, cursor=cursor)
        name = _stash_name(stash)
    if as_json:
        output.page(page.items, page.cursor)
        return
    columns = [
        Column("wake at"),
        Column("run"),
        Column("graph", 1, wrap=True),
        Column("created", 2),
    ]
    rows = [[when(r.wake_at), r.run_id, r.graph_name, when(r.created_at)] for r in page.items]
    output.table(f"due runs ({namespace})", columns, rows, stash=name, cursor=page.cursor,
                 empty="none due")  # fmt: skip


@app.command("stuck")
def runs_stuck(
    namespace: Namespace = "default",
    limit: Limit = 20,
    cursor: Cursor = None,
    clock_skew: Annotated[
        float, typer.Option(metavar="SECONDS", help="Seconds a lease must be past its expiry.")
    ] = 5.0,
    url: Url = None,
    as_json: AsJson = False,
    wide: Wide = False,
) -> None:
    """List abandoned attempts: running, and their lease ran out (the latest first).

    Their workers stopped sending heartbeats (a reclaimed spot instance, a killed Lambda).
    Take the run over (`stashpoint runs takeover RUN_ID`, or `takeover()` in the library)
    to fence those workers and end their attempts as failed, then retry them.
    """
    from stashpoint.cli.output import Column, Output, when

    output = Output(as_json=as_json, wide=wide)
    with open_stash(url, existing=True) as stash:
        stash.runs.clock_skew = timedelta(seconds=clock_skew)
        page = stash.runs.list_attempts(
            abandoned=True, namespace=namespace, limit=limit, cursor=cursor
        )
        name = _stash_name(stash)
    if as_json:
        output.page(page.items, page.cursor)
        return
    columns = [
        Column("lease ran out"), Column("run"), Column("node", 1),
        Column("attempt", 2, justify="right"), Column("started", 3),
    ]  # fmt: skip
    rows = [
        [when(r.lease_expires_at), r.run_id, r.node_id, str(r.attempt), when(r.started_at)]
        for r in page.items
    ]
    output.table(f"abandoned attempts ({namespace})", columns, rows, stash=name,
                 cursor=page.cursor, empty="none")  # fmt: skip


@app.command("resolve")
def runs_resolve(
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID", help="Run id.")],
    step: Annotated[str, typer.Argument(metavar="STEP", help="The step's name.")],
    retry: Annotated[bool, typer.Option("--retry", help="Let the step run again.")] = False,
    result: Annotated[
        str | None,
        typer.Option("--result", metavar="JSON", help="JSON result the step counts as done with."),
    ] = None,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Settle a durable step a crash left interrupted (at-most-once steps wait for this).

    \b
    --retry        it runs again on the next invocation (its effects may repeat)
    --result JSON  it counts as done with this result; its function is not called

    Takes the run over: a worker still running it is fenced. A run that does not exist is
    not_found (nothing is created).
    """
    import json

    from stashpoint.cli.output import Output
    from stashpoint.cli.safe import safe

    output = Output(as_json=as_json)
    if retry == (result is not None):
        raise typer.BadParameter("pass exactly one of --retry and --result")
    value = None
    if result is not None:
        try:
            value = json.loads(result)
        except ValueError as exc:
            raise typer.BadParameter(f"not JSON: {exc}", param_hint="--result") from exc
    with open_stash(url) as stash:
        resolved = stash.runs.durable(run_id).resolve(step, retry=retry, result=value)
    how = "retry" if retry else "result"
    if as_json:
        output.emit({"run_id": run_id, "step": step, "resolved": resolved, "how": how})
    elif resolved:
        output.say(f"{safe(run_id)}: step {safe(step)} resolved ({how}); run it again")
    else:
        output.say(f"{safe(run_id)}: step {safe(step)} needs nothing (done or never run)")


def _payload(text: str | None) -> Any:
    import json

    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise typer.BadParameter(f"not JSON: {exc}", param_hint="--payload") from exc


def _receipt(output: Any, receipt: Any, as_json: bool) -> None:
    from stashpoint.cli.safe import safe

    if as_json:
        output.emit(
            {
                "run_id": receipt.run_id,
                "name": receipt.name,
                "signal_id": receipt.signal_id,
                "duplicate": receipt.duplicate,
                "woke": receipt.woke,
            }
        )
        return
    what = f"{safe(receipt.run_id)}: event {safe(receipt.name)}"
    if receipt.duplicate:
        output.say(f"{what} was delivered before with this id; nothing changed")
    elif receipt.woke:
        output.say(f"{what} delivered; the run is due now (stashpoint runs due)")
    else:
        output.say(f"{what} delivered and kept until the run waits for it")


Payload = Annotated[
    str | None,
    typer.Option("--payload", metavar="JSON", help="The event's JSON payload (default null)."),
]


@app.command("signal")
def runs_signal(
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID", help="Run id.")],
    name: Annotated[str, typer.Argument(metavar="NAME", help="The event's name.")],
    payload: Payload = None,
    signal_id: Annotated[
        str | None,
        typer.Option("--id", metavar="ID", help="Delivery id: the same id again is one signal."),
    ] = None,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Deliver event NAME to a durable run waiting for it (`run.wait_for(NAME)`).

    Kept if the run does not wait yet; a waiting run is due at once (`stashpoint runs
    due`). A finished run is terminal_state, an unknown one not_found.
    """
    from stashpoint.cli.output import Output

    output = Output(as_json=as_json)
    value = _payload(payload)
    with open_stash(url) as stash:
        receipt = stash.runs.signal(run_id, name, value, signal_id=signal_id)
    _receipt(output, receipt, as_json)


@app.command("redeem")
def runs_redeem(
    token: Annotated[str, typer.Argument(metavar="TOKEN", help="A `run.callback()` token.")],
    payload: Payload = None,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Deliver the event of a callback token (`run.callback(NAME)`), without the run id.

    Redeeming a token again is the same signal. A token the run did not make is
    invalid_argument.
    """
    from stashpoint.cli.output import Output

    output = Output(as_json=as_json)
    value = _payload(payload)
    with open_stash(url) as stash:
        receipt = stash.runs.redeem(token, value)
    _receipt(output, receipt, as_json)


@app.command("takeover")
def runs_takeover(
    run_id: Annotated[str, typer.Argument(metavar="RUN_ID", help="Run id.")],
    reason: Annotated[
        str, typer.Option(metavar="TEXT", help="Error recorded on the attempts it ends.")
    ] = "abandoned: the run was taken over",
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Take a run over: raise its owner epoch, fence earlier owners, fail their attempts."""
    from stashpoint.cli.output import Output
    from stashpoint.cli.safe import safe

    output = Output(as_json=as_json)
    with open_stash(url) as stash:
        epoch = stash.runs.takeover(run_id, reason=reason)
    if as_json:
        output.emit({"run_id": run_id, "epoch": epoch})
    else:
        output.say(f"{safe(run_id)}: taken over, owner epoch {epoch}")
