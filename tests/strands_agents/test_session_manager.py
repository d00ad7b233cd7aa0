"""`StashSessionManager`: a Strands agent's session as one log, under an agent loop with a
fake model, two invocations at once, crashes at every request, the fault proxy, `kill -9`,
hostile records, purges; and its plans scripted without I/O.

A message is acknowledged when the manager's `create_message` returns (Strands appends it
to the agent's messages and goes on). Whatever fails after that point must read back.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

pytest.importorskip("strands")

from strands import Agent, tool
from strands.types.exceptions import SessionException
from strands.types.session import Session, SessionAgent, SessionMessage, SessionType

import stashpoint
from stashpoint.errors import (
    InvalidArgument,
    InvalidId,
    InvalidPayload,
    Purged,
    StashpointError,
)
from stashpoint.logs.log import LogHead
from stashpoint.logs.state import Known
from stashpoint.stores.layout import STRANDS_SESSIONS
from stashpoint.strands_agents import (
    SessionConflict,
    SessionMissing,
    SessionState,
    SessionSteps,
    StashSessionManager,
    StashSessionRepository,
)
from tests import servers
from tests.crashes import Crash, crash_at
from tests.faultproxy import FaultProxy, everyday_faults
from tests.kills import kill_after_lines
from tests.strands_agents.fake_model import ScriptedModel


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


@pytest.fixture(params=["local_url", "s3_seaweed_url"])
def url(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, Any]]]:
    return request.getfixturevalue(request.param)


def _agent(
    stash: Any,
    session_id: str,
    model: ScriptedModel | None = None,
    *,
    save: Any = "message",
    **options: Any,
) -> Agent:
    return Agent(
        model=model or ScriptedModel(),
        tools=[add],
        session_manager=StashSessionManager(session_id, stash, save=save),
        callback_handler=None,
        **options,
    )


def _texts(agent: Agent) -> list[str]:
    return [b["text"] for m in agent.messages for b in m["content"] if "text" in b]


def _stored(stash: Any, session_id: str) -> list[str]:
    """Every text of the session as stored (no sliding window trims a long one on load)."""
    repository = StashSessionRepository(stash)
    assert repository.read_session(session_id) is not None
    messages = repository.list_messages(session_id, "default")
    return [b["text"] for m in messages for b in m.message["content"] if "text" in b]


def test_an_agent_loop_with_tools_resumes_in_a_cold_process(
    url: tuple[str, dict[str, Any]],
) -> None:
    address, options = url
    with stashpoint.open(address, **options) as stash:
        agent = _agent(stash, "loop", ScriptedModel([{"tool": "add", "input": {"a": 2, "b": 3}}]))
        agent("what is 2 + 3?")
        agent.state.set("answered", 1)
        agent("and now?")
        before = [dict(m) for m in agent.messages]
        assert any("toolResult" in b for m in before for b in m["content"])
    with stashpoint.open(address, **options) as stash:  # the next invocation: a new process
        resumed = _agent(stash, "loop")
        assert [m["content"] for m in resumed.messages] == [m["content"] for m in before]
        assert resumed.state.get("answered") == 1
        resumed("third")
        assert _texts(resumed)[-2:] == ["third", "echo: third"]


@pytest.mark.parametrize(("save", "per_turn"), [("message", 2), ("turn", 1)])
def test_a_message_is_one_request_a_turn_one_and_a_cold_load_a_few(
    local_url: tuple[str, dict[str, Any]], save: str, per_turn: int
) -> None:
    from strands.agent.conversation_manager import NullConversationManager

    address, options = local_url
    with stashpoint.open(address, **options) as stash:
        agent = _agent(stash, "long", save=save, conversation_manager=NullConversationManager())
        for n in range(100):
            agent(f"turn {n}")
        sent: list[str] = []
        with stash.intercept(lambda r, go: (sent.append(type(r).__name__), go())[1]):
            agent("one more")
        # The prompt and the reply: an append each, or the turn's one append.
        assert sent == ["PutObject"] * per_turn, sent
    with stashpoint.open(address, **options) as stash:
        sent.clear()
        with stash.intercept(lambda r, go: (sent.append(type(r).__name__), go())[1]):
            resumed = _agent(stash, "long", conversation_manager=NullConversationManager())
        assert len(resumed.messages) == 202
        # A listing or two, sealed segments for the old versions, the newest entries.
        assert sent.count("ListKeys") <= 2 and len(sent) <= 2 + 4 + 64, sent
        assert sent.count("GetObject") < 100


def test_two_invocations_never_interleave_the_loser_gets_a_conflict(
    s3_seaweed_url: tuple[str, dict[str, Any]],
) -> None:
    address, options = s3_seaweed_url
    with stashpoint.open(address, **options) as stash:
        _agent(stash, "shared")("hello")
        first, second = _agent(stash, "shared"), _agent(stash, "shared")
        first("from the first")
        with pytest.raises(SessionConflict) as raised:
            second("from the second")
        assert isinstance(raised.value, SessionException) and raised.value.kind == "conflict"
        again = _agent(stash, "shared")  # the loser loads again and goes on
        again("from the second, again")
        assert _texts(_agent(stash, "shared")) == [
            "hello", "echo: hello", "from the first", "echo: from the first",
            "from the second, again", "echo: from the second, again",
        ]  # fmt: skip


@pytest.mark.parametrize("save", ["message", "turn"])
def test_racing_invocations_on_real_servers_lose_and_duplicate_nothing(
    s3_seaweed_url: tuple[str, dict[str, Any]], save: str
) -> None:
    address, options = s3_seaweed_url
    with stashpoint.open(address, **options) as stash:
        _agent(stash, "race")("start")
    done: list[str] = []
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(w: int) -> None:
        try:
            with stashpoint.open(address, **options) as stash:
                for t in range(5):
                    for attempt in range(40):  # bounded: reload after a lost race
                        agent = _agent(stash, "race", save=save)
                        try:
                            agent(f"w{w} t{t} a{attempt}")
                        except SessionConflict:
                            continue
                        with lock:
                            done.append(f"w{w} t{t} a{attempt}")
                        break
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(w,)) for w in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=180)
    assert not errors, errors
    assert len(done) == 20
    with stashpoint.open(address, **options) as stash:
        texts = _stored(stash, "race")[2:]
    assert len(texts) == len(set(texts))  # nothing stored twice
    prompts = [t for t in texts if not t.startswith("echo: ")]
    replies = [t.removeprefix("echo: ") for t in texts if t.startswith("echo: ")]
    assert sorted(replies) == sorted(done)  # every acknowledged turn, once
    if save == "turn":  # turns whole, never interleaved, and a lost turn left nothing
        assert prompts == replies and texts[1::2] == [f"echo: {p}" for p in texts[0::2]]
    else:  # a turn that lost after its prompt landed leaves the prompt (told by the conflict)
        assert set(replies) <= set(prompts)
        for n, text in enumerate(texts):
            if text.startswith("echo: "):
                assert texts[n - 1] == text.removeprefix("echo: ")  # a reply follows its prompt


@pytest.mark.parametrize("save", ["message", "turn"])
def test_a_crash_at_any_request_leaves_whole_messages_and_a_loadable_session(
    local_url: tuple[str, dict[str, Any]], save: str
) -> None:
    address, options = local_url
    with stashpoint.open(address, **options) as stash:
        _agent(stash, "c")("first")
    for step in range(4):
        for after in (False, True):
            with stashpoint.open(address, **options) as stash:
                before = _texts(_agent(stash, "c"))
            with stashpoint.open(address, **options) as stash:
                agent = _agent(stash, "c", save=save)
                # The process dies there: whatever it raises on its way out does not matter.
                with crash_at(stash, step, after), contextlib.suppress(Crash, SessionConflict):
                    agent(f"s{step}{after}")
            with stashpoint.open(address, **options) as stash:
                now = _texts(_agent(stash, "c"))  # a new invocation loads it
            turn = [f"s{step}{after}", f"echo: s{step}{after}"]
            # Message by message: what landed before the crash; a turn: all of it or nothing.
            allowed = [before, before + turn] + ([before + turn[:1]] if save == "message" else [])
            assert now in allowed, (step, after, now[len(before) :])


def test_the_fault_proxy_on_every_request_loses_no_acknowledged_message(
    seaweedfs: servers.S3Server,
) -> None:
    plan, config = everyday_faults()
    prefix = f"t-{uuid.uuid4().hex}"
    acknowledged: list[str] = []
    failed: list[str] = []
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        with stashpoint.open(url, client_config=config) as stash:
            for n in range(40):  # bounded
                try:
                    repository = StashSessionRepository(stash)
                    if repository.read_session("f") is None:
                        repository.create_session(Session("f", SessionType.AGENT))
                    if repository.read_agent("f", "a") is None:
                        repository.create_agent("f", SessionAgent("a", {}, {}))
                    index = len(repository.list_messages("f", "a"))
                    message = {"role": "user", "content": [{"text": f"m{n}"}]}
                    repository.create_message("f", "a", SessionMessage(message, index))
                    acknowledged.append(f"m{n}")
                except StashpointError as exc:  # told it failed: a new invocation goes on
                    failed.append(exc.kind.value)
    assert plan.injected["drop_response"] > 0 and plan.injected["drop_request"] > 0
    assert len(acknowledged) >= 20, failed
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        stored = [
            m.message["content"][0]["text"]
            for m in StashSessionRepository(clean).list_messages("f", "a")
        ]
    assert len(stored) == len(set(stored))
    assert set(acknowledged) <= set(stored)
    assert [s for s in stored if s in acknowledged] == acknowledged  # in the order acknowledged


KILLED_WRITER = """
import sys
import stashpoint
from strands import Agent
from stashpoint.strands_agents import StashSessionManager
from tests.strands_agents.fake_model import ScriptedModel

