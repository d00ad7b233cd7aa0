"""The queryable archive from the command line: `stashpoint project` and `stashpoint query`."""

from __future__ import annotations

from typing import Annotated

import typer

from stashpoint.cli.options import AsJson, Url, open_stash

app = typer.Typer()
"""The archive's commands (registered at the top level)."""

_Namespaces = Annotated[
    list[str] | None,
    typer.Option(
        "--namespace",
        metavar="NS",
        help="A log namespace (repeatable; default: conversations, logs, run-logs, langgraph).",
    ),
]


@app.command()
def project(
    prefix: Annotated[str, typer.Option(help="Only logs whose id starts with this.")] = "",
    namespaces: _Namespaces = None,
    iceberg: Annotated[
        bool,
        typer.Option(
            "--iceberg",
            help="Then make the Iceberg table hold exactly the projected files (needs the "
            "iceberg extra).",
        ),
    ] = False,
    catalog: Annotated[
        list[str] | None,
        typer.Option(
            "--catalog",
            metavar="KEY=VALUE",
            help="A pyiceberg catalog property (repeatable), e.g. type=glue or "
            "uri=sqlite:///catalog.db; default for a local folder: SQLite in the folder.",
        ),
    ] = None,
    table: Annotated[
        str, typer.Option(help="The Iceberg table, `namespace.name`.")
    ] = "stashpoint.records",
    compact: Annotated[
        bool,
        typer.Option(
            "--compact",
            help="With --iceberg: first rewrite each tenant's small files into large ones.",
        ),
    ] = False,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Project logs' records into Parquet files under projection/ (what was appended since).

    Needs the archive extra (pip install 'stashpoint[archive]'). A purge of a log erases
    its projected files with it; a deleted log's are erased by the next run. With
    --iceberg, the Iceberg table then registers the new files and drops the erased ones
    (run it after a purge too): Athena, Spark, Trino and DuckDB read it by name.
    """
    import dataclasses

    from stashpoint.cli.output import Output
    from stashpoint.cli.safe import safe
    from stashpoint.projection import SOURCES
    from stashpoint.projection import project as run_projection

    output = Output(as_json=as_json)
    properties = _properties(catalog)
    published = None
    with open_stash(url) as stash:
        report = run_projection(stash, namespaces=namespaces or SOURCES, prefix=prefix)
        if iceberg:
            from stashpoint.iceberg import publish

            published = publish(
                stash,
                catalog=properties,
                table=table,
                namespaces=namespaces or SOURCES,
                compact=compact,
            )
        elif compact:
            raise typer.BadParameter("--compact compacts the Iceberg table's files: add --iceberg")
    if as_json:
        shown = dataclasses.asdict(report)
        if published is not None:
            shown["iceberg"] = dataclasses.asdict(published)
        output.emit(shown)
    else:
        output.say(
            f"looked at {report.logs} logs ({report.unchanged} unchanged): {report.rows} rows "
            f"in {len(report.files)} new files; {len(report.erased)} logs' projections erased"
        )
        if published is not None and published.compaction is not None:
            done = published.compaction
            output.say(
                f"compacted {done.covered} small files into {len(done.written)}; "
                f"{len(done.erased)} stale compacted files erased"
            )
        if published is not None:
            output.say(
                f"iceberg table {published.table}: {published.files} files "
                f"({len(published.added)} added, {len(published.removed)} removed, "
                f"{published.expired_snapshots} snapshots expired)"
            )
        for problem in report.unreadable:
            output.warn(f"[yellow]skipped, unreadable:[/] {safe(problem)}")
        for problem in [] if published is None else published.skipped:
            output.warn(f"[yellow]not registered:[/] {safe(problem)}")
    failed = report.unreadable or (published is not None and published.skipped)
    raise typer.Exit(1 if failed else 0)


def _properties(given: list[str] | None) -> dict[str, str] | None:
    """Return `--catalog KEY=VALUE` options as a mapping (None when none was given)."""
    if not given:
        return None
    properties = {}
    for item in given:
        key, equals, value = item.partition("=")
        if not equals or not key:
            raise typer.BadParameter(
                "--catalog takes KEY=VALUE (a value is not shown: it may be a secret)"
            )
        properties[key] = value
    return properties


@app.command()
def query(
    sql: Annotated[
        str,
        typer.Argument(
            help="SQL over `records` and its views (`messages`, `attempts`, `checkpoints`, "
            "`checkpoint_writes`)."
        ),
    ],
    namespaces: _Namespaces = None,
    url: Url = None,
    as_json: AsJson = False,
) -> None:
    """Run SQL with DuckDB over the projected rows.

    The table `records` (namespace, log_id, tenant, version, position, written_at, day,
    role, content, record) and its views `messages` (records with a role), `attempts`
    (runs' attempts: run_id, node_id, attempt, status, error, started_at, finished_at),
    `checkpoints` (LangGraph puts: thread_key, checkpoint_id, parent_id, step, source,
    channels) and `checkpoint_writes` (tasks' writes: checkpoint_id, task_id, channels).
    Run `stashpoint project` first; needs the archive extra.
    """
    from stashpoint.cli.output import Column, Output
    from stashpoint.projection import SOURCES
    from stashpoint.projection import query as run_query

    output = Output(as_json=as_json)
    with open_stash(url) as stash:
        result = run_query(stash, sql, namespaces=namespaces or SOURCES)
        shown = stash.url
    rows = result.to_pylist()
    if as_json:
        output.emit({"columns": result.column_names, "rows": rows})
        return
    columns = [Column(name, wrap=True) for name in result.column_names]
    cells = [["" if row[c] is None else str(row[c]) for c in result.column_names] for row in rows]
    output.table("query", columns, cells, stash=shown, empty="no rows")
