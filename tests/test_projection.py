"""The queryable archive: logs projected to Parquet, queried with DuckDB, erased with them.

Each test checks rows by their identity (namespace, log, version, position): a projection
loses none and repeats none, whatever runs, races, crashes or is killed; a purge leaves no
projected row of the purged id in any stored version, and every other row stays.
"""

from __future__ import annotations

import threading
import uuid
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pyarrow")
pytest.importorskip("duckdb")

import pyarrow
import pyarrow.parquet

import stashpoint
import stashpoint.stores.objects
from stashpoint import projection
from stashpoint.agent import ConversationStore, Message
from stashpoint.errors import InvalidArgument
from stashpoint.stores.layout import PROJECTION
from stashpoint.stores.objects import GetObject, ListKeys, PutObject
from tests.archive_rows import expected_rows as _expected
from tests.archive_rows import write_log as _write
from tests.kills import counting_child
from tests.purging import versions

SECRET = "card 4111-1111-1111-1111"


def _rows(stash: Any) -> Counter[tuple[str, str, int, int]]:
    result = projection.query(
        stash, "select namespace, log_id, version, position from records"
    ).to_pylist()
    return Counter((r["namespace"], r["log_id"], r["version"], r["position"]) for r in result)


def _projected_text(stash: Any) -> list[str]:
    """Every value of every stored version of every projected file, decompressed."""
    found = []
    for version in versions(stash, f"{PROJECTION}/"):
        if version.is_delete_marker:
            continue
        info = stash.driver(GetObject(version.key, version.version_id))
        try:
            rows = pyarrow.parquet.read_table(pyarrow.BufferReader(info.body)).to_pylist()
        except pyarrow.ArrowException:
            found.append(info.body.decode("utf-8", "replace"))  # not Parquet: its bytes
            continue
        found += [str(value) for row in rows for value in row.values()]
    return found


def _memory() -> Any:
    return stashpoint.open(f"memory://projection-{uuid.uuid4().hex}")


def test_a_projection_holds_every_record_once_and_a_rerun_only_what_was_appended(
    erasure_url: str,
) -> None:
    with stashpoint.open(erasure_url) as stash:
        head = _write(stash, "acme.t1", 70)  # beyond a sealed segment
        _write(stash, "globex.t1", 3)
        first = projection.project(stash)
        assert first.rows == 146 and len(first.files) == 2 and not first.unreadable
        assert _rows(stash) == _expected(stash, "acme.t1", "globex.t1")
        again = projection.project(stash)
        assert (again.rows, again.files) == (0, [])  # nothing appended: nothing written
        _write(stash, "acme.t1", 2, "later", after=head)
        third = projection.project(stash)
        assert third.rows == 4 and len(third.files) == 1
        assert _rows(stash) == _expected(stash, "acme.t1", "globex.t1")
        per_tenant = projection.query(
            stash, "select tenant, count(*) as n from messages group by tenant order by tenant"
        ).to_pylist()
        assert per_tenant == [{"tenant": "acme", "n": 144}, {"tenant": "globex", "n": 6}]


def test_a_rerun_finds_an_unchanged_log_up_to_date_from_the_listings_alone(
    erasure_url: str,
) -> None:

    with stashpoint.open(erasure_url) as stash:
        heads = {log_id: _write(stash, log_id, 70) for log_id in ("acme.t1", "acme.t2")}
        _write(stash, "globex.t1", 3)
        projection.project(stash)
        sent: list[Any] = []

        def count(request: Any, proceed: Any) -> Any:
            sent.append(request)
            return proceed()

        with stash.intercept(count):
            again = projection.project(stash)
        assert (again.unchanged, again.rows, again.files, again.erased) == (3, 0, [], [])
        per_log = [r for r in sent if "/acme.t1/" in getattr(r, "key", getattr(r, "prefix", ""))]
        # No request of its own: the newest file's mark says where it ends, the listing of
        # the ids the log's top.
        assert per_log == [], per_log
        # Sources: one listing of the files and one of the ids per namespace; no head reads.
        assert len(sent) <= 3 + 2 * len(projection.SOURCES), [type(r) for r in sent]
        assert all(isinstance(r, (GetObject, ListKeys)) for r in sent)
        # What was written since is seen the same way: one grew, one was deleted.
        _write(stash, "acme.t1", 1, "later", after=heads["acme.t1"])
        stash.logs.delete("acme.t2")
        sent.clear()
        with stash.intercept(count):
            third = projection.project(stash)
        assert (third.unchanged, third.rows, third.erased) == (1, 2, ["logs/acme.t2"])
        files = stash.layout.key(PROJECTION, "logs/acme.t1/")
        reads = [r for r in sent if isinstance(r, GetObject) and r.key.startswith(files)]
        assert len(reads) == 1  # the grown log's newest file is read and judged once
        assert _rows(stash) == _expected(stash, "acme.t1", "globex.t1")


