"""One error hierarchy, rooted at `StashpointError`, each error carrying a kind to branch on."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum


class ErrorKind(StrEnum):
    """What went wrong, for callers that branch on it.

    New kinds may appear in later versions: keep a default branch when matching.
    """

    NOT_FOUND = "not_found"
    """The object (checkpoint, run, attempt) does not exist."""
    CONFLICT = "conflict"
    """A compare-and-swap lost a race, or the expected revision is stale."""
    INVALID_PAYLOAD = "invalid_payload"
    """Bytes or fields that cannot be decoded or validated."""
    UNSUPPORTED_FORMAT = "unsupported_format"
    """A format or schema version this library does not know (often a newer one)."""
    INVALID_ID = "invalid_id"
    """An identifier outside the allowed alphabet or length."""
    TERMINAL_STATE = "terminal_state"
    """A transition out of a state that is final."""
    AMBIGUOUS_RESUME = "ambiguous_resume"
    """Resuming would repeat work whose effects are unknown."""
    GRAPH_DRIFT = "graph_drift"
    """The stored graph definition differs from the caller's."""
    STORAGE_UNAVAILABLE = "storage_unavailable"
    """Storage could not be reached or did not give a definite answer."""
    CONFIGURATION = "configuration"
    """A URL, option or environment setting is wrong."""
    LIMIT_EXCEEDED = "limit_exceeded"
    """A size or depth limit was crossed."""
    IDENTITY_MISMATCH = "identity_mismatch"
    """A checkpoint belongs to another agent or model than the caller's."""
    INVALID_ARGUMENT = "invalid_argument"
    """An argument of the wrong type or out of range (a negative limit, an unknown status)."""
    OTHER = "other"
    """None of the above (the root error's kind; every error raised has a narrower one)."""
    UNSAFE_STORAGE = "unsafe_storage"
    """Storage holds something stashpoint refuses to follow (a symlink inside the store)."""
    ARCHIVED = "archived"
    """The object sits in an archive storage class: restore it before reading it."""
    FENCED = "fenced"
    """Another worker took the run over: this worker's epoch is stale; stop, store nothing."""
    NONDETERMINISTIC = "nondeterministic"
    """A replay asked for other steps than the run recorded, in another order."""
    STEP_INTERRUPTED = "step_interrupted"
    """An at-most-once step started before and did not complete: it is not run again."""
    SUSPENDED = "suspended"
    """A durable run stopped on purpose (a wait, a retry delay, a deadline): run it later."""
    STEP_FAILED = "step_failed"
    """A step failed as many times as its retry policy allows."""
    CLAIMED = "claimed"
    """Another live worker holds the run (its lease has not run out): leave it, or wait."""
    PURGED = "purged"
    """The object was purged: erased for good, its id refused to writers."""
    RETENTION_LOCKED = "retention_locked"
    """S3 Object Lock keeps an object (a retention or a legal hold): it cannot be erased."""
    UNDECRYPTABLE = "undecryptable"
    """An encrypted object fails to decrypt: tampered, moved to another key or tenant, an
    unknown algorithm, or read without (or with the wrong) encryption settings."""
    SHREDDED = "shredded"
    """The tenant's key was shredded (`purge --tenant T --shred`): its objects are gone."""
    KEY_UNAVAILABLE = "key_unavailable"
    """The key service refused or could not be reached (KMS access denied, a disabled key)."""
    WAIT_TIMED_OUT = "wait_timed_out"
    """A durable run's wait for an outside event (`wait_for`) ran out of time first."""
    SOURCE_CHANGED = "source_changed"
    """An object a fleet map reads its items from changed while it was being read."""


def described(value: object) -> str:
    """Describe a value for an error message without showing its content.

    Errors carry ids and kinds, never payloads or credentials: a number, a bool or None
    is shown (range errors need it); anything else by its type alone (`a str of 41
    characters`, `a dict`).
    """
    if value is None or isinstance(value, bool | int | float):
        return repr(value)[:40]
    if isinstance(value, str):
        return f"a str of {len(value)} characters"
    return f"a {type(value).__name__}"


class StashpointError(Exception):
    """Root of every error stashpoint raises on purpose."""

    kind: ErrorKind = ErrorKind.OTHER
    """The kind of failure, stable across versions."""

    def __init__(self, message: str, *, object_name: str | None = None) -> None:
        self.message = message
        """Human-readable description of the failure."""
        self.object_name = object_name
        """The object (id or key) the failure concerns, when there is one."""
        super().__init__(f"{message} [{object_name}]" if object_name else message)


