"""The OpenAI Agents SDK's own tests, run against `StashSession`, beside its `SQLiteSession`.

The SDK's published sdist (the installed version, downloaded from PyPI into `.cache/` at
test time; nothing of it is kept in this repository) holds its test suite. Its session
tests and the runner tests that keep history in a session construct `SQLiteSession`
directly; `sdk_plugin` puts `StashSession` in its place. Each file set runs twice in one
test: once as the SDK ships it (its SQLite backend) and once on the stash; every test that
passes on SQLite passes on the stash, except the ones listed in `NOT_APPLICABLE`, which
reach into `SQLiteSession`'s internals (its connections, its locks, rows it corrupts with
`sqlite3` by hand).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("agents")

from tests import servers
from tests.sdk_suites import Suite, all_pass, compare, passed

HERE = Path(__file__).resolve().parent

SESSION_FILES = [
    "tests/memory/test_session.py",
    "tests/memory/test_session_limit.py",
    "tests/memory/test_compaction_model_visibility.py",
    "tests/memory/test_compaction_suffix.py",
]
"""The SDK's tests of sessions themselves."""
RUNNER_FILES = [
    "tests/test_agent_runner.py",
    "tests/test_agent_runner_streamed.py",
    "tests/test_run_impl_resume_paths.py",
    "tests/test_max_turns.py",
    "tests/test_soft_cancel.py",
    "tests/test_tool_batch_failure_history.py",
    "tests/test_native_tool_failure_history.py",
    "tests/test_tool_failure_boundaries.py",
    "tests/test_hitl_session_scenario.py",
]
"""The SDK's runner tests that keep a conversation in a session."""

_INTERNALS = "reaches into SQLiteSession's internals"
NOT_APPLICABLE = {
    **{
        f"tests/memory/test_session.py::{name}": reason
        for name, reason in {
            "test_sqlite_session_close_closes_worker_thread_connections": _INTERNALS,
            "test_sqlite_session_reaps_connections_from_exited_worker_threads": _INTERNALS,
            "test_sqlite_session_closes_retired_connections_before_the_next_allocation": (
                _INTERNALS
            ),
            "test_sqlite_session_keeps_connections_of_live_worker_threads": _INTERNALS,
            "test_sqlite_session_closed_rejects_empty_add_items": (
                "a closed SQLiteSession raises RuntimeError; a StashSession has nothing to "
                "close (its stash is the caller's)"
            ),
            "test_sqlite_session_pop_item_skips_corrupt_most_recent": (
                "corrupts rows with sqlite3; a damaged log is InvalidPayload, never skipped"
            ),
            "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": (
                "corrupts rows with sqlite3; a damaged log is InvalidPayload, never skipped"
            ),
            "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": (
                "corrupts rows with sqlite3; a damaged log is InvalidPayload, never skipped"
            ),
            "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": (
                "corrupts rows with sqlite3; a damaged log is InvalidPayload, never skipped"
            ),
            "test_sqlite_session_file_lock_is_shared_across_instances": _INTERNALS,
            "test_sqlite_session_failed_add_items_releases_write_lock": _INTERNALS,
            "test_sqlite_session_failed_clear_session_rolls_back": _INTERNALS,
            "test_sqlite_session_failed_pop_item_releases_write_lock": _INTERNALS,
            "test_sqlite_session_rollback_failure_evicts_connection": _INTERNALS,
            "test_sqlite_session_close_retries_quarantined_connection": _INTERNALS,
            **{
                f"test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome"
                f"[{op}]": "pauses sqlite3's commit (the stash's changes are awaited to their "
                "outcome under cancellation too: tests/openai_agents/test_session.py)"
                for op in ("add", "pop", "clear")
            },
        }.items()
    },
    **{
        f"tests/test_run_impl_resume_paths.py::"
        f"test_handoff_resume_after_cancelled_compaction_commits[{mode}]": (
            "patches SQLiteSession._insert_items"
        )
        for mode in ("run-live", "run-json", "streamed-live", "streamed-json")
    },
}
"""The SDK's tests that do not apply to a session kept in a stash, and why."""


_outcomes = Suite("openai-agents", "tests/memory", HERE).run
"""Run its test files, as shipped or on the stash (`Suite.run`)."""


def _compare(sqlite: dict[str, str], stash: dict[str, str]) -> int:
    return compare(sqlite, stash, NOT_APPLICABLE)


def _all_pass(stash: dict[str, str]) -> int:
    return all_pass(stash, NOT_APPLICABLE)


def test_the_sdks_session_tests_pass_on_the_stash_on_seaweedfs_as_on_sqlite(
    seaweedfs: servers.S3Server,
) -> None:
    sqlite = _outcomes(SESSION_FILES, ours=False)
    judged = passed(sqlite) - NOT_APPLICABLE.keys()
    stash = _outcomes(
        SESSION_FILES, ours=True, url=seaweedfs.url("sdk"), counts=judged.__contains__
    )
    _compare(sqlite, stash)  # 134 of 152 pass with openai-agents 0.24.0 (SQLite: 152)
    # Every test of the files ran on both. A count of passes is no bound here: a new release
    # of a dependency can fail SDK tests as shipped (cryptography 51 fails 16 compaction
    # tests that patch `cryptography.fernet.time`), and `compare` judges test by test.
    assert len(sqlite) >= 150 and len(stash) >= 150


def test_the_sdks_runner_tests_keep_their_sessions_on_the_stash() -> None:
    stash = _outcomes(RUNNER_FILES, ours=True, counts=lambda test: test not in NOT_APPLICABLE)
    assert _all_pass(stash) >= 850  # 857 with 0.24.0
