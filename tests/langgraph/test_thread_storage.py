"""The stored form of a LangGraph thread: keys, readable values, serializers, tombstones,
hostile objects and request counts."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

pytest.importorskip("langgraph.checkpoint.base")

from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer

import stashpoint
from stashpoint import CheckpointConflict, InvalidPayload
from stashpoint.ids import thread_key
from stashpoint.langgraph import LATEST_MARKER, StashpointSaver
from stashpoint.steps import PARALLEL_WIDTH
from stashpoint.stores.objects import GetObject, ListKeys


def _put(saver: Any, thread_id: str, values: dict[str, Any], parent: str | None = None,
         ns: str = "", marker: bool = False, metadata: dict[str, Any] | None = None) -> Any:  # fmt: skip
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = values
    checkpoint["channel_versions"] = {k: saver.get_next_version(None, None) for k in values}
    configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ns}
    if parent is not None:
        configurable["checkpoint_id"] = parent
    if marker:
        configurable[LATEST_MARKER] = True
    return saver.put(
        {"configurable": configurable},
        checkpoint,
        metadata or {"source": "loop", "step": 0},
        checkpoint["channel_versions"],
    )


@pytest.fixture
def stash(memory_url: tuple[str, dict[str, Any]]) -> Any:
    with stashpoint.open(memory_url[0]) as stash:
        yield stash


def test_thread_ids_never_collide_and_escape_safely(stash: Any) -> None:
    saver = StashpointSaver(stash)
    ids = ["t", "t/x", "t x", "T", "ü", "a:b", ".", "x" * 400, "y" * 400]
    keys = [thread_key(i) for i in ids]
    assert len(set(keys)) == len(ids)
    assert thread_key("plain-id_1.2") == "plain-id_1.2"
    for index, thread_id in enumerate(ids):
        _put(saver, thread_id, {"n": index})
    for index, thread_id in enumerate(ids):
        found = saver.get_tuple({"configurable": {"thread_id": thread_id, "checkpoint_ns": ""}})
        assert found is not None and found.checkpoint["channel_values"] == {"n": index}
    listed = {t.config["configurable"]["thread_id"] for t in saver.list(None)}
    assert listed == set(ids)


def test_plain_values_are_readable_json_and_messages_are_stored_once(stash: Any) -> None:
    saver = StashpointSaver(stash)
    config = _put(saver, "readable", {"plan": {"steps": ["a", "b"], "n": 2}, "log": ["x"]})
    config = _put(
        saver, "readable", {"log": ["x", "y", "z"]}, parent=config["configurable"]["checkpoint_id"]
    )
    entries = stash.log_steps("langgraph").keys.entries_prefix("readable")
    page = stash.driver(ListKeys(entries))
    documents = []
    for key in page.keys:
        body = stash.driver(GetObject(key)).body
        codec = stash.codec
        raw = codec.unwrap(body, name=key)
        documents.append(
            codec.parse_document(raw, name=key, format_name="stashpoint.log", format_version=1)
        )
    first, second = (d["records"][0]["values"] for d in documents)
    assert first["plan"]["value"] == {"type": "msgpack", "msgpack": {"steps": ["a", "b"], "n": 2}}
    assert [i["msgpack"] for i in first["log"]["value"]["list"]] == ["x"]
    # The second checkpoint's list extends the first's: only the new items are stored.
    assert [i["msgpack"] for i in second["log"]["value"]["items"]] == ["y", "z"]
    found = saver.get_tuple({"configurable": {"thread_id": "readable", "checkpoint_ns": ""}})
    assert found.checkpoint["channel_values"]["log"] == ["x", "y", "z"]


class _XorCipher:
    """A stand-in cipher: the test checks that values go through the serializer only."""

    def encrypt(self, plaintext: bytes) -> tuple[str, bytes]:
        return "xor", bytes(b ^ 0x5A for b in plaintext)

    def decrypt(self, ciphername: str, ciphertext: bytes) -> bytes:
        assert ciphername == "xor"
        return bytes(b ^ 0x5A for b in ciphertext)


def test_values_go_only_through_the_serializer(stash: Any) -> None:
    saver = StashpointSaver(stash, serde=EncryptedSerializer(_XorCipher()))
    _put(saver, "secret", {"token": "hunter2-secret-value"})
    prefix = stash.log_steps("langgraph").keys.entries_prefix("secret")
    for key in stash.driver(ListKeys(prefix)).keys:
        raw = stash.codec.unwrap(stash.driver(GetObject(key)).body, name=key)
        assert b"hunter2" not in raw
    found = saver.get_tuple({"configurable": {"thread_id": "secret", "checkpoint_ns": ""}})
    assert found.checkpoint["channel_values"] == {"token": "hunter2-secret-value"}


def test_deleted_thread_stays_deleted_for_late_writes(stash: Any) -> None:
    saver = StashpointSaver(stash)
    first = _put(saver, "gone", {"v": 1})
    late = StashpointSaver(stash)  # another worker, still holding the thread
    late.get_tuple({"configurable": {"thread_id": "gone", "checkpoint_ns": ""}})
    saver.delete_thread("gone")
    with pytest.raises(CheckpointConflict, match="deleted"):
        _put(late, "gone", {"v": 2}, parent=first["configurable"]["checkpoint_id"])
    with pytest.raises(CheckpointConflict, match="deleted"):
        late.put_writes(first, [("ch", 1)], "task")
    assert saver.get_tuple({"configurable": {"thread_id": "gone", "checkpoint_ns": ""}}) is None
    assert list(saver.list({"configurable": {"thread_id": "gone"}})) == []
    # Starting the thread afresh is allowed.
    _put(saver, "gone", {"v": 3}, metadata={"source": "input", "step": -1})
    found = saver.get_tuple({"configurable": {"thread_id": "gone", "checkpoint_ns": ""}})
    assert found.checkpoint["channel_values"] == {"v": 3} and found.parent_config is None


def test_a_second_fresh_start_of_a_thread_is_refused(stash: Any) -> None:
    saver = StashpointSaver(stash)
    _put(saver, "fresh", {"v": 1}, metadata={"source": "input", "step": -1})
    with pytest.raises(CheckpointConflict, match="started it first"):
        _put(saver, "fresh", {"v": 2}, metadata={"source": "input", "step": -1})


def test_explicit_branch_from_a_past_checkpoint_is_allowed(stash: Any) -> None:
    saver = StashpointSaver(stash)
    one = _put(saver, "tt", {"v": 1})["configurable"]["checkpoint_id"]
    two = _put(saver, "tt", {"v": 2}, parent=one)["configurable"]["checkpoint_id"]
    with pytest.raises(CheckpointConflict, match="moved on") as stale:
        _put(saver, "tt", {"v": 3}, parent=one, marker=True)
    # The error says how to fork on purpose: the config to pass, without the marker.
    advice = str(stale.value)
    assert two in advice and "to fork on purpose" in advice and LATEST_MARKER in advice
    assert f"'checkpoint_id': '{one}'" in advice
    branch = _put(saver, "tt", {"v": 4}, parent=one)["configurable"]["checkpoint_id"]
    latest = saver.get_tuple({"configurable": {"thread_id": "tt", "checkpoint_ns": ""}})
    assert (
        latest.checkpoint["id"] == branch
        and latest.parent_config["configurable"]["checkpoint_id"] == one
    )
    assert {t.checkpoint["id"] for t in saver.list({"configurable": {"thread_id": "tt"}})} == {
        one,
        two,
        branch,
    }


@pytest.mark.parametrize(
    ("record", "match"),
    [
        ({"op": "explode"}, "unknown thread record op"),
        ({"op": "put", "ns": ""}, "malformed thread record"),
        ("not a record", "must be an object"),
    ],
)
def test_hostile_thread_records_raise_typed_errors(stash: Any, record: Any, match: str) -> None:
    saver = StashpointSaver(stash)
    config = _put(saver, "hostile", {"v": 1})
    logs = stash.log_steps("langgraph")  # extended as a hostile writer would
    logs.full_state_every = 1
    from stashpoint.steps import run_sync

    current = run_sync(logs.head("hostile"), stash.driver)
    state = {**current.state, "ns": {}}  # make readers fold the whole thread
    run_sync(logs.append("hostile", [record], after=current, state=state), stash.driver)
    with pytest.raises(InvalidPayload, match=match) as raised:
        saver.get_tuple(config)
    assert raised.value.object_name == "hostile"


def test_a_missing_large_value_object_is_named(stash: Any) -> None:
    saver = StashpointSaver(stash)
    config = _put(saver, "large", {"blob": "z" * 300_000 + uuid.uuid4().hex})
    prefix = stash.layout.namespace_prefix("langgraph-values")
    keys = stash.driver(ListKeys(prefix)).keys
    assert len(keys) == 1
    from stashpoint.stores.objects import DeleteObject

    stash.driver(DeleteObject(keys[0]))
    with pytest.raises(InvalidPayload, match="large value") as raised:
        saver.get_tuple(config)
    assert raised.value.object_name == keys[0]


def test_request_counts(stash: Any) -> None:
    saver = StashpointSaver(stash)
    config = None
    for step in range(20):
        parent = None if config is None else config["configurable"]["checkpoint_id"]
        config = _put(
            saver, "counted", {"messages": [f"m{i}" for i in range(step + 1)]}, parent=parent
        )
        saver.put_writes(config, [("a", 1), ("b", 2)], f"task-{step}")
    requests: list[str] = []

    def counting(request: Any, proceed: Any) -> Any:
        requests.append(type(request).__name__)
        return proceed()

    stash.intercept(counting)
    parent = config["configurable"]["checkpoint_id"]
    _put(saver, "counted", {"messages": ["x"] * 21}, parent=parent)
    assert requests == ["PutObject"]  # put: one conditional PUT
    requests.clear()
    saver.put_writes(config, [(f"c{i}", i) for i in range(50)], "task-big")
    assert requests == ["PutObject"]  # put_writes of any size: one PUT
    requests.clear()
    found = saver.get_tuple({"configurable": {"thread_id": "counted", "checkpoint_ns": ""}})
    assert found.checkpoint["channel_values"]["messages"] == ["x"] * 21
    # get latest, warm (this saver wrote the head and the entries it names, which it
    # keeps until they are sealed): the key after the head (absent), nothing else.
    assert requests == ["GetObject"], requests
    requests.clear()
    with stashpoint.open(stash.url) as cold:  # a new process
        cold.intercept(counting)
        latest = {"configurable": {"thread_id": "counted", "checkpoint_ns": ""}}
        found = StashpointSaver(cold).get_tuple(latest)
    assert found.checkpoint["channel_values"]["messages"] == ["x"] * 21
    # cold: a listing (entries, segments and the thread's list objects at once), then the
    # newest entry with the list objects and the versions after the newest (the guess:
    # one round of the driver's width), and what the guess missed (here: nothing it named
    # is older), in one parallel round each.
    assert requests.count("ListKeys") == 3, requests
    assert requests.count("GetObject") <= PARALLEL_WIDTH + 4, requests
    assert "PutObject" not in requests


def test_a_warm_list_reads_only_the_top_of_what_its_saver_wrote(stash: Any) -> None:
    saver = StashpointSaver(stash)
    config = None
    for step in range(30):  # 60 entries, none sealed yet
        parent = None if config is None else config["configurable"]["checkpoint_id"]
        config = _put(saver, "listed", {"n": step}, parent=parent)
        saver.put_writes(config, [("a", step)], f"task-{step}")
    gets: list[str] = []

    def counting(request: Any, proceed: Any) -> Any:
        if isinstance(request, GetObject):
            gets.append(request.key)
        return proceed()

    thread = {"configurable": {"thread_id": "listed"}}
    with stash.intercept(counting):
        found = list(saver.list(thread, limit=20))
    assert [t.checkpoint["channel_values"]["n"] for t in found] == list(range(29, 9, -1))
    # Entries never change: the saver keeps those it appended (until they are sealed) and
    # asks the bucket only for the key after the head it knows (a purge's tombstone, or
    # another process's put, would be there), not for all 60.
    assert gets == [stash.log_steps("langgraph").keys.entry("listed", 60)], gets
    with stashpoint.open(stash.url) as cold, cold.intercept(counting):  # a new process
        again = list(StashpointSaver(cold).list(thread, limit=20))  # reads every entry
    assert [t.checkpoint for t in again] == [t.checkpoint for t in found]
    assert len(gets) == 1 + 60, len(gets)


def test_a_process_that_read_a_thread_reads_it_again_in_one_request(stash: Any) -> None:
    """What a saver read (not only what it wrote) serves its next read: entries never change,
    and the GET of the key after the head shows whether anything came since."""
    writer = StashpointSaver(stash)
    config = None
    for step in range(20):
        parent = None if config is None else config["configurable"]["checkpoint_id"]
        config = _put(writer, "reread", {"n": step}, parent=parent)
        writer.put_writes(config, [("a", step)], f"task-{step}")
    thread = {"configurable": {"thread_id": "reread"}}
    sent: list[str] = []

    def counting(request: Any, proceed: Any) -> Any:
        sent.append(getattr(request, "key", type(request).__name__))
        return proceed()

    with stashpoint.open(stash.url) as other:  # another process: it read, it never wrote
        reader = StashpointSaver(other)
        first = reader.get_tuple(thread)
        with other.intercept(counting):
            again = reader.get_tuple(thread)
        assert first is not None and again is not None
        assert again.checkpoint == first.checkpoint and again.pending_writes == first.pending_writes
        assert sent == [other.log_steps("langgraph").keys.entry("reread", 40)], sent
        config = _put(writer, "reread", {"n": 99}, parent=config["configurable"]["checkpoint_id"])
        sent.clear()
        with other.intercept(counting):
            moved = reader.get_tuple(thread)  # the writer went on: seen, and read
        assert moved is not None and moved.checkpoint["channel_values"]["n"] == 99
        assert len(sent) > 1


def test_a_warm_list_of_a_sealed_thread_reads_no_segment_its_saver_sealed(stash: Any) -> None:
    """Issue 27 #3: `list(config, limit=20)` in at most 4 requests, for the process that
    wrote the thread: the segments it sealed are kept as it wrote them (they hold exactly
    its entries), so the read is a listing, the top, and nothing older. A new process
    reads the segments, and reads the same."""
    saver = StashpointSaver(stash)
    config = None
    for step in range(100):  # 200 entries: three segments sealed
        parent = None if config is None else config["configurable"]["checkpoint_id"]
        config = _put(saver, "sealed", {"n": step}, parent=parent)
        saver.put_writes(config, [("a", step)], f"task-{step}")
    assert saver.flush()  # the seals are made after the puts returned
    prefix = stash.layout.namespace_prefix("sealed")
    assert len(stash.driver(ListKeys(prefix)).keys) == 3
    sent: list[str] = []

    def counting(request: Any, proceed: Any) -> Any:
        sent.append(type(request).__name__)
        return proceed()

    thread = {"configurable": {"thread_id": "sealed"}}
    with stash.intercept(counting):
        found = list(saver.list(thread, limit=20))
    assert [t.checkpoint["channel_values"]["n"] for t in found] == list(range(99, 79, -1))
    assert len(sent) <= 4 and "GetObject" in sent, sent  # the key after the top, at least
    sent.clear()
    with stashpoint.open(stash.url) as cold, cold.intercept(counting):  # a new process
        again = list(StashpointSaver(cold).list(thread, limit=20))
    assert [t.checkpoint for t in again] == [t.checkpoint for t in found]
    assert sent.count("GetObject") >= 3  # the segments, at least


def test_delta_channel_history_matches_in_memory_saver(stash: Any) -> None:
    from langgraph.checkpoint.memory import InMemorySaver

    ours, reference = StashpointSaver(stash), InMemorySaver()
    configs: dict[str, list[Any]] = {"ours": [], "reference": []}
    for name, saver in (("ours", ours), ("reference", reference)):
        parent = None
        for step in range(6):
            values = {"seed": f"s{step}"} if step % 3 == 0 else {}
            config = _put(saver, "delta", values, parent=parent)
            saver.put_writes(
                config, [("log", f"w{step}a"), ("log", f"w{step}b"), ("x", step)], f"t{step}"
            )
            parent = config["configurable"]["checkpoint_id"]
            configs[name].append(config)
    for mine, theirs in zip(configs["ours"], configs["reference"], strict=True):
        got = ours.get_delta_channel_history(config=mine, channels=["log", "seed", "x", "none"])
        want = reference.get_delta_channel_history(
            config=theirs, channels=["log", "seed", "x", "none"]
        )
        assert got == want
    # One read of the thread however long the chain: the writer knows its head, so no
    # listing, and keeps what it appended: the key after the head is the one request.
    requests: list[str] = []
    real = stash.driver
    stash.driver = lambda r: (requests.append(type(r).__name__), real(r))[1]
    ours.get_delta_channel_history(config=configs["ours"][-1], channels=["log"])
    assert requests == ["GetObject"], requests
    requests.clear()
    StashpointSaver(stash).get_delta_channel_history(config=configs["ours"][-1], channels=["log"])
    assert requests.count("ListKeys") == 2  # a saver that knows nothing of it: one listing


def test_threads_list_show_and_export(tmp_path: Any) -> None:
    import json as json_

    from tests.cli.test_cli import cli

    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        saver = StashpointSaver(stash)
        ids = [f"thread/{i} ü" for i in range(5)]
        for thread_id in ids:
            _put(saver, thread_id, {"messages": ["hi", thread_id]})
    first = json_.loads(cli("threads", "list", "--limit", "3", "--json", url=url).stdout)
    assert len(first["items"]) == 3 and first["cursor"]
    rest = json_.loads(
        cli("threads", "list", "--cursor", first["cursor"], "--json", url=url).stdout
    )
    listed = [t["thread_id"] for t in first["items"] + rest["items"]]
    assert sorted(listed) == sorted(ids) and rest["cursor"] is None
    shown = json_.loads(cli("threads", "show", ids[2], url=url).stdout)
    assert shown["checkpoint"]["channel_values"] == {"messages": ["hi", ids[2]]}
    assert shown["config"]["thread_id"] == ids[2]
    out = tmp_path / "threads.jsonl"
    cli("export", "--prefix", "", "--out", str(out), url=url)
    lines = [json_.loads(line) for line in out.read_text().splitlines()]
    threads = [line for line in lines if line.get("namespace") == "langgraph"]
    assert len(threads) == 5
    assert {line["state"]["thread_id"] for line in threads} == set(ids)
    with stashpoint.open(url) as stash:
        StashpointSaver(stash).delete_thread(ids[0])
    live = json_.loads(cli("threads", "list", "--json", url=url).stdout)["items"]
    assert sorted(t["thread_id"] for t in live) == sorted(ids[1:])  # a deleted thread is gone
    every = json_.loads(cli("threads", "list", "--deleted", "--json", url=url).stdout)["items"]
    assert [t["deleted"] for t in every if t["thread_id"] == ids[0]] == [True]
    garbage = cli("threads", "list", "--cursor", "garbage!", "--json", url=url, check=False)
    assert garbage.returncode != 0 and json_.loads(garbage.stdout)["error"]["kind"] == (
        "invalid_argument"
    )


def test_a_growing_list_keeps_one_snapshot_and_reads_without_it(stash: Any) -> None:
    saver = StashpointSaver(stash)
    _grown(saver, 80, thread_id="grow", word="message")
    assert saver.flush()  # replaced snapshots are deleted after the puts returned
    prefix = stash.layout.namespace_prefix("langgraph-values")
    snapshots = stash.driver(ListKeys(prefix)).keys
    assert len(snapshots) == 1  # each new snapshot replaced the one before
    latest = {"configurable": {"thread_id": "grow", "checkpoint_ns": ""}}
    expected = [f"message {i}" for i in range(80)]
    assert saver.get_tuple(latest).checkpoint["channel_values"]["messages"] == expected
    # A reader whose snapshot was replaced under it reads the whole chain instead.
    from stashpoint.stores.objects import DeleteObject

    stash.driver(DeleteObject(snapshots[0]))
    assert saver.get_tuple(latest).checkpoint["channel_values"]["messages"] == expected
    past = list(saver.list({"configurable": {"thread_id": "grow"}}))
    assert [len(t.checkpoint["channel_values"]["messages"]) for t in past] == list(range(80, 0, -1))


def test_langchain_messages_are_stored_as_readable_json(stash: Any) -> None:
    from langchain_core.messages import AIMessage, HumanMessage

    saver = StashpointSaver(stash)
    messages = [HumanMessage(content="find the needle", id="h1"),
                AIMessage(content="found it", id="a1", tool_calls=[])]  # fmt: skip
    config = _put(saver, "chat", {"messages": messages, "blob": {"raw": b"\x00\x01"}})
    prefix = stash.log_steps("langgraph").keys.entries_prefix("chat")
    key = stash.driver(ListKeys(prefix)).keys[0]
    raw = stash.codec.unwrap(stash.driver(GetObject(key)).body, name=key)
    assert b'"content":"find the needle"' in raw  # readable with zstd -d | jq, not base64
    values = saver.get_tuple(config).checkpoint["channel_values"]
    assert values["messages"] == messages and values["blob"] == {"raw": b"\x00\x01"}


def _grown(
    saver: StashpointSaver, steps: int, *, thread_id: str = "hostile-values", word: str = "m"
) -> Any:
    """Put `steps` checkpoints whose list grows by one item each; return the last config."""
    config, version = None, None
    for step in range(steps):
        checkpoint = empty_checkpoint()
        version = saver.get_next_version(version, None)
        checkpoint["channel_values"] = {"messages": [f"{word} {i}" for i in range(step + 1)]}
        checkpoint["channel_versions"] = {"messages": version}
        configurable: dict[str, Any] = {"thread_id": thread_id, "checkpoint_ns": ""}
        if config is not None:
            configurable["checkpoint_id"] = config["configurable"]["checkpoint_id"]
        config = saver.put({"configurable": configurable}, checkpoint,
                           {"source": "loop", "step": step}, {"messages": version})  # fmt: skip
    return config


@pytest.mark.parametrize("kind", ["s-", "t-"])
@pytest.mark.parametrize("swap", ["other snapshot", "garbage"])
def test_a_snapshot_that_is_not_what_its_name_says_is_refused(
    stash: Any, swap: str, kind: str
) -> None:
    saver = StashpointSaver(stash)
    _grown(saver, 40)  # a snapshot (after 8 extensions) and a tail (after 32)
    assert saver.flush()  # replaced snapshots are deleted after the puts returned
    prefix = stash.layout.namespace_prefix("langgraph-values")
    [key] = [k for k in stash.driver(ListKeys(prefix)).keys if f"/{kind}" in k]
    codec = stash.codec
    from stashpoint.steps import run_sync
    from stashpoint.stores.objects import PutObject

    if swap == "garbage":
        body = b"\x28\xb5\x2f\xfd garbage"
    else:  # a well-formed snapshot of another list
        document = {"format": "stashpoint.langgraph-list/1",
                    "items": [{"type": "msgpack", "msgpack": "forged"}]}  # fmt: skip
        body = run_sync(codec.document_encoding(document, name="x"), stash.driver)
    stash.driver(PutObject(key, body, None))
    latest = {"configurable": {"thread_id": "hostile-values", "checkpoint_ns": ""}}
    # The writer keeps the bytes it wrote (named by their hash): it reads the true list.
    expected = [f"m {i}" for i in range(40)]
    assert saver.get_tuple(latest).checkpoint["channel_values"]["messages"] == expected
    with pytest.raises(InvalidPayload, match="does not hold what its name says") as raised:
        StashpointSaver(stash).get_tuple(latest)  # another saver reads the planted object
    assert raised.value.object_name == key


def test_a_large_value_object_holding_another_value_is_refused(stash: Any) -> None:
    saver = StashpointSaver(stash)
    config = _put(saver, "swapped", {"a": "A" * 300_000, "b": "B" * 300_000})
    prefix = stash.layout.namespace_prefix("langgraph-values")
    first, second = stash.driver(ListKeys(prefix)).keys
    from stashpoint.stores.objects import PutObject

    stash.driver(PutObject(first, stash.driver(GetObject(second)).body, None))
    with pytest.raises(InvalidPayload, match="does not hold the value its name says") as raised:
        saver.get_tuple(config)
    assert raised.value.object_name == first


def test_a_long_lived_saver_remembers_a_bounded_number_of_threads(stash: Any) -> None:
    from stashpoint.langgraph.steps import KNOWN_THREADS

    saver = StashpointSaver(stash)
    for index in range(KNOWN_THREADS + 40):
        _put(saver, f"many-{index}", {"messages": ["hi", str(index)]})
    assert len(saver.steps.threads) == KNOWN_THREADS  # the least recently written went
    assert len(saver._locks) == 0  # a thread's write lock lives only while in use
    # A forgotten thread is read again and written as before.
    config = _put(saver, "many-0", {"messages": ["again"]})
    assert saver.get_tuple(config).checkpoint["channel_values"] == {"messages": ["again"]}


@pytest.mark.parametrize("rewrite", ["prune", "delete_for_runs", "copy_thread", "delete_thread"])
def test_a_put_from_a_stale_saver_after_a_rewrite_is_stored_where_readers_look(
    saver_url: tuple[str, dict[str, Any]], rewrite: str
) -> None:
    """Issue 23 #1: a rewrite frees the versions below it; a saver whose cached head is
    older puts next. Its put must land where readers look, or be refused; never be
    acknowledged into a freed version no reader reads."""
    url, options = saver_url
    with stashpoint.open(url, **options) as stash:
        stale, other = StashpointSaver(stash), StashpointSaver(stash)
        thread = f"t-{uuid.uuid4().hex[:8]}"
        one = _put(
            stale, thread, {"v": 1}, metadata={"source": "input", "step": -1, "run_id": "r1"}
        )
        parent = one["configurable"]["checkpoint_id"]
        # Another worker writes more of the thread, then rewrites it.
        two = _put(
            other,
            thread,
            {"v": 2},
            parent=parent,
            metadata={"source": "loop", "step": 1, "run_id": "r2"},
        )
        _put(other, thread, {"v": 3}, parent=two["configurable"]["checkpoint_id"],
             metadata={"source": "loop", "step": 2, "run_id": "r2"})  # fmt: skip
        if rewrite == "prune":
            other.prune([thread], strategy="keep_latest")
        elif rewrite == "delete_for_runs":
            other.delete_for_runs(["r2"])
        elif rewrite == "copy_thread":
            # The target is rewritten from the source; the stale saver writes the target.
            target = f"c-{uuid.uuid4().hex[:8]}"
            one = _put(stale, target, {"v": 1}, metadata={"source": "input", "step": -1})
            parent = one["configurable"]["checkpoint_id"]
            other.delete_thread(target)
            other.copy_thread(thread, target)
            thread = target
        else:
            other.delete_thread(thread)
        # The stale saver (its cached head is version 0) branches from its checkpoint.
        try:
            late = _put(stale, thread, {"v": "late"}, parent=parent)
        except CheckpointConflict:
            return  # refused, never acknowledged: nothing lost
        config = {"configurable": {"thread_id": thread, "checkpoint_ns": "",
                                   "checkpoint_id": late["configurable"]["checkpoint_id"]}}  # fmt: skip
        for reader in (StashpointSaver(stash), stale):
            found = reader.get_tuple(config)
            assert found is not None, "acknowledged, then no reader finds it"
            assert found.checkpoint["channel_values"] == {"v": "late"}
            ids = {t.checkpoint["id"] for t in reader.list({"configurable": {"thread_id": thread}})}
            assert late["configurable"]["checkpoint_id"] in ids


def test_writes_stored_before_their_checkpoint_are_its_pending_writes(stash: Any) -> None:
    """Issue 23 #7, the direct form: under LangGraph's default `durability="async"` the
    writes of a checkpoint may land before its put. InMemorySaver returns them; so must we."""
    from langgraph.checkpoint.memory import InMemorySaver

    results = []
    for saver in (StashpointSaver(stash), InMemorySaver()):
        thread = f"early-{uuid.uuid4().hex[:6]}"
        c0 = _put(saver, thread, {"v": 0}, metadata={"source": "input", "step": -1})
        c1 = empty_checkpoint()
        c1["channel_values"] = {"v": 1}
        c1["channel_versions"] = {"v": saver.get_next_version(None, None)}
        early = {
            "configurable": {"thread_id": thread, "checkpoint_ns": "", "checkpoint_id": c1["id"]}
        }
        saver.put_writes(early, [("__interrupt__", {"ask": 1}), ("v", 2)], "task-1")
        saver.put_writes(early, [("v", 3)], "task-2")
        saver.put(c0, c1, {"source": "loop", "step": 0}, c1["channel_versions"])
        found = saver.get_tuple({"configurable": {"thread_id": thread, "checkpoint_ns": ""}})
        results.append(sorted((w[0], w[1], str(w[2])) for w in found.pending_writes))
        # A fresh saver (a new process) reads the same.
        if isinstance(saver, StashpointSaver):
            again = StashpointSaver(stash).get_tuple(
                {"configurable": {"thread_id": thread, "checkpoint_ns": ""}}
            )
            assert sorted((w[0], w[1], str(w[2])) for w in again.pending_writes) == results[0]
    assert results[0] == results[1] and len(results[0]) == 3


class _Planting:
    """A serializer that writes one value as a msgpack object naming `os.system`."""

    def __init__(self, command: str) -> None:
        import ormsgpack
        from langgraph.checkpoint.serde.jsonplus import EXT_CONSTRUCTOR_POS_ARGS, JsonPlusSerializer

        self.inner = JsonPlusSerializer()
        self.hostile = ormsgpack.packb(
            ormsgpack.Ext(EXT_CONSTRUCTOR_POS_ARGS, ormsgpack.packb(("os", "system", [command])))
        )

    def dumps_typed(self, value: Any) -> tuple[str, bytes]:
        if value == "plant":
            return "msgpack", self.hostile
        return self.inner.dumps_typed(value)

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        return self.inner.loads_typed(data)


def test_reading_a_thread_never_runs_code_a_stored_value_names(stash: Any, tmp_path: Any) -> None:
    """Issue 23 #9: LangGraph's default serializer imported and called what a stored
    msgpack object named (`os.system`): anyone who could write the bucket ran code on
    every reader. The saver's default is strict."""
    proof = tmp_path / "pwned"
    writer = StashpointSaver(stash, serde=_Planting(f"touch {proof}"))  # the attacker's bytes
    _put(writer, "hostile-value", {"note": "plant"})
    config = {"configurable": {"thread_id": "hostile-value", "checkpoint_ns": ""}}
    found = StashpointSaver(stash).get_tuple(config)
    list(StashpointSaver(stash).list({"configurable": {"thread_id": "hostile-value"}}))
    assert not proof.exists(), "a read ran the planted command"
    assert found is not None and found.checkpoint["channel_values"]["note"] != 0
    # Widening the allowlist is explicit, per type.
    saver = StashpointSaver(stash, allowed_msgpack_modules=[("collections", "OrderedDict")])
    assert saver.get_tuple(config) is not None and not proof.exists()
    with pytest.raises(stashpoint.ConfigurationError):
        StashpointSaver(stash, allowed_msgpack_modules=["os.system"])  # type: ignore[list-item]


