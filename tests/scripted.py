"""Scripted storage: drive any steps with the exact answers a server (or botocore) gives.

Steps are I/O-free, so a script stands in for storage and every request the logic makes
is checked, in order. Every write path's scripted tests use it (`tests/stores/`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from stashpoint.clock import REAL
from stashpoint.randomness import SYSTEM, Randomness
from stashpoint.steps import ID_REQUESTS, Compute, Now, Sleep, Steps
from stashpoint.stores.objects import PutObject, WriteOutcome, WriteResult

Answer = Any  # a result, an exception to raise, or a function of the request


@dataclass
class Script:
    """Storage that answers each request with the next scripted answer, checking its type."""

    answers: list[tuple[type[Any], Answer]]
    requests: list[Any] = field(default_factory=list)
    sleeps: int = 0
    ids: Randomness = SYSTEM  # each script is another writer: never a shared seed

    def run(self, steps: Steps[Any]) -> Any:
        try:
            request = next(steps)
            while True:
                if isinstance(request, Sleep):
                    self.sleeps += 1
                    request = steps.send(None)
                    continue
                if isinstance(request, Compute):
                    request = steps.send(request.work())
                    continue
                if isinstance(request, Now):
                    request = steps.send(datetime(2026, 1, 1, tzinfo=UTC))
                    continue
                if isinstance(request, ID_REQUESTS):
                    request = steps.send(self.ids.answer(request, REAL))
                    continue
                assert self.answers, f"unscripted request {request!r}"
                kind, answer = self.answers.pop(0)
                assert isinstance(request, kind), f"expected {kind.__name__}, got {request!r}"
                self.requests.append(request)
                if callable(answer) and not isinstance(answer, type):
                    answer = answer(request)
                if isinstance(answer, BaseException):
                    request = steps.throw(answer)
                else:
                    request = steps.send(answer)
        except StopIteration as stop:
            assert not self.answers, f"scripted answers left over: {self.answers}"
            return stop.value

    def puts(self) -> list[PutObject]:
        return [r for r in self.requests if isinstance(r, PutObject)]


STORED = WriteResult(WriteOutcome.STORED, etag="etag-new")
TIMEOUT = WriteResult(WriteOutcome.AMBIGUOUS, detail="ReadTimeoutError")
REFUSED = WriteResult(WriteOutcome.PRECONDITION_FAILED, detail="HTTP 412", retried=False)
REFUSED_AFTER_RETRY = WriteResult(WriteOutcome.PRECONDITION_FAILED, detail="HTTP 412")
BUSY = WriteResult(WriteOutcome.CONDITION_CONFLICT, detail="HTTP 409", retried=False)
