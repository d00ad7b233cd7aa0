"""Optional OpenTelemetry spans for every operation, with its retries, conflicts and read-backs.

With the `otel` extra installed (`opentelemetry-api`), each public operation of a stash,
checkpoint store, log store or run store is a span `stashpoint.<operation>` (the one
mechanism of `twins` runs them all, sync and async), with attributes `stashpoint.id` (the
object), `stashpoint.revision` / `stashpoint.version` (what it read or wrote),
`stashpoint.bytes` (bytes sent) and `stashpoint.error_kind` on failure, and events
`stashpoint.retry`, `stashpoint.conflict` and `stashpoint.read_back` (an unclear write
answer settled by reading it back). A run operation given a `trace_ctx` (`TraceContext`)
becomes a child of that span. Spans go wherever the application's tracer provider sends
them; without a provider configured they cost almost nothing.

stashpoint never imports OpenTelemetry itself: it uses `opentelemetry.trace` once the
application has imported it (as setting up a tracer provider does, or `opentelemetry-instrument`
before the program starts). A program that never imports it could only have made
non-recording spans, so it pays nothing for them: not the ~60 ms import at a cold start,
and one dictionary lookup per operation.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any


def _otel() -> Any:
    """Return `opentelemetry.trace` if the application has imported it, else None."""
    return sys.modules.get("opentelemetry.trace")


def _parent(trace: Any, trace_ctx: Any) -> Any:
    """Return a context whose current span is the caller's `TraceContext`, if it has one."""
    trace_id = getattr(trace_ctx, "trace_id", None)
    span_id = getattr(trace_ctx, "span_id", None)
    if not trace_id or not span_id:
        return None
    try:
        context = trace.SpanContext(
            trace_id=int(trace_id, 16),
            span_id=int(span_id, 16),
            is_remote=True,
            trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        )
    except ValueError:
        return None  # not hex: keep the ambient context
    if not context.is_valid:
        return None
    return trace.set_span_in_context(trace.NonRecordingSpan(context))


@contextmanager
def operation(name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> Iterator[Any]:
    """Run an operation inside its span (a no-op without the API); yields the span."""
    trace = _otel()
    if trace is None:
        yield None
        return
    attributes: dict[str, Any] = {}
    if args:
        subject = args[0] if isinstance(args[0], str) else getattr(args[0], "id", None)
        if isinstance(subject, str):
            attributes["stashpoint.id"] = subject  # an id, or the envelope being saved
        revision = getattr(args[0], "revision", None)
        if type(revision) is int:
            attributes["stashpoint.revision"] = revision
    parent = _parent(trace, kwargs.get("trace_ctx"))
    tracer = trace.get_tracer("stashpoint")
    # Exceptions are recorded by hand, by type and kind: their messages may name values
    # the caller passed, and spans carry ids and kinds, never payloads or credentials.
    with tracer.start_as_current_span(
        f"stashpoint.{name}",
        context=parent,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except Exception as exc:
            kind = getattr(exc, "kind", None)
            if kind is not None:
                span.set_attribute("stashpoint.error_kind", str(kind))
            span.add_event("exception", {"exception.type": type(exc).__name__})
            status = getattr(trace, "Status", None)
            codes = getattr(trace, "StatusCode", None)
            if status is not None and codes is not None:
                span.set_status(status(codes.ERROR, str(kind or type(exc).__name__)))
            raise


def finished(span: Any, result: Any) -> None:
    """Record what an operation returned (its revision or version) on its span."""
    if span is None:
        return
    for field in ("revision", "version"):
        value = getattr(result, field, None)
        if type(value) is int:
            span.set_attribute(f"stashpoint.{field}", value)


def event(name: str, **attributes: Any) -> None:
    """Add an event to the current span (a retry, a conflict, a read-back)."""
    trace = _otel()
    if trace is not None:
        trace.get_current_span().add_event(f"stashpoint.{name}", attributes)


def sent(size: int) -> None:
    """Add `size` bytes to the current span's `stashpoint.bytes`."""
    trace = _otel()
    if trace is None:
        return
    span = trace.get_current_span()
    previous = getattr(span, "attributes", None) or {}
    span.set_attribute("stashpoint.bytes", int(previous.get("stashpoint.bytes", 0)) + size)
