"""Handlers for AWS's durable execution conformance requirements, written from their prose.

AWS publishes each requirement (`aws-durable-execution-conformance-tests`, read at test
time from the published wheel) as prose describing a handler, its input, the expected
result and history. These are our handlers for them, written with the public SDK, keyed
by requirement id ("1-1"). A requirement whose handler needs a Lambda process crash
raises `SimulatedCrash` (a `BaseException`, so it escapes the SDK like a dying process:
no answer is recorded, the invocation's lease runs out, another one takes over).
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from collections.abc import Callable
from typing import Any

from aws_durable_execution_sdk_python import DurableContext, durable_execution
from aws_durable_execution_sdk_python.concurrency.models import BatchResult
from aws_durable_execution_sdk_python.config import (
    CallbackConfig,
    ChildConfig,
    CompletionConfig,
    Duration,
    InvokeConfig,
    JitterStrategy,
    MapConfig,
    NestingType,
    ParallelBranch,
    ParallelConfig,
    StepConfig,
    StepSemantics,
    WaitForCallbackConfig,
)
from aws_durable_execution_sdk_python.exceptions import (
    CallbackError,
    ChildContextError,
    InvokeError,
    StepError,
    WaitForConditionError,
)
from aws_durable_execution_sdk_python.plugin import DurableInstrumentationPlugin
from aws_durable_execution_sdk_python.retries import (
    RetryDecision,
    RetryPresets,
    RetryStrategyConfig,
    create_retry_strategy,
)
from aws_durable_execution_sdk_python.serdes import SerDes, SerDesContext
from aws_durable_execution_sdk_python.waits import (
    WaitForConditionConfig,
    WaitForConditionDecision,
    WaitStrategyConfig,
    create_wait_strategy,
)

HANDLERS: dict[str, Callable[[Any, Any], Any]] = {}
"""Requirement id -> its handler."""
ATTEMPTS: Counter[str] = Counter()
"""Counts kept across invocations of one requirement (the driver clears it)."""


class Recorded:
    """Lets a handler wait until an event is in its execution's history (set by the driver)."""

    def __init__(self) -> None:
        self.history: Callable[[], list[dict[str, Any]]] | None = None

    def wait_for(self, event_type: str) -> None:
        """Return once an event of `event_type` is recorded (bounded: 10 s)."""
        import time

        deadline = time.monotonic() + 10
        while self.history is not None and time.monotonic() < deadline:
            if any(e["EventType"] == event_type for e in self.history()):
                return
            time.sleep(0.005)
        raise AssertionError(f"{event_type} was never recorded")


RECORDED = Recorded()
"""The driver points it at the running execution's history."""


class SimulatedCrash(BaseException):
    """The Lambda process dies here: no answer, no clean-up."""


def requirement(req_id: str) -> Callable[[Callable[[Any, DurableContext], Any]], Any]:
    """Register a `@durable_execution` handler for requirement `req_id`."""

    def decorate(func: Callable[[Any, DurableContext], Any]) -> Any:
        handler = durable_execution(func)
        HANDLERS[req_id] = handler
        return handler

    return decorate


def no_retry() -> StepConfig:
    return StepConfig(retry_strategy=RetryPresets.none())


def retry(max_attempts: int, delay: int = 1, backoff: float = 1.0) -> StepConfig:
    return StepConfig(
        retry_strategy=create_retry_strategy(
            RetryStrategyConfig(
                max_attempts=max_attempts,
                initial_delay=Duration.from_seconds(delay),
                backoff_rate=backoff,
                jitter_strategy=JitterStrategy.NONE,
            )
        )
    )


class RawUpper(SerDes[Any]):
    """Stores a string upper-cased as raw text, not JSON (requirement 3-14)."""

    def serialize(self, value: Any, serdes_context: SerDesContext) -> str:
        return str(value).upper()

    def deserialize(self, data: str, serdes_context: SerDesContext) -> Any:
        return data


class Upper(SerDes[Any]):
    """Serializes strings upper-cased (requirement 1-6)."""

    def serialize(self, value: Any, serdes_context: SerDesContext) -> str:
        return json.dumps(value.upper() if isinstance(value, str) else value)

    def deserialize(self, data: str, serdes_context: SerDesContext) -> Any:
        return json.loads(data)


# 1. Steps.


@requirement("1-1")
def _step_basic(event: Any, ctx: DurableContext) -> Any:
    return ctx.step(lambda _: f"Hello, {event}!")


@requirement("1-2")
def _step_named(event: Any, ctx: DurableContext) -> Any:
    return ctx.step(lambda _: f"Hello, {event}!", name="custom_step_name")


@requirement("1-3")
def _step_sequence(event: Any, ctx: DurableContext) -> Any:
    first = ctx.step(lambda _: "first")
    return ctx.step(lambda _: f"{first}_second")


@requirement("1-4")
def _step_nested(event: Any, ctx: DurableContext) -> Any:
    return ctx.step(
        lambda _: {
            "user": {"name": event["name"], "tags": event["tags"]},
            "count": len(event["tags"]),
        }
    )


@requirement("1-5")
def _step_none(event: Any, ctx: DurableContext) -> Any:
    return ctx.step(lambda _: None)


@requirement("1-6")
def _step_serdes(event: Any, ctx: DurableContext) -> Any:
    return ctx.step(lambda _: event, config=StepConfig(serdes=Upper()))


@requirement("1-7")
def _step_logger(event: Any, ctx: DurableContext) -> Any:
    def greet(step: Any) -> str:
        step.logger.info(f"Greeting step started for: {event}")
        result = f"Hello, {event}!"
        step.logger.info(f"Greeting step completed with: {result}")
        return result

    return ctx.step(greet)


@requirement("1-8")
def _step_then_wait(event: Any, ctx: DurableContext) -> Any:
    result = ctx.step(lambda _: "computed")
    ctx.wait(Duration.from_seconds(2))
    return result


@requirement("1-9")
def _step_replayed(event: Any, ctx: DurableContext) -> Any:
    def once(step: Any) -> str:
        ATTEMPTS["1-9"] += 1
        step.logger.info("step executed")
        return "cached_value"

    result = ctx.step(once)
    ctx.wait(Duration.from_seconds(1))
    return result


@requirement("1-10")
def _step_failed_replayed(event: Any, ctx: DurableContext) -> Any:
    def fails(step: Any) -> str:
        step.logger.info("step executed")
        raise RuntimeError("permanent failure")

    with contextlib.suppress(StepError):
        ctx.step(fails, config=no_retry())
    ctx.wait(Duration.from_seconds(1))
    return None


@requirement("1-11")
def _step_retry_once(event: Any, ctx: DurableContext) -> Any:
    def unreliable(step: Any) -> str:
        ATTEMPTS["1-11"] += 1
        if ATTEMPTS["1-11"] == 1:
            raise RuntimeError("first attempt fails")
        return "Operation succeeded"

    return ctx.step(unreliable, config=retry(3))


