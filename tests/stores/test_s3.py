"""The S3 backend: faults on every branch, request counts, real concurrency, a fault proxy."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import botocore.exceptions
import pytest
from botocore.config import Config

import stashpoint
from stashpoint import (
    CheckpointConflict,
    ConfigurationError,
    Envelope,
    RetryPolicy,
    StorageUnavailable,
)
from tests import servers
from tests.faultproxy import FaultPlan, FaultProxy

# --- deterministic faults -------------------------------------------------------------------
# A real client (moto in-process) wrapped so that put_object misbehaves on cue. Only the
# faults are fake: a real server cannot time out *after* applying a write on demand.


def _client_error(status: int, code: str) -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError(
        {"Error": {"Code": code, "Message": code}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "PutObject",
    )


class FaultyClient:
    """Delegates to a real S3 client; `put_object` follows a script of faults."""

    def __init__(self, real: Any, script: list[str], competitor: Callable[[], None] | None = None):
        self.real = real
        self.script = script
        self.competitor = competitor
        self.fail_reads = False
        self.puts = 0

    def __getattr__(self, name: str) -> Any:
        if self.fail_reads and name in ("head_object", "get_object"):
            raise botocore.exceptions.EndpointConnectionError(endpoint_url="http://down")
        return getattr(self.real, name)

    def put_object(self, **params: Any) -> Any:
        self.puts += 1
        fault = self.script.pop(0) if self.script else "pass"
        if fault == "reset_before":
            raise botocore.exceptions.ConnectionClosedError(endpoint_url="http://s3")
        if fault == "409":
            raise _client_error(409, "ConditionalRequestConflict")
        if fault == "503":
            raise _client_error(503, "SlowDown")
        response = self.real.put_object(**params)
        if fault == "pass":
            return response
        if fault == "timeout_after_apply":
            raise botocore.exceptions.ReadTimeoutError(endpoint_url="http://s3")
        if fault == "apply_then_409":
            # botocore's first copy landed unheard; its retry met a 409. Our resend then
            # gets a plain 412: it must not be mistaken for a refusal of our write.
            raise _client_error(409, "ConditionalRequestConflict")
        if fault == "503_after_apply":
            raise _client_error(503, "InternalError")
        if fault == "own_retry_412":
            return self.real.put_object(**params)  # botocore's retry of our landed write: 412
        if fault == "competitor_then_timeout":
            assert self.competitor is not None
            self.competitor()
            raise botocore.exceptions.ReadTimeoutError(endpoint_url="http://s3")
        if fault == "timeout_then_reads_fail":
            self.fail_reads = True
            raise botocore.exceptions.ReadTimeoutError(endpoint_url="http://s3")
        raise AssertionError(fault)


class _Switch:
    """The stash's S3 client (given as `client=`): forwards to `inner`, which a test swaps."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.fixture
def switch(s3_moto_url: tuple[str, dict[str, Any]]) -> _Switch:
    import boto3

    return _Switch(boto3.client("s3", region_name="us-east-1"))


@pytest.fixture
def moto_stash(
    s3_moto_url: tuple[str, dict[str, Any]], switch: _Switch
) -> Iterator[stashpoint.Stash]:
    url, _ = s3_moto_url
    retry = RetryPolicy(max_attempts=4, base_delay=0.001)
    with stashpoint.open(url, retry=retry, client=switch) as stash:
        yield stash


def _faulty(switch: _Switch, script: list[str], **kw: Any) -> FaultyClient:
    faulty = FaultyClient(switch.inner, script, **kw)
    switch.inner = faulty
    return faulty


def _created(stash: stashpoint.Stash) -> Envelope:
    env = Envelope.initial(stashpoint.new_id(), None, "k", 1, {"count": 0})
    stash.checkpoints.compare_and_swap(env, None)
    return env


@pytest.mark.parametrize(
    "script",
    [
        ["timeout_after_apply"],
        ["reset_before"],
        ["409"],
        ["409", "409", "reset_before"],
        ["503"],
        ["503_after_apply"],
        ["own_retry_412"],
        ["reset_before", "timeout_after_apply"],
        ["apply_then_409"],
    ],
)
def test_update_fault_ends_in_exactly_one_landed_revision(
    moto_stash: stashpoint.Stash, switch: _Switch, script: list[str]
) -> None:
    env = _created(moto_stash)
    nxt = env.next({"count": 1})
    faulty = _faulty(switch, list(script))
    moto_stash.checkpoints.compare_and_swap(nxt, 0)
    head = moto_stash.checkpoints.load(env.id)
    assert (head.revision, head.write_id) == (1, nxt.write_id)
    assert [h.revision for h in moto_stash.checkpoints.history(env.id)] == [0]
    assert faulty.script == []