def test_messages_are_rows_with_role_and_text_whatever_their_shape() -> None:
    with _memory() as stash:
        conversations = ConversationStore(stash.checkpoints)
        conversations.commit(
            "acme",
            "c1",
            0,
            [
                Message(role="user", content="hello"),
                Message(role="assistant", content=[{"type": "text", "text": "hi"}, "there"]),
            ],
        )
        stash.logs.append("x", [{"message": {"role": "tool", "content": {"n": 1}}}, 7], after=None)
        projection.project(stash)
        rows = projection.query(
            stash, "select namespace, tenant, role, content from records order by all"
        ).to_pylist()
    assert rows == [
        {
            "namespace": "conversations",
            "tenant": "acme",
            "role": "assistant",
            "content": "hi\nthere",
        },
        {"namespace": "conversations", "tenant": "acme", "role": "user", "content": "hello"},
        {"namespace": "logs", "tenant": "x", "role": "tool", "content": '{"n": 1}'},
        {"namespace": "logs", "tenant": "x", "role": None, "content": None},  # nulls last
    ]


def test_a_purge_erases_the_projected_rows_of_its_id_and_keeps_every_other(
    erasure_url: str,
) -> None:
    with stashpoint.open(erasure_url) as stash:
        head = _write(stash, "acme.t1", 40, SECRET)
        projection.project(stash)
        _write(stash, "acme.t1", 3, SECRET, after=head)  # a second file of the same log
        _write(stash, "acme.t2", 5)
        projection.project(stash)
        assert sum(SECRET in text for text in _projected_text(stash)) == 86
        projected = {v.key for v in versions(stash, f"{PROJECTION}/logs/acme.t1/")}
        assert len(projected) == 4  # two files and their marks
        receipt = stash.admin.purge(log="acme.t1")
        assert receipt.verified
        assert projected <= {v.key for v in receipt.removed}  # the receipt names them
        assert not any(SECRET in text for text in _projected_text(stash))
        assert versions(stash, f"{PROJECTION}/logs/acme.t1/") == []
        assert _rows(stash) == _expected(stash, "acme.t2")
        assert projection.project(stash).rows == 0  # a purged log is not projected again


def test_a_prefix_purge_reaches_the_projection_of_every_log_it_takes() -> None:
    with _memory() as stash:
        _write(stash, "acme.t1", 2, SECRET)
        _write(stash, "acme.t2", 2, SECRET)
        _write(stash, "globex.t1", 2)
        projection.project(stash)
        stash.admin.purge(prefix="acme.")
        assert not any(SECRET in text for text in _projected_text(stash))
        assert _rows(stash) == _expected(stash, "globex.t1")


def test_a_deleted_log_and_an_old_life_are_erased_by_the_next_run() -> None:
    with _memory() as stash:
        _write(stash, "gone", 2, SECRET)
        _write(stash, "reborn", 2, SECRET)
        projection.project(stash)
        stash.logs.delete("gone")
        stash.logs.delete("reborn")
        _write(stash, "reborn", 1, "new life")
        report = projection.project(stash)
        assert sorted(report.erased) == ["logs/gone", "logs/reborn"]
        assert not any(SECRET in text for text in _projected_text(stash))
        rows = projection.query(stash, "select log_id, content from messages").to_pylist()
        assert sorted(r["content"] for r in rows) == ["new life 0", "ok"]


def test_two_projectors_at_once_write_no_row_twice_and_lose_none(seaweedfs: Any) -> None:
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}")
    ids = [f"t{n}" for n in range(6)]
    with stashpoint.open(url) as stash:
        heads = {log_id: _write(stash, log_id, 3) for log_id in ids}
    go = threading.Barrier(3)
    failures: list[BaseException] = []

    def projector() -> None:
        try:
            with stashpoint.open(url) as mine:
                go.wait()
                for _ in range(4):  # bounded
                    projection.project(mine)
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=projector) for _ in range(2)]
    for thread in threads:
        thread.start()
    with stashpoint.open(url) as stash:
        go.wait()
        for turn in range(3):  # appends while they project
            for log_id in ids:
                heads[log_id] = _write(stash, log_id, 1, f"race {turn}", after=heads[log_id])
    for thread in threads:
        thread.join(timeout=300)
    assert failures == []
    with stashpoint.open(url) as stash:
        projection.project(stash)
        rows = _rows(stash)
        assert rows == _expected(stash, *ids)
        assert max(rows.values()) == 1


