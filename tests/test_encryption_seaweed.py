"""Client-side encryption on real servers: contention, the fault proxy, `kill -9`, and the
sealer's steps scripted one request at a time.

Encryption adds one write of its own, the data-key object (created before any object it
seals); everything else goes through the one write engine unchanged. These tests check
that nothing acknowledged is lost or left unreadable when writers race, answers are
dropped, or a process dies between a data key and the object it seals.
"""

from __future__ import annotations

import textwrap
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint.codec import Codec
from stashpoint.encryption import (
    MAGIC,
    Encryption,
    GenerateDataKey,
    KeyRule,
    NewDataKey,
    Sealer,
)
from stashpoint.stores.layout import Layout
from stashpoint.stores.objects import (
    Create,
    GetObject,
    ObjectInfo,
    PutObject,
    WriteOutcome,
    WriteResult,
)
from tests.kills import kill_after_lines
from tests.purging import bodies, versions


def _encryption(tmp_path: Path) -> Encryption:
    return Encryption(
        (KeyRule("acme", "keyring:acme", prefix="acme-"), KeyRule("default", "keyring:default")),
        keyring=str(tmp_path / "keyring.json"),
    )


def test_writers_racing_through_the_fault_proxy_lose_nothing_and_store_no_plaintext(
    seaweedfs: Any, tmp_path: Path
) -> None:
    from botocore.config import Config

    from tests.faultproxy import FaultPlan, FaultProxy

    encryption = _encryption(tmp_path)
    prefix = f"t-{uuid.uuid4().hex}"
    plan = FaultPlan(
        {"drop_response": 0.05, "drop_request": 0.05, "slowdown": 0.03, "conflict": 0.03}
    )
    config = Config(
        read_timeout=2, connect_timeout=2, retries={"mode": "standard", "max_attempts": 3}
    )
    acknowledged: list[str] = []
    failures: list[str] = []
    lock = threading.Lock()

    def writer(name: str) -> None:
        # A stash of its own per writer: its own data key, as separate processes have.
        with stashpoint.open(url, client_config=config, encryption=encryption) as stash:
            for turn in range(12):
                text = f"acme-secret {name} {turn}"
                for _ in range(8):  # bounded: an unknown outcome is asked again
                    try:
                        head = stash.logs.head("acme-chat")
                    except stashpoint.CheckpointNotFound:
                        head = None
                    except stashpoint.StashpointError:
                        continue
                    try:
                        stash.logs.append("acme-chat", [{"text": text}], after=head)
                    except stashpoint.StashpointError as exc:
                        with lock:
                            failures.append(exc.kind.value)
                        continue
                    with lock:
                        acknowledged.append(text)
                    break

    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        threads = [threading.Thread(target=writer, args=(f"w{i}",)) for i in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=300)
    assert plan.injected["pass"] < sum(plan.injected.values())  # faults struck
    with stashpoint.open(seaweedfs.url(prefix), encryption=encryption) as stash:
        stored = [r["text"] for e in stash.logs.entries("acme-chat") for r in e.records]
    assert len(acknowledged) >= 24
    assert set(failures) <= {"conflict", "storage_unavailable"}, failures
    assert set(acknowledged) <= set(stored)  # nothing acknowledged is lost
    assert len(stored) == len(set(stored))  # nor stored twice
    with stashpoint.open(seaweedfs.url(prefix)) as raw:
        for version, info in bodies(raw, versions(raw)):
            assert b"acme-secret" not in info.body, version.key
            assert info.body.startswith(MAGIC) or "/data-keys/" in f"/{version.key}"