@pytest.mark.parametrize("script", [["timeout_after_apply"], ["own_retry_412"], ["reset_before"]])
def test_create_fault_ends_in_the_created_object(
    moto_stash: stashpoint.Stash, switch: _Switch, script: list[str]
) -> None:
    env = Envelope.initial(stashpoint.new_id(), None, "k", 1, {"count": 0})
    _faulty(switch, list(script))
    moto_stash.checkpoints.compare_and_swap(env, None)
    assert moto_stash.checkpoints.load(env.id).write_id == env.write_id


def test_landed_write_already_built_on_is_our_success_not_a_conflict(
    moto_stash: stashpoint.Stash, switch: _Switch, s3_moto_url: tuple[str, dict[str, Any]]
) -> None:
    env = _created(moto_stash)
    ours = env.next({"count": 1})

    def competitor() -> None:
        with stashpoint.open(s3_moto_url[0]) as other:
            head = other.checkpoints.load(env.id)
            other.checkpoints.compare_and_swap(head.next({"count": 2}), head.revision)

    _faulty(switch, ["competitor_then_timeout"], competitor=competitor)
    moto_stash.checkpoints.compare_and_swap(ours, 0)  # must not raise, must not resend
    head = moto_stash.checkpoints.load(env.id)
    assert head.revision == 2 and head.payload == {"count": 2}
    assert head.lineage[0] == ours.write_id


@pytest.mark.parametrize("competing_saves", [1, 40])
def test_landed_write_is_found_even_past_the_lineage_window(
    moto_stash: stashpoint.Stash,
    switch: _Switch,
    s3_moto_url: tuple[str, dict[str, Any]],
    competing_saves: int,
) -> None:
    env = _created(moto_stash)
    ours = env.next({"count": 1})

    def competitor() -> None:
        with stashpoint.open(s3_moto_url[0]) as other:
            head = other.checkpoints.load(env.id)
            for _ in range(competing_saves):
                nxt = head.next({"count": head.payload["count"] + 1})
                other.checkpoints.compare_and_swap(nxt, head.revision)
                head = nxt

    _faulty(switch, ["competitor_then_timeout"], competitor=competitor)
    moto_stash.checkpoints.compare_and_swap(ours, 0)
    assert moto_stash.checkpoints.load(env.id).revision == 1 + competing_saves


@pytest.mark.parametrize("competing_saves", [1, 40])
def test_write_that_never_landed_is_a_conflict_even_past_the_lineage_window(
    moto_stash: stashpoint.Stash,
    switch: _Switch,
    s3_moto_url: tuple[str, dict[str, Any]],
    competing_saves: int,
) -> None:
    env = _created(moto_stash)

    def competitor() -> None:
        with stashpoint.open(s3_moto_url[0]) as other:
            head = other.checkpoints.load(env.id)
            for _ in range(competing_saves):
                nxt = head.next({"count": -1})
                other.checkpoints.compare_and_swap(nxt, head.revision)
                head = nxt

    class NotApplied(FaultyClient):
        def put_object(self, **params: Any) -> Any:
            self.competitor()  # type: ignore[misc]
            raise _client_error(412, "PreconditionFailed")

    switch.inner = NotApplied(switch.inner, [], competitor)
    with pytest.raises(CheckpointConflict) as info:
        moto_stash.checkpoints.compare_and_swap(env.next({"count": 1}), 0)
    assert info.value.actual_revision == competing_saves


@pytest.fixture
def plain_bucket(s3_moto_url: tuple[str, dict[str, Any]]) -> str:
    """A bucket with versioning off (no history to search), beside the versioned one."""
    import boto3

    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="moto-plain")
    return "s3://moto-plain/p"


