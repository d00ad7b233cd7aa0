"""Route each request to the transport that serves it: object storage or the index."""

from __future__ import annotations

from typing import Any

from stashpoint.errors import ConfigurationError
from stashpoint.index.requests import INDEX_REQUESTS
from stashpoint.steps import Request

_NO_INDEX = "this stash has no index (open it with ?index=...)"


class _Routes:
    """Which transport serves a request: index requests to the index, the rest to objects."""

    def __init__(self, objects: Any, index: Any | None) -> None:
        self.objects = objects
        """The object-storage transport."""
        self.index = index
        """The index transport, None where there is none."""

    def route(self, request: Request[Any]) -> Any:
        """Return the transport that executes `request`."""
        if isinstance(request, INDEX_REQUESTS):
            if self.index is None:
                raise ConfigurationError(_NO_INDEX)
            return self.index
        return self.objects


class Router(_Routes):
    """Blocking router over blocking transports."""

    def execute(self, request: Request[Any]) -> Any:
        """Execute one request on the transport that serves it."""
        return self.route(request).execute(request)

    def close(self) -> None:
        """Close both transports."""
        self.objects.close()
        if self.index is not None:
            self.index.close()


class AsyncRouter(_Routes):
    """The asyncio twin of `Router`."""

    async def execute(self, request: Request[Any]) -> Any:
        """Execute one request on the transport that serves it."""
        return await self.route(request).execute(request)

    async def close(self) -> None:
        """Close both transports."""
        await self.objects.close()
        if self.index is not None:
            await self.index.close()
