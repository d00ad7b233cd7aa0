"""The local backend never follows a symlink found inside the store folder.

Someone who can write into the folder plants links to elsewhere; every operation that
would go through one refuses with `UnsafeStorage` naming the path, and nothing outside the
store is read, written or deleted. The store root itself may be a symlink.
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import pytest

import stashpoint
from stashpoint import Envelope
from stashpoint.errors import ErrorKind, UnsafeStorage


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "passwd").write_text("root:x:0:0\n")
    return folder


def open_store(tmp_path: Path) -> stashpoint.Stash:
    return stashpoint.open(f"local://{tmp_path / 'store'}")


def seed(stash: stashpoint.Stash, checkpoint_id: str = "good") -> None:
    stash.checkpoints.compare_and_swap(Envelope.initial(checkpoint_id, None, "k", 1, {}), None)


def test_symlinked_namespace_folder_is_never_followed(tmp_path: Path, outside: Path) -> None:
    with open_store(tmp_path) as stash:
        seed(stash)
        root = tmp_path / "store"
        (root / "checkpoints").rename(root / "real")
        (root / "checkpoints").symlink_to(outside)
        with pytest.raises(UnsafeStorage) as info:
            stash.checkpoints.delete("passwd")
        assert info.value.kind is ErrorKind.UNSAFE_STORAGE and "checkpoints" in str(info.value)
        with pytest.raises(UnsafeStorage):
            stash.checkpoints.load("passwd")
        with pytest.raises(UnsafeStorage):
            seed(stash, "new")
    assert (outside / "passwd").read_text() == "root:x:0:0\n"
    assert sorted(p.name for p in outside.iterdir()) == ["passwd"]


def test_symlinked_object_is_not_read(tmp_path: Path, outside: Path) -> None:
    with open_store(tmp_path) as stash:
        seed(stash)
        (tmp_path / "store" / "checkpoints" / "evil").symlink_to(outside / "passwd")
        with pytest.raises(UnsafeStorage):
            stash.checkpoints.load("evil")
        assert "evil" not in stash.checkpoints.list_ids()


def test_listing_does_not_walk_a_symlinked_folder(tmp_path: Path) -> None:
    with open_store(tmp_path) as stash:
        seed(stash)
        (tmp_path / "store" / "checkpoints" / "usr").symlink_to("/usr")
        started = time.monotonic()
        assert stash.checkpoints.list_ids() == ["good"]
        assert time.monotonic() - started < 5


def test_gc_does_not_delete_through_a_symlinked_blobs_folder(tmp_path: Path, outside: Path) -> None:
    with open_store(tmp_path) as stash:
        seed(stash)
        (tmp_path / "store" / "blobs").symlink_to(outside)
        old = time.time() - 10 * 86400
        os.utime(outside / "passwd", (old, old))
        with pytest.raises(UnsafeStorage):
            stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
    assert (outside / "passwd").exists()


def test_temp_sweep_does_not_follow_a_symlinked_tmp(tmp_path: Path, outside: Path) -> None:
    root = tmp_path / "store"
    root.mkdir()
    (root / ".tmp").symlink_to(outside)
    old = time.time() - 10 * 86400
    os.utime(outside / "passwd", (old, old))
    with open_store(tmp_path) as stash, pytest.raises(UnsafeStorage):
        seed(stash)
    assert (outside / "passwd").exists()


def test_symlinked_lock_and_version_folders_are_refused(tmp_path: Path, outside: Path) -> None:
    with open_store(tmp_path) as stash:
        seed(stash)
        (tmp_path / "store" / ".versions").rename(tmp_path / "store" / ".v-real")
        (tmp_path / "store" / ".versions").symlink_to(outside)
        with pytest.raises(UnsafeStorage):
            stash.checkpoints.history("good")
    assert sorted(p.name for p in outside.iterdir()) == ["passwd"]


def test_the_store_root_itself_may_be_a_symlink(tmp_path: Path) -> None:
    real = tmp_path / "real-store"
    real.mkdir()
    (tmp_path / "store").symlink_to(real)
    with open_store(tmp_path) as stash:
        seed(stash)
        assert stash.checkpoints.load("good").revision == 0


@pytest.mark.parametrize("root", [".", "store", "./store/"])
def test_a_relative_root_is_checked_like_an_absolute_one(
    tmp_path: Path, outside: Path, monkeypatch: pytest.MonkeyPatch, root: str
) -> None:
    """A store opened at a folder relative to the working one (even the working folder
    itself, whose name pathlib drops from the paths it joins) refuses links and `..`."""
    from stashpoint._backends.local import LocalTransport
    from stashpoint.stores.objects import GetObject

    monkeypatch.chdir(tmp_path)
    (tmp_path / "store").mkdir(exist_ok=True)
    transport = LocalTransport(root)
    folder = tmp_path / "store" if "store" in root else tmp_path
    (folder / "evil").symlink_to(outside / "passwd")
    with pytest.raises(UnsafeStorage):
        transport.execute(GetObject("evil"))
    with pytest.raises(UnsafeStorage):
        transport.execute(GetObject("../outside/passwd"))
    assert transport.execute(GetObject("missing")) is None
