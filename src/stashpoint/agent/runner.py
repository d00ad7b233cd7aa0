"""Running an agent turn by turn, durably: `AgentRunner` and `AsyncAgentRunner`.

Before a turn calls the model (and its tools), the checkpoint is saved as
`TurnInFlight(turn)`; after the turn, as `ReadyForTurn` with the new transcript (or
`Completed`). A process that dies mid-turn leaves `TurnInFlight` behind: whether resuming
may run that turn again is the `ResumePolicy`'s call, never a guess. The steps live in
`agent.logic`; both runners are made from one definition (`stashpoint.twins`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from stashpoint.agent import logic
from stashpoint.agent.checkpoint import (
    AgentCheckpoint,
    AsyncAgentCheckpoint,
    AsyncCheckpointCursor,
    CheckpointCursor,
    _CursorApi,
)
from stashpoint.agent.logic import AsyncTurn, Turn
from stashpoint.agent.models import (
    AgentCheckpointState,
    AgentOutcome,
    DurableConversationCheckpoint,
    Message,
    ModelRef,
    ResumePolicy,
    Suspended,
)
from stashpoint.deadline import Deadline
from stashpoint.steps import Steps
from stashpoint.twins import Awaiting, Blocking, operation

HandleT = TypeVar("HandleT", AgentCheckpoint, AsyncAgentCheckpoint)


class TurnAttempts(Protocol):
    """The run operations a runner records turns with, as typed steps.

    Runs sit beside agents, not below: `RunOperations` (`stash.runs.owner_view()`) has them.
    """

    def record_attempt(
        self, run_id: str, node_id: str, attempt: int, input: Any = None
    ) -> Steps[str]:
        """Record a running attempt; return its id."""
        ...

    def complete_attempt(self, attempt_id: str, output: Any = None) -> Steps[None]:
        """Complete a running attempt."""
        ...

    def fail_attempt(self, attempt_id: str, error: str) -> Steps[None]:
        """Fail a running attempt."""
        ...

    def complete_run(self, run_id: str) -> Steps[None]:
        """Complete a run (a completed run is left as it is)."""
        ...

    def fail_run(self, run_id: str, error: str) -> Steps[None]:
        """Fail a run (`TerminalStateConflict` if it has ended already)."""
        ...


class RunRecorder(Protocol):
    """A run store (`stash.runs`), as far as a runner needs it."""

    def owner_view(self) -> TurnAttempts:
        """Return the store's operations as typed steps."""
        ...


CursorT = TypeVar("CursorT", bound=_CursorApi[Any, Any])


