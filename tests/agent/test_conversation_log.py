"""Durable conversations are logs: a commit sends the new messages only, whole-envelope
conversations of earlier versions migrate on their next commit, racing commits at one
version let exactly one through, and a tampered log is refused."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest

import stashpoint
from stashpoint import CheckpointConflict, Envelope, InvalidPayload
from stashpoint.agent import ConversationStore, Message
from stashpoint.agent.conversation_log import CONVERSATION_KIND, conversation_key
from stashpoint.logs.store import LogStore
from stashpoint.steps import run_sync
from stashpoint.stores.layout import CONVERSATIONS
from stashpoint.stores.objects import PutObject
from tests.kills import whole_lines


@pytest.fixture(params=["local_url", "s3_seaweed_url"], ids=["local", "s3"])
def stash(request: pytest.FixtureRequest) -> Any:
    url, options = request.getfixturevalue(request.param)
    with stashpoint.open(url, **options) as opened:
        yield opened


def _turn(n: int) -> list[Message]:
    return [
        Message(role="user", content=f"question {n} " + "x" * 1500),
        Message(role="assistant", content=f"answer {n} " + "y" * 1500),
    ]


def _put_bytes(stash: Any) -> list[int]:
    sent: list[int] = []

    def hook(request: Any, proceed: Callable[[], Any]) -> Any:
        if isinstance(request, PutObject):
            sent.append(len(request.body))
        return proceed()

    stash.intercept(hook)
    return sent


def test_a_commit_sends_only_the_new_messages(stash: Any) -> None:
    conversations = ConversationStore(stash.checkpoints)
    sent = _put_bytes(stash)
    transcript: list[Message] = []
    per_commit: list[int] = []
    for n in range(60):
        transcript = [*transcript, *_turn(n)]
        before = sum(sent)
        assert conversations.commit("t", "chat", n, transcript) == n + 1
        per_commit.append(sum(sent) - before)
    version, loaded = conversations.load("t", "chat")
    assert version == 60 and loaded == transcript
    early, late = sorted(per_commit[2:12])[5], sorted(per_commit[-10:])[5]
    assert late <= 1.5 * early, per_commit  # flat: not the whole transcript each time
    summary = [Message(role="system", content="summary of 60 turns"), *_turn(60)]
    assert conversations.commit("t", "chat", 60, summary) == 61  # not an extension
    assert conversations.load("t", "chat") == (61, summary)
    assert conversations.commit("t", "chat", 60, summary) == 61  # replayed after a crash


def test_a_whole_envelope_conversation_of_a_pre_release_is_not_read(stash: Any) -> None:
    """Format v1 freezes conversations as logs: 0.x's whole envelopes are not read."""
    key = conversation_key("t", "old")
    old = [m.model_dump(mode="json") for m in _turn(0)]
    envelope = Envelope.initial(key, None, CONVERSATION_KIND, 1, {"messages": old})
    run_sync(stash.checkpoints.steps.compare_and_swap(envelope, None), stash.driver)
    conversations = ConversationStore(stash.checkpoints)
    assert conversations.load("t", "old") == (0, [])
    assert conversations.commit("t", "old", 0, _turn(1)) == 1
    assert conversations.load("t", "old") == (1, _turn(1))


def test_racing_commits_at_one_version_let_exactly_one_through(stash: Any) -> None:
    conversations = ConversationStore(stash.checkpoints)
    conversations.commit("t", "race", 0, _turn(0))
    barrier = threading.Barrier(6)
    won: list[int] = []
    lost: list[int] = []

    def commit(i: int) -> None:
        barrier.wait()
        try:
            conversations.commit("t", "race", 1, [*_turn(0), *_turn(100 + i)])
            won.append(i)
        except CheckpointConflict:
            lost.append(i)

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(won) == 1 and len(lost) == 5
    assert conversations.load("t", "race") == (2, [*_turn(0), *_turn(100 + won[0])])


def test_a_tampered_conversation_log_is_refused_naming_it(local_url: Any) -> None:
    url, _ = local_url
    with stashpoint.open(url) as stash:
        conversations = ConversationStore(stash.checkpoints)
        conversations.commit("t", "c", 0, _turn(0))
        logs = LogStore(stash.log_steps(CONVERSATIONS), stash.driver)
        key = conversation_key("t", "c")
        head = logs.head(key)
        forged = [{"role": "assistant", "content": "words nobody said"}]
        logs.append(key, forged, after=head, state=dict(head.state, length=3))
        with pytest.raises(InvalidPayload, match="do not match") as caught:
            conversations.load("t", "c")
        assert "conversations/" in (caught.value.object_name or "")


