"""LangGraph thread commands (`stashpoint threads ...`): list and show (the langgraph extra)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from stashpoint.cli.options import AsJson, Cursor, Limit, NoRedact, Redact, Url, Wide, open_stash

app = typer.Typer(
    help="LangGraph threads (stashpoint.langgraph): list and inspect.", no_args_is_help=True
)
"""The `threads` command group."""


def _langgraph() -> Any:
    """Return `stashpoint.langgraph.thread`, or say which extra to install."""
    import stashpoint

    try:
        from stashpoint.langgraph import thread
    except ImportError as exc:
        raise stashpoint.ConfigurationError(
            f"install the langgraph extra: pip install 'stashpoint[langgraph]' ({exc})"
        ) from None
    return thread


@app.command("list")
def threads_list(
    prefix: Annotated[
        str, typer.Option(metavar="PREFIX", help="Only thread keys starting with this.")
    ] = "",
    limit: Limit = 50,
    cursor: Cursor = None,
    deleted: Annotated[
        bool, typer.Option("--deleted", help="List deleted threads (tombstones) too.")
    ] = False,
    url: Url = None,
    as_json: AsJson = False,
    wide: Wide = False,
) -> None:
    """List LangGraph threads ascending by key, a page at a time, with their latest checkpoint.

    One head read per thread; a deleted thread is left out unless `--deleted`.
    """
    import stashpoint
    from stashpoint.cli.output import Column, Output, when
    from stashpoint.ids import thread_id_of
    from stashpoint.stores.layout import LANGGRAPH
    from stashpoint.url import without_credentials

    thread = _langgraph()
    output = Output(as_json=as_json, wide=wide)
    items: list[dict[str, Any]] = []
    unreadable: list[dict[str, str]] = []
    with open_stash(url, existing=True) as stash:
        logs = stash.logs_in(LANGGRAPH)
        keys, next_cursor = logs.list_page(prefix, limit, cursor)
        for key in keys:
            try:
                head = logs.head(key)
                state = thread.check_state(head.state, key)
            except stashpoint.CheckpointNotFound:
                continue  # deleted since it was listed
            except stashpoint.StashpointError as exc:
                unreadable.append({"key": key, "kind": exc.kind.value, "error": str(exc)})
                continue
            if state.deleted and not deleted:
                continue
            root = state.ns.get("")
            items.append({
                "thread_id": thread_id_of(key), "key": key, "deleted": state.deleted,
                "latest_checkpoint_id": None if root is None else root.latest,
                "namespaces": len(state.ns), "version": head.version,
                "updated_at": head.written_at,
            })  # fmt: skip
        name = without_credentials(stash.url)
    if as_json:
        output.page(items, next_cursor, unreadable=unreadable)
        return
    columns = [
        Column("thread"), Column("latest checkpoint", 1), Column("updated", 2),
        Column("ns", 3, justify="right"), Column("key", 5), Column("deleted", 4),
    ]  # fmt: skip
    rows = [
        [
            i["thread_id"] if i["thread_id"] is not None else f"(hashed) {i['key']}",
            i["latest_checkpoint_id"] or "-", when(i["updated_at"]), str(i["namespaces"]),
            i["key"], "yes" if i["deleted"] else "",
        ]
        for i in items
    ]  # fmt: skip
    output.table("LangGraph threads", columns, rows, stash=name, cursor=next_cursor,
                 empty="none")  # fmt: skip
    for bad in unreadable:
        from stashpoint.cli.safe import safe

        output.warn(f"[yellow]unreadable[/] {safe(bad['key'])}: {safe(bad['error'])}")


@app.command("show")
def threads_show(
    thread_id: Annotated[
        str, typer.Argument(metavar="THREAD_ID", help="Thread id (as given to LangGraph).")
    ],
    checkpoint_ns: Annotated[
        str, typer.Option("--ns", metavar="NS", help="Checkpoint namespace.")
    ] = "",
    checkpoint: Annotated[
        str | None, typer.Option(metavar="ID", help="A checkpoint id (default: latest).")
    ] = None,
    url: Url = None,
    as_json: AsJson = False,
    hide: Redact = None,
    no_redact: NoRedact = False,
) -> None:
    """Show a LangGraph checkpoint: config, metadata, channel values and pending writes."""
    import stashpoint
    from stashpoint.cli.output import Output
    from stashpoint.cli.redact import parse, redact

    _langgraph()
    from stashpoint.langgraph import StashpointSaver

    output = Output(as_json=as_json)
    configurable = {"thread_id": thread_id, "checkpoint_ns": checkpoint_ns}
    if checkpoint:
        configurable["checkpoint_id"] = checkpoint
    with open_stash(url, existing=True) as stash:
        found = StashpointSaver(stash).get_tuple({"configurable": configurable})
    if found is None:
        raise stashpoint.CheckpointNotFound("no such LangGraph checkpoint", object_name=thread_id)
    configurable = {k: v for k, v in found.config["configurable"].items() if not k.startswith("__")}
    parent = (found.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    document = {
        "config": configurable,
        "parent_checkpoint_id": parent,
        "metadata": found.metadata,
        "checkpoint": found.checkpoint,
        "pending_writes": [list(w) for w in found.pending_writes or []],
    }
    import json

    from stashpoint.cli.output import to_json

    plain = json.loads(to_json(document))
    output.emit(redact(plain, parse(hide, defaults=not no_redact)))