class CheckpointNotFound(StashpointError):
    """No checkpoint (or revision) exists under the given id."""

    kind = ErrorKind.NOT_FOUND


class Purged(CheckpointNotFound):
    """The id was purged (`Admin.purge`): nothing of it can be read, and writes are refused.

    A not-found (it subclasses `CheckpointNotFound`), with its own kind, so a reader that
    treats a missing id as absent goes on working; `purge_id` names the erasure receipt.
    Writes after a purge are refused so that nothing a writer that did not see the purge
    sends survives unnoticed.
    """

    kind = ErrorKind.PURGED

    def __init__(self, object_name: str, *, purge_id: str) -> None:
        self.purge_id = purge_id
        """The purge that erased it (`stashpoint receipts show PURGE_ID`)."""
        super().__init__(
            f"purged by {purge_id}: erased for good; writes to this id are refused",
            object_name=object_name,
        )


class RetentionLocked(StashpointError):
    """A purge found versions S3 Object Lock keeps; nothing was erased.

    `locked` names each kept version with its retain-until date (None when a legal hold
    alone keeps it).
    """

    kind = ErrorKind.RETENTION_LOCKED

    def __init__(self, locked: list[tuple[str, str, datetime | None, bool]]) -> None:
        self.locked = locked
        """(key, version id, retain until, legal hold) of each kept version."""
        shown = "; ".join(
            f"{key} until {until.isoformat() if until else '-'}{' (legal hold)' if hold else ''}"
            for key, _, until, hold in locked[:5]
        )
        more = f" and {len(locked) - 5} more" if len(locked) > 5 else ""
        super().__init__(
            f"refused: Object Lock keeps {len(locked)} version(s) ({shown}{more}); nothing "
            "was erased",
            object_name=locked[0][0] if locked else None,
        )


class Undecryptable(StashpointError):
    """An encrypted object could not be decrypted (`stashpoint.encryption`).

    Tampered bytes, an object moved to another key or tenant, a wrong or unknown key, an
    unknown algorithm, a plain object where the stash encrypts, or an encrypted object read
    by a stash opened without encryption. The message names the object and why, never its
    content or any key material.
    """

    kind = ErrorKind.UNDECRYPTABLE


class KeyShredded(Undecryptable):
    """The object's tenant key was shredded: it can never be read again (on purpose)."""

    kind = ErrorKind.SHREDDED


class KeyUnavailable(StashpointError):
    """The key service refused a data-key request or could not be reached."""

    kind = ErrorKind.KEY_UNAVAILABLE


class CheckpointConflict(StashpointError):
    """A compare-and-swap found another revision than the one expected."""

    kind = ErrorKind.CONFLICT

    def __init__(
        self,
        checkpoint_id: str,
        *,
        expected_revision: int | None,
        actual_revision: int | None = None,
        message: str | None = None,
    ) -> None:
        self.checkpoint_id = checkpoint_id
        """The checkpoint whose write lost."""
        self.expected_revision = expected_revision
        """The revision the writer expected (None: it expected no object)."""
        self.actual_revision = actual_revision
        """The revision found in storage, when known (None: absent or unknown)."""
        expected = "absent" if expected_revision is None else f"revision {expected_revision}"
        actual = "unknown" if actual_revision is None else f"revision {actual_revision}"
        super().__init__(
            message or f"compare-and-swap conflict: expected {expected}, found {actual}",
            object_name=checkpoint_id,
        )


class InvalidPayload(StashpointError):
    """Bytes or fields that cannot be decoded into a valid envelope or typed state."""

    kind = ErrorKind.INVALID_PAYLOAD


class IndexDamaged(InvalidPayload):
    """The run index's SQLite file is damaged (not a database, or malformed).

    The index is derived from storage, so nothing stored is lost: `stashpoint reindex`
    sets the damaged file aside and rebuilds it (`object_name` is the file).
    """


class UnsupportedFormat(StashpointError):
    """A format name, format version or schema version this library does not support."""

    kind = ErrorKind.UNSUPPORTED_FORMAT


class LimitExceeded(InvalidPayload):
    """A configured size or depth limit was crossed; nothing was written or trusted."""

    kind = ErrorKind.LIMIT_EXCEEDED


class InvalidId(StashpointError, ValueError):
    """An identifier outside `[A-Za-z0-9._:-]{1,255}` (or `.` / `..`)."""

    kind = ErrorKind.INVALID_ID


