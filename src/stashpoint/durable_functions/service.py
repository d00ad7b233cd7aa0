"""The checkpoint service of AWS Lambda durable functions, kept in a stash.

`DurableService` does what the Lambda service does for `@durable_execution` handlers:
it starts executions, hands an invocation its checkpoint token and operations, applies
checkpoints (`operations.apply_checkpoint`), records the invocation's answer, resolves
waits, retries, callbacks and chained invokes, and answers the history and status
calls. Everything is stored through `executions` (one log per execution, one
compare-and-swap append per change), so an acknowledged checkpoint is never lost or
overwritten, and a zombie invocation's checkpoint (its execution taken over after its
lease ran out) is refused with `StaleCheckpointToken`.

Plain dicts in the Lambda API's wire shapes in and out; `client` adapts them to the SDK's
types. Blocking: the SDK's handlers are synchronous.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import secrets
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from stashpoint.cache import Lru
from stashpoint.durable_functions import operations as ops
from stashpoint.durable_functions.checkpoints import apply_checkpoint
from stashpoint.durable_functions.due_index import DueIndex
from stashpoint.durable_functions.executions import Executions, Held
from stashpoint.durable_functions.operations import Change, ExecutionView, Invocation
from stashpoint.errors import (
    CheckpointConflict,
    CheckpointNotFound,
    DurableExecutionExists,
    DurableExecutionNotFound,
    InvalidArgument,
    InvalidDurableUpdate,
    StaleCheckpointToken,
    StashpointError,
    described,
)
from stashpoint.ids import validate_id
from stashpoint.steps import PARALLEL_WIDTH, Call, Now, Parallel, Steps, ask, run_sync
from stashpoint.stores.layout import DURABLE_EXECUTIONS

if TYPE_CHECKING:
    from stashpoint.stash import Stash

T = TypeVar("T")

log = logging.getLogger("stashpoint.durable_functions")

ARN_PREFIX = "arn:stashpoint:lambda-durable:"
"""Every execution ARN this service issues starts so: `{prefix}{function}:{name}/{op}`,
`op` the id of the execution's own operation (the SDK reads it from the ARN's end)."""
DEFAULT_LEASE = timedelta(minutes=15)
"""How long an invocation holds its execution without checkpointing (Lambda's longest
invocation): after it, another worker may take the execution over."""
MAX_INVOCATION_FAILURES = 3
"""Invocations in a row that may end without an answer before the execution fails."""
DEFAULT_SWEEP = timedelta(minutes=1)
"""How often a worker on an indexed stash also scans every execution (the safety net for
an index item a dead process did not write)."""
DUE_PAGE = 256
"""Due executions read from the index at a time."""


def execution_id(arn: str) -> str:
    """Return the log id of the execution `arn` names; `DurableExecutionNotFound` if none."""
    if not isinstance(arn, str) or not arn.startswith(ARN_PREFIX):
        raise DurableExecutionNotFound(f"not a durable execution ARN: {described(arn)}")
    rest, _, op = arn[len(ARN_PREFIX) :].partition("/")
    function, _, name = rest.partition(":")
    if not function or not name or ":" in name or op != execution_op_of(name):
        raise DurableExecutionNotFound(f"not a durable execution ARN: {described(arn)}")
    return validate_id(f"{function}:{name}", what="execution id")


def arn_of(function: str, name: str) -> str:
    """Return the ARN of the execution `name` of `function`."""
    return f"{ARN_PREFIX}{function}:{name}/{execution_op_of(name)}"


def execution_op_of(name: str) -> str:
    """Return the id of the execution operation of the execution `name`."""
    return hashlib.blake2b(name.encode(), digest_size=16).hexdigest()


def _check_name(value: Any, what: str) -> str:
    if (
        not isinstance(value, str)
        or not value
        or len(value) > 64
        or not all(c.isalnum() or c in "-_." for c in value)
    ):
        raise InvalidArgument(
            f"{what} must be 1-64 characters of [A-Za-z0-9-_.], not {described(value)}"
        )
    return value


@dataclass(frozen=True, slots=True)
class Claimed:
    """An invocation's start: what its handler is given."""

    arn: str
    """The execution's ARN."""
    checkpoint_token: str
    """The token its first checkpoint names."""
    operations: list[dict[str, Any]]
    """Every operation so far (wire form)."""
    function: str
    """The registered function to invoke."""
    request_id: str
    """The invocation's request id."""


