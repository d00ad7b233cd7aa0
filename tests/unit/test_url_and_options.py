"""Opening a stash: URL forms, options and their errors."""

from __future__ import annotations

from pathlib import Path

import pytest

import stashpoint
from stashpoint import ConfigurationError, Limits, RetryPolicy
from stashpoint.url import DEFAULT_URL, parse_url, resolve_url


def test_url_forms_parse() -> None:
    assert parse_url("local://./.stashpoint").location == "./.stashpoint"
    assert parse_url("local:///abs/path").location == "/abs/path"
    s3 = parse_url("s3://bucket/a/b/?index=dynamodb://t&sse=aws:kms")
    assert (s3.location, s3.prefix, s3.params) == (
        "bucket", "a/b", {"index": "dynamodb://t", "sse": "aws:kms"},
    )  # fmt: skip
    assert parse_url("memory://").location == ""


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ftp://x", "unknown scheme"),
        ("no-scheme", "not a stash URL"),
        ("s3:///prefix", "without a bucket"),
        ("local://", "needs a folder"),
    ],
)
def test_bad_urls_are_configuration_errors(url: str, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        stashpoint.open(url)


def test_default_url_comes_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("STASHPOINT_URL", raising=False)
    assert resolve_url(None) == DEFAULT_URL
    monkeypatch.setenv("STASHPOINT_URL", "memory://from-env")
    assert resolve_url(None) == "memory://from-env"
    with stashpoint.open() as stash:
        assert stash.url == "memory://from-env"


def test_unknown_options_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="unknown local options"):
        stashpoint.open(f"local://{tmp_path}?colour=red")
    with pytest.raises(ConfigurationError, match="unknown index"):
        stashpoint.open(f"local://{tmp_path}?index=redis://x")


def test_stash_without_index_says_so_on_listing() -> None:
    with stashpoint.open("memory://?index=none") as stash:
        run_id = stash.runs.create_run("g")  # storage works without an index
        assert stash.runs.load_run(run_id) is not None
        with pytest.raises(ConfigurationError, match="no index"):
            stash.runs.list_runs()


def test_limits_and_retry_policy_are_validated() -> None:
    with pytest.raises(ValueError, match="max_depth"):
        Limits(max_depth=500)
    with pytest.raises(ValueError, match="positive"):
        Limits(max_compressed_bytes=0)
    policy = RetryPolicy(base_delay=0.1, max_delay=0.3)
    assert all(0 <= policy.delay(n) <= 0.3 for n in range(1, 20))


def test_opening_a_local_stash_writes_nothing_until_used(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path / 'lazy'}"):
        pass
    assert not (tmp_path / "lazy").exists()
