"""The encrypting object transport: every body sealed on its way out, opened on its way in.

It wraps the stash's object transport (S3, the local folder, memory) and drives the steps
of `stashpoint.encryption.Sealer` for each `PutObject` and `GetObject`; their key requests
go to the key services (`KeyServices`: the keyring file, AWS KMS), their object requests
(data-key objects) to the wrapped transport, their clock requests to the stash's clock.
Every other request passes through unchanged: listings, heads and deletes see what is
stored (sizes are the ciphertext's).
"""

from __future__ import annotations

import threading
from typing import Any

from stashpoint.cache import Lru
from stashpoint.clock import Clock, answer, answer_async
from stashpoint.encryption import KeyRequest, Sealer, UnwrapDataKey
from stashpoint.randomness import SYSTEM, Randomness
from stashpoint.steps import CLOCK_REQUESTS, ID_REQUESTS, run_async, run_sync
from stashpoint.stores.objects import GetObject, HeadObject, PutObject


class KeyServices:
    """The key service of each master key: the keyring file's, or AWS KMS's (made on use)."""

    def __init__(self, sealer: Sealer, session: Any = None) -> None:
        self.encryption = sealer.encryption
        """The settings naming the keyring and KMS."""
        self._session = session
        self._kms: Any = None
        self._keyring: Any = None
        self._lock = threading.Lock()
        self._unwrapping: dict[bytes, threading.Lock] = {}
        self._unwrapped: Lru[bytes, bytes] = Lru(256)
        self._service_lock = threading.Lock()

    def execute(self, request: KeyRequest) -> Any:
        """Send `request` to the service of its master key.

        Concurrent unwraps of one data key (a new process reading many entries at once)
        send one request: the others wait for its answer.
        """
        if not isinstance(request, UnwrapDataKey):
            return self._service(str(getattr(request, "master", ""))).execute(request)
        with self._lock:
            flight = self._unwrapping.setdefault(request.wrapped, threading.Lock())
        with flight:
            known = self._unwrapped.get(request.wrapped)
            if known is None:
                known = self._service(request.master).execute(request)
                self._unwrapped.put(request.wrapped, known)
        with self._lock:
            self._unwrapping.pop(request.wrapped, None)
        return known

    def _service(self, master: str) -> Any:
        with self._service_lock:
            if master.startswith("keyring:"):
                if self._keyring is None:
                    from stashpoint._backends.keyring import KeyringTransport

                    self._keyring = KeyringTransport(self.encryption.keyring or "")
                return self._keyring
            if self._kms is None:
                from stashpoint._backends.kms import KmsTransport  # boto3 only for KMS keys

                self._kms = KmsTransport(self.encryption, self._session)
            return self._kms


class _Encrypting:
    """What both twins hold: the wrapped transport, the logic and what answers its asks."""

    def __init__(
        self,
        inner: Any,
        sealer: Sealer,
        keys: KeyServices,
        clock: Clock,
        randomness: Randomness = SYSTEM,
    ) -> None:
        self.inner = inner
        """The transport that stores the ciphertext (blocking, or async for the twin)."""
        self.sealer = sealer
        """The logic."""
        self.keys = keys
        """Serves data-key requests (in a worker thread for the asyncio twin)."""
        self.clock = clock
        """Answers the logic's clock requests (data keys' ages)."""
        self.randomness = randomness
        """Answers the logic's id requests (new data keys' ids)."""


class EncryptingTransport(_Encrypting):
    """A blocking object transport that seals and opens bodies (see the module)."""

    def _step(self, request: Any) -> Any:
        if isinstance(request, KeyRequest):
            return self.keys.execute(request)
        if isinstance(request, CLOCK_REQUESTS):
            return answer(self.clock, request)
        if isinstance(request, ID_REQUESTS):
            return self.randomness.answer(request, self.clock)
        return self.inner.execute(request)

    def execute(self, request: Any) -> Any:
        """Execute one request, sealing what is stored and opening what is read."""
        if isinstance(request, KeyRequest):
            return self.keys.execute(request)
        if isinstance(request, PutObject):
            sealed = run_sync(self.sealer.sealing(request), self._step)
            return self.inner.execute(sealed)
        if isinstance(request, HeadObject):  # a local HEAD may carry the body
            found = self.inner.execute(request)
            return run_sync(self.sealer.heading(request.key, found), self._step)
        if isinstance(request, GetObject):
            found = self.inner.execute(request)
            return run_sync(self.sealer.opening(request.key, found), self._step)
        return self.inner.execute(request)

    def close(self) -> None:
        """Close the wrapped transport."""
        self.inner.close()


class AsyncEncryptingTransport(_Encrypting):
    """The asyncio twin of `EncryptingTransport` (key services run in worker threads)."""

    async def _keys(self, request: KeyRequest) -> Any:
        import asyncio

        return await asyncio.to_thread(self.keys.execute, request)

    async def _step(self, request: Any) -> Any:
        if isinstance(request, KeyRequest):
            return await self._keys(request)
        if isinstance(request, CLOCK_REQUESTS):
            return await answer_async(self.clock, request)
        if isinstance(request, ID_REQUESTS):
            return self.randomness.answer(request, self.clock)
        return await self.inner.execute(request)

    async def execute(self, request: Any) -> Any:
        """Execute one request, sealing what is stored and opening what is read."""
        if isinstance(request, KeyRequest):
            return await self._keys(request)
        if isinstance(request, PutObject):
            sealed = await run_async(self.sealer.sealing(request), self._step)
            return await self.inner.execute(sealed)
        if isinstance(request, HeadObject):
            found = await self.inner.execute(request)
            return await run_async(self.sealer.heading(request.key, found), self._step)
        if isinstance(request, GetObject):
            found = await self.inner.execute(request)
            return await run_async(self.sealer.opening(request.key, found), self._step)
        return await self.inner.execute(request)

    async def close(self) -> None:
        """Close the wrapped transport."""
        await self.inner.close()
