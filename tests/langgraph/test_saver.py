"""`StashpointSaver.from_url` / `from_conn_string` / `setup`, as code written for the SQL
savers calls them, sync and async, on a plain and an encrypted stash."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, TypedDict

import pytest

pytest.importorskip("langgraph.graph")

from langgraph.graph import END, START, StateGraph

from stashpoint.langgraph import AsyncStashpointSaver, StashpointSaver
from tests.purging import plain


class _Count(TypedDict):
    n: int
    note: str


def _graph() -> Any:
    builder = StateGraph(_Count)
    builder.add_node("add", lambda state: {"n": state["n"] + 1})
    builder.add_edge(START, "add")
    builder.add_edge("add", END)
    return builder


def _settings(tmp_path: Path) -> Path:
    settings = tmp_path / "encryption.json"
    settings.write_text(
        json.dumps(
            {"rules": [{"tenant": "default", "key": "keyring:default"}], "keyring": "keyring.json"}
        )
    )
    return settings


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "encrypted"])
def test_from_conn_string_and_setup_run_a_graph(tmp_path: Path, encrypted: bool) -> None:
    url = f"local://{tmp_path / 'stash'}"
    if encrypted:
        url += f"?encryption={_settings(tmp_path)}"
    config: Any = {"configurable": {"thread_id": "t-1"}}
    with StashpointSaver.from_conn_string(url) as saver:
        saver.setup()  # a no-op, as code for the SQL savers calls it
        graph = _graph().compile(checkpointer=saver)
        graph.invoke({"n": 1, "note": "confidential-note"}, config)
        assert graph.get_state(config).values == {"n": 2, "note": "confidential-note"}
    with StashpointSaver.from_url(url) as again:  # another process's view
        assert _graph().compile(checkpointer=again).get_state(config).values["n"] == 2
    stored = [plain(p.read_bytes()) for p in (tmp_path / "stash").rglob("*") if p.is_file()]
    assert any(b"confidential-note" in body for body in stored) is not encrypted


def test_the_async_saver_has_the_same_entry_points(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}?encryption={_settings(tmp_path)}"
    config: Any = {"configurable": {"thread_id": "t-1"}}

    async def main() -> Any:
        async with AsyncStashpointSaver.from_conn_string(url) as saver:
            await saver.setup()
            graph = _graph().compile(checkpointer=saver)
            await graph.ainvoke({"n": 5, "note": "x"}, config)
            return (await graph.aget_state(config)).values

    assert asyncio.run(main()) == {"n": 6, "note": "x"}