@pytest.mark.parametrize("landed", [True, False])
def test_an_unclear_save_past_the_lineage_window_is_judged_without_versions(
    plain_bucket: str, switch: _Switch, landed: bool
) -> None:
    """Issue 29: on a bucket without versions a save whose answer was lost while 40 others
    landed was `StorageUnavailable`; the head's writers now tell, exactly."""
    retry = RetryPolicy(max_attempts=4, base_delay=0.001)
    with stashpoint.open(plain_bucket, retry=retry, client=switch) as stash:
        env = _created(stash)

        def competitor() -> None:
            with stashpoint.open(plain_bucket) as other:
                head = other.checkpoints.load(env.id)
                for _ in range(40):
                    nxt = head.next({"count": head.payload["count"] + 1})
                    other.checkpoints.compare_and_swap(nxt, head.revision)
                    head = nxt

        if landed:
            _faulty(switch, ["competitor_then_timeout"], competitor=competitor)
            stash.checkpoints.compare_and_swap(env.next({"count": 1}), 0)  # success
            assert stash.checkpoints.load(env.id).payload == {"count": 41}
        else:

            class NotApplied(FaultyClient):
                def put_object(self, **params: Any) -> Any:
                    competitor()
                    raise botocore.exceptions.ReadTimeoutError(endpoint_url="http://s3")

            switch.inner = NotApplied(switch.inner, [])
            with pytest.raises(CheckpointConflict) as info:  # not StorageUnavailable
                stash.checkpoints.compare_and_swap(env.next({"count": 1}), 0)
            assert info.value.actual_revision == 40


def test_unreadable_head_after_ambiguous_write_is_unavailable_with_write_id(
    moto_stash: stashpoint.Stash,
    switch: _Switch,
) -> None:
    env = _created(moto_stash)
    nxt = env.next({"count": 1})
    _faulty(switch, ["timeout_then_reads_fail"])
    with pytest.raises(StorageUnavailable) as info:
        moto_stash.checkpoints.compare_and_swap(nxt, 0)
    assert info.value.write_id == nxt.write_id


def test_persistent_409_gives_up_with_unavailable(
    moto_stash: stashpoint.Stash, switch: _Switch
) -> None:
    env = _created(moto_stash)
    faulty = _faulty(switch, ["409"] * 10)
    with pytest.raises(StorageUnavailable):
        moto_stash.checkpoints.compare_and_swap(env.next({"count": 1}), 0)
    assert faulty.puts == 4  # bounded by the retry policy (max_attempts=4)
    assert moto_stash.checkpoints.load(env.id).revision == 0


def test_real_412_on_stale_etag_is_a_conflict(
    moto_stash: stashpoint.Stash, s3_moto_url: tuple[str, dict[str, Any]]
) -> None:
    env = _created(moto_stash)
    with stashpoint.open(s3_moto_url[0]) as other:
        other.checkpoints.compare_and_swap(env.next({"count": 7}), 0)
    with pytest.raises(CheckpointConflict) as info:
        moto_stash.checkpoints.compare_and_swap(env.next({"count": 1}), 0)  # cached ETag: stale
    assert info.value.actual_revision == 1


def test_history_on_unversioned_bucket_says_versioning_is_off(seaweedfs: servers.S3Server) -> None:
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}", bucket=servers.UNVERSIONED_BUCKET)
    with stashpoint.open(url) as stash:
        env = _created(stash)
        with pytest.raises(ConfigurationError, match="versioning"):
            stash.checkpoints.history(env.id)


def test_encryption_and_storage_class_pass_through(s3_moto_url: tuple[str, Any]) -> None:
    import boto3

    url = s3_moto_url[0]
    client = boto3.client("s3", region_name="us-east-1")
    with stashpoint.open(url, sse="AES256", storage_class="STANDARD_IA", client=client) as stash:
        env = _created(stash)
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        head = client.head_object(Bucket=bucket, Key=f"{prefix}/checkpoints/{env.id}")
    assert head["ServerSideEncryption"] == "AES256"
    assert head["StorageClass"] == "STANDARD_IA"
    assert head["Metadata"]["stashpoint-revision"] == "0"
    assert head["Metadata"]["stashpoint-write-id"] == env.write_id
    assert head["ContentType"] == "application/json"


def test_kms_key_id_selects_sse_kms(s3_moto_url: tuple[str, Any]) -> None:
    import boto3

    key_id = boto3.client("kms", region_name="us-east-1").create_key()["KeyMetadata"]["KeyId"]
    url = s3_moto_url[0]
    client = boto3.client("s3", region_name="us-east-1")
    with stashpoint.open(url, kms_key_id=key_id, client=client) as stash:
        env = _created(stash)
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        head = client.head_object(Bucket=bucket, Key=f"{prefix}/checkpoints/{env.id}")
        assert stash.checkpoints.load(env.id) == env
    assert head["ServerSideEncryption"] == "aws:kms"
    assert head["SSEKMSKeyId"].endswith(key_id)


