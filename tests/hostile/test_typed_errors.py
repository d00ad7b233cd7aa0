"""Issue #10's list of raw errors that leaked from the public API: each is now typed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import stashpoint
from stashpoint import Envelope, ErrorKind, StashpointError
from stashpoint.errors import StorageUnavailable


def _stash() -> stashpoint.Stash:
    stash = stashpoint.open("memory://")
    stash.runs.create_run("g", run_id="r")
    return stash


CASES: dict[str, tuple[Callable[[], Any], ErrorKind]] = {
    "list_runs(limit=0)": (lambda: _stash().runs.list_runs(limit=0), ErrorKind.INVALID_ARGUMENT),
    "list_attempts(limit=-1)": (
        lambda: _stash().runs.list_attempts(limit=-1),
        ErrorKind.INVALID_ARGUMENT,
    ),
    "list_runs(status='bogus')": (
        lambda: _stash().runs.list_runs(status="bogus"),  # type: ignore[arg-type]
        ErrorKind.INVALID_ARGUMENT,
    ),
    "create_run(123)": (lambda: _stash().runs.create_run(123), ErrorKind.INVALID_ARGUMENT),  # type: ignore[arg-type]
    "schema_version=-1": (
        lambda: Envelope.initial("a", None, "k", -1, {}),
        ErrorKind.INVALID_PAYLOAD,
    ),
    "revision=2**63": (
        lambda: Envelope(
            id="a",
            kind="k",
            schema_version=1,
            revision=2**63,
            write_id="w",
            created_at="2026-01-01T00:00:00Z",
            updated_at="2026-01-01T00:00:00Z",
            payload=None,
        ),
        ErrorKind.INVALID_PAYLOAD,
    ),
    "ttl_days=abc": (lambda: stashpoint.open("memory://", ttl_days="abc"), ErrorKind.CONFIGURATION),
    "blob_threshold=abc": (
        lambda: stashpoint.open("memory://", blob_threshold="abc"),
        ErrorKind.CONFIGURATION,
    ),
    "compression_level=99": (
        lambda: stashpoint.open("memory://", compression_level=99),
        ErrorKind.CONFIGURATION,
    ),
    # Issue 24 #9: the other way to build a stash validated nothing, and the first save
    # raised zstandard's raw ValueError.
    "Stash(url, Options(compression_level=99))": (
        lambda: stashpoint.Stash("memory://", stashpoint.Options(compression_level=99)),
        ErrorKind.CONFIGURATION,
    ),
    "Options(limits=dict)": (
        lambda: stashpoint.Options(limits={}),  # type: ignore[arg-type]
        ErrorKind.CONFIGURATION,
    ),
    "addressing_style=bogus": (
        lambda: stashpoint.open("s3://b/p", addressing_style="bogus"),
        ErrorKind.CONFIGURATION,
    ),
    "save_state_snapshot([..])": (
        lambda: _stash().runs.save_state_snapshot("r", [1, 2]),  # type: ignore[arg-type]
        ErrorKind.INVALID_ARGUMENT,
    ),
    "unknown memory:// option": (
        lambda: stashpoint.open("memory://?colour=blue"),
        ErrorKind.CONFIGURATION,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_former_leak_is_a_typed_error(case: str) -> None:
    call, kind = CASES[case]
    with pytest.raises(StashpointError) as info:
        call()
    assert info.value.kind is kind


def test_the_root_error_no_longer_claims_storage_trouble() -> None:
    assert StashpointError("x").kind is ErrorKind.OTHER
    assert StorageUnavailable("x").kind is ErrorKind.STORAGE_UNAVAILABLE


def test_max_turns_and_identity_have_their_own_kinds() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import fake_model

    from stashpoint.agent import AgentCheckpoint, AgentRunner

    with stashpoint.open("memory://") as stash:
        runner = AgentRunner(AgentCheckpoint.new(stash.checkpoints))
        with pytest.raises(stashpoint.LimitExceeded):
            runner.run(fake_model.turn, agent="a", model=fake_model.MODEL, max_turns=1)
        with pytest.raises(stashpoint.IdentityMismatch):
            runner.resume(agent="b")


def test_wrong_s3_credentials_are_a_configuration_error(
    seaweedfs: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "wrong-secret")  # read when the client is made
    with stashpoint.open(seaweedfs.url("creds")) as stash, pytest.raises(StashpointError) as info:
        stash.checkpoints.load("x")
    assert info.value.kind is ErrorKind.CONFIGURATION