def test_commits_through_a_fault_proxy_lose_and_duplicate_no_message(
    seaweedfs: Any,
) -> None:
    """Six writers extend one conversation through dropped requests and answers, 503s and
    409s: every acknowledged message is in the final transcript once, none twice."""
    import uuid

    from botocore.config import Config

    from tests.faultproxy import FaultPlan, FaultProxy

    plan = FaultPlan(
        {"drop_response": 0.08, "drop_request": 0.05, "slowdown": 0.05, "conflict": 0.05}
    )
    config = Config(
        read_timeout=2, connect_timeout=2, retries={"mode": "standard", "max_attempts": 3}
    )
    prefix = f"t-{uuid.uuid4().hex}"
    acknowledged: list[str] = []
    unknown: list[str] = []
    lock = threading.Lock()
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        with stashpoint.open(url, client_config=config) as stash:
            conversations = ConversationStore(stash.checkpoints)

            def writer(who: int) -> None:
                for n in range(6):
                    text = f"w{who}-{n}"
                    for _ in range(50):
                        try:
                            version, messages = conversations.load("t", "shared")
                            new = [*messages, Message(role="user", content=text)]
                            conversations.commit("t", "shared", version, new)
                            with lock:
                                acknowledged.append(text)
                            break
                        except CheckpointConflict:
                            continue  # another writer went first: load and extend again
                        except stashpoint.StashpointError:
                            with lock:
                                unknown.append(text)
                            break

            threads = [threading.Thread(target=writer, args=(i,)) for i in range(6)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        version, messages = ConversationStore(clean.checkpoints).load("t", "shared")
    texts = [m.content for m in messages]
    assert all(texts.count(t) == 1 for t in acknowledged), "lost or duplicated"
    assert all(texts.count(t) <= 1 for t in unknown), "duplicated"
    assert set(texts) <= set(acknowledged) | set(unknown), "invented"
    assert version == len(texts) and len(acknowledged) > 20
    assert plan.injected["drop_response"] > 0 and plan.injected["conflict"] > 0


KILLED_WRITER = """
import sys
import stashpoint
from stashpoint.agent import ConversationStore, Message
with stashpoint.open(sys.argv[1]) as stash:
    conversations = ConversationStore(stash.checkpoints)
    version, messages = conversations.load("t", "killed")
    for n in range(version, 100_000):
        print("try", n, flush=True)
        messages = [*messages, Message(role="user", content=f"m{n}")]
        version = conversations.commit("t", "killed", version, messages)
        print("acked", n, flush=True)
"""


def test_a_writer_killed_mid_commit_loses_no_acknowledged_message(tmp_path: Any) -> None:
    import signal
    import subprocess
    import sys

    url = f"local://{tmp_path / 'stash'}"
    acked: list[int] = []
    for round_ in range(3):
        writer = subprocess.Popen(
            [sys.executable, "-c", KILLED_WRITER, url], stdout=subprocess.PIPE, text=True
        )
        assert writer.stdout is not None
        lines: list[str] = []
        while len([x for x in lines if x.startswith("acked")]) < 20 + 7 * round_:
            line = writer.stdout.readline()
            assert line.endswith("\n"), "the writer ended before the kill"
            lines.append(line.rstrip("\n"))
        writer.send_signal(signal.SIGKILL)  # somewhere in the next commit, or between two
        assert writer.wait(timeout=30) == -signal.SIGKILL
        lines += whole_lines(writer.stdout.read())  # not one the kill cut short
        acked += [int(x.split()[1]) for x in lines if x.startswith("acked")]
        with stashpoint.open(url) as stash:
            version, messages = ConversationStore(stash.checkpoints).load("t", "killed")
        texts = [m.content for m in messages]
        assert texts == [f"m{n}" for n in range(len(texts))]  # in order, no gap, none twice
        assert len(texts) in (max(acked) + 1, max(acked) + 2)  # at most the one in flight
        assert version == len(texts)


def test_a_commit_by_its_only_writer_is_one_request_and_a_stale_head_is_judged_afresh(
    stash: Any,
) -> None:
    """Conversations are the one log-backed state: the head a store wrote is where its next
    commit starts (one PUT, no read); another store's commit meanwhile costs a fresh read."""
    mine, other = ConversationStore(stash.checkpoints), ConversationStore(stash.checkpoints)
    transcript = _turn(0)
    assert mine.commit("t", "solo", 0, transcript) == 1
    requests: list[str] = []

    def counting(request: Any, proceed: Callable[[], Any]) -> Any:
        requests.append(type(request).__name__)
        return proceed()

    with stash.intercept(counting):
        transcript = [*transcript, *_turn(1)]
        assert mine.commit("t", "solo", 1, transcript) == 2
    assert requests == ["PutObject"]
    transcript = [*transcript, *_turn(2)]
    assert other.commit("t", "solo", 2, transcript) == 3  # unknown to `mine`'s head
    with pytest.raises(CheckpointConflict, match="moved to version 3"):
        mine.commit("t", "solo", 2, [*transcript[:4], *_turn(9)])
    transcript = [*transcript, *_turn(3)]
    assert mine.commit("t", "solo", 3, transcript) == 4
    assert mine.commit("t", "solo", 3, transcript) == 4  # the same commit again: made
    assert ConversationStore(stash.checkpoints).load("t", "solo") == (4, transcript)