def test_unknown_s3_option_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match="colour"):
        stashpoint.open("s3://bucket/prefix", colour="blue")


def test_opening_touches_no_network() -> None:
    # An unroutable endpoint: opening and closing must not try to connect.
    with stashpoint.open("s3://bucket/p?endpoint_url=http://127.0.0.1:9") as stash:
        assert stash.checkpoints is not None


# --- request counts on a real server ----------------------------------------------------------


def _counted_client(seaweedfs: servers.S3Server) -> tuple[Any, Counter[str]]:
    """An S3 client for SeaweedFS (given to a stash as `client=`) counting HTTP requests."""
    import boto3
    import botocore.config

    config = botocore.config.Config(s3={"addressing_style": "path"})
    client = boto3.client(
        "s3", endpoint_url=seaweedfs.endpoint, region_name="us-east-1", config=config
    )
    counts: Counter[str] = Counter()

    def on_send(request: Any, **_: Any) -> None:
        counts[request.method] += 1

    client.meta.events.register("before-send.s3", on_send)
    return client, counts


def test_request_counts(seaweedfs: servers.S3Server) -> None:
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}")
    client, counts = _counted_client(seaweedfs)
    with stashpoint.open(url, client=client) as stash, stashpoint.open(url) as rival:
        env = Envelope.initial(stashpoint.new_id(), None, "k", 1, {"n": 0})
        stash.checkpoints.compare_and_swap(env, None)
        assert counts == {"PUT": 1}, "create = 1 PUT"

        counts.clear()
        nxt = env.next({"n": 1})
        stash.checkpoints.compare_and_swap(nxt, 0)
        assert counts == {"PUT": 1}, "save after save = 1 PUT"

        counts.clear()
        loaded = stash.checkpoints.load(env.id)
        assert counts == {"GET": 1}, "load latest = 1 GET"

        counts.clear()
        stash.checkpoints.compare_and_swap(loaded.next({"n": 2}), 1)
        assert counts == {"PUT": 1}, "save after load = 1 PUT"

        counts.clear()
        assert stash.checkpoints.describe(env.id).revision == 2
        assert counts == {"HEAD": 1}, "describe = 1 HEAD, no payload downloaded"

        rival_head = rival.checkpoints.load(env.id)
        rival.checkpoints.compare_and_swap(rival_head.next({"n": 3}), 2)
        counts.clear()
        stale = stash.checkpoints.load.__self__  # same store
        with pytest.raises(CheckpointConflict):
            stale.compare_and_swap(loaded.next({"n": 2}).next({"n": 9}), 2)
        assert counts["PUT"] == 1 and counts["HEAD"] + counts["GET"] <= 1, (
            "stale save = 1 PUT + at most 1 read-back"
        )


# --- real concurrency on SeaweedFS ------------------------------------------------------------


def _increment(store: Any, checkpoint_id: str, tally: Counter[str], who: str, times: int) -> None:
    done = 0
    while done < times:
        current = store.load(checkpoint_id)
        by = dict(current.payload["by"])
        by[who] = by.get(who, 0) + 1
        nxt = current.next({"count": current.payload["count"] + 1, "by": by})
        try:
            store.compare_and_swap(nxt, current.revision)
        except CheckpointConflict:
            tally["conflicts"] += 1
            continue
        done += 1
        tally[who] += 1


def _race_increments(
    stash: stashpoint.Stash, threads: int, times: int
) -> tuple[Envelope, Counter[str]]:
    """Create a counter, let `threads` threads each increment it `times` times through one
    shared client, and return the final head and the tally of successes and conflicts."""
    stash.checkpoints.compare_and_swap(
        Envelope.initial("counter", None, "k", 1, {"count": 0, "by": {}}), None
    )
    tally: Counter[str] = Counter()
    workers = [
        threading.Thread(
            target=_increment, args=(stash.checkpoints, "counter", tally, f"t{i}", times)
        )
        for i in range(threads)
    ]
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    return stash.checkpoints.load("counter"), tally


