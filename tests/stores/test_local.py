"""The local folder backend across processes, and under SIGKILL."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import stashpoint
from stashpoint import Envelope
from tests.kills import kill_after_lines
from tests.together import READY_THEN_WAIT, start_together

INCREMENT_WORKER = textwrap.dedent(
    """
    import sys, stashpoint
    url, checkpoint_id, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    conflicts = 0
    with stashpoint.open(url) as stash:
        READY_THEN_WAIT
        done = 0
        while done < count:
            current = stash.checkpoints.load(checkpoint_id)
            nxt = current.next({"count": current.payload["count"] + 1})
            try:
                stash.checkpoints.compare_and_swap(nxt, current.revision)
                done += 1
            except stashpoint.CheckpointConflict:
                conflicts += 1
    print(conflicts)
    """
).replace("READY_THEN_WAIT", READY_THEN_WAIT)  # ready, then wait for the word


def test_four_processes_increment_without_losing_an_update(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        stash.checkpoints.compare_and_swap(
            Envelope.initial("counter", None, "c", 1, {"count": 0}), None
        )
    workers = [
        subprocess.Popen(
            [sys.executable, "-c", INCREMENT_WORKER, url, "counter", "25"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    start_together(workers)  # they really race, however slowly each one starts
    conflicts = [int(w.communicate(timeout=120)[0]) for w in workers]
    assert all(w.returncode == 0 for w in workers)
    with stashpoint.open(url) as stash:
        final = stash.checkpoints.load("counter")
        assert final.revision == 100
        assert final.payload == {"count": 100}
        assert len(stash.checkpoints.history("counter")) == 100
    # The processes really raced: some lost a compare-and-swap and retried.
    assert sum(conflicts) > 0


KILLED_WRITER = textwrap.dedent(
    """
    import sys, stashpoint
    url = sys.argv[1]
    with stashpoint.open(url) as stash:
        current = stash.checkpoints.load("victim")
        while True:
            nxt = current.next({"n": current.payload["n"] + 1, "pad": "x" * 300_000})
            stash.checkpoints.compare_and_swap(nxt, current.revision)
            current = nxt
            print(current.revision, flush=True)
    """
)


def test_sigkill_mid_write_leaves_old_or_new_revision_never_torn(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        stash.checkpoints.compare_and_swap(Envelope.initial("victim", None, "c", 1, {"n": 0}), None)
    for round_ in range(6):
        before, after = kill_after_lines(KILLED_WRITER, [url], 3 + round_, pause=0.002 * round_)
        # The last revision the writer printed is the last one acknowledged to it.
        printed = [int(line) for line in [*before, *after]]
        acknowledged = printed[-1]
        with stashpoint.open(url) as stash:
            head = stash.checkpoints.load("victim")
            # Every acknowledged write survives; at most the in-flight one is added.
            assert head.revision in (acknowledged, acknowledged + 1)
            assert head.payload["n"] == head.revision
            history = stash.checkpoints.history("victim")
            assert [h.revision for h in history] == list(range(head.revision - 1, -1, -1))
    leftovers = list((tmp_path / "stash" / ".tmp").iterdir())
    assert len(leftovers) <= 6  # at most one abandoned temp file per kill, never read


def _two_revisions(url: str) -> Envelope:
    with stashpoint.open(url) as stash:
        env = Envelope.initial("c", None, "k", 1, {"n": 0})
        stash.checkpoints.compare_and_swap(env, None)
        stash.checkpoints.compare_and_swap(env.next({"n": 1}), 0)
        return stash.checkpoints.load("c")


def test_write_that_crashed_before_replacing_the_head_is_never_history(tmp_path: Path) -> None:
    """A crash between linking the new version and renaming it over the head leaves a
    pending version that never landed. The next write (which then builds the same revision
    again) must not list it: that was the CI failure where one revision showed up twice."""
    from stashpoint.codec import Codec

    url = f"local://{tmp_path / 'stash'}"
    head = _two_revisions(url)
    versions = tmp_path / "stash" / ".versions" / "checkpoints" / "c"
    (versions / ".pending").write_bytes(Codec().encode(head.next({"n": 99})))
    with stashpoint.open(url) as stash:
        assert stash.checkpoints.load("c").payload == {"n": 1}
        assert [h.payload for h in stash.checkpoints.history("c")] == [{"n": 0}]
        stash.checkpoints.compare_and_swap(head.next({"n": 2}), 1)
        stash.checkpoints.compare_and_swap(head.next({"n": 2}).next({"n": 3}), 2)
        assert [(h.revision, h.payload["n"]) for h in stash.checkpoints.history("c")] == [
            (2, 2),
            (1, 1),
            (0, 0),
        ]
    assert sorted(os.listdir(versions))[-1] != ".pending"
    assert len(os.listdir(versions)) == 4


def test_write_that_crashed_after_replacing_the_head_is_promoted(tmp_path: Path) -> None:
    """A crash after the head was replaced but before the pending version got its final name:
    the write landed, so the next operation keeps it as a real version."""
    from stashpoint.codec import Codec

    url = f"local://{tmp_path / 'stash'}"
    head = _two_revisions(url)
    versions = tmp_path / "stash" / ".versions" / "checkpoints" / "c"
    landed = head.next({"n": 2})
    body = Codec().encode(landed)
    (tmp_path / "stash" / "checkpoints" / "c").unlink()  # a hard link to the last version
    (tmp_path / "stash" / "checkpoints" / "c").write_bytes(body)
    (versions / ".pending").write_bytes(body)
    with stashpoint.open(url) as stash:
        assert stash.checkpoints.load("c").payload == {"n": 2}
        assert [h.revision for h in stash.checkpoints.history("c")] == [1, 0]
        stash.checkpoints.compare_and_swap(landed.next({"n": 3}), 2)
        assert [h.revision for h in stash.checkpoints.history("c")] == [2, 1, 0]
    assert ".pending" not in os.listdir(versions)


def test_version_newer_than_the_head_is_not_history(tmp_path: Path) -> None:
    """A stray version file newer than the head (for example from an older layout that
    linked versions under their final name) was never acknowledged, so it is not listed."""
    from stashpoint.codec import Codec

    url = f"local://{tmp_path / 'stash'}"
    head = _two_revisions(url)
    versions = tmp_path / "stash" / ".versions" / "checkpoints" / "c"
    orphan = head.next({"n": 99})
    (versions / f"{time.time_ns() + 10**12:020d}-deadbeef").write_bytes(Codec().encode(orphan))
    with stashpoint.open(url) as stash:
        assert stash.checkpoints.load("c").payload == {"n": 1}
        assert [h.payload for h in stash.checkpoints.history("c")] == [{"n": 0}]


def test_history_keeps_write_order_when_the_wall_clock_steps_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Version names start with a timestamp; a clock stepped back (NTP, a restored VM) must
    not sort a new revision below older ones, or history would drop revisions."""
    import stashpoint._backends.local as local

    real = time.time_ns
    offset = [0]
    monkeypatch.setattr(local.time, "time_ns", lambda: real() + offset[0])
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        env = Envelope.initial("c", None, "k", 1, {"n": 0})
        stash.checkpoints.compare_and_swap(env, None)
        for n in range(1, 7):
            if n == 3:
                offset[0] = -3600 * 10**9  # an hour back
            if n == 5:
                # A lost or foreign lock file: the next name comes from listing the folder.
                for lock in (tmp_path / "stash" / ".locks").rglob("*.lock"):
                    lock.write_bytes(b"garbage")
                offset[0] = -7200 * 10**9
            stash.checkpoints.compare_and_swap(env.next({"n": n}), n - 1)
            env = env.next({"n": n})
        assert stash.checkpoints.load("c").revision == 6
        assert [h.revision for h in stash.checkpoints.history("c")] == [5, 4, 3, 2, 1, 0]