class DurableService:
    """The Lambda durable functions checkpoint service, over one stash."""

    def __init__(
        self,
        stash: Stash,
        *,
        lease: timedelta = DEFAULT_LEASE,
        max_invocation_failures: int = MAX_INVOCATION_FAILURES,
        sweep: timedelta = DEFAULT_SWEEP,
    ) -> None:
        if not isinstance(lease, timedelta) or lease <= timedelta(0):
            raise InvalidArgument(f"lease must be a positive timedelta, not {described(lease)}")
        if not isinstance(sweep, timedelta) or sweep <= timedelta(0):
            raise InvalidArgument(f"sweep must be a positive timedelta, not {described(sweep)}")
        self.stash = stash
        """The stash executions live in."""
        self.lease = lease
        """How long an invocation holds its execution between checkpoints."""
        self.max_invocation_failures = max_invocation_failures
        """Invocations in a row without an answer before the execution fails."""
        self.executions = Executions(stash.log_steps(DURABLE_EXECUTIONS))
        """The executions' storage steps."""
        self.due_index = DueIndex(stash.layout.prefix) if stash.indexed else None
        """Where workers find due executions (`due_index`); None on a stash without an index."""
        self.sweep = sweep
        """How often `due` scans every execution although the index answers."""
        self._swept_ms: int | None = None
        self._started: Lru[str, bool] = Lru(4096)  # chained invokes' targets started here

    # Driving.

    def _run(self, steps: Steps[T]) -> T:
        return run_sync(steps, self.stash.driver)

    def now_ms(self) -> int:
        """Return the stash clock's time in epoch milliseconds."""
        return int(self._run(ask(Now())).timestamp() * 1000)

    def _update(
        self, arn: str, plan: Callable[[Held, int], Change | None], *, fresh: bool = False
    ) -> Held:
        log_id = execution_id(arn)
        before: list[ops.ExecutionState] = []

        def planned(held: Held) -> Change | None:
            before[:] = [held.view.state]
            return plan(held, now)

        with self.executions.lock(log_id):
            now = self.now_ms()
            held = self._run(self.executions.update(log_id, planned, trust_cached=not fresh))
        if before and held.view.state is not before[0]:
            self._index(log_id, held, before[0])
        return held

    def _index(self, log_id: str, held: Held, before: ops.ExecutionState | None) -> None:
        """Record when the execution is due, if this append changed it (`due_index`)."""
        if self.due_index is None:
            return
        after = held.view.state
        if before is not None:
            if _due_at(before) == _due_at(after):
                return
            held_on = before.invocation is not None and after.invocation is not None
            if held_on and before.invocation.nonce == after.invocation.nonce:  # type: ignore[union-attr]
                return  # a checkpoint renewed the lease: an early item costs one read, no more
        self._index_at(log_id, held.head.version, after)

    def _index_at(self, log_id: str, version: int, state: ops.ExecutionState) -> None:
        assert self.due_index is not None
        try:
            self._run(self.due_index.record(log_id, version, _due_at(state)))
        except StashpointError as exc:
            # The append is stored and acknowledged; the item only follows it. The sweep
            # (or the next change) rewrites it: a late item delays the execution, no more.
            log.warning("the due item of execution %s was not written (%s)", log_id, exc.kind)

    def read(self, arn: str) -> ExecutionView:
        """Return the execution's newest operations, history and state."""
        log_id = execution_id(arn)
        with self.executions.lock(log_id):
            return self._run(self.executions.read(log_id)).view.copy()

    # Executions.

    def start(
        self,
        function: str,
        payload: str | None = None,
        *,
        name: str | None = None,
        timeout_s: int | None = None,
        parent: tuple[str, str] | None = None,
    ) -> str:
        """Start an execution of `function` with the JSON text `payload`; return its ARN.

        Starting again with the same name and payload returns the same ARN (a retried
        start); another payload under a taken name is `DurableExecutionExists`.
        """
        _check_name(function, "function")
        name = _check_name(name, "name") if name is not None else uuid.uuid4().hex
        if payload is not None and not isinstance(payload, str):
            raise InvalidArgument(f"payload must be JSON text, not {described(payload)}")
        arn = arn_of(function, name)
        log_id = execution_id(arn)
        change = ops.new_execution(
            function=function,
            name=name,
            execution_op=execution_op_of(name),
            input_payload=payload,
            now_ms=self.now_ms(),
            timeout_s=timeout_s,
            parent=parent,
        )
        with self.executions.lock(log_id):
            try:
                created = self._run(self.executions.create(log_id, change))
            except CheckpointConflict:
                # A create-only write that found an execution judges it by its content.
                view = self._run(self.executions.read(log_id)).view
                execution = view.operations[view.state.execution_op]
                same = (
                    view.state.function == function
                    and execution.get("ExecutionDetails", {}).get("InputPayload") == payload
                    and view.state.parent == parent
                )
                if not same:
                    raise DurableExecutionExists(
                        "an execution of this function already has this name", object_name=arn
                    ) from None
                # A retried start: its first try may have died before the item was written.
                created = self._run(self.executions.read(log_id))
        self._index(log_id, created, None)
        return arn

    def claim(self, arn: str, worker: str) -> Claimed | None:
        """Take the execution for an invocation if it is due and free; None if not.

        A due wait, retry or timeout is resolved in the same append. An invocation whose
        lease ran out is recorded as ended without an answer (`InvocationCompleted` with
        an error); after `max_invocation_failures` of those the execution fails. An
        execution past its timeout ends `TIMED_OUT` instead. An ended target of a chained
        invoke whose caller was not told yet (its process died in between) tells it now.
        """
        nonce = secrets.token_hex(12)
        request_id = str(uuid.uuid4())

        def plan(held: Held, now: int) -> Change | None:
            view, state = held.view, held.view.state
            if state.ended:
                return None
            if state.timeout_s is not None and state.started_ms + state.timeout_s * 1000 <= now:
                error = {"ErrorType": "Execution.TimedOut", "ErrorMessage": "execution timed out"}
                return ops.end_execution(view, ops.TIMED_OUT, error, now)
            if state.invocation is not None:
                if state.invocation.lease_ms > now:
                    return None  # held by a live invocation
                lost = ops.end_invocation(view, None, now)
                if lost.state.failed_invocations >= self.max_invocation_failures:
                    return _fail_after(view, lost, now, "Invocation.Failed")
                view = _folded(view, lost)
                claimed = ops.claim(view, self._invocation(worker, now, nonce, request_id), now)
                return _joined(lost, claimed)
            if not state.ready and (state.due_ms is None or state.due_ms > now):
                return None
            return ops.claim(view, self._invocation(worker, now, nonce, request_id), now)

        log_id = execution_id(arn)
        with self.executions.lock(log_id):
            now = self.now_ms()
            # The newest entry's state alone says whether it is due: one read, not every
            # entry this process has not seen, for an execution that is not.
            looked = self._run(self.executions.read_if(log_id, lambda s: _is_due(s, now)))
        if not isinstance(looked, Held):
            head, seen = looked
            if self.due_index is not None:
                self._index_at(log_id, head.version, seen)
            return None
        held = self._update(arn, plan)  # on the version just read (a newer one: a conflict)
        state = held.view.state
        if state.ended and state.parent is not None and not state.parent_told:
            self._tell_parent(arn, held.view.copy())
        inv = state.invocation
        if inv is None or inv.nonce != nonce:
            return None  # another worker won it: its claim wrote the item
        return Claimed(
            arn=arn,
            checkpoint_token=_token(held.head.version, nonce),
            operations=[ops.public_operation(op) for op in held.view.operations.values()],
            function=held.view.state.function,
            request_id=request_id,
        )

    def _invocation(self, worker: str, now: int, nonce: str, request_id: str) -> Invocation:
        lease_ms = now + int(self.lease.total_seconds() * 1000)
        return Invocation(nonce, worker, now, lease_ms, request_id)

    def checkpoint(
        self,
        arn: str,
        checkpoint_token: str,
        updates: list[dict[str, Any]],
        client_token: str | None = None,
    ) -> tuple[str, list[dict[str, Any]]]:
        """Apply a checkpoint; return the next token and the operations it changed.

        `StaleCheckpointToken` if the token's invocation no longer holds the execution;
        `InvalidDurableUpdate` if an update is refused (nothing stored). A checkpoint
        retried with the same `client_token` after its answer was lost gets the answer.
        """
        version, nonce = _parse_token(checkpoint_token)
        if client_token is not None and not isinstance(client_token, str):
            raise InvalidDurableUpdate("client_token must be a string")
        answered: list[tuple[int, list[dict[str, Any]]]] = []

        def plan(held: Held, now: int) -> Change | None:
            state = held.view.state
            _check_holder(state, nonce, arn)
            if (
                client_token is not None
                and state.client_token is not None
                and state.client_token[0] == client_token
                and version < state.client_token[1]
            ):
                answered.append((state.client_token[1], []))
                return None  # applied already: the retry gets the same answer
            change = apply_checkpoint(
                held.view,
                updates,
                now,
                new_callback_id=lambda op_id: _callback_id(execution_id(arn), op_id),
                start_invoke=lambda op: self._child_arn(arn, op),
            )
            assert state.invocation is not None
            lease_ms = now + int(self.lease.total_seconds() * 1000)
            change.state = replace(
                change.state,
                invocation=replace(state.invocation, lease_ms=lease_ms),
                client_token=None
                if client_token is None
                else (client_token, held.head.version + 1),
            )
            return change

        held = self._update(arn, plan)
        if answered:
            changed = self._changed_at(arn, answered[0][0])
            return _token(held.head.version, nonce), changed
        changed_ops = list(held.view.last_changed)
        self._start_children(arn, held, changed_ops)
        return _token(held.head.version, nonce), [ops.public_operation(op) for op in changed_ops]

    def _changed_at(self, arn: str, version: int) -> list[dict[str, Any]]:
        entries = self._run(self.executions.logs.entries(execution_id(arn), version, version))
        return [ops.public_operation(r["op"]) for e in entries for r in e.records if "op" in r]

    def state(
        self, arn: str, checkpoint_token: str, marker: str | None = None, max_items: int = 1000
    ) -> tuple[list[dict[str, Any]], str | None]:
        """Return a page of the execution's operations for its holder, and the next marker."""
        _, nonce = _parse_token(checkpoint_token)
        log_id = execution_id(arn)
        with self.executions.lock(log_id):
            held = self.executions.cached(log_id) or self._run(self.executions.read(log_id))
            if held.view.state.invocation is None or held.view.state.invocation.nonce != nonce:
                held = self._run(self.executions.read(log_id))
            _check_holder(held.view.state, nonce, arn)
            operations = list(held.view.operations.values())
        start = 0
        if marker:
            try:
                start = int(marker)
            except ValueError:
                raise InvalidDurableUpdate("not a marker this service issued") from None
        if type(max_items) is not int or max_items < 1:
            raise InvalidDurableUpdate("max_items must be a positive int")
        page = operations[start : start + max_items]
        following = start + max_items
        next_marker = str(following) if following < len(operations) else None
        return [ops.public_operation(op) for op in page], next_marker

    def finish(self, arn: str, checkpoint_token: str, output: Any) -> ExecutionView:
        """Record the answer of the invocation holding `checkpoint_token` (None: it crashed).

        `StaleCheckpointToken` if another invocation holds the execution now (this one's
        answer is not recorded: it was a zombie).
        """
        _, nonce = _parse_token(checkpoint_token)

        def plan(held: Held, now: int) -> Change | None:
            _check_holder(held.view.state, nonce, arn)
            change = ops.end_invocation(held.view, output, now)
            if (
                not change.state.ended
                and change.state.failed_invocations >= self.max_invocation_failures
            ):
                return _fail_after(held.view, change, now, "Invocation.Failed")
            return change

        view = self._update(arn, plan).view.copy()
        if view.state.ended and view.state.parent is not None:
            self._tell_parent(arn, view)
        elif not view.state.ended:
            # A process that died between a chained invoke's checkpoint and the start of
            # its target left no target: the invocation that replays it starts it here.
            for op in view.operations.values():
                if op["Type"] == ops.CHAINED_INVOKE and op["Status"] == "STARTED":
                    self._start_child(arn, op)
        return view

    # Outside answers.

    def callback(
        self,
        callback_id: str,
        outcome: str,
        *,
        result: str | None = None,
        error: dict[str, Any] | None = None,
    ) -> None:
        """Answer a callback: `success` (with `result`), `failure` (`error`) or `heartbeat`.

        `DurableExecutionNotFound` for an id this stash never issued or one no longer
        waiting.
        """
        if outcome not in ("success", "failure", "heartbeat"):
            raise InvalidArgument(f"outcome must be success, failure or heartbeat, not {outcome!r}")
        if result is not None and not isinstance(result, str):
            raise InvalidArgument(f"result must be text, not {described(result)}")
        log_id, op_id = _parse_callback_id(callback_id)
        arn = _arn_of_id(log_id)

        def plan(held: Held, now: int) -> Change | None:
            view = held.view
            if view.callbacks.get(callback_id) != op_id:
                raise DurableExecutionNotFound("no such callback", object_name=callback_id)
            try:
                return ops.complete_callback(view, op_id, outcome, now, result=result, error=error)
            except InvalidDurableUpdate:
                raise DurableExecutionNotFound(
                    "the callback is no longer waiting", object_name=callback_id
                ) from None

        try:
            self._update(arn, plan, fresh=True)
        except DurableExecutionNotFound as exc:
            if exc.object_name == log_id:
                raise DurableExecutionNotFound(
                    "no such callback", object_name=callback_id
                ) from None
            raise

    def stop(self, arn: str, error: dict[str, Any] | None = None) -> ExecutionView:
        """Stop a running execution (`ExecutionStopped`); a stopped one stays as it is."""

        def plan(held: Held, now: int) -> Change | None:
            if held.view.state.ended:
                return None
            return ops.end_execution(
                held.view,
                ops.STOPPED,
                error or {"ErrorType": "Execution.Stopped", "ErrorMessage": "stopped"},
                now,
            )

        view = self._update(arn, plan, fresh=True).view.copy()
        if view.state.parent is not None:
            self._tell_parent(arn, view)
        return view

    # Chained invokes.

    def _child_arn(self, arn: str, op: dict[str, Any]) -> str:
        target = _function_of(op["_Invoke"]["FunctionName"])
        digest = hashlib.blake2b(f"{execution_id(arn)}/{op['Id']}".encode(), digest_size=12)
        return arn_of(target, f"invoke-{digest.hexdigest()}")

    def _start_children(self, arn: str, held: Held, changed: list[dict[str, Any]]) -> None:
        for op in changed:
            if op["Type"] == ops.CHAINED_INVOKE and op["Status"] == "STARTED":
                self._start_child(arn, op)

    def _start_child(self, arn: str, op: dict[str, Any]) -> None:
        """Start a chained invoke's target (idempotent: a started one is left as it is)."""
        invoke = op.get("_Invoke")
        if not isinstance(invoke, dict) or not isinstance(invoke.get("DurableExecutionArn"), str):
            return
        target = invoke["DurableExecutionArn"]
        if self._started.get(target):
            return
        function, _, name = target[len(ARN_PREFIX) :].partition("/")[0].partition(":")
        self.start(function, invoke.get("Input"), name=name, parent=(execution_id(arn), op["Id"]))
        self._started.put(target, True)

    def _tell_parent(self, arn: str, child: ExecutionView) -> None:
        """Record an ended target's outcome in its caller, then mark the caller told."""
        assert child.state.parent is not None
        parent_id, op_id = child.state.parent

        def plan(held: Held, now: int) -> Change | None:
            if held.view.state.ended or op_id not in held.view.operations:
                return None
            change = ops.complete_invoke(held.view, op_id, child, now)
            return change if change.operations else None

        self._update(_arn_of_id(parent_id), plan, fresh=True)

        def told(held: Held, now: int) -> Change | None:
            state = held.view.state
            if state.parent_told:
                return None
            return Change(replace(state, parent_told=True))

        self._update(arn, told)

    # Reading.

    def arns(self, function: str | None = None) -> list[str]:
        """Return the ARNs of every execution (of `function`), by id."""
        prefix = "" if function is None else f"{_check_name(function, 'function')}:"
        ids = self._run(self.executions.list_ids(prefix))
        return [_arn_of_id(i) for i in ids]

    def states(self, function: str | None = None) -> list[tuple[str, ops.ExecutionState]]:
        """Return every execution's ARN and newest state (one read of its newest entry).

        The executions are read `PARALLEL_WIDTH` at a time: a worker looking for due work
        waits about one read, not one per execution.
        """
        return [(arn, state) for arn, _, state in self._scan(function)]

    def _scan(self, function: str | None) -> list[tuple[str, int, ops.ExecutionState]]:
        """Every execution's ARN, newest version and state (a deleted one is left out)."""
        arns = self.arns(function)
        found: list[tuple[str, int, ops.ExecutionState] | None] = []
        for start in range(0, len(arns), PARALLEL_WIDTH):
            batch = arns[start : start + PARALLEL_WIDTH]
            read: list[Any] = self._run(
                ask(Parallel(tuple(Call(self._state, (a,)) for a in batch)))
            )
            found += read
        return [entry for entry in found if entry is not None]

    def _state(self, arn: str) -> tuple[str, int, ops.ExecutionState] | None:
        try:
            head = self._run(self.executions.logs.head(execution_id(arn)))
        except CheckpointNotFound:
            return None  # deleted between the listing and the read
        return arn, head.version, ops.ExecutionState.parse(head.state)

    def due(self, function: str | None = None) -> list[str]:
        """Return the ARNs of executions an invocation could take now, earliest due first.

        On an indexed stash one query per index shard (`due_index`), and every `sweep` a
        scan of every execution that also rewrites the index items a dead process left
        behind; otherwise (or for one `function`) the scan.
        """
        now = self.now_ms()
        if self.due_index is None or function is not None or self._sweep_due(now):
            scanned = self._scan(function)
            if self.due_index is not None and function is None:
                self._repair(scanned)
                self._swept_ms = now
            due = [(at, arn) for arn, _, state in scanned if (at := _due_at(state)) is not None]
            return [arn for at, arn in sorted(due) if at <= now]
        listed = self._run(self.due_index.due(now, DUE_PAGE))
        arns = []
        for _, log_id in listed:
            try:
                arn = _arn_of_id(log_id)
                if execution_id(arn) != log_id:
                    raise DurableExecutionNotFound("not an execution id")
                arns.append(arn)
            except (InvalidArgument, DurableExecutionNotFound):
                self._run(self.due_index.forget(log_id))  # not an id this service writes
        return arns

    def _sweep_due(self, now: int) -> bool:
        last = self._swept_ms
        return last is None or now - last >= self.sweep.total_seconds() * 1000 or now < last

    def _repair(self, scanned: list[tuple[str, int, ops.ExecutionState]]) -> None:
        """Write the due items that are behind their execution's newest version.

        The items are read first (a batch read of up to 100 a request): most are current
        (every ended execution's is), and a refused conditional write costs as much as one
        that lands.
        """
        assert self.due_index is not None
        dues = [(execution_id(arn), version, _due_at(state)) for arn, version, state in scanned]
        behind = self._run(self.due_index.behind(dues))
        for start in range(0, len(behind), PARALLEL_WIDTH):
            self._run(self.due_index.record_many(behind[start : start + PARALLEL_WIDTH]))

    def forget_due(self, arn: str) -> None:
        """Drop a missing execution's due item (a worker found it deleted or purged)."""
        if self.due_index is not None:
            self._run(self.due_index.forget(execution_id(arn)))

    def next_due_ms(self, function: str | None = None) -> int | None:
        """Return the earliest time an execution that waits on time becomes due."""
        if self.due_index is not None and function is None:
            return self._run(self.due_index.next_due_ms())
        times = [t for _, state in self.states(function) if (t := _due_at(state)) is not None]
        return min(times) if times else None