def test_sixteen_threads_thirty_increments_each_end_at_480(seaweedfs: servers.S3Server) -> None:
    # 30 each, not 50: the same sixteen-way contention, and the suite's second-slowest
    # test no more (45 s under load at 50).
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}")
    with stashpoint.open(url) as stash:  # one client shared by every thread
        final, tally = _race_increments(stash, threads=16, times=30)
    assert final.payload["count"] == 480 and final.revision == 480
    assert final.payload["by"] == {f"t{i}": 30 for i in range(16)}
    assert tally["conflicts"] > 0


def test_sixteen_tasks_twenty_five_increments_each_end_at_400(
    seaweedfs: servers.S3Server,
) -> None:
    # Half the threads' count: the tasks retry without backoff, so each increment costs
    # many conflicts (this was the suite's slowest test at 50 each).
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}")

    async def main() -> Any:
        async with stashpoint.open_async(url) as stash:
            store = stash.checkpoints
            await store.compare_and_swap(
                Envelope.initial("counter", None, "k", 1, {"count": 0}), None
            )
            conflicts = 0

            async def worker() -> None:
                nonlocal conflicts
                done = 0
                while done < 25:
                    current = await store.load("counter")
                    nxt = current.next({"count": current.payload["count"] + 1})
                    try:
                        await store.compare_and_swap(nxt, current.revision)
                        done += 1
                    except CheckpointConflict:
                        conflicts += 1

            await asyncio.gather(*(worker() for _ in range(16)))
            return await store.load("counter"), conflicts

    final, conflicts = asyncio.run(main())
    assert final.payload["count"] == 400 and final.revision == 400
    assert conflicts > 0


def test_racing_async_creates_have_one_winner(seaweedfs: servers.S3Server) -> None:
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}")

    async def main() -> list[str]:
        async with stashpoint.open_async(url) as stash:

            async def create(n: int) -> str:
                env = Envelope.initial("contested", None, "k", 1, {"n": n})
                try:
                    await stash.checkpoints.compare_and_swap(env, None)
                    return "won"
                except CheckpointConflict:
                    return "conflict"

            return list(await asyncio.gather(*(create(n) for n in range(8))))

    # SeaweedFS makes some of the losers wait about a second each: eight racers suffice.
    outcomes = asyncio.run(main())
    assert outcomes.count("won") == 1 and outcomes.count("conflict") == 7


# --- faults on the wire: a proxy between the client and SeaweedFS ----------------------------


@pytest.mark.parametrize("flavour", ["versioned", "unversioned", "directory"])
def test_fault_proxy_loses_and_duplicates_nothing(
    seaweedfs: servers.S3Server, directory_bucket: str, flavour: str
) -> None:
    """8 writers, 400 increments, faults on the wire: every acknowledged increment once,
    no `StorageUnavailable` (a thread that got one would stop short of its 50), on a
    versioned bucket, one without versions and the directory-bucket stand-in."""
    plan = FaultPlan(
        {"drop_response": 0.08, "drop_request": 0.05, "slowdown": 0.05, "conflict": 0.05}
    )
    upstream = directory_bucket if flavour == "directory" else seaweedfs.endpoint
    bucket = servers.VERSIONED_BUCKET if flavour == "versioned" else servers.UNVERSIONED_BUCKET
    with FaultProxy(upstream, plan) as proxy:
        url = seaweedfs.url(f"t-{uuid.uuid4().hex}", bucket, endpoint=proxy.endpoint)
        url += "&provider=s3express" if flavour == "directory" else ""
        config = Config(
            read_timeout=2, connect_timeout=2, retries={"mode": "standard", "max_attempts": 3}
        )
        with stashpoint.open(url, client_config=config) as stash:
            final, tally = _race_increments(stash, threads=8, times=50)
    acknowledged = sum(tally[f"t{i}"] for i in range(8))
    assert acknowledged == 400
    assert final.payload["count"] == acknowledged  # nothing lost, nothing duplicated
    assert final.payload["by"] == {f"t{i}": tally[f"t{i}"] for i in range(8)}
    # The faults really happened, every kind of them.
    assert all(
        plan.injected[f] > 0 for f in ("drop_response", "drop_request", "slowdown", "conflict")
    )


def test_a_missing_bucket_is_named(s3_moto_url: tuple[str, Any]) -> None:
    """Issue 25 #11: the message omitted the bucket's name."""
    with (
        stashpoint.open("s3://no-such-bucket-here/p") as stash,
        pytest.raises(stashpoint.ConfigurationError, match="'no-such-bucket-here' does not exist"),
    ):
        stash.checkpoints.compare_and_swap(Envelope.initial("x", None, "k", 1, {}), None)
