"""Serving the async API from a blocking transport (local folder, memory)."""

from __future__ import annotations

from typing import Any

from stashpoint.stores.objects import ObjectTransport


class ThreadedAsyncTransport:
    """Runs a blocking transport's requests in worker threads, for the async API."""

    def __init__(self, transport: ObjectTransport, *, offload: bool = True) -> None:
        self.transport = transport
        """The blocking transport doing the work."""
        self.offload = offload
        """Whether to run requests in a thread (False for transports that never block)."""

    async def execute(self, request: Any) -> Any:
        """Execute one request without blocking the event loop."""
        if not self.offload:
            return self.transport.execute(request)
        import asyncio  # lazily: only async users pay for importing it

        return await asyncio.to_thread(self.transport.execute, request)

    async def close(self) -> None:
        """Release the blocking transport."""
        self.transport.close()