with stashpoint.open(sys.argv[1]) as stash:
    agent = Agent(model=ScriptedModel(), session_manager=StashSessionManager("killed", stash),
                  callback_handler=None)
    for t in range(int(sys.argv[2]), 1000):
        agent(f"t{t}")
        print(t, flush=True)
"""


def test_kill_9_of_an_invocation_loses_no_acknowledged_turn(
    s3_seaweed_url: tuple[str, dict[str, Any]],
) -> None:
    address, _ = s3_seaweed_url
    acknowledged: set[int] = set()
    start = 0
    for round_ in range(4):
        before, after = kill_after_lines(
            KILLED_WRITER, [address, str(start)], 2 + round_, pause=0.004 * round_
        )
        acknowledged |= {int(line) for line in before + after}
        start = max(acknowledged, default=-1) + 2  # the turn killed mid-write may be there
    with stashpoint.open(address) as stash:
        texts = _stored(stash, "killed")
    prompts = [t for t in texts if not t.startswith("echo: ")]
    assert {f"t{n}" for n in acknowledged} <= set(prompts)
    assert len(prompts) == len(set(prompts))
    for n, text in enumerate(texts[:-1]):  # a reply always follows its own prompt
        if text.startswith("echo: "):
            assert texts[n - 1] == text.removeprefix("echo: ")
    assert len(acknowledged) >= 6


def test_hostile_records_bad_input_and_purge(local_url: tuple[str, dict[str, Any]]) -> None:
    address, options = local_url
    with stashpoint.open(address, **options) as stash:
        with pytest.raises(InvalidId):
            StashSessionManager("a/b", stash)
        with pytest.raises(InvalidArgument):
            StashSessionManager("s", "not a stash")  # type: ignore[arg-type]
        _agent(stash, "s")("hello")
        repository = StashSessionRepository(stash)
        repository.read_session("s")
        with pytest.raises(InvalidArgument):
            repository.list_messages("s", "default", offset=-1)
        with pytest.raises(SessionMissing):
            repository.update_message(
                "s", "default", SessionMessage({"role": "user", "content": []}, 9)
            )
        logs = stash.logs_in(STRANDS_SESSIONS)
        head = logs.head("s")
        logs.append("s", [{"planted": True}], after=head, state=head.state)  # a hostile writer
        with pytest.raises(InvalidPayload):
            _agent(stash, "s")
        logs.append("t", [{"session": {}}], after=None, state={"start": 0})  # a bad state
        with pytest.raises(InvalidPayload):
            _agent(stash, "t")
        _agent(stash, "gone")("secret")
        receipt = stash.admin.purge(prefix="gone", namespace="strands-sessions")
        assert receipt.verified
        with pytest.raises(Purged):
            _agent(stash, "gone")


def test_delete_session_starts_a_new_life(local_url: tuple[str, dict[str, Any]]) -> None:
    address, options = local_url
    with stashpoint.open(address, **options) as stash:
        _agent(stash, "d")("before")
        manager = StashSessionManager("d", stash)
        manager.delete_session("d")
        with pytest.raises(SessionMissing):
            manager.delete_session("d")
        fresh = _agent(stash, "d")
        assert fresh.messages == []
        fresh("after")
        assert _texts(_agent(stash, "d")) == ["after", "echo: after"]


# -- the plans, scripted without I/O ----------------------------------------------------------


def _known(state: SessionState, version: int) -> Known[SessionState]:
    head = LogHead(
        log_id="p", version=version, next_record=version + 1, state={}, kind="k",
        schema_version=1, write_id="w", written_at=datetime.now(UTC),
    )  # fmt: skip
    return Known(state, head)


class _NoLogs:
    form = None


def _steps() -> SessionSteps:
    return SessionSteps("p", _NoLogs())  # type: ignore[arg-type]


def test_plans_refuse_writes_on_a_stale_view() -> None:
    steps = _steps()
    state = SessionState(created=True, agents={"a": (2, 0)})
    steps.seen_agents = {"a": (2, 0)}
    planned = steps.add_message("a", {"message_id": 2})(_known(state, 3))
    assert planned.state.agents["a"] == (3, 0) and planned.records[0]["agent"] == "a"
    moved = SessionState(created=True, agents={"a": (3, 0)})  # another invocation appended
    with pytest.raises(SessionConflict):
        steps.add_message("a", {"message_id": 2})(_known(moved, 4))
    with pytest.raises(SessionConflict):  # an agent record written since: refused too
        steps.put_agent({"agent_id": "a"}, create=False)(
            _known(SessionState(created=True, agents={"a": (2, 4)}), 5)
        )
    other = SessionState(created=True, agents={"a": (2, 0), "b": (7, 1)})
    assert steps.add_message("a", {"message_id": 2})(_known(other, 8))  # b's writes: no matter
    redaction = steps.redact("a", {"message_id": 0})(_known(moved, 4))  # always written
    assert redaction.state == moved
    with pytest.raises(SessionMissing):
        steps.redact("a", {"message_id": 5})(_known(moved, 4))
    with pytest.raises(SessionConflict):
        steps.create_session({})(_known(state, 3))
    with pytest.raises(SessionMissing):
        steps.add_message("z", {"message_id": 0})(_known(state, 3))
    with pytest.raises(SessionConflict):  # created by another invocation meanwhile
        steps.put_agent({"agent_id": "a"}, create=True)(_known(state, 3))
    multi = SessionState(created=True, multi_agents={"g": 2})
    with pytest.raises(SessionConflict):  # a graph's state this process never saw
        steps.put_multi_agent("g", {}, create=True)(_known(multi, 3))
    steps.seen_multi = {"g": 2}
    assert steps.put_multi_agent("g", {}, create=False)(_known(multi, 3)).state.multi_agents == {
        "g": 4
    }
    deleted = steps.delete()(_known(state, 3))
    assert deleted.state == SessionState(start=5, since=4) and deleted.records == [{"delete": True}]