def test_a_crash_at_every_request_of_a_projection_loses_and_repeats_no_row() -> None:
    from tests.crashes import crash_everywhere

    def scenario(stash: Any) -> None:
        head = _write(stash, "a", 2)
        projection.project(stash)
        _write(stash, "a", 2, "more", after=head)
        _write(stash, "b", 1)

    def check(stash: Any, step: int, after: bool) -> None:
        projection.project(stash)  # the next run, a new process
        assert _rows(stash) == _expected(stash, "a", "b"), (step, after)

    crash_everywhere(_memory, scenario, projection.project, check, at_least=8)


KILLED_PROJECTOR = counting_child("projection.project(stash)", "from stashpoint import projection")


def test_a_projector_killed_with_sigkill_leaves_what_the_next_run_completes(
    tmp_path: Any,
) -> None:
    from tests.kills import kill_after_requests

    for kill_after in (2, 5, 9, 14):
        url = f"local://{tmp_path / f's-{kill_after}'}"
        with stashpoint.open(url) as stash:
            for n in range(4):
                _write(stash, f"t{n}", 2)
        made = kill_after_requests(KILLED_PROJECTOR, [url], kill_after)
        assert made == kill_after  # killed mid-run
        with stashpoint.open(url) as stash:
            projection.project(stash)
            assert _rows(stash) == _expected(stash, *(f"t{n}" for n in range(4))), kill_after


def test_hostile_records_and_planted_objects_are_projected_or_passed_over() -> None:
    with _memory() as stash:
        odd = [
            {"role": "user", "content": "bell \x07 escape \x1b[31m nul \x00 end"},
            {"role": "user", "content": "right-to-left \u202e override, astral \U0001f600"},
            {"role": "assistant", "content": "x" * 1_000_000},
            {"role": ["not", "a", "role"], "content": None},
        ]
        stash.logs.append("odd", odd, after=None)
        _write(stash, "fine", 1)
        _write(stash, "damaged", 1)
        above = stash.layout.key("logs", f"damaged/{1:020d}")  # a damaged newest entry
        stash.driver(PutObject(above, b"\xff\xfe not an entry", None, content_encoding=None))
        projector_key = stash.layout.key(
            PROJECTION, f"logs/odd/{0:020d}-{0:020d}.parquet"
        )  # where the next file goes: a planted object is written over
        stash.driver(PutObject(projector_key, b"not parquet", None, content_encoding=None))
        junk = stash.layout.key(PROJECTION, "logs/fine/garbage.bin")
        stash.driver(PutObject(junk, b"PAR1 junk", None, content_encoding=None))
        beyond = stash.layout.key(PROJECTION, f"logs/fine/{0:020d}-{999:020d}.parquet")
        stash.driver(PutObject(beyond, b"named beyond the top", None, content_encoding=None))
        elsewhere = stash.layout.key(PROJECTION, f"logs/odd/{0:020d}-{5:020d}.parquet")
        other_log = projection.encode_file(
            "logs", "fine", 0, 5, 9, projection.rows_of("logs", "fine", [])
        )
        stash.driver(PutObject(elsewhere, other_log, None, content_encoding=None))
        report = projection.project(stash)
        assert report.unreadable == ["logs/damaged: invalid_payload"]  # reported, run goes on
        assert versions(stash, beyond) == []  # it would have held the log back: erased
        assert versions(stash, elsewhere) == []  # another log's file here: not this one's
        rows = projection.query(
            stash, "select log_id, role, length(content) as n from records where log_id = 'odd'"
        ).to_pylist()
        assert len(rows) == 4 and {"log_id": "odd", "role": "assistant", "n": 1_000_000} in rows
        assert {r["role"] for r in rows} == {"user", "assistant", None}
        text = projection.query(
            stash, "select content from messages where content like 'right-to-left%'"
        ).to_pylist()
        assert text == [{"content": "right-to-left \u202e override, astral \U0001f600"}]
        assert _rows(stash) == _expected(stash, "odd", "fine")


