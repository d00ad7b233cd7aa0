"""The public face is small and pinned (issue 48, item 3): a name joins it on purpose."""

from __future__ import annotations

import stashpoint
import stashpoint.errors

PUBLIC = [
    "AsyncLogStore", "AsyncRunStore", "AsyncStash", "AsyncStore", "AttemptStatus",
    "CheckpointInfo", "CheckpointMetadata", "Codec", "Deadline", "Encryption", "Envelope",
    "ErrorKind", "Interrupt", "KeyRule", "Limits", "LogEntry", "LogHead", "LogStore",
    "Manifest", "OpenOptions", "Options", "Prefix", "PurgeReceipt", "Retry", "RetryPolicy",
    "RunState", "RunStatus", "RunStore", "RunSummary", "Semantics", "Stash",
    "StashpointError", "Store", "TraceContext", "new_id", "open", "open_async", "validate_id",
]  # fmt: skip


def test_the_top_level_lists_at_most_forty_names_and_exactly_these() -> None:
    assert len(stashpoint.__all__) <= 40
    assert sorted(stashpoint.__all__) == sorted(PUBLIC)


def test_every_error_is_a_stashpoint_error_with_a_kind_importable_from_errors() -> None:
    errors = [
        value
        for value in vars(stashpoint.errors).values()
        if isinstance(value, type) and issubclass(value, stashpoint.StashpointError)
    ]
    assert len(errors) > 20
    for error in errors:
        assert isinstance(error.kind, stashpoint.ErrorKind), error
        # Still reachable from the top level, as before, without being listed there.
        assert getattr(stashpoint, error.__name__) is error
