"""The one bounded cache (`stashpoint.cache.Lru`) and the caches built on it, under threads."""

from __future__ import annotations

import sys
import threading
import uuid
from collections.abc import Callable

import pytest

import stashpoint
from stashpoint.cache import Lru
from stashpoint.logs import reading as log_module


def test_the_least_recently_used_entry_goes_first() -> None:
    cache: Lru[str, int] = Lru(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # "a" is now the most recently used
    cache.put("c", 3)
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3
    assert len(cache) == 2


def test_update_is_a_read_modify_write_and_none_removes() -> None:
    cache: Lru[str, int] = Lru(4)
    assert cache.update("n", lambda v: 1 if v is None else v + 1) == 1
    assert cache.update("n", lambda v: 1 if v is None else v + 1) == 2
    assert cache.update("n", lambda v: None) is None
    assert cache.get("n") is None and cache.pop("n") is None


def test_forget_where_drops_the_matching_keys_and_their_weight() -> None:
    cache: Lru[str, bytes] = Lru(8, max_weight=10, weigh=len)
    for key in ("logs/a/0", "logs/a/1", "logs/b/0"):
        cache.put(key, b"xxx")
    assert cache.forget_where(lambda key: key.startswith("logs/a/")) == 2
    assert cache.get("logs/a/0") is None and cache.get("logs/b/0") == b"xxx"
    cache.put("logs/c/0", b"1234567")  # fits: the forgotten weight was given back
    assert cache.get("logs/b/0") == b"xxx" and len(cache) == 2


def test_a_weighed_cache_keeps_its_total_weight_under_its_bound() -> None:
    cache: Lru[str, bytes] = Lru(100, max_weight=10, weigh=len)
    cache.put("a", b"1234")
    cache.put("b", b"1234")
    assert cache.get("a") == b"1234"  # "b" is now the least recently used
    cache.put("c", b"123")  # 11 > 10: "b" goes
    assert cache.get("b") is None and cache.get("a") and cache.get("c")
    cache.put("a", b"1")  # a lighter value replaces the heavier one's weight
    cache.put("d", b"123456")  # 1 + 3 + 6 = 10
    assert cache.get("a") and cache.get("c") and cache.get("d")
    cache.put("e", b"x" * 11)  # heavier than the bound: not kept, nothing else goes
    assert cache.get("e") is None and len(cache) == 3
    assert cache.pop("d") == b"123456"
    cache.put("f", b"123456")
    assert len(cache) == 3  # the popped weight was given back
    with pytest.raises(ValueError):
        Lru(4, max_weight=10)


def test_capacity_must_be_a_positive_int() -> None:
    with pytest.raises(ValueError):
        Lru(0)


def _hammer(threads: int, work: Callable[[int], None]) -> list[BaseException]:
    failures: list[BaseException] = []
    start = threading.Barrier(threads)

    def run(n: int) -> None:
        start.wait()
        try:
            work(n)
        except BaseException as exc:  # a test harness: report whatever escaped
            failures.append(exc)

    pool = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    return failures


def test_eight_threads_updating_and_evicting_never_break_the_cache() -> None:
    cache: Lru[int, int] = Lru(16)

    def work(n: int) -> None:
        for i in range(20_000):
            key = (n * 100_003 + i) % 97
            cache.update(key, lambda v: 0 if v is None else v + 1)
            cache.get(key + 1)
            if i % 7 == 0:
                cache.pop(key + 2)

    assert _hammer(8, work) == []
    assert len(cache) <= 16


def test_eight_threads_appending_to_fresh_logs_are_never_told_a_landed_append_failed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A small hint cache evicts on nearly every append: on a plain dict shared by the
    # threads (the old `_learn_top`) this raised KeyError after the entry was stored.
    monkeypatch.setattr(log_module, "KNOWN_TOPS", 4)
    # Switching threads every microsecond makes the interleavings that break a shared
    # dict happen within a second (the old code failed 5 of 8 threads here).
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        _race_fresh_logs()
    finally:
        sys.setswitchinterval(interval)


def _race_fresh_logs() -> None:
    with stashpoint.open(f"memory://race-{uuid.uuid4().hex}") as stash:
        appended: list[str] = []
        lock = threading.Lock()

        def work(n: int) -> None:
            for i in range(1500):
                log_id = f"w{n}-{i}"
                stash.logs.append(log_id, [i], after=None, state={"n": i})
                with lock:
                    appended.append(log_id)

        assert _hammer(8, work) == []
        assert len(appended) == 12_000
        for log_id in appended[::97]:
            assert stash.logs.records(log_id) == [int(log_id.split("-")[1])]