def test_bad_input_is_a_typed_error() -> None:
    with _memory() as stash:
        with pytest.raises(InvalidArgument):
            projection.project(stash, namespaces=["purges"])
        with pytest.raises(InvalidArgument):
            projection.project(stash, namespaces=["no-such"])
        with pytest.raises(InvalidArgument):
            projection.query(stash, "  ")
        _write(stash, "t", 1, SECRET)
        projection.project(stash)
        with pytest.raises(InvalidArgument) as caught:
            projection.query(stash, "select cast(content as integer) from messages")
        assert SECRET not in str(caught.value) and "turn" not in str(caught.value)
    for not_a_stash in (None, "local://x"):
        with pytest.raises(InvalidArgument):
            projection.project(not_a_stash)  # type: ignore[arg-type]


def test_on_an_encrypted_stash_files_are_sealed_by_their_tenant_and_a_shred_reaches_them(
    tmp_path: Any,
) -> None:
    from stashpoint.encryption import MAGIC, Encryption, KeyRule

    encryption = Encryption(
        (
            KeyRule("acme", "keyring:acme", prefix="acme."),
            KeyRule("globex", "keyring:globex", prefix="globex."),
            KeyRule("default", "keyring:default"),
        ),
        keyring=str(tmp_path / "keyring.json"),
    )
    root = tmp_path / "stash"
    with stashpoint.open(f"local://{root}", encryption=encryption) as stash:
        _write(stash, "acme.t1", 3, f"{SECRET} acme")
        _write(stash, "globex.t1", 3, f"{SECRET} globex")
        report = projection.project(stash)
        assert report.rows == 12 and len(report.files) == 2
        files = sorted((root / PROJECTION).rglob("*.parquet"))
        assert len(files) == 2
        for path in files:  # sealed, like every object: no plain Parquet, no plain text
            body = path.read_bytes()
            assert body.startswith(MAGIC) and SECRET.encode() not in body
        assert _rows(stash) == _expected(stash, "acme.t1", "globex.t1")
        stash.admin.purge(tenant="acme", shred=True)
        # Acme's rows went with its keys; a run names its logs unreadable, and goes on.
        assert {r[1] for r in _rows(stash)} == {"globex.t1"}
        again = projection.project(stash)
        assert again.unreadable == ["logs/acme.t1: shredded"]
        assert _rows(stash) == _expected(stash, "globex.t1")


def test_a_record_no_stash_can_store_is_projected_as_valid_text_all_the_same() -> None:
    """A lone surrogate (valid in JSON text, refused by every stashpoint write) in a record
    read from a planted entry is written as its escape, never a crashed projection."""
    from datetime import UTC, datetime
    from types import SimpleNamespace

    entry = SimpleNamespace(
        version=3,
        first_record=7,
        written_at=datetime(2026, 12, 5, tzinfo=UTC),
        records=[{"role": "user", "content": "lone \ud800 surrogate"}],
    )
    columns = projection.rows_of("logs", "acme.t1", [entry])  # type: ignore[list-item]
    body = projection.encode_file("logs", "acme.t1", 0, 3, 3, columns)
    [row] = pyarrow.parquet.read_table(pyarrow.BufferReader(body)).to_pylist()
    assert row["content"] == "lone \\ud800 surrogate" and row["position"] == 7
    assert projection.described_by(body) == {
        "format": projection.PROJECTION_FORMAT, "namespace": "logs", "log_id": "acme.t1",
        "life": 0, "first": 3, "last": 3,
    }  # fmt: skip
    assert projection.described_by(b"PAR1 not a projection") is None


# -- the write of a projected file, scripted (free of I/O) -----------------------------------


def _file(first: int, log_id: str = "acme.t1", life: int = 0) -> bytes:
    columns = projection.rows_of("logs", log_id, [])
    return projection.encode_file("logs", log_id, life, first, first + 4, columns)


def _create(body: bytes) -> Any:
    from stashpoint.retry import DEFAULT_RETRY
    from stashpoint.stores.objects import Create
    from stashpoint.stores.writes import create_named

    request = PutObject("projection/logs/acme.t1/f.parquet", body, Create(), content_encoding=None)
    judge = projection.file_judge("logs", "acme.t1", 0, 5)
    return create_named(request, judge, DEFAULT_RETRY, what="projection", limit=1 << 30,
                        refresh=False)  # fmt: skip


