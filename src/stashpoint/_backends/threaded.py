"""Serving the async API from a blocking transport (local folder, memory)."""

from __future__ import annotations

from typing import Any, Protocol

from stashpoint.steps import Request


class BlockingTransport(Protocol):
    """Any blocking transport: object storage or an index."""

    def execute(self, request: Any, /) -> Any:
        """Execute one request and return its result."""
        ...

    def close(self) -> None:
        """Release clients and files."""
        ...


class ThreadedAsyncTransport:
    """Runs a blocking transport's requests in worker threads, for the async API."""

    def __init__(self, transport: BlockingTransport, *, offload: bool = True) -> None:
        self.transport = transport
        """The blocking transport doing the work."""
        self.offload = offload
        """Whether to run requests in a thread (False for transports that never block)."""

    async def execute(self, request: Request[Any]) -> Any:
        """Execute one request without blocking the event loop."""
        if not self.offload:
            return self.transport.execute(request)
        import asyncio  # lazily: only async users pay for importing it

        return await asyncio.to_thread(self.transport.execute, request)

    async def close(self) -> None:
        """Release the blocking transport."""
        self.transport.close()