def test_a_delete_racing_writers_backs_off_and_ends(memory_url: tuple[str, dict[str, Any]]) -> None:
    """Issue 24: the LangGraph loops retried a lost race at once, delete_thread forever;
    they back off on the stash's clock and give up after a bound."""
    from stashpoint.clock import FakeClock
    from stashpoint.stores.objects import PutObject

    clock = FakeClock()
    start = clock.now()
    config = {"configurable": {"thread_id": "race", "checkpoint_ns": ""}}
    with (
        stashpoint.open(memory_url[0], clock=clock) as deleting,
        stashpoint.open(memory_url[0]) as other,
    ):
        saver, writer = StashpointSaver(deleting), StashpointSaver(other)
        _put(saver, "race", {"v": 1})
        races: list[str] = []

        def another_writer_first(request: Any, proceed: Any) -> Any:
            key = request.key if isinstance(request, PutObject) else ""
            if key.startswith("langgraph/race/") and len(races) < 3:
                races.append(key)  # another worker's checkpoint lands first, three times
                latest = writer.get_tuple(config)  # type: ignore[arg-type]
                assert latest is not None
                parent = latest.config["configurable"]["checkpoint_id"]
                _put(writer, "race", {"v": len(races) + 1}, parent=parent)
            return proceed()

        with deleting.intercept(another_writer_first):
            saver.delete_thread("race")
        assert len(races) == 3
        assert clock.now() > start  # it slept between the lost races (fake time only)
        assert saver.get_tuple(config) is None  # type: ignore[arg-type]
        assert writer.get_tuple(config) is None  # type: ignore[arg-type]