def test_a_writer_killed_between_its_data_key_and_its_objects_loses_nothing_acknowledged(
    tmp_path: Path,
) -> None:
    settings = tmp_path / "encryption.json"
    settings.write_text(
        '{"rules": [{"tenant": "acme", "prefix": "acme-", "key": "keyring:acme"},'
        ' {"tenant": "default", "key": "keyring:default"}], "keyring": "keyring.json",'
        ' "max_uses": 7}'
    )
    url = f"local://{tmp_path / 'stash'}?encryption={settings}"
    child = textwrap.dedent(
        """
        import sys, stashpoint
        with stashpoint.open(sys.argv[1]) as stash:
            head = None
            try:
                head = stash.logs.head("acme-chat")
            except stashpoint.CheckpointNotFound:
                pass
            for turn in range(int(sys.argv[2]), 10_000):
                head = stash.logs.append("acme-chat", [{"turn": turn}], after=head)
                print(turn, flush=True)
        """
    )
    acknowledged: list[int] = []
    for kill_after in (1, 3, 8, 13):  # a data key every 7 objects: kills land near them
        start = acknowledged[-1] + 1 if acknowledged else 0
        before, _ = kill_after_lines(child, [url, str(start)], kill_after)
        acknowledged += [int(line) for line in before]
        with stashpoint.open(url) as stash:
            stored = [r["turn"] for e in stash.logs.entries("acme-chat") for r in e.records]
        assert set(acknowledged) <= set(stored), kill_after
        acknowledged = stored  # what a restarted worker carries on from
    assert len(list((tmp_path / "stash" / "data-keys" / "acme").iterdir())) >= 3


# -- the sealer's steps, scripted -----------------------------------------------------------


def _scripted(sealer: Sealer, request: PutObject, answers: dict[type, Any]) -> list[Any]:
    """Drive the sealing of `request`, answering each request from `answers`; return them."""
    from datetime import UTC, datetime

    from stashpoint.clock import REAL
    from stashpoint.randomness import SYSTEM
    from stashpoint.steps import ID_REQUESTS, Compute, Now

    seen: list[Any] = []
    steps = sealer.sealing(request)
    sent = None
    try:
        while True:
            asked = steps.send(sent)
            seen.append(asked)
            if isinstance(asked, Now):
                sent = datetime(2026, 12, 2, tzinfo=UTC)
            elif isinstance(asked, Compute):
                seen.pop()  # the codec's own work, not a request
                sent = asked.work()
            elif isinstance(asked, ID_REQUESTS):
                seen.pop()  # the data key's new id, not a request
                sent = SYSTEM.answer(asked, REAL)
            else:
                answer = answers[type(asked)]
                sent = answer(asked) if callable(answer) else answer
    except StopIteration as stop:
        seen.append(stop.value)
    return seen


def _sealer(tmp_path: Path) -> Sealer:
    return Sealer(_encryption(tmp_path), Layout("p"), Codec())


def test_scripted_a_data_key_is_stored_create_only_before_the_object_is_sealed(
    tmp_path: Path,
) -> None:
    sealer = _sealer(tmp_path)
    fresh = NewDataKey(b"k" * 32, b"wrapped", "keyring:acme#1")
    stored = WriteResult(WriteOutcome.STORED, '"e1"')
    seen = _scripted(
        sealer,
        PutObject("p/checkpoints/acme-1", b"body", Create()),
        {GetObject: None, GenerateDataKey: fresh, PutObject: stored},
    )
    kinds = [type(s).__name__ for s in seen]
    assert kinds == ["Now", "GetObject", "GenerateDataKey", "PutObject", "PutObject"]
    mark, data_key, sealed = seen[1], seen[3], seen[4]
    assert mark.key == "p/data-keys/acme.shredded"  # a shred's mark is looked for first
    assert data_key.key.startswith("p/data-keys/acme/")
    assert isinstance(data_key.condition, Create)  # If-None-Match: never over another
    assert sealed.body.startswith(MAGIC) and b"body" not in sealed.body
    # A second object within the key's age reuses it: no request at all but the clock.
    again = _scripted(sealer, PutObject("p/checkpoints/acme-2", b"body", Create()), {})
    assert [type(s).__name__ for s in again] == ["Now", "PutObject"]


