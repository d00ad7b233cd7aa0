"""Retry policy: capped exponential backoff with full jitter, free of I/O."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how patiently stashpoint retries what is safe to retry.

    Applies to HTTP 409 ConditionalRequestConflict, to resending a write that read-back
    showed has not landed, and to run-state compare-and-swap loops.
    """

    max_attempts: int = 8
    """Attempts in all, the first included."""
    base_delay: float = 0.02
    """Delay bound before the second attempt, in seconds."""
    max_delay: float = 1.0
    """Upper bound of any one delay, in seconds."""

    def delay(self, attempt: int) -> float:
        """Return the delay before attempt number `attempt + 1` (`attempt` counts from 1)."""
        bound = min(self.max_delay, self.base_delay * (2 ** max(0, attempt - 1)))
        return random.uniform(0, bound)


DEFAULT_RETRY = RetryPolicy()
"""The retry policy used when none is given."""
