"""`StashStorageDriver`: Temporal's payloads in the stash, under a real workflow on the dev
server, crashes at every request, the fault proxy, `kill -9` and hostile objects.

A payload is acknowledged when `store` returns its claim (Temporal then writes the claim
into the history); every acknowledged claim must retrieve its payload, byte for byte.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("temporalio")

from temporalio.api.common.v1 import Payload
from temporalio.client import Client
from temporalio.converter import (
    DataConverter,
    ExternalStorage,
    StorageDriverClaim,
    StorageDriverRetrieveContext,
    StorageDriverStoreContext,
    StorageDriverWorkflowInfo,
)
from temporalio.worker import Worker

import stashpoint
from stashpoint.errors import InvalidArgument, InvalidPayload, LimitExceeded, StashpointError
from stashpoint.steps import run_sync
from stashpoint.stores.layout import TEMPORAL_PAYLOADS
from stashpoint.stores.objects import Create, PutObject, every_version
from stashpoint.temporal import StashStorageDriver, workflow_owner
from tests import servers
from tests.crashes import Crash, crash_at
from tests.faultproxy import FaultProxy, everyday_faults
from tests.kills import kill_after_lines
from tests.temporal.workflows import Digest, summarize

CONTEXT = StorageDriverStoreContext(
    target=StorageDriverWorkflowInfo(namespace="default", id="order-17", type="Digest")
)
READ = StorageDriverRetrieveContext()


@pytest.fixture(params=["local_url", "s3_seaweed_url"])
def url(request: pytest.FixtureRequest) -> Iterator[tuple[str, dict[str, Any]]]:
    return request.getfixturevalue(request.param)


def _payload(n: int, *, binary: bool = False) -> Payload:
    data = (
        bytes(range(256)) * 8 + bytes([n % 256]) if binary else json.dumps(f"v{n}" * 500).encode()
    )
    return Payload(metadata={"encoding": b"binary/plain" if binary else b"json/plain"}, data=data)


def _keys(stash: stashpoint.Stash) -> list[str]:
    found = run_sync(every_version(stash.layout.key(TEMPORAL_PAYLOADS, "")), stash.driver)
    return sorted(v.key for v in found)


def test_payloads_round_trip_once_stored_and_checked_on_read(
    url: tuple[str, dict[str, Any]],
) -> None:
    address, options = url
    with stashpoint.open(address, **options) as stash:
        driver = StashStorageDriver(stash)
        payloads = [_payload(1), _payload(2, binary=True), _payload(1)]
        claims = asyncio.run(driver.store(CONTEXT, payloads))
        assert claims[0] == claims[2]  # the same content, the same object
        assert asyncio.run(driver.retrieve(READ, claims)) == payloads
        assert len(_keys(stash)) == 2
        assert claims[0].claim_data["name"].startswith(workflow_owner("default", "order-17") + "/")
        forged = StorageDriverClaim(
            {**claims[0].claim_data, "sha256": claims[1].claim_data["sha256"]}
        )
        with pytest.raises(InvalidPayload):
            asyncio.run(driver.retrieve(READ, [forged]))
        with pytest.raises(InvalidPayload):
            asyncio.run(driver.retrieve(READ, [StorageDriverClaim({"name": "x"})]))
        with pytest.raises(InvalidPayload):  # no path out of the namespace
            asyncio.run(
                driver.retrieve(READ, [StorageDriverClaim({"name": "../x", "sha256": "0"})])
            )
        assert asyncio.run(driver.erase("default", "order-17")) == 2
        with pytest.raises(InvalidPayload):  # erased: a claim to it is refused, never empty
            asyncio.run(driver.retrieve(READ, claims[:1]))


def test_a_planted_object_under_a_payloads_name_is_never_read_as_it(
    local_url: tuple[str, dict[str, Any]],
) -> None:
    address, options = local_url
    with stashpoint.open(address, **options) as stash:
        driver = StashStorageDriver(stash)
        claim = asyncio.run(driver.store(CONTEXT, [_payload(5)]))[0]
        asyncio.run(driver.erase("default", "order-17"))
        key = stash.layout.key(TEMPORAL_PAYLOADS, claim.claim_data["name"])
        run_sync(_plant(key), stash.driver)
        with pytest.raises(InvalidPayload):  # judged by its content, not by its name
            asyncio.run(driver.retrieve(READ, [claim]))
        # A store finds it under its name, judges it someone else's, replaces it over its ETag.
        assert asyncio.run(driver.store(CONTEXT, [_payload(5)])) == [claim]
        assert asyncio.run(driver.retrieve(READ, [claim])) == [_payload(5)]


def _plant(key: str) -> Any:
    from stashpoint.steps import ask

    yield from ask(PutObject(key, b"not a payload", Create()))


def test_bad_input_is_a_typed_error(local_url: tuple[str, dict[str, Any]]) -> None:
    address, options = local_url
    with stashpoint.open(address, **options) as stash:
        with pytest.raises(InvalidArgument):
            StashStorageDriver("not a stash")  # type: ignore[arg-type]
        with pytest.raises(InvalidArgument):
            StashStorageDriver(stash, max_payload_size=0)
        with pytest.raises(LimitExceeded):
            asyncio.run(
                StashStorageDriver(stash, max_payload_size=10).store(CONTEXT, [_payload(1)])
            )
        with pytest.raises(InvalidArgument):
            asyncio.run(
                StashStorageDriver(stash, owner=lambda t: "a/b").store(CONTEXT, [_payload(1)])
            )


def test_a_crash_at_any_request_then_a_retry_stores_it_once(
    local_url: tuple[str, dict[str, Any]],
) -> None:
    address, options = local_url
    for step in range(3):
        for after in (False, True):
            payload = _payload(100 + 2 * step + after)
            with (
                stashpoint.open(address, **options) as stash,
                crash_at(stash, step, after),
                contextlib.suppress(Crash),
            ):
                asyncio.run(StashStorageDriver(stash).store(CONTEXT, [payload]))
            with stashpoint.open(address, **options) as stash:  # Temporal retries the task
                driver = StashStorageDriver(stash)
                claims = asyncio.run(driver.store(CONTEXT, [payload]))
                assert asyncio.run(driver.retrieve(READ, claims)) == [payload]


def test_the_fault_proxy_on_every_request_loses_no_acknowledged_payload(
    seaweedfs: servers.S3Server,
) -> None:
    plan, config = everyday_faults()
    prefix = f"t-{uuid.uuid4().hex}"
    acknowledged: dict[int, StorageDriverClaim] = {}
    failed: list[str] = []
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        with stashpoint.open(url, client_config=config) as stash:
            driver = StashStorageDriver(stash)
            for n in range(40):  # bounded
                try:
                    acknowledged[n] = asyncio.run(driver.store(CONTEXT, [_payload(n)]))[0]
                except StashpointError as exc:  # told it failed: Temporal retries the task
                    failed.append(exc.kind.value)
    assert plan.injected["drop_response"] > 0 and plan.injected["drop_request"] > 0
    assert len(acknowledged) >= 20, failed
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        driver = StashStorageDriver(clean)
        for n, claim in acknowledged.items():
            assert asyncio.run(driver.retrieve(READ, [claim])) == [_payload(n)]


KILLED_WRITER = """
import asyncio, json, sys
import stashpoint
from stashpoint.temporal import StashStorageDriver
from tests.temporal.test_driver import CONTEXT, _payload

