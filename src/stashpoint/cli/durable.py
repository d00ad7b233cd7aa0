"""Lambda durable functions' executions (`stashpoint durable ...`): list, history, answer.

Reads and answers what `stashpoint.durable_functions` keeps; the SDK is not needed (the
commands speak to the service, not to handlers).
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any

import typer

from stashpoint.cli.options import AsJson, Url, Wide, open_stash

app = typer.Typer(
    help="AWS Lambda durable functions' executions (stashpoint.durable_functions).",
    no_args_is_help=True,
)
"""The `durable` command group."""

Function = Annotated[
    str | None, typer.Option("--function", metavar="NAME", help="Only this function's.")
]


def _time(ms: int | None) -> datetime | None:
    return None if ms is None else datetime.fromtimestamp(ms / 1000, tz=UTC)


@app.command("list")
def durable_list(
    function: Function = None,
    pending: Annotated[
        bool, typer.Option("--pending", help="Only executions that have not ended.")
    ] = False,
    url: Url = None,
    as_json: AsJson = False,
    wide: Wide = False,
) -> None:
    """List durable executions: function, name, status, when started and ended, ARN.

    One read of each execution's newest entry.
    """
    from stashpoint.cli.output import Column, Output, when
    from stashpoint.durable_functions.service import DurableService
    from stashpoint.url import without_credentials

    output = Output(as_json=as_json, wide=wide)
    with open_stash(url, existing=True) as stash:
        name = without_credentials(stash.url)
        states = DurableService(stash).states(function)
    items: list[dict[str, Any]] = [
        {
            "arn": arn,
            "function": state.function,
            "name": state.name,
            "status": state.status,
            "started_at": _time(state.started_ms),
            "ended_at": _time(state.ended_ms),
            "invocations": state.invocations,
        }
        for arn, state in states
        if not (pending and state.ended)
    ]
    if as_json:
        output.emit({"items": items})
        return
    columns = [
        Column("function"), Column("name"), Column("status"), Column("started", 1),
        Column("ended", 2), Column("invocations", 3, justify="right"), Column("arn", 4),
    ]  # fmt: skip
    rows = [
        [i["function"], i["name"], i["status"], when(i["started_at"]), when(i["ended_at"]),
         str(i["invocations"]), i["arn"]]
        for i in items
    ]  # fmt: skip
    output.table("Durable executions", columns, rows, stash=name, cursor=None, empty="none")


@app.command("history")
def durable_history(
    arn: Annotated[str, typer.Argument(metavar="ARN", help="The execution's ARN.")],
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            metavar="FILE",
            help="Write the execution as one self-contained HTML page (its operations as a "
            "timeline; no payloads).",
        ),
    ] = None,
    url: Url = None,
    as_json: AsJson = False,
    wide: Wide = False,
) -> None:
    """Show an execution's status and its history of events, in order.

    `--html FILE` writes a page that needs no network: every operation (step, wait,
    callback, invoke, child context) as a bar on a timeline, retries outlined, with its
    status, attempt and error type; inputs and results are left out.
    """
    from stashpoint.cli.output import Column, Output, when
    from stashpoint.durable_functions.service import DurableService
    from stashpoint.url import without_credentials

    output = Output(as_json=as_json, wide=wide)
    with open_stash(url, existing=True) as stash:
        name = without_credentials(stash.url)
        view = DurableService(stash).read(arn)
    if html is not None:
        from stashpoint.cli.report import execution_report_data, write_report

        target = html.expanduser()
        write_report(target, execution_report_data(view, arn=arn, stash=name))
        if as_json:
            output.emit({"file": str(target), "operations": len(view.operations)})
        else:
            output.say(f"wrote {len(view.operations)} operations to {target}")
        return
    events = [
        {
            "id": e["EventId"],
            "type": e["EventType"],
            "at": _time(int(e["EventTimestamp"])),
            "operation": e.get("Id"),
            "name": e.get("Name"),
            "parent": e.get("ParentId"),
            "subtype": e.get("SubType"),
        }
        for e in view.events
    ]
    if as_json:
        output.emit({"arn": arn, "status": view.state.status, "events": events})
        return
    columns = [
        Column("id", justify="right"), Column("event"), Column("at", 1), Column("name", 2),
        Column("subtype", 3), Column("operation", 4), Column("parent", 5),
    ]  # fmt: skip
    rows = [
        [str(e["id"]), e["type"], when(e["at"]), e["name"] or "", e["subtype"] or "",
         e["operation"] or "", e["parent"] or ""]
        for e in events
    ]  # fmt: skip
    output.table(
        f"{arn} ({view.state.status})", columns, rows, stash=name, cursor=None, empty="none"
    )


@app.command("export")
def durable_export(
    arns: Annotated[list[str], typer.Argument(metavar="ARN...", help="The executions' ARNs.")],
    out_file: Annotated[
        Path,
        typer.Option(
            "--out", metavar="FILE", help="JSONL file to write (zstd-compressed if it ends .zst)."
        ),
    ],
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Export executions whole, payloads included: one JSON line each.

    Each line holds what Lambda's `GetDurableExecution`, `GetDurableExecutionState` and
    `GetDurableExecutionHistory` give: the execution (status, input, result or error),
    every operation with its payloads, and the events in order. The file is readable by
    its owner only (0600) and appears whole or not at all. (`stashpoint export --prefix`
    exports the executions' logs version by version instead.)
    """
    from stashpoint.cli.export import EXECUTION_EXPORT_FORMAT, Sink
    from stashpoint.cli.output import Output
    from stashpoint.cli.safe import safe
    from stashpoint.durable_functions.export import exported

    output = Output(as_json=as_json)
    target = out_file.expanduser()
    with open_stash(url, existing=True) as stash:
        documents = [exported(stash, arn) for arn in arns]  # every one read before writing
    sink = Sink(target)
    try:
        for document in documents:
            sink.write({"format": EXECUTION_EXPORT_FORMAT, **document})
        sink.commit()
    finally:
        sink.close()
    if as_json:
        output.emit({"file": str(target), "records": len(documents), "unreadable": []})
    else:
        output.say(f"wrote {len(documents)} executions to {safe(str(target))}")


