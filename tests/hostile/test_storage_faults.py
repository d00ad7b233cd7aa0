"""Storage that is missing, read-only, corrupted in place, or reused after a delete."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint import (
    CheckpointNotFound,
    ConfigurationError,
    Envelope,
    InvalidId,
    InvalidPayload,
    StashpointError,
)


def test_a_missing_bucket_on_load_is_a_configuration_error(seaweedfs: Any) -> None:
    url = seaweedfs.url("p", bucket="no-such-bucket-anywhere")
    with stashpoint.open(url) as stash, pytest.raises(ConfigurationError, match="bucket"):
        stash.checkpoints.load("x")  # not "no checkpoint with this id"


@pytest.fixture
def read_only(tmp_path: Path) -> Any:
    if os.geteuid() == 0:
        pytest.skip("root ignores folder permissions")  # pragma: no cover - CI runs as root
    return tmp_path


def _chmod_tree(root: Path, writable: bool) -> None:
    for folder, dirs, files in os.walk(root):
        for name in [*dirs, *files]:
            path = Path(folder) / name
            mode = path.stat().st_mode
            path.chmod(mode | stat.S_IWUSR if writable else mode & ~0o222)
    mode = root.stat().st_mode
    root.chmod(mode | stat.S_IWUSR if writable else mode & ~0o222)


def test_read_only_folder_reads_and_refuses_writes_plainly(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with stashpoint.open(f"local://{root}") as stash:
        head = Envelope.initial("a", None, "k", 1, {"n": 0})
        stash.checkpoints.compare_and_swap(head, None)
        stash.checkpoints.compare_and_swap(head.next({"n": 1}), 0)
    # Simulate a read-only mount for root as well: the transport sees EROFS-like refusals.
    import errno

    from stashpoint._backends import local

    real_open = os.open

    def refusing_open(path: Any, flags: int, *args: Any, **kwargs: Any) -> int:
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *args, **kwargs)

    original = local.os.open
    local.os.open = refusing_open  # type: ignore[assignment]
    try:
        with stashpoint.open(f"local://{root}") as stash:
            assert stash.checkpoints.load("a").revision == 1
            assert [e.revision for e in stash.checkpoints.history("a")] == [0]
            with pytest.raises(ConfigurationError, match="not writable"):
                stash.checkpoints.compare_and_swap(stash.checkpoints.load("a").next({"n": 2}), 1)
            with pytest.raises(ConfigurationError, match="not writable"):
                stash.checkpoints.delete("a")
    finally:
        local.os.open = original  # type: ignore[assignment]


def test_ids_up_to_the_limit_work_on_the_local_backend(tmp_path: Path) -> None:
    longest = "x" * stashpoint.ids.MAX_ID_LENGTH if hasattr(stashpoint, "ids") else "x" * 255
    with stashpoint.open(f"local://{tmp_path / 's'}") as stash:
        head = Envelope.initial(longest, None, "k", 1, {})
        stash.checkpoints.compare_and_swap(head, None)
        stash.checkpoints.compare_and_swap(head.next({"n": 1}), 0)
        assert [e.revision for e in stash.checkpoints.history(longest)] == [0]
        with pytest.raises(InvalidId):
            Envelope.initial("x" * 256, None, "k", 1, {})


def test_history_survives_a_head_corrupted_in_place(tmp_path: Path) -> None:
    root = tmp_path / "s"
    with stashpoint.open(f"local://{root}") as stash:
        head = Envelope.initial("a", None, "k", 1, {"n": 0})
        stash.checkpoints.compare_and_swap(head, None)
        stash.checkpoints.compare_and_swap(head.next({"n": 1}), 0)
        with open(root / "checkpoints" / "a", "r+b") as f:  # a disk fault, an editor
            f.write(b"garbage!")
        with pytest.raises(InvalidPayload):
            stash.checkpoints.load("a")
        # The versions are copies, not the head's inode: both revisions are intact.
        assert [e.payload for e in stash.checkpoints.history("a")] == [{"n": 1}, {"n": 0}]
        assert stash.checkpoints.load("a", revision=1).payload == {"n": 1}
        assert stash.checkpoints.load("a", revision=0).payload == {"n": 0}


@pytest.fixture(params=["memory_url", "local_url", "s3_seaweed_url"])
def url(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return request.getfixturevalue(request.param)


def test_history_across_delete_and_recreate_is_the_current_life(
    url: tuple[str, dict[str, Any]],
) -> None:
    address, options = url
    with stashpoint.open(address, **options) as stash:
        first = Envelope.initial("a", None, "k", 1, {"life": 1, "n": 0})
        stash.checkpoints.compare_and_swap(first, None)
        stash.checkpoints.compare_and_swap(first.next({"life": 1, "n": 1}), 0)
        stash.checkpoints.compare_and_swap(first.next({"life": 1, "n": 1}).next({"n": 2}), 1)
        stash.checkpoints.delete("a")
        # A deleted id keeps its last life's history (the head is gone).
        assert [e.revision for e in stash.checkpoints.history("a")] == [2, 1, 0]
        second = Envelope.initial("a", None, "k", 1, {"life": 2, "n": 0})
        stash.checkpoints.compare_and_swap(second, None)
        assert stash.checkpoints.history("a") == []
        stash.checkpoints.compare_and_swap(second.next({"life": 2, "n": 1}), 0)
        assert [e.payload["life"] for e in stash.checkpoints.history("a")] == [2]
        assert stash.checkpoints.load("a", revision=0).payload == {"life": 2, "n": 0}
        with pytest.raises(CheckpointNotFound):
            stash.checkpoints.load("a", revision=2)  # the old life's revision 2


def test_every_failure_above_is_a_stashpoint_error() -> None:
    assert issubclass(ConfigurationError, StashpointError)
