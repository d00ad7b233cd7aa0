"""Durable functions tests: the SDK's background thread told to notice its stop sooner.

AWS's SDK ends each invocation by signalling its checkpoint batcher to stop and joining
it; the batcher looks for the signal between waits of 0.1 s on an empty queue
(`_STOP_SIGNAL_POLL_SECONDS`), so every invocation ends up to 0.1 s later in real time,
whatever it did. These tests run thousands of invocations (a crash at every request is
one test of 250), so they would spend most of their time idle. Here the batcher looks
every 2 ms: when its thread exits changes, nothing it sends or in what order (it still
sends every batch before it stops). Worker processes (`worker_app.py`) keep the SDK's
own interval.
"""

from __future__ import annotations

import pytest

_SDK_POLL_SECONDS = 0.002


@pytest.fixture(autouse=True)
def _sdk_notices_its_stop_sooner(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        from aws_durable_execution_sdk_python import state
    except ImportError:
        return  # the tests that need the SDK skip themselves
    if hasattr(state, "_STOP_SIGNAL_POLL_SECONDS"):  # a release without it: as shipped
        monkeypatch.setattr(state, "_STOP_SIGNAL_POLL_SECONDS", _SDK_POLL_SECONDS)