@app.command("callback")
def durable_callback(
    callback_id: Annotated[str, typer.Argument(metavar="CALLBACK_ID", help="The callback's id.")],
    success: Annotated[
        str | None, typer.Option("--success", metavar="RESULT", help="Complete it with this text.")
    ] = None,
    failure: Annotated[
        str | None, typer.Option("--failure", metavar="TYPE", help="Fail it with this error type.")
    ] = None,
    message: Annotated[str, typer.Option(help="The failure's message.")] = "",
    heartbeat: Annotated[
        bool, typer.Option("--heartbeat", help="Say its answer is still coming.")
    ] = False,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Answer a waiting callback: `--success RESULT`, `--failure TYPE` or `--heartbeat`."""
    import stashpoint
    from stashpoint.cli.output import Output
    from stashpoint.durable_functions.service import DurableService

    chosen = [
        o
        for o, given in (
            ("success", success is not None),
            ("failure", failure is not None),
            ("heartbeat", heartbeat),
        )
        if given
    ]
    if len(chosen) != 1:
        raise stashpoint.InvalidArgument("give exactly one of --success, --failure, --heartbeat")
    outcome = chosen[0]
    with open_stash(url, existing=True) as stash:
        service = DurableService(stash)
        if outcome == "failure":
            service.callback(
                callback_id, "failure", error={"ErrorType": failure, "ErrorMessage": message}
            )
        else:
            service.callback(callback_id, outcome, result=success)
    output = Output(as_json=as_json)
    if as_json:
        output.emit({"callback_id": callback_id, "outcome": outcome})
    else:
        output.say(f"callback {outcome} recorded")


@app.command("stop")
def durable_stop(
    arn: Annotated[str, typer.Argument(metavar="ARN", help="The execution's ARN.")],
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Stop a running execution (`ExecutionStopped`); an ended one stays as it is."""
    from stashpoint.cli.output import Output
    from stashpoint.durable_functions.service import DurableService

    with open_stash(url, existing=True) as stash:
        view = DurableService(stash).stop(arn)
    output = Output(as_json=as_json)
    if as_json:
        output.emit({"arn": arn, "status": view.state.status})
    else:
        output.say(f"{view.state.status.lower()}: {arn}")
