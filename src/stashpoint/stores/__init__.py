"""Checkpoint stores: the contract (`Store`, `AsyncStore`) and the logic behind it.

`cas` (compare-and-swap steps), `store` (the two APIs), `blobs`, `layout`, and `objects`
(the request vocabulary every object transport executes).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stashpoint.stores.store import AsyncStore, Store

__all__ = ["AsyncStore", "Store"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: the request vocabulary in `objects` must not pull in the codec.
    if name in __all__:
        from stashpoint.stores import store

        return getattr(store, name)
    raise AttributeError(f"module 'stashpoint.stores' has no attribute {name!r}")