@pytest.mark.parametrize(
    ("found", "rewritten"),
    [
        (_file(5), False),  # another projector's file of the same rows' start: kept
        (_file(6), True),  # another first version under this name: not what it says
        (_file(5, log_id="acme.t2"), True),  # another log's
        (_file(5, life=9), True),  # another life's
        (b"PAR1 planted", True),
    ],
)
def test_a_file_found_under_the_name_is_kept_only_when_it_holds_the_same_rows_start(
    found: bytes, rewritten: bool
) -> None:
    from stashpoint.stores.objects import Match
    from tests.scripted import REFUSED, STORED, Script

    there = (GetObject, stashpoint.stores.objects.ObjectInfo(etag="etag-there", body=found))
    answers = [(PutObject, REFUSED), there] + ([(PutObject, STORED)] if rewritten else [])
    script = Script(answers)
    assert script.run(_create(_file(5))) == ("etag-new" if rewritten else "etag-there")
    if rewritten:
        assert script.puts()[1].condition == Match("etag-there")


def test_the_fault_proxy_on_every_request_loses_and_repeats_no_row(seaweedfs: Any) -> None:
    from tests.faultproxy import FaultProxy, everyday_faults

    plan, config = everyday_faults()
    prefix = f"t-{uuid.uuid4().hex}"
    ids = [f"t{n}" for n in range(5)]
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        heads = {log_id: _write(clean, log_id, 2) for log_id in ids}
    failures: list[str] = []
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        with stashpoint.open(url, client_config=config) as stash:
            for turn in range(8):  # bounded: appends between runs, each run may fail
                for log_id in ids:
                    with stashpoint.open(seaweedfs.url(prefix)) as clean:
                        heads[log_id] = _write(clean, log_id, 1, f"r{turn}", after=heads[log_id])
                try:
                    report = projection.project(stash)
                    failures += report.unreadable
                except stashpoint.StashpointError as exc:
                    failures.append(exc.kind.value)
    assert sum(plan.injected.values()) > 0
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        projection.project(clean)
        rows = _rows(clean)
        assert rows == _expected(clean, *ids), failures
        assert max(rows.values()) == 1


def test_a_projector_racing_a_purge_leaves_none_of_the_purged_rows(seaweedfs: Any) -> None:
    """What a run wrote while its log was purged it erases when it reads the head again: once
    both have returned, no projected row of the purged id is stored, in any version."""
    for round_ in range(3):  # bounded
        url = seaweedfs.url(f"t-{uuid.uuid4().hex}")
        with stashpoint.open(url) as stash:
            _write(stash, "acme.t1", 30 + 10 * round_, SECRET)
            _write(stash, "acme.t2", 2)
        go = threading.Barrier(2)
        failures: list[BaseException] = []

        def projector(
            url: str = url, go: Any = go, failures: list[BaseException] = failures
        ) -> None:
            try:
                with stashpoint.open(url) as mine:
                    go.wait()
                    for _ in range(3):
                        projection.project(mine)
            except BaseException as exc:  # reported below
                failures.append(exc)

        thread = threading.Thread(target=projector)
        thread.start()
        with stashpoint.open(url) as stash:
            go.wait()
            assert stash.admin.purge(log="acme.t1").verified
        thread.join(timeout=300)
        assert failures == []
        with stashpoint.open(url) as stash:
            assert not any(SECRET in text for text in _projected_text(stash)), round_
            assert projection.query(stash, "select count(*) as n from messages where "
                                    "log_id = 'acme.t1'").to_pylist() == [{"n": 0}]  # fmt: skip


def test_a_runs_attempts_are_a_view_with_how_each_ended() -> None:
    with _memory() as stash:
        run = stash.runs.create_run("etl")
        extract = stash.runs.record_attempt(run, "extract", 1, {"rows": 3})
        stash.runs.complete_attempt(extract, {"ok": True})
        load = stash.runs.record_attempt(run, "load", 1, None)
        stash.runs.fail_attempt(load, "disk full")
        stash.runs.record_attempt(run, "load", 2, None)  # still running
        stash.logs.append("x", [{"role": "user", "content": "hi"}, {"n": 1}], after=None)
        projection.project(stash)
        attempts = projection.query(
            stash,
            "select run_id, node_id, attempt, status, error, finished_at >= started_at as ok "
            "from attempts order by node_id, attempt",
        ).to_pylist()
        assert attempts == [
            {"run_id": run, "node_id": "extract", "attempt": 1, "status": "completed",
             "error": None, "ok": True},
            {"run_id": run, "node_id": "load", "attempt": 1, "status": "failed",
             "error": "disk full", "ok": True},
            {"run_id": run, "node_id": "load", "attempt": 2, "status": "running",
             "error": None, "ok": None},
        ]  # fmt: skip
        failed = projection.query(
            stash, "select node_id, count(*) as n from attempts where status = 'failed' group by 1"
        ).to_pylist()
        assert failed == [{"node_id": "load", "n": 1}]
        messages = projection.query(stash, "select content from messages").to_pylist()
        assert messages == [{"content": "hi"}]  # the view: records that are messages
        assert projection.query(stash, "select count(*) as n from records").to_pylist() == [
            {"n": 2 + 5}  # two log records; three attempts and two ends
        ]