class StorageUnavailable(StashpointError):
    """Storage could not be reached or gave no definite answer.

    When a write's outcome is unknown, `write_id` names it so a caller can check later
    whether it landed (it is in the head's lineage if it did).
    """

    kind = ErrorKind.STORAGE_UNAVAILABLE

    def __init__(
        self, message: str, *, object_name: str | None = None, write_id: str | None = None
    ) -> None:
        self.write_id = write_id
        """The write whose outcome is unknown, if this error concerns a write."""
        super().__init__(message, object_name=object_name)


class ConfigurationError(StashpointError, ValueError):
    """A URL, option or environment setting is wrong."""

    kind = ErrorKind.CONFIGURATION


class InvalidArgument(StashpointError, ValueError):
    """An argument of the wrong type or out of range; nothing was read or written."""

    kind = ErrorKind.INVALID_ARGUMENT


class IdentityMismatch(StashpointError):
    """Resuming a checkpoint made by another agent, or with another model, than the caller's."""

    kind = ErrorKind.IDENTITY_MISMATCH


class UnsafeStorage(StashpointError):
    """Storage holds something stashpoint refuses to follow: a symlink inside the local store.

    Nothing was read, written or deleted through it; `object_name` is the path.
    """

    kind = ErrorKind.UNSAFE_STORAGE


class ArchivedObject(StashpointError):
    """An object is in an archive tier (S3 Glacier, Deep Archive): it must be restored first.

    The message names the command that restores it (`stashpoint restore ID`).
    """

    kind = ErrorKind.ARCHIVED


class Fenced(StashpointError):
    """A write under an owner epoch older than the run's: another worker took it over.

    Nothing was stored. The worker that gets this is a zombie (a reclaimed spot instance
    still running, a timed-out Lambda retried while alive): it should stop working on the
    run, not retry.
    """

    kind = ErrorKind.FENCED

    def __init__(self, run_id: str, *, epoch: int, current_epoch: int) -> None:
        self.epoch = epoch
        """The epoch this worker wrote under."""
        self.current_epoch = current_epoch
        """The run's epoch now (raised by the takeover)."""
        super().__init__(
            f"fenced: this worker holds epoch {epoch}, the run was taken over (epoch "
            f"{current_epoch}); nothing was stored",
            object_name=run_id,
        )


class NondeterministicReplay(StashpointError):
    """A durable run replayed another step than the one recorded at the same position."""

    kind = ErrorKind.NONDETERMINISTIC

    def __init__(self, run_id: str, *, position: int, recorded: str, asked: str) -> None:
        self.position = position
        """Position of the step (0: the first)."""
        self.recorded = recorded
        """The step the run recorded there."""
        self.asked = asked
        """The step the replay asked for."""
        super().__init__(
            f"replay asked for step {asked!r} at position {position}, where the run recorded "
            f"{recorded!r}: steps must run in the same order on every replay",
            object_name=run_id,
        )


class StepInterrupted(StashpointError):
    """An at-most-once step started before and did not complete; it is not run again."""

    kind = ErrorKind.STEP_INTERRUPTED

    def __init__(self, run_id: str, *, step: str, detail: str) -> None:
        self.step = step
        """The step."""
        super().__init__(
            f"at-most-once step {step!r} started before and did not complete ({detail}); "
            "it is not run again: settle it by hand",
            object_name=run_id,
        )


class RunSuspended(StashpointError):
    """A durable run stopped on purpose; nothing is lost: run it again later.

    Not a failure: the handler returns and is invoked again (from `stashpoint runs due`,
    EventBridge Scheduler, an SQS delay, or a loop) at `until`, or at once when `until` is
    None (a deadline: the next invocation has time again).
    """

    kind = ErrorKind.SUSPENDED

    def __init__(self, run_id: str, *, until: datetime | None, reason: str) -> None:
        self.run_id = run_id
        """The run."""
        self.until = until
        """When the run is due again (None: at once, in a new invocation)."""
        self.reason = reason
        """Why: `wait`, `event` (`wait_for`), `retry` or `deadline`."""
        when = "now, in a new invocation" if until is None else f"at {until.isoformat()}"
        super().__init__(f"run suspended ({reason}): run it again {when}", object_name=run_id)


class RunClaimed(StashpointError):
    """Another worker holds the run: a step of it is running under a lease not run out."""

    kind = ErrorKind.CLAIMED

    def __init__(self, run_id: str, *, step: str, until: datetime) -> None:
        self.step = step
        """The step the other worker is running."""
        self.until = until
        """When its lease runs out unless it sends a heartbeat."""
        super().__init__(
            f"step {step!r} is running in another worker, its lease until {until.isoformat()}"
            ": leave the run to it, or wait (`claim_wait=True`) and take it over after",
            object_name=run_id,
        )


