"""The protocol drivers: where requests, sleeps and CPU-bound work run."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

import stashpoint
from stashpoint import Envelope
from stashpoint.codec import Codec
from stashpoint.steps import OFFLOAD_BYTES, Compute, Steps, run_async, run_sync


def _where(size: int) -> Steps[tuple[str, str]]:
    """Yield two pieces of work and return the threads they ran on."""
    small: str = yield Compute(lambda: threading.current_thread().name, 10)
    large: str = yield Compute(lambda: threading.current_thread().name, size)
    return small, large


def _unused(request: Any) -> Any:
    raise AssertionError(f"no request should reach execute: {request!r}")


async def _unused_async(request: Any) -> Any:
    raise AssertionError(f"no request should reach execute: {request!r}")


def test_sync_driver_does_work_in_place() -> None:
    here = threading.current_thread().name
    assert run_sync(_where(OFFLOAD_BYTES * 4), _unused) == (here, here)


async def test_async_driver_takes_large_work_off_the_event_loop() -> None:
    loop_thread = threading.current_thread().name
    small, large = await run_async(_where(OFFLOAD_BYTES), _unused_async)
    assert small == loop_thread
    assert large != loop_thread


async def test_async_driver_keeps_the_loop_running_during_large_work() -> None:
    """While a large piece of work runs, other tasks on the loop make progress."""
    started, release = threading.Event(), threading.Event()

    def work() -> str:
        started.set()
        assert release.wait(10), "the loop never got to release the work"
        return "done"

    def protocol() -> Steps[str]:
        result: str = yield Compute(work, OFFLOAD_BYTES)
        return result

    async def other_task() -> None:
        # Resumes only if the loop is free while `work` blocks its thread.
        assert await asyncio.to_thread(started.wait, 10)
        release.set()

    result, _ = await asyncio.gather(run_async(protocol(), _unused_async), other_task())
    assert result == "done"


@pytest.mark.parametrize("size", [10, OFFLOAD_BYTES])
async def test_work_errors_are_raised_into_the_protocol(size: int) -> None:
    def fail() -> None:
        raise stashpoint.InvalidPayload("bad bytes", object_name="x")

    def protocol() -> Steps[str]:
        try:
            yield Compute(fail, size)
        except stashpoint.InvalidPayload as exc:
            return f"caught: {exc.object_name}"
        return "not raised"

    assert await run_async(protocol(), _unused_async) == "caught: x"
    assert run_sync(protocol(), _unused) == "caught: x"


async def test_async_store_compresses_and_decompresses_large_envelopes_off_the_loop(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    loop_thread = threading.get_ident()
    seen: list[tuple[str, bool]] = []
    compress, unwrap = Codec.compress, Codec.unwrap

    def spy_compress(self: Codec, raw: bytes, **kw: Any) -> bytes:
        seen.append(("compress", threading.get_ident() == loop_thread))
        return compress(self, raw, **kw)

    def spy_unwrap(self: Codec, data: bytes, **kw: Any) -> bytes:
        seen.append(("unwrap", threading.get_ident() == loop_thread))
        return unwrap(self, data, **kw)

    monkeypatch.setattr(Codec, "compress", spy_compress)
    monkeypatch.setattr(Codec, "unwrap", spy_unwrap)
    big = {"transcript": [f"message {i} " * 20 for i in range(3000)]}  # about 400 KB of JSON
    async with stashpoint.open_async(f"local://{tmp_path}") as stash:
        await stash.checkpoints.compare_and_swap(Envelope.initial("big", None, "k", 1, big), None)
        await stash.checkpoints.compare_and_swap(Envelope.initial("small", None, "k", 1, {}), None)
        assert (await stash.checkpoints.load("big")).payload == big
        assert (await stash.checkpoints.load("small")).payload == {}
    # Large work ran on a worker thread, small work on the loop.
    assert seen == [
        ("compress", False),
        ("compress", True),
        ("unwrap", False),
        ("unwrap", True),
    ]
