"""What a stash sends: requests by type, PUT body bytes and index items written."""

from __future__ import annotations

from collections import Counter
from typing import Any

from stashpoint.index.requests import PutItems
from stashpoint.stores.objects import PutObject


class Meter:
    """Counts a (blocking) stash's requests, PUT body bytes and index items written.

    Every way its operations reach storage is wrapped: the transport, the stash's own
    `_execute` and its run store's.
    """

    def __init__(self, stash: Any) -> None:
        self.requests: Counter[str] = Counter()
        self.put_bytes = 0
        self.index_items = 0
        real = stash._transport.execute

        def execute(request: Any) -> Any:
            self.requests[type(request).__name__] += 1
            if isinstance(request, PutObject):
                self.put_bytes += len(request.body)
            if isinstance(request, PutItems):
                self.index_items += len(request.items)
            return real(request)

        stash._transport.execute = execute
        stash._execute = execute
        stash.runs._execute = execute

    def reset(self) -> None:
        """Start counting again from zero."""
        self.requests.clear()
        self.put_bytes = self.index_items = 0
