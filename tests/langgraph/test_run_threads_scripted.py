"""The (run, thread) index steps driven by scripted index answers: no server.

Every request `RunThreads` makes is checked in order, with the answers a table gives,
including planted items (`stashpoint.langgraph.run_threads`).
"""

from __future__ import annotations

from stashpoint.index.requests import (
    MALFORMED,
    DeleteItem,
    GetItem,
    GetPartition,
    PutItems,
)
from stashpoint.langgraph.run_threads import RunThreads
from stashpoint.steps import Parallel
from tests.scripted import Script

MARKER = {"pk": "meta#langgraph", "sk": "run-threads:p", "revision": 1}


def test_no_marker_means_walk() -> None:
    """Without the marker nothing else is read: the caller walks every thread."""
    script = Script([(GetItem, None)])
    assert script.run(RunThreads("p").threads_of(["r"])) is None
    assert script.requests[0] == GetItem("meta#langgraph", "run-threads:p")


def test_a_marker_of_an_older_layout_or_planted_means_walk() -> None:
    for planted in ({**MARKER, "revision": 0}, {**MARKER, "revision": "1"}, {"pk": "x"}):
        script = Script([(GetItem, planted)])
        assert script.run(RunThreads("p").threads_of(["r"])) is None


def test_the_partitions_are_read_together_and_planted_items_passed_over() -> None:
    threads = RunThreads("p")
    pages = [
        [{"pk": "lgrun#p#a", "sk": "thread#t1", "revision": 4},
         {"pk": "lgrun#p#a", "sk": "thread#../up", "revision": 1},
         {"pk": "lgrun#p#a", "sk": "other#t9", "revision": 1},
         {"pk": "lgrun#p#a", "sk": "thread#t2"}],
        [{"pk": "lgrun#p#b", "sk": "thread#t1", "revision": True}],
    ]  # fmt: skip
    script = Script([(GetItem, MARKER), (Parallel, pages)])
    found = script.run(threads.threads_of(["b", "a", "a"]))
    assert script.requests[1].requests == (GetPartition("lgrun#p#a"), GetPartition("lgrun#p#b"))
    # No revision (or a bool) counts as none: -1, below every version a thread is read at.
    assert found == {"t1": {"a": 4, "b": -1}, "t2": {"a": -1}}


def test_items_are_written_once_per_run_and_forgotten_on_their_revision() -> None:
    threads = RunThreads("")
    script = Script([(PutItems, 2)])
    script.run(threads.note(["r2", "r1", "r2"], "t", 7))
    assert script.requests[0].items == (
        {"pk": "lgrun#-#r1", "sk": "thread#t", "revision": 7},
        {"pk": "lgrun#-#r2", "sk": "thread#t", "revision": 7},
    )
    for revision, expected in ((7, 7), (-1, MALFORMED)):
        script = Script([(DeleteItem, None)])
        script.run(threads.forget("r1", "t", revision))
        assert script.requests == [DeleteItem("lgrun#-#r1", "thread#t", expected=expected)]


def test_no_runs_no_request() -> None:
    script = Script([])
    script.run(RunThreads("p").note([], "t", 0))
    assert script.requests == []


def test_a_long_run_id_is_hashed_into_a_bounded_key() -> None:
    partition = RunThreads("p").run_partition("r" * 5000)
    assert partition.startswith("lgrun#p#~sha256-") and len(partition) < 100
    assert RunThreads("p").run_partition("short") == "lgrun#p#short"


def test_a_walk_records_its_progress_and_the_marker_ends_it() -> None:
    threads = RunThreads("p")
    script = Script([(PutItems, 1)])
    script.run(threads.walking("t-099", 100))
    assert script.requests[0].items == (
        {"pk": "meta#langgraph", "sk": "run-threads-walked:p", "revision": 100,
         "position": "t-099"},
    )  # fmt: skip
    stored = dict(script.requests[0].items[0])
    assert Script([(GetItem, stored)]).run(threads.walked()) == ("t-099", 100)
    assert Script([(GetItem, None)]).run(threads.walked()) == (None, 0)
    script = Script([(PutItems, 1), (DeleteItem, None)])
    script.run(threads.complete())
    assert script.requests[1] == DeleteItem("meta#langgraph", "run-threads-walked:p")