def _chat(stash: Any) -> tuple[Any, Any]:
    from langgraph.graph import START, MessagesState, StateGraph

    from stashpoint.langgraph import StashpointSaver

    def bot(state: Any) -> dict[str, Any]:
        return {"messages": [("ai", f"answer {len(state['messages'])}")]}

    graph = StateGraph(MessagesState)
    graph.add_node("bot", bot)
    graph.add_edge(START, "bot")
    saver = StashpointSaver(stash)
    return graph.compile(checkpointer=saver), saver


def _checkpoints(stash: Any) -> dict[str, set[tuple[Any, ...]]]:
    rows = projection.query(
        stash, "select thread_key, checkpoint_id, parent_id, step, source from checkpoints"
    ).to_pylist()
    found: dict[str, set[tuple[Any, ...]]] = {}
    for r in rows:
        found.setdefault(r["thread_key"], set()).add(
            (r["checkpoint_id"], r["parent_id"], r["step"], r["source"])
        )
    return found


def _listed(saver: Any, thread_id: str) -> set[tuple[Any, ...]]:
    config = {"configurable": {"thread_id": thread_id}}
    return {
        (
            c.config["configurable"]["checkpoint_id"],
            c.parent_config["configurable"]["checkpoint_id"] if c.parent_config else None,
            c.metadata["step"],
            c.metadata["source"],
        )
        for c in saver.list(config)
    }


def test_langgraph_threads_are_checkpoints_and_writes_that_deletion_prune_and_purge_reach() -> None:
    pytest.importorskip("langgraph")
    with _memory() as stash:
        app, saver = _chat(stash)
        threads = ("acme.t1", "acme.t2", "globex.t3")
        for thread_id in threads:
            for turn in range(3):
                config = {"configurable": {"thread_id": thread_id}}
                app.invoke({"messages": [("user", f"{SECRET} in {thread_id} {turn}")]}, config)
        saver.flush()
        projection.project(stash)
        assert _checkpoints(stash) == {t: _listed(saver, t) for t in threads}
        assert {len(v) for v in _checkpoints(stash).values()} == {9}  # 3 turns: input, 2 steps
        writes = projection.query(
            stash,
            "select checkpoint_id, task_id, channels from checkpoint_writes"
            " where thread_key = 'acme.t1'",
        ).to_pylist()
        pending = {
            (c.config["configurable"]["checkpoint_id"], task, channel)
            for c in saver.list({"configurable": {"thread_id": "acme.t1"}})
            for task, channel, _ in c.pending_writes or []
        }
        assert {(w["checkpoint_id"], w["task_id"], ch) for w in writes for ch in w["channels"]} == (
            pending
        )
        # Deleted: the next run erases its files (a new life), every stored version.
        saver.delete_thread("acme.t1")
        # Pruned: a rebase keeps the latest checkpoint, and so does the projection.
        saver.prune(["acme.t2"])
        saver.flush()
        report = projection.project(stash)
        assert {"langgraph/acme.t1", "langgraph/acme.t2"} <= set(report.erased)
        found = _checkpoints(stash)
        assert "acme.t1" not in found
        assert found["acme.t2"] == _listed(saver, "acme.t2") and len(found["acme.t2"]) == 1
        stored = " ".join(_projected_text(stash))
        assert f"{SECRET} in acme.t1" not in stored
        # Purged: the receipt names the projected files, and nothing of the thread is left.
        receipt = stash.admin.purge(thread="globex.t3")
        erased = {r.key for r in receipt.removed}
        assert any(
            k.startswith(stash.layout.key(PROJECTION, "langgraph/globex.t3/")) for k in erased
        )
        assert "globex.t3" not in _checkpoints(stash)
        assert f"{SECRET} in globex.t3" not in " ".join(_projected_text(stash))
        assert f"{SECRET} in acme.t2 2" in stored  # the latest checkpoint's messages stay


