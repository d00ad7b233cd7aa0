"""LangGraph checkpointers over a stash: `StashpointSaver` and `AsyncStashpointSaver`.

Install with the `langgraph` extra. Importing this module imports `langgraph.checkpoint`
only (not `langgraph.graph`). See the README's LangGraph section and `thread` for the
stored form.
"""

from stashpoint.langgraph.saver import AsyncStashpointSaver, StashpointSaver
from stashpoint.langgraph.thread import LATEST_MARKER

__all__ = ["LATEST_MARKER", "AsyncStashpointSaver", "StashpointSaver"]