class _RunnerApi(Generic[HandleT, CursorT]):
    """A runner, defined once; see `AgentRunner`."""

    _cursor: type[CursorT]

    def __init__(
        self,
        checkpoint: HandleT,
        *,
        policy: ResumePolicy = ResumePolicy.REJECT_AMBIGUOUS,
        commit_conversations: bool = True,
        runs: RunRecorder | None = None,
    ) -> None:
        self.checkpoint: HandleT = checkpoint
        """The checkpoint this runner saves to."""
        self.policy = policy
        """What to do with a turn found in flight."""
        self.commit_conversations = commit_conversations
        """Whether turns commit their durable conversation (same store) at the end."""
        self.runs = runs
        """The run store (`stash.runs`, same stash) that records each turn as an attempt
        of the checkpoint's run (`run_id=`); None: turns are not recorded in a run."""
        self._attempts = None if runs is None else runs.owner_view()
        self.driver = checkpoint.driver
        """Runs this object's requests: what its operations' steps are driven with."""

    def _turn_steps(self) -> logic.TurnSteps | None:
        """Return the run store's operations a turn needs, as steps (None: no run store)."""
        attempts = self._attempts
        if attempts is None:
            return None

        def begin(run_id: str, number: int) -> Steps[str]:
            return attempts.record_attempt(run_id, f"turn-{number}", 1, {"turn": number})

        def end(attempt_id: str, output: Any, error: str | None) -> Steps[None]:
            if error is not None:
                return attempts.fail_attempt(attempt_id, error)
            return attempts.complete_attempt(attempt_id, output)

        return logic.TurnSteps(begin, end, attempts.complete_run, attempts.fail_run)

    @operation
    def start(
        self,
        *,
        agent: str,
        model: ModelRef,
        transcript: list[Message],
        execution_id: str | None = None,
        run_id: str | None = None,
        durable: DurableConversationCheckpoint | None = None,
    ) -> Steps[tuple[CursorT, AgentCheckpointState]]:
        """Create the checkpoint with a ready state (create-only)."""
        saved, state = yield from logic.start(
            self.checkpoint.storage, self.checkpoint.id, agent=agent, model=model,
            transcript=transcript, execution_id=execution_id, run_id=run_id, durable=durable,
        )  # fmt: skip
        return self._cursor(self.checkpoint, saved), state

    @operation
    def resume(
        self, *, agent: str | None = None, model: ModelRef | None = None
    ) -> Steps[tuple[CursorT, AgentCheckpointState]]:
        """Load the checkpoint and apply the resume policy; check identity if given."""
        saved, state = yield from logic.resume(
            self.checkpoint.storage, self.checkpoint.id, self.policy, agent, model
        )
        return self._cursor(self.checkpoint, saved), state

    @operation
    def run_turn(
        self, cursor: CursorT, state: AgentCheckpointState, turn: AsyncTurn
    ) -> Steps[AgentCheckpointState]:
        """Run one turn durably; return the state saved after it.

        The asyncio runner awaits a coroutine turn; the blocking runner takes plain functions.
        """
        cursor.saved, state = yield from logic.run_turn(
            self.checkpoint.storage, cursor.saved, state, self.commit_conversations, turn,
            steps=self._turn_steps(),
        )  # fmt: skip
        return state

    @operation
    def run(
        self,
        turn: AsyncTurn,
        *,
        agent: str,
        model: ModelRef,
        transcript: list[Message] | None = None,
        max_turns: int = 100,
        durable: DurableConversationCheckpoint | None = None,
        run_id: str | None = None,
    ) -> Steps[AgentOutcome]:
        """Resume the checkpoint (or start it) and run turns until the agent completes.

        A completed checkpoint returns its outcome without calling the model again. A new
        checkpoint belongs to run `run_id` (its turns are recorded there, see `runs`).
        """
        outcome = yield from logic.run(
            self.checkpoint.storage, self.checkpoint.id, turn, policy=self.policy,
            commit_conversations=self.commit_conversations, agent=agent, model=model,
            transcript=transcript or [], max_turns=max_turns, durable=durable,
            run_id=run_id, steps=self._turn_steps(),
        )  # fmt: skip
        assert isinstance(outcome, AgentOutcome)  # no deadline: never suspended
        return outcome

    @operation
    def run_until(
        self,
        deadline: Deadline,
        turn: AsyncTurn,
        *,
        agent: str,
        model: ModelRef,
        transcript: list[Message] | None = None,
        max_turns: int = 100,
        durable: DurableConversationCheckpoint | None = None,
        run_id: str | None = None,
    ) -> Steps[AgentOutcome | Suspended]:
        """Run turns like `run`, but start one only if it is likely to end before `deadline`.

        The checkpoint keeps how long recent turns took; a turn starts only if the time
        left covers the slowest of them with headroom (`Deadline`). Otherwise every
        finished turn is saved, no turn is left in flight, and `Suspended` is returned:
        invoke again to go on (a Lambda handler returns "continue" to its Step Functions
        loop). `Deadline.of_lambda(context)` reads a Lambda context.
        """
        return logic.run(
            self.checkpoint.storage, self.checkpoint.id, turn, policy=self.policy,
            commit_conversations=self.commit_conversations, agent=agent, model=model,
            transcript=transcript or [], max_turns=max_turns, durable=durable,
            deadline=deadline, run_id=run_id, steps=self._turn_steps(),
        )  # fmt: skip

    @operation
    def resolve(self, *, retry: bool) -> Steps[tuple[bool, AgentCheckpointState]]:
        """Settle a turn a dead process left in flight, as an operator decided.

        `retry=True` runs it again on the next resume (its model calls and tools may
        repeat); `retry=False` abandons it (counted, nothing added, listed in
        `abandoned_turns`). Returns whether a turn was in flight, and the state now. The
        command line: `stashpoint agent resolve ID --retry-turn | --abandon-turn`.
        """
        return logic.resolve(self.checkpoint.storage, self.checkpoint.id, retry=retry)


class AgentRunner(Blocking, _RunnerApi[AgentCheckpoint, CheckpointCursor]):
    """Runs an agent's turns against one checkpoint, saving each boundary with CAS.

    Make one from a checkpoint (`AgentCheckpoint.new(stash.checkpoints)`, or
    `AgentCheckpoint(checkpoint_id, stash.checkpoints)` to resume one) and call
    `run(turn, agent=..., model=...)`: each turn is marked in flight before the model
    runs and saved after; the agent ends at the first turn whose `TurnResult` has a
    `response`. A completed checkpoint returns its stored outcome without calling the
    model again. With `runs=` (`stash.runs`) and `run_id=`, every turn is an attempt of
    that run and the run completes with the agent.
    """

    _cursor = CheckpointCursor

    if TYPE_CHECKING:
        # What mypy and editors see (the operations above run): a blocking runner takes
        # plain turn functions (`Turn`); the asyncio runner's `AsyncTurn` may be awaited.
        def run_turn(  # type: ignore[override]
            self, cursor: CheckpointCursor, state: AgentCheckpointState, turn: Turn
        ) -> AgentCheckpointState:
            """Run one turn durably; return the state saved after it."""

        def run(  # type: ignore[override]
            self,
            turn: Turn,
            *,
            agent: str,
            model: ModelRef,
            transcript: list[Message] | None = None,
            max_turns: int = 100,
            durable: DurableConversationCheckpoint | None = None,
            run_id: str | None = None,
        ) -> AgentOutcome:
            """Resume the checkpoint (or start it) and run turns until the agent completes."""

        def run_until(  # type: ignore[override]
            self,
            deadline: Deadline,
            turn: Turn,
            *,
            agent: str,
            model: ModelRef,
            transcript: list[Message] | None = None,
            max_turns: int = 100,
            durable: DurableConversationCheckpoint | None = None,
            run_id: str | None = None,
        ) -> AgentOutcome | Suspended:
            """Run turns like `run`, but start one only if it is likely to end before `deadline`."""


class AsyncAgentRunner(Awaiting, _RunnerApi[AsyncAgentCheckpoint, AsyncCheckpointCursor]):
    """The asyncio twin of `AgentRunner`; turns may be coroutine functions."""

    _cursor = AsyncCheckpointCursor
