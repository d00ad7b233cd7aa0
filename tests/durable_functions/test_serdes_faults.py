"""`StashSerDes`'s write path under crashes, faults and `kill -9`: no acknowledged value lost.

A value is acknowledged when `serialize` returns its pointer (the SDK then checkpoints the
pointer). Whatever dies or fails before that, a retry stores the value under the same name
and reads it back; whatever was acknowledged reads back byte for byte.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

pytest.importorskip("aws_durable_execution_sdk_python")

from aws_durable_execution_sdk_python.serdes import SerDesContext

import stashpoint
from stashpoint.durable_functions import StashSerDes
from stashpoint.durable_functions.serdes import POINTER_KEY
from stashpoint.errors import StashpointError
from stashpoint.steps import run_sync
from stashpoint.stores.layout import DURABLE_VALUES
from stashpoint.stores.objects import every_version
from tests import servers
from tests.crashes import Crash, crash_at
from tests.faultproxy import FaultProxy, everyday_faults
from tests.kills import kill_after_lines

ARN = "arn:aws:lambda:us-east-1:123456789012:function:f:$LATEST/durable-execution/n/1"


def _value(n: int) -> str:
    return f"value {n}: " + "x" * 4000 + str(n)


def _objects(stash: stashpoint.Stash) -> list[str]:
    found = run_sync(every_version(stash.layout.key(DURABLE_VALUES, "")), stash.driver)
    return sorted(v.key for v in found)


def test_a_crash_at_every_request_of_a_write_loses_nothing(
    local_url: tuple[str, dict[str, Any]],
) -> None:
    url, options = local_url
    context = SerDesContext("op-1", ARN)
    with stashpoint.open(url, **options) as stash:
        requests: list[str] = []
        with stash.intercept(lambda r, proceed: (requests.append(type(r).__name__), proceed())[1]):
            StashSerDes(stash, inline_limit=10).serialize(_value(0), SerDesContext("op-0", ARN))
    assert requests  # what one write costs: each is a point to die at, before and after
    for step in range(len(requests)):
        for after in (False, True):
            with (
                stashpoint.open(url, **options) as stash,
                crash_at(stash, step, after),
                pytest.raises(Crash),
            ):
                StashSerDes(stash, inline_limit=10).serialize(_value(step), context)
            with stashpoint.open(url, **options) as stash:  # the retried step, a new process
                serdes = StashSerDes(stash, inline_limit=10)
                data = serdes.serialize(_value(step), context)
                assert serdes.deserialize(data, context) == _value(step)
                assert json.loads(data)[POINTER_KEY] in {
                    k.rsplit(f"{DURABLE_VALUES}/", 1)[1] for k in _objects(stash)
                }


def test_the_fault_proxy_on_every_request_loses_no_acknowledged_value(
    seaweedfs: servers.S3Server,
) -> None:
    plan, config = everyday_faults()
    prefix = f"t-{uuid.uuid4().hex}"
    acknowledged: dict[int, str] = {}
    failed: list[str] = []
    with FaultProxy(seaweedfs.endpoint, plan) as proxy:
        url = seaweedfs.url(prefix, endpoint=proxy.endpoint)
        with stashpoint.open(url, client_config=config) as stash:
            serdes = StashSerDes(stash, inline_limit=10)
            for n in range(40):  # bounded
                try:
                    acknowledged[n] = serdes.serialize(_value(n), SerDesContext(f"op-{n}", ARN))
                except StashpointError as exc:  # told it failed: the SDK retries the step
                    failed.append(exc.kind.value)
    assert plan.injected["drop_response"] > 0 and plan.injected["drop_request"] > 0
    assert len(acknowledged) >= 20, failed
    with stashpoint.open(seaweedfs.url(prefix)) as clean:
        serdes = StashSerDes(clean, inline_limit=10)
        for n, data in acknowledged.items():
            assert serdes.deserialize(data, SerDesContext(f"op-{n}", ARN)) == _value(n)


KILLED_WRITER = """
import sys
import stashpoint
from aws_durable_execution_sdk_python.serdes import SerDesContext
from stashpoint.durable_functions import StashSerDes
from tests.durable_functions.test_serdes_faults import ARN, _value

with stashpoint.open(sys.argv[1]) as stash:
    serdes = StashSerDes(stash, inline_limit=10)
    for n in range(int(sys.argv[2]), 1000):
        data = serdes.serialize(_value(n), SerDesContext(f"op-{n}", ARN))
        print(n, data, flush=True)
"""


def test_kill_9_of_a_writer_loses_no_acknowledged_value(
    seaweedfs: servers.S3Server,
) -> None:
    url = seaweedfs.url(f"t-{uuid.uuid4().hex}")
    start = 0
    acknowledged: dict[int, str] = {}
    for round_ in range(5):
        before, after = kill_after_lines(
            KILLED_WRITER, [url, str(start)], 3 + round_, pause=0.003 * round_
        )
        for line in before + after:
            n, _, data = line.partition(" ")
            acknowledged[int(n)] = data
        start = max(acknowledged) + 1 if acknowledged else start
    assert len(acknowledged) >= 15
    with stashpoint.open(url) as stash:
        serdes = StashSerDes(stash, inline_limit=10)
        for n, data in acknowledged.items():
            assert serdes.deserialize(data, SerDesContext(f"op-{n}", ARN)) == _value(n)
        # The value a writer was killed writing is stored whole by its retry.
        retried = serdes.serialize(_value(start), SerDesContext(f"op-{start}", ARN))
        assert serdes.deserialize(retried, SerDesContext(f"op-{start}", ARN)) == _value(start)