def _due_at(state: ops.ExecutionState) -> int | None:
    """When an execution can next be taken (None: it waits on the outside, or ended)."""
    if state.ended:
        return state.started_ms if state.parent is not None and not state.parent_told else None
    times = []
    if state.invocation is not None:
        times.append(state.invocation.lease_ms)
    elif state.ready:
        times.append(state.started_ms)
    elif state.due_ms is not None:
        times.append(state.due_ms)
    if state.timeout_s is not None:
        times.append(state.started_ms + state.timeout_s * 1000)
    return min(times) if times else None


def _is_due(state: ops.ExecutionState, now: int) -> bool:
    at = _due_at(state)
    return at is not None and at <= now


def _joined(first: Change, second: Change) -> Change:
    joined = Change(second.state, list(first.operations), list(first.events))
    for op in second.operations:
        joined.put(op)
    joined.events.extend(second.events)
    return joined


def _folded(view: ExecutionView, change: Change) -> ExecutionView:
    after = view.copy()
    after.apply(change.records(), change.state)
    return after


def _fail_after(view: ExecutionView, change: Change, now: int, error_type: str) -> Change:
    error = {
        "ErrorType": error_type,
        "ErrorMessage": "the execution's invocations ended without an answer too many times",
    }
    ended = ops.end_execution(_folded(view, change), ops.FAILED, error, now)
    return _joined(change, ended)


