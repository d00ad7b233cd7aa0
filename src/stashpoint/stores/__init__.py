"""Checkpoint stores: the contract (`Store`, `AsyncStore`) and its object-storage backends."""

from stashpoint.stores.store import AsyncStore, Store

__all__ = ["AsyncStore", "Store"]