class StepFailed(StashpointError):
    """A step failed on every attempt its retry policy allows; it is not run again."""

    kind = ErrorKind.STEP_FAILED

    def __init__(self, run_id: str, *, step: str, attempts: int, error: str | None) -> None:
        self.step = step
        """The step."""
        self.attempts = attempts
        """Attempts made."""
        super().__init__(
            f"step {step!r} failed {attempts} times, its last error: {error}",
            object_name=run_id,
        )


class WaitTimedOut(StashpointError):
    """A durable run's `wait_for(name, timeout=...)` ended without its event.

    Recorded as the wait's outcome: every replay raises it again at the same point (a
    signal that arrives later is kept but does not change it). Catch it to go on without
    the event, or let it fail the run.
    """

    kind = ErrorKind.WAIT_TIMED_OUT

    def __init__(self, run_id: str, *, name: str, timeout_at: datetime) -> None:
        self.name = name
        """The event waited for."""
        self.timeout_at = timeout_at
        """When the wait ran out."""
        super().__init__(
            f"the wait for {name!r} timed out at {timeout_at.isoformat()}", object_name=run_id
        )


class SourceChanged(StashpointError):
    """The object a fleet map's items are read from (a manifest) changed while it was read.

    Nothing was planned: start the map again once the object stays put (or copy it to a
    key nobody writes and map over that).
    """

    kind = ErrorKind.SOURCE_CHANGED


class RunNotFound(StashpointError):
    """No run exists under the given id."""

    kind = ErrorKind.NOT_FOUND


class AttemptNotFound(StashpointError):
    """No attempt exists under the given id (unknown ids are never silently ignored)."""

    kind = ErrorKind.NOT_FOUND


class TerminalStateConflict(StashpointError):
    """A transition out of a final state: a completed, failed or cancelled run or attempt."""

    kind = ErrorKind.TERMINAL_STATE


class GraphDriftError(StashpointError):
    """The run was recorded with another graph definition than the caller's."""

    kind = ErrorKind.GRAPH_DRIFT

    def __init__(self, run_id: str, *, stored_hash: str, current_hash: str) -> None:
        self.stored_hash = stored_hash
        """Graph hash recorded with the run."""
        self.current_hash = current_hash
        """Graph hash the caller resumes with."""
        super().__init__(
            f"graph definition changed since the run was recorded ({stored_hash[:12]} -> "
            f"{current_hash[:12]}); pass allow_graph_drift=True to resume anyway",
            object_name=run_id,
        )


class AmbiguousResume(StashpointError):
    """Resuming would repeat a turn whose effects are unknown (see `ResumePolicy`)."""

    kind = ErrorKind.AMBIGUOUS_RESUME

    def __init__(self, checkpoint_id: str, turn: int) -> None:
        self.turn = turn
        """The one-based turn that may have partially executed."""
        super().__init__(
            f"turn {turn} of agent {checkpoint_id!r} was in flight when it stopped; its model "
            "call and tools may have run. Settle it once: `stashpoint agent resolve "
            f"{checkpoint_id} --retry-turn` (run it again) or `--abandon-turn` (count it as "
            "done), or resume with ResumePolicy.RETRY_INTERRUPTED_TURN when turns are safe "
            "to repeat",
            object_name=checkpoint_id,
        )


def whole(value: object, name: str, minimum: int = 0, *, object_name: str | None = None) -> int:
    """Return `value` if it is an int (not a bool) of at least `minimum`.

    Else `InvalidArgument` naming the argument and describing the value by its type.
    """
    if type(value) is not int or value < minimum:
        raise InvalidArgument(
            f"{name} must be an int >= {minimum}, not {described(value)}", object_name=object_name
        )
    return value


class InvalidDurableUpdate(InvalidArgument):
    """A durable function's checkpoint the service refuses; nothing of it was stored.

    Lambda's `InvalidParameterValueException`: the SDK fails the execution.
    """


class StaleCheckpointToken(StashpointError):
    """A checkpoint token whose invocation no longer holds the execution; nothing stored.

    Another invocation took the execution over (this one is a zombie and must stop), or
    the token was never issued by this stash.
    """

    kind = ErrorKind.FENCED


class DurableExecutionNotFound(StashpointError):
    """No durable execution (or callback) exists under the given ARN or id."""

    kind = ErrorKind.NOT_FOUND


class DurableExecutionExists(StashpointError):
    """A durable execution of that function already has that name."""

    kind = ErrorKind.CONFLICT