def test_temp_files_abandoned_by_killed_writers_are_swept(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    tmp_dir = tmp_path / "stash" / ".tmp"
    tmp_dir.mkdir(parents=True)
    abandoned, in_flight = tmp_dir / "abandoned", tmp_dir / "in-flight"
    abandoned.write_bytes(b"half a checkpoint")
    in_flight.write_bytes(b"another writer's checkpoint")
    two_hours_ago = time.time() - 7200
    os.utime(abandoned, (two_hours_ago, two_hours_ago))
    with stashpoint.open(url) as stash:
        stash.checkpoints.compare_and_swap(Envelope.initial("c", None, "k", 1, {}), None)
    assert sorted(p.name for p in tmp_dir.iterdir()) == ["in-flight"]


def test_head_without_a_version_file_is_versioned_when_history_is_read(tmp_path: Path) -> None:
    """A power loss can keep the head's rename but lose the version link made just before
    it (another folder). History then still lists every older revision, once."""
    url = f"local://{tmp_path / 'stash'}"
    head = _two_revisions(url)
    versions = tmp_path / "stash" / ".versions" / "checkpoints" / "c"
    newest = sorted(os.listdir(versions))[-1]
    (versions / newest).unlink()  # the head's own version file is gone
    with stashpoint.open(url) as stash:
        assert [h.revision for h in stash.checkpoints.history("c")] == [0]
        stash.checkpoints.compare_and_swap(head.next({"n": 2}), 1)
        assert [h.revision for h in stash.checkpoints.history("c")] == [1, 0]
        assert stash.checkpoints.load("c", revision=1).payload == {"n": 1}
    assert len(os.listdir(versions)) == 3


def test_head_without_a_version_file_is_versioned_before_a_write_replaces_it(
    tmp_path: Path,
) -> None:
    url = f"local://{tmp_path / 'stash'}"
    head = _two_revisions(url)
    versions = tmp_path / "stash" / ".versions" / "checkpoints" / "c"
    (versions / sorted(os.listdir(versions))[-1]).unlink()
    with stashpoint.open(url) as stash:
        stash.checkpoints.compare_and_swap(head.next({"n": 2}), 1)  # no history read first
        assert [h.payload["n"] for h in stash.checkpoints.history("c")] == [1, 0]


def test_the_sqlite_index_opens_on_the_first_run_operation_only(tmp_path: Path) -> None:
    index_file = tmp_path / "index.sqlite3"
    with stashpoint.open(f"local://{tmp_path}") as stash:
        stash.checkpoints.compare_and_swap(Envelope.initial("a", None, "k", 1, {}), None)
        assert stash.checkpoints.load("a").revision == 0
    assert not index_file.exists()  # checkpoints alone never make it (nor does closing)
    with stashpoint.open(f"local://{tmp_path}") as stash:
        run = stash.runs.create_run("graph")  # its run id
        assert index_file.exists()
        assert [row.run_id for row in stash.runs.list_runs().items] == [run]


async def test_the_async_stash_also_opens_its_index_on_first_use(tmp_path: Path) -> None:
    async with stashpoint.open_async(f"local://{tmp_path}") as stash:
        await stash.checkpoints.compare_and_swap(Envelope.initial("a", None, "k", 1, {}), None)
    assert not (tmp_path / "index.sqlite3").exists()
    async with stashpoint.open_async(f"local://{tmp_path}") as stash:
        run = await stash.runs.create_run("graph")
        assert [row.run_id for row in (await stash.runs.list_runs()).items] == [run]


def test_files_are_owner_only_and_the_umask_may_only_narrow(tmp_path: Path) -> None:
    """Issue 23 #17: stash files were 0644 and folders 0755 (transcripts world-readable on
    a shared host)."""
    import os
    import stat

    old = os.umask(0o022)
    try:
        root = tmp_path / "private" / "stash"
        with stashpoint.open(f"local://{root}") as stash:
            stash.checkpoints.compare_and_swap(
                stashpoint.Envelope.initial("secret", None, "t.k", 1, {"n": 1}), None
            )
            stash.logs.append("chat", ["hello"], after=None)
            stash.runs.create_run("g")  # the index file too
        for path in [root, *root.rglob("*")]:
            mode = stat.S_IMODE(path.stat().st_mode)
            if path.is_dir():
                assert mode == 0o700, (path, oct(mode))
            else:
                assert mode & 0o077 == 0, (path, oct(mode))
    finally:
        os.umask(old)


@pytest.mark.parametrize("prefix", ["..", "../../..", "../../../usr/share", "x/../../.."])
def test_a_listing_prefix_never_leaves_the_store(tmp_path: Path, prefix: str) -> None:
    """Issue 23 #18: a `..` prefix walked outside the root (1,000 keys under /usr/share)."""
    with stashpoint.open(f"local://{tmp_path / 'stash'}") as stash:
        stash.checkpoints.compare_and_swap(
            stashpoint.Envelope.initial("a", None, "t.k", 1, {}), None
        )
        for listing in (stash.checkpoints.list_ids, stash.logs.list_ids):
            if "/" not in prefix:  # ids may start with "..": a name prefix, not a path
                assert listing(prefix) == []
                continue
            with pytest.raises(stashpoint.StashpointError) as info:
                listing(prefix)
            assert info.value.kind.value in ("invalid_id", "unsafe_storage")


@pytest.mark.parametrize("inner", ["sealed", "agents", "checkpoints", "logs", "run-logs"])
def test_a_stash_inside_another_stash_s_namespace_is_refused(tmp_path: Path, inner: str) -> None:
    """Issue 23 #19: a stash at `T` and one at `T/sealed` (or any namespace under `T`)
    shared keys, and each read the other's objects as its own."""
    with stashpoint.open(f"local://{tmp_path / 'outer'}") as outer:
        outer.checkpoints.compare_and_swap(
            stashpoint.Envelope.initial("a", None, "t.k", 1, {}), None
        )
    with pytest.raises(stashpoint.ConfigurationError, match="shares keys"):
        stashpoint.open(f"local://{tmp_path / 'outer' / inner}")
    # A lone folder named after a namespace holds no other stash's keys: it opens.
    with stashpoint.open(f"local://{tmp_path / 'alone' / inner}") as alone:
        alone.runs.create_run("graph")  # its index file marks it a stash
    # ... and the stash above it is then refused, for it would read the inner one's keys.
    with pytest.raises(stashpoint.ConfigurationError, match="shares keys"):
        stashpoint.open(f"local://{tmp_path / 'alone'}")
    with pytest.raises(stashpoint.ConfigurationError, match="namespace"):
        stashpoint.open(f"s3://bucket/tenant/{inner}")
    with pytest.raises(stashpoint.ConfigurationError, match="namespace"):
        stashpoint.open(f"s3://bucket/tenant/{inner}/deeper")
    stashpoint.open(f"s3://bucket/tenant/{inner}-data").close()  # near names are fine
    # One who knows no stash lives above says so (existing data at such a prefix).
    stashpoint.open(f"s3://bucket/tenant/{inner}?nested_prefix=allow").close()
    with pytest.raises(stashpoint.ConfigurationError, match="nested_prefix"):
        stashpoint.open(f"s3://bucket/tenant/{inner}?nested_prefix=yes")


_NAME = "ab-._~0"  # characters on both sides of `/` in key order


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    keys=st.sets(
        st.lists(st.text(_NAME, min_size=1, max_size=3), min_size=1, max_size=3).map("/".join),
        max_size=25,
    ),
    after=st.text(_NAME + "/", max_size=6),
    page_size=st.integers(1, 6),
)
def test_a_local_listing_pages_in_key_order_from_any_key(
    tmp_path_factory: pytest.TempPathFactory, keys: set[str], after: str, page_size: int
) -> None:
    # The folder walk is ordered and pruned: what it lists must be what sorting every key
    # lists, page by page, with `/` sorting among the characters names hold.
    from stashpoint.stores.objects import ListKeys, PutObject

    root = tmp_path_factory.mktemp("listing")
    keys = {k for k in keys if not any(f"{k}/".startswith(f"{o}/") for o in keys if o != k)}
    keys = {k for k in keys if all(part not in (".", "..") for part in k.split("/"))}
    with stashpoint.open(f"local://{root}") as stash:
        for key in keys:
            stash.driver(PutObject(f"p/{key}", b"x", None, content_encoding=None))
        listed: list[str] = []
        token = None
        while True:
            page = stash.driver(
                ListKeys(
                    "p/", token, page_size=page_size, start_after=f"p/{after}" if after else None
                )
            )
            assert len(page.keys) <= page_size
            listed += page.keys
            token = page.next_token
            if token is None:
                break
    expected = sorted(f"p/{k}" for k in keys if not after or f"p/{k}" > f"p/{after}")
    assert listed == expected
