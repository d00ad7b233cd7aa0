"""LangGraph persistence over a stash: checkpointers and a store.

`StashpointSaver` / `AsyncStashpointSaver` are checkpointers (threads); `StashpointStore` /
`AsyncStashpointStore` are LangGraph's `BaseStore` (long-term memory across threads).
Install with the `langgraph` extra. Importing this module imports `langgraph.checkpoint`
only (not `langgraph.graph`); the store classes import `langgraph.store` when first used.
See the README's LangGraph section, `thread` for a thread's stored form and `items` for
an item's.
"""

from typing import TYPE_CHECKING, Any

from stashpoint.langgraph.saver import AsyncStashpointSaver, StashpointSaver
from stashpoint.langgraph.thread import LATEST_MARKER

if TYPE_CHECKING:
    from stashpoint.langgraph.store import AsyncStashpointStore, StashpointStore

__all__ = [
    "LATEST_MARKER",
    "AsyncStashpointSaver",
    "AsyncStashpointStore",
    "StashpointSaver",
    "StashpointStore",
]


def __getattr__(name: str) -> Any:
    # The store's classes load `langgraph.store` (and LangChain's embeddings interface):
    # a checkpointer-only Lambda never pays for them.
    if name in ("StashpointStore", "AsyncStashpointStore"):
        from stashpoint.langgraph import store

        return getattr(store, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