def test_scripted_a_planted_data_key_object_is_judged_by_its_content_and_replaced(
    tmp_path: Path,
) -> None:
    from stashpoint.stores.objects import Match

    sealer = _sealer(tmp_path)
    fresh = NewDataKey(b"k" * 32, b"wrapped", "keyring:acme#1")
    puts: list[PutObject] = []
    planted = ObjectInfo(etag='"planted"', body=b'{"format": "stashpoint.data-key/1"}')

    def put(request: PutObject) -> WriteResult:
        puts.append(request)
        if request.key.startswith("p/data-keys/") and isinstance(request.condition, Create):
            return WriteResult(WriteOutcome.PRECONDITION_FAILED, None)
        return WriteResult(WriteOutcome.STORED, '"ours"')

    def get(request: GetObject) -> ObjectInfo | None:
        return planted if request.key.startswith("p/data-keys/acme/") else None

    seen = _scripted(
        sealer,
        PutObject("p/checkpoints/acme-1", b"body", Create()),
        {GetObject: get, GenerateDataKey: fresh, PutObject: put},
    )
    data_key_puts = [p for p in puts if p.key.startswith("p/data-keys/")]
    assert isinstance(data_key_puts[0].condition, Create)
    assert data_key_puts[-1].condition == Match('"planted"')  # replaced over its own ETag
    assert seen[-1].body.startswith(MAGIC)


def test_scripted_a_shredded_tenant_gets_no_new_data_key(tmp_path: Path) -> None:
    sealer = _sealer(tmp_path)
    with pytest.raises(stashpoint.KeyShredded):
        _scripted(
            sealer,
            PutObject("p/checkpoints/acme-1", b"body", Create()),
            {GetObject: ObjectInfo(etag='"m"', body=b"{}")},
        )


def test_a_crash_at_any_request_below_the_encryption_loses_no_acknowledged_append(
    tmp_path: Path,
) -> None:
    """The data-key requests are below the stash's hooks: crash the wrapped transport itself
    at each of its requests (data-key mark GET, data-key PUT and read-back, entry PUT...),
    then read with a new sealer (a new process): every acknowledged record is there."""
    from stashpoint._backends.encrypting import EncryptingTransport, KeyServices
    from stashpoint._backends.memory import MemoryTransport
    from stashpoint._backends.router import Router
    from stashpoint.clock import REAL
    from stashpoint.steps import run_sync
    from tests.crashes import Crash

    encryption = Encryption(
        (KeyRule("acme", "keyring:acme", prefix="acme-"), KeyRule("default", "keyring:d")),
        keyring=str(tmp_path / "keyring.json"),
        max_uses=3,  # a new data key every third append: crashes land around them
    )

    class Crashing:
        def __init__(self, inner: Any, at: int) -> None:
            self.inner, self.at, self.sent = inner, at, 0

        def execute(self, request: Any) -> Any:
            self.sent += 1
            if self.sent == self.at:
                raise Crash(type(request).__name__)
            return self.inner.execute(request)

        def close(self) -> None:
            pass

    def process(storage: Any, at: int | None) -> tuple[Any, Any]:
        with stashpoint.open("memory://", encryption=encryption) as shape:
            logs = shape.log_steps("logs")  # the stash's log settings, free of I/O
        sealer = Sealer(encryption, Layout(), Codec())
        inner = storage if at is None else Crashing(storage, at)
        return logs, Router(EncryptingTransport(inner, sealer, KeyServices(sealer), REAL), None)

    def records(storage: Any) -> list[int]:
        logs, transport = process(storage, None)
        try:
            entries = run_sync(logs.entries("acme-log"), transport.execute)
        except stashpoint.CheckpointNotFound:
            return []
        return [r for e in entries for r in e.records]

    counting = MemoryTransport()
    logs, transport = process(counting, 10**9)
    head = None
    for turn in range(7):
        head = run_sync(logs.append("acme-log", [turn], after=head), transport.execute)
    total = transport.objects.inner.sent
    assert total >= 10  # three data keys (mark GET, PUT each), seven entries
    crashed = 0
    for at in range(1, total + 1):
        storage = MemoryTransport()
        acknowledged: list[int] = []
        logs, transport = process(storage, at)
        head = None
        try:
            for turn in range(7):
                head = run_sync(logs.append("acme-log", [turn], after=head), transport.execute)
                acknowledged.append(turn)
        except Crash:
            crashed += 1
        stored = records(storage)
        assert stored[: len(acknowledged)] == acknowledged, at
        assert len(stored) <= len(acknowledged) + 1  # at most the append in flight
        # The log goes on from a new process after any crash.
        logs, transport = process(storage, None)
        last = None if not stored else run_sync(logs.head("acme-log"), transport.execute)
        run_sync(logs.append("acme-log", ["after"], after=last), transport.execute)
        assert records(storage) == [*stored, "after"]
    assert crashed == total
