"""Statuses of runs and attempts: the vocabulary every layer (and the CLI) shares.

A module of its own, free of models and I/O, so that the command line can offer them as
choices without loading the run models. Status enums may gain variants in later versions:
keep a default branch when matching.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any


class _Status(StrEnum):
    """A status, read in this library's spelling or in the Rust run format's serde one."""

    @classmethod
    def _missing_(cls, value: object) -> Any:
        # The Rust run format spells "Running"; it reads as ours ("running"), ours is written.
        if isinstance(value, str):
            return next((m for m in cls if m.value == value.lower()), None)
        return None


class RunStatus(_Status):
    """Overall status of a run."""

    RUNNING = "running"
    """Attempts may still be recorded."""
    COMPLETED = "completed"
    """Finished successfully (final)."""
    FAILED = "failed"
    """Finished with an error (final)."""
    INTERRUPTED = "interrupted"
    """Paused by an interrupt (for example human input); recording an attempt resumes it."""
    CANCELLED = "cancelled"
    """Stopped on request (final)."""
    WAITING = "waiting"
    """Suspended until `wake_at` (a durable wait or retry delay); waking resumes it."""

    @property
    def is_terminal(self) -> bool:
        """Whether no transition may leave this status."""
        return self in (RunStatus.COMPLETED, RunStatus.FAILED, RunStatus.CANCELLED)


class AttemptStatus(_Status):
    """Status of one node execution attempt."""

    RUNNING = "running"
    """Started, not finished."""
    COMPLETED = "completed"
    """Finished with an output (final)."""
    FAILED = "failed"
    """Finished with an error (final)."""
    INTERRUPTED = "interrupted"
    """Stopped by an interrupt (final for this attempt; a new attempt resumes the node)."""
    CANCELLED = "cancelled"
    """Stopped on request (final)."""