def _token(version: int, nonce: str) -> str:
    return f"{version}.{nonce}"


def _parse_token(token: Any) -> tuple[int, str]:
    if isinstance(token, str):
        version, _, nonce = token.partition(".")
        if version.isdigit() and len(nonce) == 24 and all(c in "0123456789abcdef" for c in nonce):
            return int(version), nonce
    raise StaleCheckpointToken("not a checkpoint token this service issued")


def _check_holder(state: ops.ExecutionState, nonce: str, arn: str) -> None:
    if state.invocation is None or state.invocation.nonce != nonce:
        raise StaleCheckpointToken(
            "the checkpoint token's invocation no longer holds the execution", object_name=arn
        )


def _callback_id(log_id: str, op_id: str) -> str:
    raw = json.dumps([log_id, op_id, secrets.token_hex(8)], separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _parse_callback_id(callback_id: Any) -> tuple[str, str]:
    if isinstance(callback_id, str) and 0 < len(callback_id) <= 1024:
        try:
            raw = base64.urlsafe_b64decode(callback_id + "=" * (-len(callback_id) % 4))
            log_id, op_id, _ = json.loads(raw)
            if isinstance(log_id, str) and isinstance(op_id, str):
                validate_id(log_id)
                return log_id, op_id
        except (ValueError, TypeError, UnicodeDecodeError):
            pass
        except InvalidArgument:
            pass
    raise DurableExecutionNotFound("no such callback", object_name=str(callback_id)[:80])


def _arn_of_id(log_id: str) -> str:
    function, _, name = log_id.partition(":")
    return arn_of(function, name)


def _function_of(target: str) -> str:
    """Return the function a chained invoke names (a name, or an ARN `...:function:NAME`)."""
    if ":function:" in target:
        target = target.split(":function:", 1)[1].split(":", 1)[0]
    return _check_name(target, "function")
