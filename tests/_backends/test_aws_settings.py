"""AWS conventions (issue 25 #6): stashpoint sets retries only where the user set nothing
(`client_config`, `AWS_MAX_ATTEMPTS` / `AWS_RETRY_MODE`, the profile), and takes a dict for
`client_config`. On main, its own retries overrode all of them, and a dict raised
AttributeError."""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.config
import pytest

import stashpoint
from stashpoint import CheckpointNotFound, ConfigurationError, StorageUnavailable
from stashpoint._backends.s3 import DEFAULT_RETRIES, S3Settings


@pytest.fixture
def no_aws_retry_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An environment that says nothing of retries; returns its (empty) AWS config file."""
    config = tmp_path / "aws-config"
    config.write_text("[default]\nregion = us-east-1\n")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)
    monkeypatch.delenv("AWS_RETRY_MODE", raising=False)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return config


def _retries(options: dict[str, object]) -> object:
    settings = S3Settings.from_options("bucket", {}, options)
    return settings.client_kwargs()["config"].retries


def test_stashpoints_retries_apply_only_where_nothing_else_says(
    no_aws_retry_settings: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _retries({}) == DEFAULT_RETRIES
    mine = {"mode": "adaptive", "max_attempts": 9}
    assert _retries({"client_config": botocore.config.Config(retries=mine)}) == mine
    assert _retries({"client_config": {"retries": mine}}) == mine  # a dict is a Config
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    assert _retries({}) is None  # botocore reads the environment
    monkeypatch.delenv("AWS_MAX_ATTEMPTS")
    monkeypatch.setenv("AWS_RETRY_MODE", "legacy")
    assert _retries({}) is None
    monkeypatch.delenv("AWS_RETRY_MODE")
    no_aws_retry_settings.write_text("[profile slow]\nmax_attempts = 7\n")
    assert _retries({"profile_name": "slow"}) is None  # the profile's say
    assert _retries({}) == DEFAULT_RETRIES  # the default profile says nothing


@pytest.mark.parametrize("bad", [{"no_such_option": 1}, "retries=3", 42])
def test_a_client_config_that_is_not_one_is_a_configuration_error(bad: object) -> None:
    with pytest.raises(ConfigurationError, match="client_config"):
        stashpoint.open("s3://bucket/prefix", client_config=bad)


@pytest.fixture
def resetting_endpoint() -> Iterator[tuple[str, list[int]]]:
    """An endpoint on 127.0.0.1 that accepts each connection and resets it at once."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    accepted: list[int] = []
    stop = threading.Event()

    def serve() -> None:
        server.settimeout(0.1)
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            accepted.append(1)
            conn.setsockopt(
                socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00"
            )
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", accepted
    finally:
        stop.set()
        thread.join(timeout=5)
        server.close()


@pytest.mark.parametrize(("env", "attempts"), [("1", 1), ("2", 2)])
def test_a_dead_endpoint_fails_within_the_attempts_the_environment_sets(
    no_aws_retry_settings: Path,
    monkeypatch: pytest.MonkeyPatch,
    resetting_endpoint: tuple[str, list[int]],
    env: str,
    attempts: int,
) -> None:
    endpoint, accepted = resetting_endpoint
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", env)
    with (
        stashpoint.open(f"s3://bucket/p?endpoint_url={endpoint}&region_name=us-east-1") as stash,
        pytest.raises(StorageUnavailable),
    ):
        stash.checkpoints.load("x")
    assert len(accepted) == attempts


def test_a_boto3_session_and_a_ready_client_are_used_as_given(
    s3_moto_url: tuple[str, dict[str, Any]],
) -> None:
    """Issue 25 #6: there was no way to pass a `boto3.Session` or a client."""
    import boto3

    url = s3_moto_url[0]
    made: list[str] = []

    class Session(boto3.session.Session):
        def client(self, service: str, **kwargs: Any) -> Any:  # type: ignore[override]
            made.append(service)
            return super().client(service, **kwargs)

    with stashpoint.open(url, session=Session(region_name="us-east-1")) as stash:
        stash.checkpoints.compare_and_swap(stashpoint.Envelope.initial("s", None, "k", 1, {}), None)
    assert made == ["s3"]

    client = boto3.client("s3", region_name="us-east-1")
    with stashpoint.open(url, client=client) as stash:
        assert stash.checkpoints.load("s").id == "s"
    # The caller's client is the caller's: still usable after the stash closed.
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    assert client.head_object(Bucket=bucket, Key=f"{prefix}/checkpoints/s")["ETag"]

    async def async_with_a_session() -> None:
        async with stashpoint.open_async(url, session=Session()):
            pass

    with pytest.raises(ConfigurationError, match="blocking"):
        asyncio.run(async_with_a_session())


def test_an_async_stash_on_s3_without_the_async_extra_says_which_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "aiobotocore", None)  # as if not installed
    with pytest.raises(stashpoint.ConfigurationError, match=r"stashpoint\[async\]"):
        stashpoint.open_async("s3://bucket/prefix?index=dynamodb://t")


def test_the_profile_is_read_from_the_session_that_makes_the_client(
    no_aws_retry_settings: Path,
) -> None:
    """The session given answers for its profile (the settings' own profile is not read)."""
    import botocore.session

    no_aws_retry_settings.write_text("[profile slow]\nmax_attempts = 7\n")
    settings = S3Settings.from_options("bucket", {}, {})
    assert settings.client_kwargs()["config"].retries == DEFAULT_RETRIES
    slow = botocore.session.Session(profile="slow")
    assert settings.client_kwargs(slow)["config"].retries is None  # the profile's say


def test_a_stash_makes_one_botocore_session_for_its_s3_client(
    s3_moto_url: tuple[str, dict[str, Any]],
    no_aws_retry_settings: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cold start made a second session only to read the profile's retry settings (its
    creation registers botocore's handlers: ~10-20 ms); the client's own session answers."""
    import botocore.session

    made: list[str | None] = []
    init = botocore.session.Session.__init__

    def counted(self: Any, *args: Any, **kwargs: Any) -> None:
        if "profile" in kwargs:  # stashpoint's (moto makes its own to describe errors)
            made.append(kwargs["profile"])
        init(self, *args, **kwargs)

    monkeypatch.setattr(botocore.session.Session, "__init__", counted)
    with stashpoint.open(s3_moto_url[0]) as stash:
        assert made == []  # the client is made at the first request
        with pytest.raises(CheckpointNotFound):
            stash.checkpoints.load("nothing-here")
        assert len(made) == 1
        with pytest.raises(CheckpointNotFound):
            stash.checkpoints.load("nothing-either")
    assert len(made) == 1
