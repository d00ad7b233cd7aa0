"""Route each request to the transport that serves it: object storage or the index."""

from __future__ import annotations

from typing import Any

from stashpoint.errors import ConfigurationError
from stashpoint.index.requests import INDEX_REQUESTS

_NO_INDEX = "this stash has no index (open it with ?index=...)"


class Router:
    """Blocking router: object requests to one transport, index requests to another."""

    def __init__(self, objects: Any, index: Any | None) -> None:
        self.objects = objects
        """The object-storage transport."""
        self.index = index
        """The index transport, None where there is none."""

    def execute(self, request: Any) -> Any:
        """Execute one request on the transport that serves it."""
        if isinstance(request, INDEX_REQUESTS):
            if self.index is None:
                raise ConfigurationError(_NO_INDEX)
            return self.index.execute(request)
        return self.objects.execute(request)

    def close(self) -> None:
        """Close both transports."""
        self.objects.close()
        if self.index is not None:
            self.index.close()


class AsyncRouter:
    """The asyncio twin of `Router`."""

    def __init__(self, objects: Any, index: Any | None) -> None:
        self.objects = objects
        """The object-storage transport."""
        self.index = index
        """The index transport, None where there is none."""

    async def execute(self, request: Any) -> Any:
        """Execute one request on the transport that serves it."""
        if isinstance(request, INDEX_REQUESTS):
            if self.index is None:
                raise ConfigurationError(_NO_INDEX)
            return await self.index.execute(request)
        return await self.objects.execute(request)

    async def close(self) -> None:
        """Close both transports."""
        await self.objects.close()
        if self.index is not None:
            await self.index.close()