@requirement("1-12")
def _step_retry_exhausted(event: Any, ctx: DurableContext) -> Any:
    def always_fail(step: Any) -> str:
        raise RuntimeError("always fails")

    return ctx.step(always_fail, config=retry(4))


@requirement("1-13")
def _step_default_retry(event: Any, ctx: DurableContext) -> Any:
    def unreliable(step: Any) -> str:
        ATTEMPTS["1-13"] += 1
        if ATTEMPTS["1-13"] <= 2:
            raise RuntimeError("transient")
        return "ok"

    return ctx.step(unreliable)


@requirement("1-14")
def _step_backoff(event: Any, ctx: DurableContext) -> Any:
    def unreliable(step: Any) -> str:
        ATTEMPTS["1-14"] += 1
        if ATTEMPTS["1-14"] <= 2:
            raise RuntimeError("transient")
        return "ok"

    return ctx.step(unreliable, config=retry(5, delay=2, backoff=3))


class TransientError(Exception):
    """The error requirements 1-15 and 1-16 retry on, or not."""


def _only_transient(error: Exception, attempt: int) -> RetryDecision:
    if isinstance(error, TransientError) and attempt < 3:
        return RetryDecision.retry(Duration.from_seconds(1))
    return RetryDecision.no_retry()


def _never_transient(error: Exception, attempt: int) -> RetryDecision:
    return RetryDecision.no_retry()


@requirement("1-15")
def _step_retry_on_type(event: Any, ctx: DurableContext) -> Any:
    def flaky(step: Any) -> str:
        ATTEMPTS["1-15"] += 1
        if ATTEMPTS["1-15"] == 1:
            raise TransientError("transient")
        return "ok"

    return ctx.step(flaky, config=StepConfig(retry_strategy=_only_transient))


@requirement("1-16")
def _step_no_retry_on_type(event: Any, ctx: DurableContext) -> Any:
    def flaky(step: Any) -> str:
        raise TransientError("transient")

    return ctx.step(flaky, config=StepConfig(retry_strategy=_never_transient))


@requirement("1-17")
def _step_at_most_once_crash(event: Any, ctx: DurableContext) -> Any:
    def at_most_once_flaky_step(step: Any) -> str:
        step.logger.info(f"executing with {event}")
        raise SimulatedCrash

    return ctx.step(
        at_most_once_flaky_step,
        name="at_most_once_flaky_step",
        config=StepConfig(
            retry_strategy=RetryPresets.none(),
            step_semantics=StepSemantics.AT_MOST_ONCE_PER_RETRY,
        ),
    )


@requirement("1-18")
def _step_at_most_once_retry(event: Any, ctx: DurableContext) -> Any:
    def flaky(step: Any) -> str:
        step.logger.info(f"executing with {event}")
        ATTEMPTS["1-18"] += 1
        if ATTEMPTS["1-18"] == 1:
            raise SimulatedCrash
        return "succeeded on second attempt"

    config = retry(3)
    return ctx.step(
        flaky,
        name="at_most_once_flaky_step",
        config=StepConfig(
            retry_strategy=config.retry_strategy,
            step_semantics=StepSemantics.AT_MOST_ONCE_PER_RETRY,
        ),
    )


@requirement("1-19")
def _step_fails(event: Any, ctx: DurableContext) -> Any:
    def failing(step: Any) -> str:
        raise RuntimeError("always fails")

    return ctx.step(failing, config=no_retry())


@requirement("1-20")
def _step_caught(event: Any, ctx: DurableContext) -> Any:
    def failing(step: Any) -> str:
        raise RuntimeError("fails")

    try:
        value = ctx.step(failing, config=no_retry())
    except StepError:
        value = "fallback"
    return ctx.step(lambda _: f"{value}_result")


# 2. Waits.


@requirement("2-1")
def _wait_basic(event: Any, ctx: DurableContext) -> Any:
    ctx.wait(Duration.from_seconds(2))


@requirement("2-2")
def _wait_named(event: Any, ctx: DurableContext) -> Any:
    ctx.wait(Duration.from_seconds(2), name="custom_wait_name")


@requirement("2-3")
def _wait_two(event: Any, ctx: DurableContext) -> Any:
    ctx.wait(Duration.from_seconds(2), name="wait-1")
    ctx.wait(Duration.from_seconds(2), name="wait-2")
    return {"completedWaits": 2}


@requirement("2-4")
def _wait_minutes(event: Any, ctx: DurableContext) -> Any:
    ctx.wait(Duration.from_minutes(1))


@requirement("2-5")
def _wait_hours(event: Any, ctx: DurableContext) -> Any:
    ctx.wait(Duration.from_hours(1))


# 3. Child contexts.


def _echo_step(ctx: DurableContext, value: Any) -> Any:
    return ctx.step(lambda _: value)


@requirement("3-1")
def _child_basic(event: Any, ctx: DurableContext) -> Any:
    return ctx.run_in_child_context(lambda child: _echo_step(child, event), name="child")


@requirement("3-2")
def _child_named(event: Any, ctx: DurableContext) -> Any:
    return ctx.run_in_child_context(
        lambda child: _echo_step(child, event["value"]), name=event["name"]
    )


@requirement("3-3")
def _child_two_steps(event: Any, ctx: DurableContext) -> Any:
    def body(child: DurableContext) -> Any:
        first = child.step(lambda _: event)
        return child.step(lambda _: first)

    return ctx.run_in_child_context(body, name="child")


@requirement("3-4")
def _child_fails(event: Any, ctx: DurableContext) -> Any:
    def body(child: DurableContext) -> Any:
        def fails(_: Any) -> Any:
            raise RuntimeError("inner failure")

        return child.step(fails, config=no_retry())

    return ctx.run_in_child_context(body, name="child")


@requirement("3-5")
def _child_caught(event: Any, ctx: DurableContext) -> Any:
    def body(child: DurableContext) -> Any:
        def fails(_: Any) -> Any:
            raise RuntimeError("inner failure")

        return child.step(fails, config=no_retry())

    with contextlib.suppress(ChildContextError, StepError):
        ctx.run_in_child_context(body, name="child")
    return ctx.step(lambda _: event)


@requirement("3-6")
def _child_nested(event: Any, ctx: DurableContext) -> Any:
    def inner(child: DurableContext) -> Any:
        return child.step(lambda _: event)

    def outer(child: DurableContext) -> Any:
        child.step(lambda _: event)
        return child.run_in_child_context(inner, name="inner")

    return ctx.run_in_child_context(outer, name="outer")


@requirement("3-7")
def _child_retry(event: Any, ctx: DurableContext) -> Any:
    def body(child: DurableContext) -> Any:
        def flaky(_: Any) -> Any:
            ATTEMPTS["3-7"] += 1
            if ATTEMPTS["3-7"] == 1:
                raise RuntimeError("first attempt fails")
            return event

        return child.step(flaky, config=retry(3))

    return ctx.run_in_child_context(body, name="child")


