"""OpenTelemetry spans (the `otel` extra): operations, retries, conflicts, trace parents."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip("opentelemetry.sdk")

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
    InMemorySpanExporter,
)
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

import stashpoint
from stashpoint import CheckpointConflict, Envelope


class _Switch(Sampler):
    """Records spans only while a test of this module runs (the provider is process-wide)."""

    on = False

    def should_sample(
        self, parent_context: Any, trace_id: int, name: str, kind: Any = None,
        attributes: Any = None, links: Any = None, trace_state: Any = None,
    ) -> SamplingResult:  # fmt: skip
        decision = Decision.RECORD_AND_SAMPLE if self.on else Decision.DROP
        return SamplingResult(decision, attributes if self.on else None)

    def get_description(self) -> str:
        return "switch"


_switch = _Switch()
_exporter = InMemorySpanExporter()
_provider = TracerProvider(sampler=_switch)
_provider.add_span_processor(SimpleSpanProcessor(_exporter))


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    # The global provider can be set once per process: route it to our exporter, and
    # record only during these tests (the rest of the suite stays untraced).
    trace.set_tracer_provider(_provider)
    _exporter.clear()
    _switch.on = True
    try:
        yield _exporter
    finally:
        _switch.on = False
        _exporter.clear()


def _named(exporter: InMemorySpanExporter, name: str) -> list[Any]:
    return [s for s in exporter.get_finished_spans() if s.name == f"stashpoint.{name}"]


def test_save_and_load_are_spans_with_id_revision_and_bytes(
    spans: InMemorySpanExporter, memory_url: tuple[str, dict[str, Any]]
) -> None:
    with stashpoint.open(memory_url[0]) as stash:
        first = Envelope.initial("traced", None, "k", 1, {"n": 1})
        stash.checkpoints.compare_and_swap(first, None)
        stash.checkpoints.load("traced")
        with pytest.raises(CheckpointConflict):  # another writer's create of the same id
            stash.checkpoints.compare_and_swap(Envelope.initial("traced", None, "k", 1, {}), None)
    [save, refused] = _named(spans, "compare_and_swap")
    assert save.attributes["stashpoint.id"] == "traced"
    assert save.attributes["stashpoint.revision"] == 0
    assert save.attributes["stashpoint.bytes"] > 0
    [load] = _named(spans, "load")
    assert load.attributes["stashpoint.revision"] == 0
    assert refused.attributes["stashpoint.error_kind"] == "conflict"
    assert refused.status.status_code == trace.StatusCode.ERROR


def test_log_appends_and_async_operations_are_spans(
    spans: InMemorySpanExporter, memory_url: tuple[str, dict[str, Any]]
) -> None:
    async def work() -> None:
        async with stashpoint.open_async(memory_url[0]) as stash:
            head = await stash.logs.append("events", [1], after=None)
            await stash.logs.append("events", [2], after=head)

    asyncio.run(work())
    appends = _named(spans, "append")
    assert [s.attributes["stashpoint.version"] for s in appends] == [0, 1]
    assert all(s.attributes["stashpoint.bytes"] > 0 for s in appends)


def test_a_run_transition_is_a_child_of_the_callers_trace(
    spans: InMemorySpanExporter, memory_url: tuple[str, dict[str, Any]]
) -> None:
    from stashpoint.runs import TraceContext

    parent = TraceContext(trace_id="4bf92f3577b34da6a3ce929d0e0e4736", span_id="00f067aa0ba902b7")
    with stashpoint.open(memory_url[0]) as stash:
        run_id = stash.runs.create_run("traced-graph")
        stash.runs.record_attempt(run_id, "node", 0, trace_ctx=parent)
    [record] = _named(spans, "record_attempt")
    assert record.context.trace_id == int(parent.trace_id, 16)
    assert record.parent is not None and record.parent.span_id == int(parent.span_id, 16)


def test_retries_and_read_backs_are_events(
    spans: InMemorySpanExporter, memory_url: tuple[str, dict[str, Any]]
) -> None:
    from stashpoint.stores.objects import PutObject, WriteOutcome, WriteResult

    with stashpoint.open(memory_url[0]) as stash:
        real = stash.driver
        answers = iter([WriteOutcome.CONDITION_CONFLICT, WriteOutcome.AMBIGUOUS])

        def flaky(request: Any) -> Any:
            outcome = next(answers, None) if isinstance(request, PutObject) else None
            if outcome is None:
                return real(request)
            if outcome is WriteOutcome.AMBIGUOUS:
                real(request)  # it landed, but the answer was lost
            return WriteResult(outcome, None, detail="injected")

        stash.checkpoints.driver = flaky
        stash.checkpoints.compare_and_swap(Envelope.initial("flaky", None, "k", 1, {}), None)
    [save] = _named(spans, "compare_and_swap")
    assert [e.name for e in save.events] == ["stashpoint.retry", "stashpoint.read_back"]


def test_import_does_not_load_opentelemetry() -> None:
    out = subprocess.run(
        [sys.executable, "-c", "import sys, stashpoint; print('opentelemetry' in sys.modules)"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert out.stdout.strip() == "False"


def test_errors_and_spans_never_carry_the_callers_values(spans: InMemorySpanExporter) -> None:
    """Issue 23 #22: error messages echoed callers' payloads and spans recorded those
    messages. Errors describe a wrong value by its type; spans keep the kind only."""
    secret = "sk-live-hunter2-0123456789"
    with stashpoint.open("memory://") as stash:
        run_id = stash.runs.create_run("g")
        failures = []
        for call in (
            lambda: stash.runs.record_attempt(run_id, {"token": secret}, 1),  # type: ignore[arg-type]
            lambda: stash.runs.record_attempt(run_id, "n", secret),  # type: ignore[arg-type]
            lambda: stash.runs.durable(run_id).wait("w", seconds=secret),  # type: ignore[arg-type]
            lambda: stash.checkpoints.compare_and_swap(
                Envelope.initial("x", None, "k", 1, {"key": {secret}}), None
            ),
        ):
            with pytest.raises(stashpoint.StashpointError) as info:
                call()
            failures.append(str(info.value))
    assert all(secret not in text for text in failures), failures
    for span in spans.get_finished_spans():
        recorded = [str(span.status.description), str(dict(span.attributes or {}))]
        recorded += [str(dict(event.attributes or {})) for event in span.events]
        assert all(secret not in text for text in recorded), span.name