with stashpoint.open(sys.argv[1]) as stash:
    driver = StashStorageDriver(stash)
    for n in range(int(sys.argv[2]), 100000):
        claim = asyncio.run(driver.store(CONTEXT, [_payload(n)]))[0]
        print(json.dumps([n, dict(claim.claim_data)]), flush=True)
"""


def test_kill_9_of_a_writer_loses_no_acknowledged_payload(
    s3_seaweed_url: tuple[str, dict[str, Any]],
) -> None:
    address, _ = s3_seaweed_url
    acknowledged: dict[int, dict[str, str]] = {}
    start = 0
    for round_ in range(4):
        before, after = kill_after_lines(
            KILLED_WRITER, [address, str(start)], 3 + round_, pause=0.004 * round_
        )
        for line in before + after:
            n, claim = json.loads(line)
            acknowledged[n] = claim
        start = max(acknowledged) + 1
    with stashpoint.open(address) as stash:
        driver = StashStorageDriver(stash)
        for n, claim in acknowledged.items():
            assert asyncio.run(driver.retrieve(READ, [StorageDriverClaim(claim)])) == [_payload(n)]
    assert len(acknowledged) >= 10


def test_a_workflow_on_the_dev_server_keeps_its_large_payloads_in_the_stash(
    temporal_server: str, url: tuple[str, dict[str, Any]]
) -> None:
    address, options = url

    async def main() -> tuple[str, list[int]]:
        with stashpoint.open(address, **options) as stash:
            converter = dataclasses.replace(
                DataConverter.default,
                external_storage=ExternalStorage(
                    drivers=[StashStorageDriver(stash)], payload_size_threshold=1024
                ),
            )
            client = await Client.connect(temporal_server, data_converter=converter)
            queue = f"q-{uuid.uuid4().hex[:8]}"
            document = "lorem ipsum " * 2000  # 24 KB: beyond the threshold
            workflow_id = f"digest-{uuid.uuid4().hex[:8]}"
            async with Worker(client, task_queue=queue, workflows=[Digest], activities=[summarize]):
                result = await client.execute_workflow(
                    Digest.run, document, id=workflow_id, task_queue=queue
                )
            history = await client.get_workflow_handle(workflow_id).fetch_history()
            sizes = [
                p.ByteSize()
                for event in history.events
                for field in (
                    "workflow_execution_started_event_attributes",
                    "activity_task_scheduled_event_attributes",
                    "activity_task_completed_event_attributes",
                    "workflow_execution_completed_event_attributes",
                )
                if event.HasField(field)
                for group in ("input", "result")
                if hasattr(getattr(event, field), group)
                for p in getattr(getattr(event, field), group).payloads
            ]
            stored = len(_keys(stash))
            # A person's erasure: the workflow's payloads purged, with a receipt naming each.
            receipt = stash.admin.purge(
                values=(TEMPORAL_PAYLOADS, workflow_owner("default", workflow_id))
            )
            assert receipt.verified and len(receipt.removed) >= 1
            owner_prefix = stash.layout.key(
                TEMPORAL_PAYLOADS, workflow_owner("default", workflow_id)
            )
            assert all(v.key.startswith(owner_prefix + "/") for v in receipt.removed)
            assert not any(k.startswith(owner_prefix + "/") for k in _keys(stash))
            return result, [*sizes, stored]

    result, numbers = asyncio.run(main())
    *sizes, stored = numbers
    assert result == ("lorem ipsum " * 2000).upper() + "|24000"
    assert sizes and all(size < 1024 for size in sizes)  # the history holds claims only
    assert stored >= 2  # the input and the result (and the activity's, by its own owner)


def test_on_an_encrypted_stash_payloads_are_sealed_per_tenant_and_a_shred_ends_them(
    tmp_path: Any,
) -> None:
    from stashpoint.encryption import Encryption
    from stashpoint.errors import KeyShredded

    encryption = Encryption.local(tmp_path / "keyring.json", ("acme", "acme."))
    url = f"local://{tmp_path / 'stash'}?fsync=false"
    with stashpoint.open(url, encryption=encryption) as stash:
        acme = StashStorageDriver(stash, owner=lambda target: "acme." + workflow_owner("d", "w"))
        other = StashStorageDriver(stash)  # the catch-all tenant
        payload = _payload(7)
        mine = asyncio.run(acme.store(CONTEXT, [payload]))[0]
        theirs = asyncio.run(other.store(CONTEXT, [payload]))[0]
        for path in (tmp_path / "stash").rglob("*"):
            if path.is_file() and TEMPORAL_PAYLOADS in str(path):
                assert b"v7v7v7" not in path.read_bytes()  # sealed at rest
        assert asyncio.run(acme.retrieve(READ, [mine])) == [payload]
        stash.admin.purge(tenant="acme", shred=True)
        with pytest.raises(KeyShredded):
            asyncio.run(acme.retrieve(READ, [mine]))
        assert asyncio.run(other.retrieve(READ, [theirs])) == [payload]  # another tenant's