def test_models_and_token_counts_are_columns_whatever_the_framework_names_them() -> None:
    records = [
        # OpenAI chat completions: usage beside the message
        {"message": {"role": "assistant", "content": "a"}, "model": "gpt-4o",
         "usage": {"prompt_tokens": 11, "completion_tokens": 3}},
        # Anthropic Messages: on the message itself
        {"role": "assistant", "content": [{"type": "text", "text": "b"}],
         "model": "claude-sonnet", "usage": {"input_tokens": 20, "output_tokens": 5}},
        # LangChain's AIMessage as a dict
        {"role": "assistant", "content": "c", "usage_metadata": {"input_tokens": 7,
         "output_tokens": 2, "total_tokens": 9}, "response_metadata": {"model_name": "m-lc"}},
        # Strands / Bedrock Converse: the counts in the event's metadata
        {"message": {"role": "assistant", "content": [{"text": "d"}]},
         "metadata": {"usage": {"inputTokens": 30, "outputTokens": 4}}, "modelId": "nova"},
        # Pydantic AI's ModelResponse: no role, still counted
        {"kind": "response", "parts": [], "model_name": "pai",
         "usage": {"input_tokens": 1, "output_tokens": 1}},
        # stashpoint.agent's ModelRef, and counts that are not counts
        {"role": "assistant", "content": "e", "model": {"provider": "p", "name": "ref"},
         "usage": {"input_tokens": True, "output_tokens": -1}},
        {"role": "user", "content": "f", "usage": {"input_tokens": 1 << 70, "output_tokens": "9"}},
    ]  # fmt: skip
    with _memory() as stash:
        stash.logs.append("acme.t1", records, after=None)
        projection.project(stash)
        rows = projection.query(
            stash,
            "select position, model, input_tokens, output_tokens from records order by position",
        ).to_pylist()
        spend = projection.query(
            stash,
            """select tenant, date_trunc('month', day) as month,
                      sum(input_tokens + output_tokens) as tokens
               from records group by all""",
        ).to_pylist()
    assert [(r["model"], r["input_tokens"], r["output_tokens"]) for r in rows] == [
        ("gpt-4o", 11, 3),
        ("claude-sonnet", 20, 5),
        ("m-lc", 7, 2),
        ("nova", 30, 4),
        ("pai", 1, 1),
        ("ref", None, None),
        (None, None, None),
    ]
    assert [r["tokens"] for r in spend] == [14 + 25 + 9 + 34 + 2]


_USAGE_KEYS = [
    "role", "content", "message", "model", "model_name", "usage", "metadata",
    "usage_metadata", "response_metadata", "input_tokens", "prompt_tokens", "outputTokens",
    "token_usage", "name", "x",
]  # fmt: skip


@settings(max_examples=200)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda inner: (
            st.lists(inner, max_size=4)
            | st.dictionaries(st.sampled_from(_USAGE_KEYS), inner, max_size=5)
        ),
        max_leaves=20,
    )
)
def test_usage_of_any_record_is_a_model_name_and_two_counts_or_nothing(record: Any) -> None:
    model, input_tokens, output_tokens = projection.usage_of(record)
    assert model is None or isinstance(model, str)
    if model is not None:
        model.encode("utf-8")  # valid text, whatever the record held
    for count in (input_tokens, output_tokens):
        assert count is None or (type(count) is int and 0 <= count < 1 << 63)


def test_a_file_written_before_the_token_columns_reads_them_as_null() -> None:
    with _memory() as stash:
        _write(stash, "acme.t1", 1)
        projection.project(stash)
        (key,) = [v.key for v in versions(stash, f"{PROJECTION}/") if v.key.endswith(".parquet")]
        old = pyarrow.parquet.read_table(pyarrow.BufferReader(stash.driver(GetObject(key)).body))
        old = old.drop_columns(["model", "input_tokens", "output_tokens"])  # as 0.x wrote it
        out = pyarrow.BufferOutputStream()
        pyarrow.parquet.write_table(old, out, compression="zstd")
        stash.driver(PutObject(key, out.getvalue().to_pybytes(), None, content_encoding=None))
        _write(stash, "acme.t1", 1, after=stash.logs.head("acme.t1"))
        stash.logs.append(
            "acme.t1", [{"role": "assistant", "content": "x", "usage": {"input_tokens": 4}}],
            after=stash.logs.head("acme.t1"),
        )  # fmt: skip
        assert projection.project(stash).rows == 3  # the old file is still a projection
        rows = projection.query(
            stash, "select version, input_tokens from records order by version, position"
        ).to_pylist()
        assert projection.table(stash).schema.names[-3:] == [
            "model",
            "input_tokens",
            "output_tokens",
        ]
    assert [(r["version"], r["input_tokens"]) for r in rows] == [
        (0, None), (0, None), (1, None), (1, None), (2, 4),
    ]  # fmt: skip