@requirement("3-8")
def _child_retry_exhausted(event: Any, ctx: DurableContext) -> Any:
    def body(child: DurableContext) -> Any:
        def fails(_: Any) -> Any:
            raise RuntimeError("always fails")

        return child.step(fails, config=retry(2))

    return ctx.run_in_child_context(body, name="child")


@requirement("3-9")
def _child_then_wait(event: Any, ctx: DurableContext) -> Any:
    result = ctx.run_in_child_context(lambda child: _echo_step(child, event), name="child")
    ctx.wait(Duration.from_seconds(1))
    return result


@requirement("3-10")
def _child_step_wait(event: Any, ctx: DurableContext) -> Any:
    def body(child: DurableContext) -> Any:
        value = child.step(lambda _: event)
        child.wait(Duration.from_seconds(1))
        return value

    return ctx.run_in_child_context(body, name="child")


@requirement("3-11")
def _child_large(event: Any, ctx: DurableContext) -> Any:
    def body(child: DurableContext) -> Any:
        # Replay logging on (the underlying logger): a re-execution of the body shows.
        child.logger.get_logger().info(f"child body ran with {event}")
        value = child.step(lambda _: event)
        return value * (300_000 // max(1, len(value)) + 1)

    result = ctx.run_in_child_context(body, name="child")
    ctx.wait(Duration.from_seconds(1))
    return len(result)


@requirement("3-12")
def _child_crash(event: Any, ctx: DurableContext) -> Any:
    def body(child: DurableContext) -> Any:
        def crashes_once(_: Any) -> Any:
            ATTEMPTS["3-12"] += 1
            if ATTEMPTS["3-12"] == 1:
                RECORDED.wait_for("StepStarted")  # the crash comes after the start is durable
                raise SimulatedCrash
            return event

        return child.step(crashes_once)

    return ctx.run_in_child_context(body, name="child")


@requirement("3-13")
def _child_only_wait(event: Any, ctx: DurableContext) -> Any:
    def body(child: DurableContext) -> Any:
        child.wait(Duration.from_seconds(1))
        return event

    ctx.run_in_child_context(body, name="child")
    return ctx.step(lambda _: event)


@requirement("3-14")
def _child_serdes(event: Any, ctx: DurableContext) -> Any:
    return ctx.run_in_child_context(
        lambda child: _echo_step(child, event), config=ChildConfig(serdes=RawUpper()), name="child"
    )


@requirement("3-15")
def _child_raises(event: Any, ctx: DurableContext) -> Any:
    def body(child: DurableContext) -> Any:
        raise RuntimeError("child failed directly")

    return ctx.run_in_child_context(body, name="child")


@requirement("3-16")
def _child_none(event: Any, ctx: DurableContext) -> Any:
    return ctx.run_in_child_context(lambda child: None, name="child")


@requirement("3-17")
def _child_logs(event: Any, ctx: DurableContext) -> Any:
    def body(child: DurableContext) -> Any:
        child.logger.get_logger().info(f"child context ran with {event}")  # replay logging on
        return event

    result = ctx.run_in_child_context(body, name="child")
    ctx.wait(Duration.from_seconds(1))
    return result


@requirement("3-18")
def _child_mixed(event: Any, ctx: DurableContext) -> Any:
    def body(child: DurableContext) -> Any:
        value = child.step(lambda _: event)
        child.wait(Duration.from_seconds(1))
        return value

    result = ctx.run_in_child_context(body, name="child")
    result = ctx.step(lambda _: result)
    ctx.wait(Duration.from_seconds(1))
    return result


# 4. Callbacks.


def _name(event: Any) -> str:
    return str(event) if event is not None else "approval"


@requirement("4-1")
def _callback_basic(event: Any, ctx: DurableContext) -> Any:
    return ctx.create_callback(name=_name(event)).result()


@requirement("4-2")
def _callback_named(event: Any, ctx: DurableContext) -> Any:
    return ctx.create_callback(name="approval").result()


@requirement("4-3")
def _callback_timeout(event: Any, ctx: DurableContext) -> Any:
    return ctx.create_callback(
        name=_name(event), config=CallbackConfig(timeout=Duration.from_seconds(5))
    ).result()


@requirement("4-4")
def _callback_heartbeat_timeout(event: Any, ctx: DurableContext) -> Any:
    return ctx.create_callback(
        name=_name(event), config=CallbackConfig(heartbeat_timeout=Duration.from_seconds(5))
    ).result()


@requirement("4-5")
def _callback_heartbeat(event: Any, ctx: DurableContext) -> Any:
    return ctx.create_callback(
        name=_name(event), config=CallbackConfig(heartbeat_timeout=Duration.from_seconds(10))
    ).result()


@requirement("4-6")
def _callback_failure(event: Any, ctx: DurableContext) -> Any:
    return ctx.create_callback(name=_name(event)).result()


@requirement("4-7")
def _callback_step_failure(event: Any, ctx: DurableContext) -> Any:
    callback = ctx.create_callback(name=_name(event))
    ctx.step(lambda _: "side work")
    return callback.result()


@requirement("4-8")
def _callback_step_timeout(event: Any, ctx: DurableContext) -> Any:
    callback = ctx.create_callback(
        name=_name(event), config=CallbackConfig(timeout=Duration.from_seconds(5))
    )
    ctx.step(lambda _: "side work")
    return callback.result()


@requirement("4-9")
def _callback_during_wait(event: Any, ctx: DurableContext) -> Any:
    callback = ctx.create_callback(name=_name(event))
    ctx.wait(Duration.from_seconds(5))
    return callback.result()


@requirement("4-10")
def _callback_failure_during_wait(event: Any, ctx: DurableContext) -> Any:
    callback = ctx.create_callback(name=_name(event))
    ctx.wait(Duration.from_seconds(5))
    return callback.result()


@requirement("4-11")
def _callback_timeout_during_wait(event: Any, ctx: DurableContext) -> Any:
    callback = ctx.create_callback(
        name=_name(event), config=CallbackConfig(timeout=Duration.from_seconds(3))
    )
    ctx.wait(Duration.from_seconds(6))
    return callback.result()


@requirement("4-12")
def _callback_then_wait(event: Any, ctx: DurableContext) -> Any:
    result = ctx.create_callback(name=_name(event)).result()
    ctx.wait(Duration.from_seconds(2))
    return result


@requirement("4-13")
def _callback_failure_caught(event: Any, ctx: DurableContext) -> Any:
    try:
        message = ctx.create_callback(name=_name(event)).result()
    except CallbackError as exc:
        message = f"callback failed: {exc}"
    ctx.wait(Duration.from_seconds(2))
    return message


@requirement("4-14")
def _callback_timeout_caught(event: Any, ctx: DurableContext) -> Any:
    try:
        message = ctx.create_callback(
            name=_name(event), config=CallbackConfig(timeout=Duration.from_seconds(3))
        ).result()
    except CallbackError as exc:
        message = f"callback timed out: {exc}"
    ctx.wait(Duration.from_seconds(2))
    return message


class _Received(SerDes[Any]):
    """Parses a callback's JSON payload; its timestamp string becomes epoch seconds."""

    def serialize(self, value: Any, serdes_context: SerDesContext) -> str:
        return json.dumps(value)

    def deserialize(self, data: str, serdes_context: SerDesContext) -> Any:
        from datetime import datetime

        value = json.loads(data)
        stamp = value.get("timestamp")
        if isinstance(stamp, str):
            value["timestamp"] = int(
                datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
            )
        return value


class _Number(SerDes[Any]):
    def serialize(self, value: Any, serdes_context: SerDesContext) -> str:
        return json.dumps(value)

    def deserialize(self, data: str, serdes_context: SerDesContext) -> Any:
        return int(json.loads(data))


@requirement("4-15")
def _callback_custom_serdes(event: Any, ctx: DurableContext) -> Any:
    received = ctx.create_callback(
        name=_name(event), config=CallbackConfig(serdes=_Received())
    ).result()
    return {"received": received}


@requirement("4-16")
def _callback_number(event: Any, ctx: DurableContext) -> Any:
    count = ctx.create_callback(name=_name(event), config=CallbackConfig(serdes=_Number())).result()
    return {"count": count, "doubled": count * 2}


@requirement("4-17")
def _callbacks_in_turn(event: Any, ctx: DurableContext) -> Any:
    a = ctx.create_callback(name=event[0]).result()
    b = ctx.create_callback(name=event[1]).result()
    return {"a": a, "b": b}


@requirement("4-18")
def _callbacks_together(event: Any, ctx: DurableContext) -> Any:
    first = ctx.create_callback(name=event[0])
    second = ctx.create_callback(name=event[1])
    return {"a": first.result(), "b": second.result()}


@requirement("4-19")
def _callbacks_reversed(event: Any, ctx: DurableContext) -> Any:
    first = ctx.create_callback(name=event[0])
    second = ctx.create_callback(name=event[1])
    b = second.result()
    a = first.result()
    return {"a": a, "b": b}


# 6. wait_for_condition.


def _count_to(threshold: Any, *, initial: int = 0, delay: int = 1, attempts: int = 60) -> Any:
    return WaitForConditionConfig(
        wait_strategy=create_wait_strategy(
            WaitStrategyConfig(
                should_continue_polling=lambda state: state < threshold,
                max_attempts=attempts,
                initial_delay=Duration.from_seconds(delay),
                backoff_rate=1,
                jitter_strategy=JitterStrategy.NONE,
            )
        ),
        initial_state=initial,
    )


@requirement("6-1")
def _condition_basic(event: Any, ctx: DurableContext) -> Any:
    return ctx.wait_for_condition(lambda state, _: state + 1, config=_count_to(event))


@requirement("6-2")
def _condition_met(event: Any, ctx: DurableContext) -> Any:
    return ctx.wait_for_condition(lambda state, _: state, config=_count_to(event, initial=5))


@requirement("6-3")
def _condition_named(event: Any, ctx: DurableContext) -> Any:
    return ctx.wait_for_condition(
        lambda state, _: state + 1, config=_count_to(event), name="poll-status"
    )


@requirement("6-4")
def _condition_initial(event: Any, ctx: DurableContext) -> Any:
    return ctx.wait_for_condition(lambda state, _: state + 1, config=_count_to(event, initial=5))


@requirement("6-5")
def _condition_fixed_delay(event: Any, ctx: DurableContext) -> Any:
    return ctx.wait_for_condition(lambda state, _: state + 1, config=_count_to(event, delay=2))


@requirement("6-6")
def _condition_exhausted(event: Any, ctx: DurableContext) -> Any:
    return ctx.wait_for_condition(
        lambda state, _: state + 1, config=_count_to(10**9, delay=1, attempts=3)
    )


@requirement("6-7")
def _condition_raises(event: Any, ctx: DurableContext) -> Any:
    def check(state: Any, _: Any) -> Any:
        raise RuntimeError("check failed")

    return ctx.wait_for_condition(check, config=_count_to(1))


@requirement("6-8")
def _condition_raises_caught(event: Any, ctx: DurableContext) -> Any:
    def check(state: Any, _: Any) -> Any:
        raise RuntimeError("check failed")

    try:
        return ctx.wait_for_condition(check, config=_count_to(1))
    except (WaitForConditionError, StepError):
        return "recovered"


@requirement("6-9")
def _condition_object(event: Any, ctx: DurableContext) -> Any:
    def check(state: Any, _: Any) -> Any:
        attempts = state["attempts"] + 1
        return {"status": "DONE" if attempts >= 2 else "PENDING", "attempts": attempts}

    config = WaitForConditionConfig(
        wait_strategy=lambda state, attempt: (
            WaitForConditionDecision.stop_polling()
            if state["status"] == "DONE"
            else WaitForConditionDecision.continue_waiting(Duration.from_seconds(1))
        ),
        initial_state={"status": "PENDING", "attempts": 0},
    )
    return ctx.wait_for_condition(check, config=config)


@requirement("6-10")
def _condition_none(event: Any, ctx: DurableContext) -> Any:
    config = WaitForConditionConfig(
        wait_strategy=lambda state, attempt: WaitForConditionDecision.stop_polling(),
        initial_state=None,
    )
    return ctx.wait_for_condition(lambda state, _: None, config=config)


class _Wrapped(SerDes[Any]):
    """Stores a string state wrapped, reads it back unwrapped (requirement 6-11)."""

    def serialize(self, value: Any, serdes_context: SerDesContext) -> str:
        return json.dumps({"wrapped": value})

    def deserialize(self, data: str, serdes_context: SerDesContext) -> Any:
        return json.loads(data)["wrapped"]


@requirement("6-11")
def _condition_serdes(event: Any, ctx: DurableContext) -> Any:
    config = WaitForConditionConfig(
        wait_strategy=lambda state, attempt: (
            WaitForConditionDecision.stop_polling()
            if len(state) >= 2
            else WaitForConditionDecision.continue_waiting(Duration.from_seconds(1))
        ),
        initial_state="",
        serdes=_Wrapped(),
    )
    return ctx.wait_for_condition(lambda state, _: state + "x", config=config)


@requirement("6-12")
def _condition_then_step(event: Any, ctx: DurableContext) -> Any:
    reached = ctx.wait_for_condition(lambda state, _: state + 1, config=_count_to(event))
    return ctx.step(lambda _: reached * 10)


@requirement("6-13")
def _conditions_chained(event: Any, ctx: DurableContext) -> Any:
    first = ctx.wait_for_condition(lambda state, _: state + 1, config=_count_to(2))
    return ctx.wait_for_condition(lambda state, _: state + 1, config=_count_to(4, initial=first))


# 7. wait_for_callback.


def _submit(callback_id: str, context: Any) -> None:
    return None


@requirement("7-1")
def _wfc_basic(event: Any, ctx: DurableContext) -> Any:
    return ctx.wait_for_callback(_submit, name=_name(event))


@requirement("7-2")
def _wfc_named(event: Any, ctx: DurableContext) -> Any:
    return ctx.wait_for_callback(_submit, name="approval")


@requirement("7-3")
def _wfc_anonymous(event: Any, ctx: DurableContext) -> Any:
    return ctx.wait_for_callback(lambda callback_id, context: None)


@requirement("7-4")
def _wfc_failure(event: Any, ctx: DurableContext) -> Any:
    return ctx.wait_for_callback(_submit, name=_name(event))


@requirement("7-5")
def _wfc_timeout(event: Any, ctx: DurableContext) -> Any:
    return ctx.wait_for_callback(
        _submit, name=_name(event), config=WaitForCallbackConfig(timeout=Duration.from_seconds(3))
    )


@requirement("7-6")
def _wfc_failure_caught(event: Any, ctx: DurableContext) -> Any:
    try:
        return ctx.wait_for_callback(_submit, name=_name(event))
    except CallbackError:
        return "recovered"


@requirement("7-7")
def _wfc_submitter_fails(event: Any, ctx: DurableContext) -> Any:
    def submitter(callback_id: str, context: Any) -> None:
        raise RuntimeError("submitter failed")

    strategy = retry(2).retry_strategy
    return ctx.wait_for_callback(
        submitter, name=_name(event), config=WaitForCallbackConfig(retry_strategy=strategy)
    )


@requirement("7-8")
def _wfc_in_child(event: Any, ctx: DurableContext) -> Any:
    return ctx.run_in_child_context(
        lambda child: child.wait_for_callback(_submit, name=_name(event)), name="wrapper"
    )


@requirement("7-9")
def _wfc_two(event: Any, ctx: DurableContext) -> Any:
    first = ctx.wait_for_callback(_submit, name="first")
    second = ctx.wait_for_callback(_submit, name="second")
    return {"first": first, "second": second}


@requirement("7-10")
def _wfc_after_wait_and_step(event: Any, ctx: DurableContext) -> Any:
    ctx.wait(Duration.from_seconds(1))
    ctx.step(lambda _: {"fixed": "data"})
    return ctx.wait_for_callback(_submit, name=_name(event))


class _Json(SerDes[Any]):
    def serialize(self, value: Any, serdes_context: SerDesContext) -> str:
        return json.dumps(value)

    def deserialize(self, data: str, serdes_context: SerDesContext) -> Any:
        return json.loads(data)


@requirement("7-11")
def _wfc_json(event: Any, ctx: DurableContext) -> Any:
    result = ctx.wait_for_callback(
        _submit, name=_name(event), config=WaitForCallbackConfig(serdes=_Json())
    )
    return result["status"]


@requirement("7-12")
def _wfc_heartbeat_timeout(event: Any, ctx: DurableContext) -> Any:
    return ctx.wait_for_callback(
        _submit,
        name=_name(event),
        config=WaitForCallbackConfig(heartbeat_timeout=Duration.from_seconds(5)),
    )


@requirement("7-13")
def _wfc_heartbeat(event: Any, ctx: DurableContext) -> Any:
    return ctx.wait_for_callback(
        _submit,
        name=_name(event),
        config=WaitForCallbackConfig(heartbeat_timeout=Duration.from_seconds(10)),
    )


@requirement("7-14")
def _wfc_timeout_caught(event: Any, ctx: DurableContext) -> Any:
    try:
        return ctx.wait_for_callback(
            _submit,
            name=_name(event),
            config=WaitForCallbackConfig(timeout=Duration.from_seconds(3)),
        )
    except CallbackError:
        return "timed-out-handled"


@requirement("7-15")
def _wfc_empty(event: Any, ctx: DurableContext) -> Any:
    return ctx.wait_for_callback(_submit, name=_name(event))


# 5. Chained invokes (targets in TARGETS, registered by the driver under their names).

TARGETS: dict[str, Callable[[Any, Any], Any]] = {}
"""Function name -> a target handler chained invokes call."""


def target(name: str) -> Callable[[Callable[[Any, DurableContext], Any]], Any]:
    """Register a `@durable_execution` target function under `name`."""

    def decorate(func: Callable[[Any, DurableContext], Any]) -> Any:
        handler = durable_execution(func)
        TARGETS[name] = handler
        return handler

    return decorate


@target("echo")
def _echo(event: Any, ctx: DurableContext) -> Any:
    return event


@target("fails")
def _fails(event: Any, ctx: DurableContext) -> Any:
    raise RuntimeError("target failed")


@target("measure")
def _measure(event: Any, ctx: DurableContext) -> Any:
    return {"received": len(event)}


@requirement("5-1")
def _invoke_echo(event: Any, ctx: DurableContext) -> Any:
    return ctx.invoke("echo", event)


@requirement("5-2")
def _invoke_named(event: Any, ctx: DurableContext) -> Any:
    return ctx.invoke("echo", event["payload"], name=event["name"])


@requirement("5-3")
def _invoke_nested(event: Any, ctx: DurableContext) -> Any:
    return ctx.invoke("echo", event)


@requirement("5-4")
def _invoke_null(event: Any, ctx: DurableContext) -> Any:
    return ctx.invoke("echo", None)


@requirement("5-5")
def _invoke_fails(event: Any, ctx: DurableContext) -> Any:
    return ctx.invoke("fails", None)


@requirement("5-6")
def _invoke_fails_caught(event: Any, ctx: DurableContext) -> Any:
    try:
        return ctx.invoke("fails", None)
    except InvokeError:
        return "fallback"


@requirement("5-7")
def _invoke_large(event: Any, ctx: DurableContext) -> Any:
    return ctx.invoke("measure", "x" * 200_000)


@requirement("5-8")
def _invoke_tenant(event: Any, ctx: DurableContext) -> Any:
    return ctx.invoke("echo", event["payload"], config=InvokeConfig(tenant_id=event["tenantId"]))


@requirement("5-9")
def _invoke_then_wait(event: Any, ctx: DurableContext) -> Any:
    result = ctx.invoke("echo", "cached")
    ctx.wait(Duration.from_seconds(1))
    return result


@requirement("5-10")
def _invoke_fails_then_wait(event: Any, ctx: DurableContext) -> Any:
    try:
        result = ctx.invoke("fails", None)
    except InvokeError:
        result = "fallback"
    ctx.wait(Duration.from_seconds(1))
    return result


@requirement("5-11")
def _step_then_invoke(event: Any, ctx: DurableContext) -> Any:
    value = ctx.step(lambda _: "from step")
    return ctx.invoke("echo", value)


@requirement("5-12")
def _invoke_then_step(event: Any, ctx: DurableContext) -> Any:
    value = ctx.invoke("echo", "from invoke")
    return ctx.step(lambda _: value)


@requirement("5-13")
def _invoke_in_child(event: Any, ctx: DurableContext) -> Any:
    return ctx.run_in_child_context(lambda child: child.invoke("echo", "inside"), name="child")


@requirement("5-14")
def _invoke_twice(event: Any, ctx: DurableContext) -> Any:
    first = ctx.invoke("echo", "one")
    second = ctx.invoke("echo", "two")
    return [first, second]


class _UpperPayload(SerDes[Any]):
    def serialize(self, value: Any, serdes_context: SerDesContext) -> str:
        return json.dumps({k: v.upper() if isinstance(v, str) else v for k, v in value.items()})

    def deserialize(self, data: str, serdes_context: SerDesContext) -> Any:
        return json.loads(data)


class _UpperResult(SerDes[Any]):
    def serialize(self, value: Any, serdes_context: SerDesContext) -> str:
        return json.dumps(value)

    def deserialize(self, data: str, serdes_context: SerDesContext) -> Any:
        return data.upper()


@requirement("5-15")
def _invoke_payload_serdes(event: Any, ctx: DurableContext) -> Any:
    return ctx.invoke("echo", event, config=InvokeConfig(serdes_payload=_UpperPayload()))


@requirement("5-16")
def _invoke_result_serdes(event: Any, ctx: DurableContext) -> Any:
    return ctx.invoke("echo", event, config=InvokeConfig(serdes_result=_UpperResult()))


# 8. parallel.


def _sequential(**completion: Any) -> ParallelConfig:
    return ParallelConfig(max_concurrency=1, completion_config=CompletionConfig(**completion))


def _project(batch: Any, *keys: str) -> dict[str, Any]:
    values = {
        "completionReason": batch.completion_reason.value,
        "status": batch.status.value,
        "successCount": batch.success_count,
        "failureCount": batch.failure_count,
        "totalCount": batch.total_count,
    }
    return {key: values[key] for key in keys}


def _const(value: Any) -> Callable[[DurableContext], Any]:
    return lambda ctx: value


def _stepped(value: Any) -> Callable[[DurableContext], Any]:
    return lambda ctx: ctx.step(lambda _: value)


def _raises(ctx: DurableContext) -> Any:
    raise RuntimeError("branch failed")


_ALL = ("completionReason", "status", "successCount", "failureCount", "totalCount")
_NO_STATUS = ("completionReason", "successCount", "failureCount", "totalCount")


@requirement("8-1")
def _parallel_steps(event: Any, ctx: DurableContext) -> Any:
    batch = ctx.parallel(
        [_stepped("task-1"), _stepped("task-2")], name="parallel", config=_sequential()
    )
    return batch.get_results()


@requirement("8-2")
def _parallel_unnamed(event: Any, ctx: DurableContext) -> Any:
    return ctx.parallel([_const("alpha"), _const("beta")], config=_sequential()).get_results()


@requirement("8-3")
def _parallel_named_branches(event: Any, ctx: DurableContext) -> Any:
    branches = [
        ParallelBranch(_const("one"), name="first"),
        ParallelBranch(_const("two"), name="second"),
    ]
    return ctx.parallel(branches, name="named", config=_sequential()).get_results()


@requirement("8-4")
def _parallel_types(event: Any, ctx: DurableContext) -> Any:
    branches = [_const("hello"), _const(42), _const({"k": "v"})]
    return ctx.parallel(branches, config=_sequential()).get_results()


@requirement("8-5")
def _parallel_empty(event: Any, ctx: DurableContext) -> Any:
    return ctx.parallel([], config=_sequential()).get_results()


@requirement("8-6")
def _parallel_fail_fast(event: Any, ctx: DurableContext) -> Any:
    batch = ctx.parallel(
        [_const("ok"), _raises, _const("never")], config=_sequential(tolerated_failure_count=0)
    )
    return _project(batch, *_ALL)


@requirement("8-7")
def _parallel_rethrow(event: Any, ctx: DurableContext) -> Any:
    batch = ctx.parallel([_raises, _const("never")], config=_sequential(tolerated_failure_count=0))
    batch.throw_if_error()
    return batch.get_results()


@requirement("8-8")
def _parallel_min_successful(event: Any, ctx: DurableContext) -> Any:
    branches = [_const("a"), _const("b"), _const("c"), _const("d")]
    batch = ctx.parallel(branches, config=_sequential(min_successful=2))
    return _project(batch, "completionReason", "successCount", "totalCount")


@requirement("8-9")
def _parallel_tolerated(event: Any, ctx: DurableContext) -> Any:
    batch = ctx.parallel(
        [_const("a"), _raises, _const("c")], config=_sequential(tolerated_failure_count=1)
    )
    return _project(batch, *_ALL)


@requirement("8-10")
def _parallel_tolerance_exceeded(event: Any, ctx: DurableContext) -> Any:
    batch = ctx.parallel(
        [_raises, _raises, _const("c")], config=_sequential(tolerated_failure_count=1)
    )
    return _project(batch, *_NO_STATUS)


@requirement("8-11")
def _parallel_concurrent(event: Any, ctx: DurableContext) -> Any:
    branches = [_const("r0"), _const("r1"), _const("r2")]
    return ctx.parallel(branches, config=ParallelConfig(max_concurrency=2)).get_results()


@requirement("8-12")
def _parallel_flat(event: Any, ctx: DurableContext) -> Any:
    config = ParallelConfig(max_concurrency=1, nesting_type=NestingType.FLAT)
    return ctx.parallel([_stepped("fa"), _stepped("fb")], config=config).get_results()


@requirement("8-13")
def _parallel_percentage(event: Any, ctx: DurableContext) -> Any:
    branches = [_raises, _raises, _const("c"), _const("d")]
    batch = ctx.parallel(branches, config=_sequential(tolerated_failure_percentage=25))
    return _project(batch, *_NO_STATUS)


@requirement("8-14")
def _parallel_wait(event: Any, ctx: DurableContext) -> Any:
    def waits(child: DurableContext) -> Any:
        child.wait(Duration.from_seconds(2))
        return "b1"

    return ctx.parallel([_stepped("b0"), waits], config=_sequential()).get_results()


@requirement("8-15")
def _parallel_item_serdes(event: Any, ctx: DurableContext) -> Any:
    config = ParallelConfig(max_concurrency=1, item_serdes=_Wrapped())
    return ctx.parallel([_const("x"), _const("y")], config=config).get_results()


@requirement("8-16")
def _parallel_all_fail(event: Any, ctx: DurableContext) -> Any:
    batch = ctx.parallel([_raises, _raises, _raises], config=_sequential(tolerated_failure_count=3))
    return _project(batch, *_ALL)


@requirement("8-17")
def _parallel_min_not_reached(event: Any, ctx: DurableContext) -> Any:
    batch = ctx.parallel([_const("a"), _raises, _const("c")], config=_sequential(min_successful=3))
    return _project(batch, *_ALL)


@requirement("8-18")
def _parallel_min_and_tolerance(event: Any, ctx: DurableContext) -> Any:
    branches = [_raises, _raises, _const("c"), _const("d")]
    batch = ctx.parallel(branches, config=_sequential(min_successful=3, tolerated_failure_count=1))
    return _project(batch, *_NO_STATUS)


@requirement("8-19")
def _parallel_bad_concurrency(event: Any, ctx: DurableContext) -> Any:
    config = ParallelConfig(max_concurrency=0)
    return ctx.parallel(
        [_const("a"), _const("b")], name="bad-concurrency", config=config
    ).get_results()


@requirement("8-20")
def _parallel_accessors(event: Any, ctx: DurableContext) -> Any:
    batch = ctx.parallel(
        [_const("a"), _raises, _const("c")], config=_sequential(tolerated_failure_count=1)
    )
    return {
        "hasFailure": batch.has_failure,
        "successCount": len(batch.succeeded()),
        "failureCount": len(batch.failed()),
        "errorCount": len([e for e in batch.get_errors() if e is not None]),
    }


@requirement("8-21")
def _parallel_nested(event: Any, ctx: DurableContext) -> Any:
    def inner(child: DurableContext) -> Any:
        return child.parallel([_stepped("i1"), _stepped("i2")], config=_sequential()).get_results()

    return ctx.parallel([inner], config=_sequential()).get_results()


@requirement("8-22")
def _parallel_percentage_kept(event: Any, ctx: DurableContext) -> Any:
    branches = [_raises, _const("b"), _const("c"), _const("d")]
    batch = ctx.parallel(branches, config=_sequential(tolerated_failure_percentage=25))
    return _project(batch, *_ALL)


# 9. map.


def _map_sequential(**completion: Any) -> MapConfig:
    return MapConfig(max_concurrency=1, completion_config=CompletionConfig(**completion))


def _item_fails_at(*failing: int) -> Callable[[DurableContext, Any, int, Any], Any]:
    def func(ctx: DurableContext, item: Any, index: int, items: Any) -> Any:
        if index in failing:
            raise RuntimeError(f"item {index} failed")
        return item

    return func


class _Prefixed(SerDes[Any]):
    """Stores an item's result as `wrapped:<value>` (requirement 9-14)."""

    def serialize(self, value: Any, serdes_context: SerDesContext) -> str:
        return f"wrapped:{value}"

    def deserialize(self, data: str, serdes_context: SerDesContext) -> Any:
        return data.removeprefix("wrapped:")


class _OpSerde(SerDes[Any]):
    """Stores a whole map result as `OPSERDE:<a>,<b>` (requirements 9-19, 9-20)."""

    def serialize(self, value: Any, serdes_context: SerDesContext) -> str:
        if not isinstance(value, BatchResult):  # an item's result: the default form
            return json.dumps(value)
        return "OPSERDE:" + ",".join(str(r) for r in value.get_results())

    def deserialize(self, data: str, serdes_context: SerDesContext) -> Any:
        if not data.startswith("OPSERDE:"):
            return json.loads(data)
        values = data.removeprefix("OPSERDE:").split(",") if data != "OPSERDE:" else []
        return BatchResult.from_dict(
            {
                "all": [
                    {"index": i, "status": "SUCCEEDED", "result": v} for i, v in enumerate(values)
                ],
                "completionReason": "ALL_COMPLETED",
            }
        )


@requirement("9-1")
def _map_steps(event: Any, ctx: DurableContext) -> Any:
    def greet(child: DurableContext, item: Any, index: int, items: Any) -> Any:
        return child.step(lambda _: f"Hello, {item}!")

    return ctx.map(event, greet, name="map", config=_map_sequential()).get_results()


@requirement("9-2")
def _map_direct(event: Any, ctx: DurableContext) -> Any:
    return ctx.map(
        event, lambda c, item, i, items: item * 2, config=_map_sequential()
    ).get_results()


@requirement("9-3")
def _map_index(event: Any, ctx: DurableContext) -> Any:
    return ctx.map(
        event, lambda c, item, i, items: item + i, config=_map_sequential()
    ).get_results()


@requirement("9-4")
def _map_empty(event: Any, ctx: DurableContext) -> Any:
    return ctx.map(event, lambda c, item, i, items: item, config=_map_sequential()).get_results()


@requirement("9-5")
def _map_fail_fast(event: Any, ctx: DurableContext) -> Any:
    batch = ctx.map(
        ["ok", "bad", "never"], _item_fails_at(1), config=_map_sequential(tolerated_failure_count=0)
    )
    return _project(batch, *_ALL)


@requirement("9-6")
def _map_rethrow(event: Any, ctx: DurableContext) -> Any:
    batch = ctx.map(
        ["bad", "never"], _item_fails_at(0), config=_map_sequential(tolerated_failure_count=0)
    )
    batch.throw_if_error()
    return batch.get_results()


@requirement("9-7")
def _map_min_successful(event: Any, ctx: DurableContext) -> Any:
    batch = ctx.map(
        ["a", "b", "c", "d"], _item_fails_at(), config=_map_sequential(min_successful=2)
    )
    return _project(batch, "completionReason", "successCount", "totalCount")


@requirement("9-8")
def _map_tolerated(event: Any, ctx: DurableContext) -> Any:
    batch = ctx.map(
        ["a", "b", "c"], _item_fails_at(1), config=_map_sequential(tolerated_failure_count=1)
    )
    return _project(batch, *_ALL)


@requirement("9-9")
def _map_tolerance_exceeded(event: Any, ctx: DurableContext) -> Any:
    batch = ctx.map(
        ["a", "b", "c"], _item_fails_at(0, 1), config=_map_sequential(tolerated_failure_count=1)
    )
    return _project(batch, *_NO_STATUS)


@requirement("9-10")
def _map_percentage(event: Any, ctx: DurableContext) -> Any:
    batch = ctx.map(
        ["a", "b", "c", "d"],
        _item_fails_at(0, 1),
        config=_map_sequential(tolerated_failure_percentage=25),
    )
    return _project(batch, *_NO_STATUS)


@requirement("9-11")
def _map_concurrent(event: Any, ctx: DurableContext) -> Any:
    return ctx.map(
        ["r0", "r1", "r2"], _item_fails_at(), config=MapConfig(max_concurrency=2)
    ).get_results()


@requirement("9-12")
def _map_flat(event: Any, ctx: DurableContext) -> Any:
    def func(child: DurableContext, item: Any, index: int, items: Any) -> Any:
        return child.step(lambda _: item)

    config = MapConfig(max_concurrency=1, nesting_type=NestingType.FLAT)
    return ctx.map(["fa", "fb"], func, config=config).get_results()


@requirement("9-13")
def _map_item_namer(event: Any, ctx: DurableContext) -> Any:
    config = MapConfig(max_concurrency=1, item_namer=lambda item, index: f"item-{item}")
    return ctx.map(event, lambda c, item, i, items: item * 10, config=config).get_results()


@requirement("9-14")
def _map_item_serdes(event: Any, ctx: DurableContext) -> Any:
    config = MapConfig(max_concurrency=1, item_serdes=_Prefixed())
    return ctx.map(
        ["x", "y"], lambda c, item, i, items: item.upper(), name="serdes", config=config
    ).get_results()


@requirement("9-15")
def _map_suspend(event: Any, ctx: DurableContext) -> Any:
    def func(child: DurableContext, item: Any, index: int, items: Any) -> Any:
        if index == 1:
            child.wait(Duration.from_seconds(1))
        return child.step(lambda _: item)

    return ctx.map(["r0", "r1"], func, name="suspend", config=_map_sequential()).get_results()


@requirement("9-16")
def _map_large(event: Any, ctx: DurableContext) -> Any:
    batch = ctx.map(
        ["a", "b", "c", "d"], lambda c, item, i, items: item * 70_000, config=_map_sequential()
    )
    return {"successCount": batch.success_count, "totalCount": batch.total_count}


@requirement("9-17")
def _map_then_wait(event: Any, ctx: DurableContext) -> Any:
    batch = ctx.map(["a", "b"], lambda c, item, i, items: item.upper(), config=_map_sequential())
    ctx.wait(Duration.from_seconds(1))
    return batch.get_results()


@requirement("9-18")
def _map_failed_then_wait(event: Any, ctx: DurableContext) -> Any:
    batch = ctx.map(
        ["ok", "bad"], _item_fails_at(1), config=_map_sequential(tolerated_failure_count=1)
    )
    ctx.wait(Duration.from_seconds(1))
    return _project(batch, *_ALL)


@requirement("9-19")
def _map_op_serdes(event: Any, ctx: DurableContext) -> Any:
    config = MapConfig(max_concurrency=1, serdes=_OpSerde())
    return ctx.map(["x", "y"], lambda c, item, i, items: item.upper(), config=config).get_results()


@requirement("9-20")
def _map_op_serdes_replayed(event: Any, ctx: DurableContext) -> Any:
    config = MapConfig(max_concurrency=1, serdes=_OpSerde())
    batch = ctx.map(["x", "y"], lambda c, item, i, items: item.upper(), config=config)
    ctx.wait(Duration.from_seconds(1))
    return batch.get_results()


# 10. Plugins (their records go to LOG_LINES, as stdout lines would).

LOG_LINES: list[str] = []
"""What the handlers and their plugins printed and logged, in order (the driver clears it)."""


def emit(record: dict[str, Any]) -> None:
    """Print a JSON record to stdout, as the requirements' plugins do, and keep it."""
    LOG_LINES.append(json.dumps(record))


class _Plugin(DurableInstrumentationPlugin):
    def __init__(self, name: str, hooks: set[str], faulty: bool = False) -> None:
        self.name, self.hooks, self.faulty, self.arn = name, hooks, faulty, None

    def _log(self, hook: str, **fields: Any) -> None:
        if hook not in self.hooks:
            return
        emit({"plugin": self.name, "hook": hook, "durableExecutionArn": self.arn, **fields})
        if self.faulty:
            raise RuntimeError(f"plugin hook {hook} failed")

    def on_invocation_start(self, info: Any) -> None:
        self.arn = info.execution_arn
        self._log("invocation-start", first=info.is_first_invocation)

    def on_invocation_end(self, info: Any) -> None:
        self._log("invocation-end", status=info.status.value)

    def on_operation_start(self, info: Any) -> None:
        if info.operation_type.value == "STEP":
            self._log("operation-start", op=info.operation_id)

    def on_operation_end(self, info: Any) -> None:
        if info.operation_type.value == "STEP":
            self._log("operation-end", op=info.operation_id, status=info.status.value)

    def on_user_function_start(self, info: Any) -> None:
        if info.operation_type.value == "STEP":
            self._log("attempt-start", n=ATTEMPTS["attempt"] + 1, op=info.operation_id)

    def on_user_function_end(self, info: Any) -> None:
        if info.operation_type.value == "STEP":
            ATTEMPTS["attempt"] += 1
            self._log(
                "attempt-end",
                n=ATTEMPTS["attempt"],
                outcome=info.outcome.value,
                op=info.operation_id,
            )


class _Factory:
    def __init__(self, name: str, *hooks: str, faulty: bool = False) -> None:
        self.name, self.hooks, self.faulty = name, set(hooks), faulty

    def create_plugin(self, info: Any) -> _Plugin:
        return _Plugin(self.name, self.hooks, self.faulty)


_INVOCATION_HOOKS = ("invocation-start", "invocation-end")
_ALL_HOOKS = (
    *_INVOCATION_HOOKS,
    "operation-start",
    "operation-end",
    "attempt-start",
    "attempt-end",
)


def plugged(
    req_id: str, *factories: _Factory
) -> Callable[[Callable[[Any, DurableContext], Any]], Any]:
    """Register a handler for `req_id` with instrumentation plugins."""

    def decorate(func: Callable[[Any, DurableContext], Any]) -> Any:
        handler = durable_execution(func, plugins=list(factories))
        HANDLERS[req_id] = handler
        return handler

    return decorate


def _greeting(event: Any, ctx: DurableContext) -> Any:
    def greet(step: Any) -> str:
        emit({"message": f"Greeting step running for: {event}"})
        return f"Hello, {event}!"

    return ctx.step(greet)


@plugged("10-1", _Factory("CONFPLUGIN", *_INVOCATION_HOOKS))
def _plugin_invocation(event: Any, ctx: DurableContext) -> Any:
    return _greeting(event, ctx)


@plugged("10-2", _Factory("CONFPLUGIN", "operation-start", "operation-end"))
def _plugin_operations(event: Any, ctx: DurableContext) -> Any:
    return _greeting(event, ctx)


@plugged("10-3", _Factory("CONFPLUGIN", "attempt-start", "attempt-end"))
def _plugin_attempts(event: Any, ctx: DurableContext) -> Any:
    def unreliable(step: Any) -> str:
        ATTEMPTS["10-3"] += 1
        if ATTEMPTS["10-3"] == 1:
            raise RuntimeError("first attempt fails")
        return "Operation succeeded"

    return ctx.step(unreliable, config=retry(3))


@plugged("10-4", _Factory("CONFPLUGIN-FAULTY", *_ALL_HOOKS, faulty=True))
def _plugin_faulty(event: Any, ctx: DurableContext) -> Any:
    return _greeting(event, ctx)


@plugged(
    "10-5",
    _Factory("CONFPLUGIN-A", *_INVOCATION_HOOKS),
    _Factory("CONFPLUGIN-B", *_INVOCATION_HOOKS),
)
def _plugin_two(event: Any, ctx: DurableContext) -> Any:
    return _greeting(event, ctx)


@plugged("10-6", _Factory("CONFPLUGIN", *_INVOCATION_HOOKS))
def _plugin_wait(event: Any, ctx: DurableContext) -> Any:
    ctx.wait(Duration.from_seconds(2))


@plugged("10-7", _Factory("CONFPLUGIN", *_INVOCATION_HOOKS))
def _plugin_failing_step(event: Any, ctx: DurableContext) -> Any:
    def fails(step: Any) -> str:
        raise RuntimeError("always fails")

    return ctx.step(fails, config=no_retry())