def _value_keys(stash: Any) -> list[str]:
    return list(stash.driver(ListKeys(stash.layout.namespace_prefix("langgraph-values"))).keys)


@pytest.mark.parametrize("planted", ["garbage", "another value", "torn"])
def test_an_object_planted_under_a_large_values_name_is_replaced(
    saver_url: tuple[str, dict[str, Any]], planted: str
) -> None:
    """A create-only write judges what it finds by its content: a put that finds something
    else under its value's name writes the value over it, so what it acknowledged reads
    (on main it was accepted for being there, and the acknowledged checkpoint unreadable)."""

    with stashpoint.open(saver_url[0], **saver_url[1]) as stash:
        _plant_and_put(stash, planted)


def _plant_and_put(stash: Any, planted: str) -> None:
    from stashpoint.stores.objects import PutObject

    big = "q" * 300_000 + uuid.uuid4().hex
    probe = stashpoint.open("memory://")  # the same value's name, found once elsewhere
    _put(StashpointSaver(probe), "probe", {"big": big})
    (probe_key,) = _value_keys(probe)
    name = probe_key.rsplit("/", 1)[1]
    genuine = probe.driver(GetObject(probe_key)).body
    probe.close()
    key = stash.layout.key("langgraph-values", f"{thread_key('planted')}/{name}")
    other = StashpointSaver(stash)
    _put(other, "elsewhere", {"big": "other" * 70_000})
    (other_key,) = _value_keys(stash)
    body = {
        "garbage": b"not a value",
        "another value": stash.driver(GetObject(other_key)).body,
        "torn": genuine[: len(genuine) // 2],
    }[planted]
    stash.driver(PutObject(key, body, None))
    config = _put(StashpointSaver(stash), "planted", {"big": big})
    found = StashpointSaver(stash).get_tuple(config)
    assert found is not None and found.checkpoint["channel_values"]["big"] == big


@pytest.mark.parametrize("moment", ["before the listing", "between judging and deleting"])
def test_a_delete_never_frees_a_value_a_fresh_start_reuses(
    memory_url: tuple[str, dict[str, Any]], moment: str
) -> None:
    """A thread deleted while another worker starts it afresh with the same large value:
    the value's key is never freed under the new checkpoint (it read on main before)."""
    from stashpoint.stores.objects import DeleteObject

    big = "w" * 300_000 + uuid.uuid4().hex
    fresh = {"source": "input", "step": -1}
    with (
        stashpoint.open(memory_url[0]) as deleting,
        stashpoint.open(memory_url[0]) as starting,
    ):
        saver, starter = StashpointSaver(deleting), StashpointSaver(starting)
        _put(saver, "reused", {"big": big}, metadata=fresh)
        starter.get_tuple({"configurable": {"thread_id": "reused", "checkpoint_ns": ""}})
        prefix = deleting.layout.namespace_prefix("langgraph-values")
        started: list[Any] = []
        trigger = ListKeys if moment == "before the listing" else DeleteObject

        def start_afresh(request: Any, proceed: Any) -> Any:
            if isinstance(request, trigger) and not started:
                where = request.prefix if isinstance(request, ListKeys) else request.key
                if where.startswith(prefix):
                    started.append(_put(starter, "reused", {"big": big}, metadata=fresh))
            return proceed()

        with deleting.intercept(start_afresh):
            saver.delete_thread("reused")
        assert started, "the fresh start ran during the delete"
        found = StashpointSaver(deleting).get_tuple(started[0])
        assert found is not None and found.checkpoint["channel_values"]["big"] == big
        # The deleted life's objects are gone; the new life's value is the one left.
        assert len(_value_keys(deleting)) == 1


def _listings_of(request: Any, prefix: str) -> bool:
    """Whether `request` lists a log whose entries are under `prefix` (a head's read)."""
    from stashpoint.steps import Parallel

    inner = request.requests if isinstance(request, Parallel) else (request,)
    return any(isinstance(r, ListKeys) and r.prefix == prefix for r in inner)


def test_a_put_landing_while_prune_folds_the_thread_is_kept(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    """On main, prune folded the thread, then read its head again and appended the rebase
    after it: a put landing between the two was acknowledged and dropped by the rebase.
    Here the put lands at the last moment: right before the rebase's own PUT."""
    config = {"configurable": {"thread_id": "pruned", "checkpoint_ns": ""}}
    with (
        stashpoint.open(memory_url[0]) as pruning,
        stashpoint.open(memory_url[0]) as writing,
    ):
        writer = StashpointSaver(writing)
        first = _put(writer, "pruned", {"v": 1})
        second = _put(writer, "pruned", {"v": 2}, parent=first["configurable"]["checkpoint_id"])
        prefix = pruning.layout.key("langgraph", f"{thread_key('pruned')}/")
        landed: list[Any] = []

        def a_put_lands(request: Any, proceed: Any) -> Any:
            from stashpoint.stores.objects import PutObject

            if isinstance(request, PutObject) and request.key.startswith(prefix) and not landed:
                parent = second["configurable"]["checkpoint_id"]
                landed.append(_put(writer, "pruned", {"v": 3}, parent=parent))
            return proceed()

        with pruning.intercept(a_put_lands):
            StashpointSaver(pruning).prune(["pruned"])
        assert landed
        latest = StashpointSaver(pruning).get_tuple(config)  # type: ignore[arg-type]
        assert latest is not None
        assert (
            latest.config["configurable"]["checkpoint_id"]
            == (landed[0]["configurable"]["checkpoint_id"])
        )
        assert latest.checkpoint["channel_values"] == {"v": 3}


def test_a_put_landing_in_a_copys_target_while_it_is_copied_is_kept(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    """On main, copy_thread checked the target was empty, then rebased it after whatever
    head it had when the copy was written: a put landing there meanwhile was dropped."""
    fresh = {"source": "input", "step": -1}
    target = {"configurable": {"thread_id": "target", "checkpoint_ns": ""}}
    with (
        stashpoint.open(memory_url[0]) as copying,
        stashpoint.open(memory_url[0]) as writing,
    ):
        writer = StashpointSaver(writing)
        _put(writer, "source", {"v": "copied"}, metadata=fresh)
        prefix = copying.layout.key("langgraph", f"{thread_key('source')}/")
        landed: list[Any] = []

        def a_put_lands_in_the_target(request: Any, proceed: Any) -> Any:
            if _listings_of(request, prefix) and not landed:
                landed.append(_put(writer, "target", {"v": "theirs"}, metadata=fresh))
            return proceed()

        with (
            copying.intercept(a_put_lands_in_the_target),
            pytest.raises(CheckpointConflict, match="already has checkpoints"),
        ):
            StashpointSaver(copying).copy_thread("source", "target")
        assert landed
        latest = StashpointSaver(copying).get_tuple(target)  # type: ignore[arg-type]
        assert latest is not None and latest.checkpoint["channel_values"] == {"v": "theirs"}


@pytest.mark.parametrize(
    "slot",
    [
        {"latest": "c", "complete": True, "at": "x", "pending": [], "values": {}},
        {"latest": "c", "complete": True, "at": 0, "pending": 3, "values": {}},
        {"latest": "c", "complete": True, "at": 0, "pending": [], "values": {"v": "where"}},
        {"latest": "c", "complete": True, "at": 0, "values": {"v": ["1", 0, [0], "s-x"]}},
        {"latest": 7, "at": 0},
        {"early": {"c": "soon"}},
        "not a slot",
    ],
)
def test_a_hostile_thread_state_is_a_typed_error(stash: Any, slot: Any) -> None:
    """The thread state is a typed model: a state no writer of ours makes is refused naming
    the log (on main one raised AttributeError and six were read as if they were valid)."""
    saver = StashpointSaver(stash)
    config = _put(saver, "hostile", {"v": 1})
    logs = stash.log_steps("langgraph")
    from stashpoint.steps import run_sync

    current = run_sync(logs.head("hostile"), stash.driver)
    state = {**current.state, "ns": {"": slot}}
    run_sync(logs.append("hostile", [{"op": "delete"}], after=current, state=state), stash.driver)
    with pytest.raises(InvalidPayload, match="thread log state") as raised:
        StashpointSaver(stash).get_tuple(config)
    assert raised.value.object_name == "hostile"
    with pytest.raises(InvalidPayload):
        _put(StashpointSaver(stash), "hostile", {"v": 2}, parent="c")


def test_a_packed_thread_reads_its_latest_and_its_past(memory_url: tuple[str, Any]) -> None:
    """Issue 26 #4: `gc --pack` packs LangGraph threads like every log; a new process
    reads the latest checkpoint, an old one and the history from the packs."""
    from stashpoint.logs.format import PACK_SPAN, SEGMENT_SPAN

    steps = PACK_SPAN + SEGMENT_SPAN + 8
    with stashpoint.open(memory_url[0]) as stash:
        saver = StashpointSaver(stash)
        _grown(saver, steps, thread_id="long", word="message")
        thread = {"configurable": {"thread_id": "long", "checkpoint_ns": ""}}
        history = [t.config["configurable"]["checkpoint_id"] for t in saver.list(thread)]
        report = stash.admin.collect_garbage(dry_run=False, pack=True)
        assert report.packs == 1 and report.segments_deleted == PACK_SPAN // SEGMENT_SPAN
    with stashpoint.open(memory_url[0]) as stash:  # a new process
        saver = StashpointSaver(stash)
        latest = saver.get_tuple(thread)
        assert latest is not None
        assert latest.checkpoint["channel_values"]["messages"] == [
            f"message {i}" for i in range(steps)
        ]
        old = {"configurable": {**thread["configurable"], "checkpoint_id": history[-11]}}
        past = saver.get_tuple(old)
        assert past is not None and len(past.checkpoint["channel_values"]["messages"]) == 11
        listed = [t.config["configurable"]["checkpoint_id"] for t in saver.list(thread)]
        assert listed == history


def test_delete_for_runs_reads_a_thread_without_those_runs_once_and_leaves_it(stash: Any) -> None:
    """Without an index (every thread walked): a thread holding no checkpoint of the runs is
    read once (the read that finds out) and not written; a thread holding one is rewritten
    without it. (With an index: `test_run_threads.py`.)"""
    from tests.meter import Meter

    saver = StashpointSaver(stash)
    for n in range(6):
        _put(saver, f"other-{n}", {"v": n}, metadata={"source": "input", "step": -1,
                                                     "run_id": f"keep-{n}"})  # fmt: skip
    doomed = _put(saver, "mixed", {"v": "doomed"},
                  metadata={"source": "input", "step": -1, "run_id": "doomed"})  # fmt: skip
    _put(saver, "mixed", {"v": "kept"}, parent=doomed["configurable"]["checkpoint_id"],
         metadata={"source": "loop", "step": 0, "run_id": "kept"})  # fmt: skip
    # A new process, on a stash without an index: no head is known, every thread is walked.
    with stashpoint.open(f"{stash.url}?index=none") as fresh:
        meter = Meter(fresh)
        StashpointSaver(fresh).delete_for_runs(["no-such-run"])
        assert "PutObject" not in meter.sent
        one_pass = len(meter.sent)
        # Seven threads, each read once from a new process (two listings and its newest
        # entry) beside the listing of thread ids: not twice (a read, then a rewrite that
        # reads again to find nothing to drop: 66 requests here).
        assert one_pass <= 4 * 7 + 2, meter.sent
        meter.sent.clear()
        StashpointSaver(fresh).delete_for_runs(["doomed"])
        assert meter.sent.count("PutObject") == 1  # the one rewrite
        # Reading every thread once, then the mixed one again for its rewrite.
        assert len(meter.sent) <= one_pass + 8, (one_pass, meter.sent)
    left = [t.metadata.get("run_id") for t in saver.list({"configurable": {"thread_id": "mixed"}})]
    assert left == ["kept"]


def test_a_list_whose_version_moved_without_new_items_stores_none(stash: Any) -> None:
    """A node that writes `{"messages": []}` moves the channel's version, not the list: the
    put stores an extension of no items, not the whole list again."""
    saver = StashpointSaver(stash)
    config = _grown(saver, 40, thread_id="still", word="a long enough message")
    entries = stash.log_steps("langgraph").keys.entries_prefix("still")
    before = dict(zip(*_keys_and_sizes(stash, entries), strict=True))
    latest = saver.get_tuple(config)
    assert latest is not None
    checkpoint = dict(latest.checkpoint)
    checkpoint["id"] = str(uuid.uuid4())
    version = saver.get_next_version(checkpoint["channel_versions"]["messages"], None)
    checkpoint["channel_versions"] = {"messages": version}
    unchanged = saver.put(latest.config, checkpoint, {"source": "loop", "step": 40},
                          {"messages": version})  # fmt: skip
    after = dict(zip(*_keys_and_sizes(stash, entries), strict=True))
    [(key, size)] = [(k, s) for k, s in after.items() if k not in before]
    raw = stash.codec.unwrap(stash.driver(GetObject(key)).body, name=key)
    assert b'"list_after"' in raw and b'"items":[]' in raw
    assert size < min(before.values()) * 4  # no copy of the 40 items
    expected = [f"a long enough message {i}" for i in range(40)]
    for reader in (saver, StashpointSaver(stash)):  # this saver, and a new process's
        read = reader.get_tuple(unchanged)
        assert read is not None and read.checkpoint["channel_values"]["messages"] == expected
        past = list(reader.list({"configurable": {"thread_id": "still"}}, limit=2))
        assert [t.checkpoint["channel_values"]["messages"] for t in past] == [expected] * 2


def _keys_and_sizes(stash: Any, prefix: str) -> tuple[list[str], list[int]]:
    page = stash.driver(ListKeys(prefix))
    assert page.sizes is not None
    return page.keys, page.sizes