def _keys(stash: Any, below: str) -> list[str]:
    """The keys under `below` now (a short listing: one page)."""
    return list(stash.driver(ListKeys(below)).keys)


def test_a_file_without_its_mark_is_read_and_a_file_written_over_loses_its_marks() -> None:
    with _memory() as stash:
        head = _write(stash, "acme.t1", 3)
        projection.project(stash)
        below = stash.layout.key(PROJECTION, "logs/acme.t1/")
        (parquet, mark) = _keys(stash, below)
        assert parquet.endswith(f"{0:020d}-{0:020d}.parquet")
        assert mark.endswith(f"/_{0:020d}-{0:020d}-{2:020d}.projected")
        # A projector killed between the file and its mark: the next run reads the file.
        stash.driver(stashpoint.stores.objects.DeleteObject(mark))
        sent: list[Any] = []

        def count(request: Any, proceed: Any) -> Any:
            sent.append(request)
            return proceed()

        with stash.intercept(count):
            assert projection.project(stash).unchanged == 1
        assert [r.key for r in sent if isinstance(r, GetObject)] == [parquet]
        # A mark stays a hint: the file is written over by something else, and the log grows;
        # the run judges the file itself, writes its rows again and drops the stale mark.
        projection.project(stash)  # nothing new: no mark written either
        assert _keys(stash, below) == [parquet]
        stash.driver(PutObject(mark, b"{}", None, content_encoding=None))
        stash.driver(PutObject(parquet, b"planted", None, content_encoding=None))
        _write(stash, "acme.t1", 1, after=head)
        report = projection.project(stash)
        assert report.rows == 8 and report.files == [parquet]
        assert _keys(stash, below) == [parquet, below + f"_{0:020d}-{0:020d}-{3:020d}.projected"]
        assert _rows(stash) == _expected(stash, "acme.t1")


def test_marks_go_with_their_log_a_purge_and_a_new_life() -> None:
    with _memory() as stash:
        _write(stash, "acme.t1", 2)
        _write(stash, "acme.t2", 2)
        projection.project(stash)
        one = stash.layout.key(PROJECTION, "logs/acme.t1/")
        two = stash.layout.key(PROJECTION, "logs/acme.t2/")
        assert len(_keys(stash, one)) == len(_keys(stash, two)) == 2
        stash.admin.purge(log="acme.t1")
        assert versions(stash, one) == []  # the purge took the file and the mark
        stash.logs.delete("acme.t2")
        _write(stash, "acme.t2", 1)  # a new life
        projection.project(stash)
        kept = _keys(stash, two)
        lives = {k.split("/")[-1].lstrip("_").split("-")[0] for k in kept}
        assert len(kept) == 2 and lives == {f"{3:020d}"}  # deleted at 2: life 3, marked
        assert _rows(stash) == _expected(stash, "acme.t2")


def test_the_json_schema_of_a_row_names_every_column_and_projected_rows_validate(
    tmp_path: Any,
) -> None:
    import json
    from datetime import date, datetime
    from pathlib import Path

    import jsonschema

    path = Path(__file__).parents[1] / "docs" / "archive-records.schema.json"
    schema = json.loads(path.read_text())
    assert list(schema["properties"]) == projection.arrow_schema(pyarrow).names
    assert schema["required"] == projection.arrow_schema(pyarrow).names
    with stashpoint.open(f"local://{tmp_path / 'stash'}") as stash:
        stash.logs.append(
            "acme.t1",
            [{"role": "assistant", "content": "hi", "model": "m", "usage": {"input_tokens": 3}},
             {"event": "not a message", "text": "bell \x07"}],
            after=None,
        )  # fmt: skip
        projection.project(stash)
        rows = projection.table(stash).to_pylist()
    assert len(rows) == 2
    checker = jsonschema.Draft202012Validator(
        schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER
    )
    for row in rows:
        as_json = {
            k: v.isoformat() if isinstance(v, datetime | date) else v for k, v in row.items()
        }
        checker.validate(as_json)
