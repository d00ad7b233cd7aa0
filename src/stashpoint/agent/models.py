"""Typed agent state: transcript, phases, usage, durable conversation metadata.

Field names and the phase tags match the Rust format's serde output, so a saved state reads the
same in either ecosystem: `{"state": "turn_in_flight", "turn": 3}`. Message, model and usage
types are typed where providers agree and open to provider-specific extra fields, so any
provider's transcript round-trips unchanged.
"""

from __future__ import annotations

from enum import Enum
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
)

AGENT_KIND = "stashpoint.agent"
"""Envelope kind of an agent checkpoint."""
SEED_AGENT_KIND = "runifold.agent"
"""The kind the Rust implementation writes; read as `AGENT_KIND` (this library writes its own)."""
AGENT_SCHEMA_VERSION = 1
"""Schema version of `AgentCheckpointState` this library writes and reads."""


class _Open(BaseModel):
    """Typed common fields; unknown provider fields are kept, not dropped.

    Serialises only the fields a message actually had (plus typed defaults it was given),
    so a provider's message round-trips to the same JSON.
    """

    model_config = ConfigDict(extra="allow")

    @model_serializer(mode="wrap")
    def _as_given(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        given = self.model_fields_set | set(self.model_extra or {})
        return {k: v for k, v in data.items() if k in given or v is not None}


class _Closed(BaseModel):
    # Unknown fields from a newer minor version are kept through a read-modify-write.
    model_config = ConfigDict(extra="allow")


class ToolCall(_Open):
    """A tool invocation requested by the model."""

    id: str | None = None
    """Provider's id of the call, echoed by the tool result."""
    name: str
    """Tool name."""
    arguments: Any = None
    """Arguments, as the provider gives them (object or JSON string)."""


class Message(_Open):
    """One transcript message."""

    role: str
    """`system`, `user`, `assistant`, `tool`, or a provider's own role."""
    content: Any = None
    """Text, a list of content parts, or None (for a pure tool-call message)."""
    name: str | None = None
    """Participant or tool name, where the provider uses one."""
    tool_calls: list[ToolCall] | None = None
    """Tool calls requested in an assistant message."""
    tool_call_id: str | None = None
    """The call a tool message answers."""


class ModelRef(_Open):
    """Which model an agent runs on; checked on recovery."""

    provider: str
    """Model provider (for example `anthropic`, `openai`, `bedrock`)."""
    name: str
    """Model name or id."""


class Usage(_Open):
    """Token usage, summed over the run."""

    input_tokens: int = 0
    """Prompt tokens."""
    output_tokens: int = 0
    """Completion tokens."""
    cache_read_tokens: int = 0
    """Prompt tokens served from a provider cache."""
    cache_write_tokens: int = 0
    """Prompt tokens written to a provider cache."""

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )


class ModelResponse(_Open):
    """A canonical model response."""

    message: Message
    """The assistant message."""
    stop_reason: str | None = None
    """Why generation stopped (`end_turn`, `tool_use`, ...)."""
    usage: Usage = Field(default_factory=Usage)
    """Usage of this response."""


class ReadyForTurn(_Closed):
    """Transcript is stable and ready for the next model turn."""

    state: Literal["ready_for_turn"] = "ready_for_turn"
    """Phase tag."""


class TurnInFlight(_Closed):
    """A model-and-callable turn may have partially executed."""

    state: Literal["turn_in_flight"] = "turn_in_flight"
    """Phase tag."""
    turn: int = Field(ge=1)
    """One-based turn number that may have partially executed."""


class Completed(_Closed):
    """The agent reached a terminal response."""

    state: Literal["completed"] = "completed"
    """Phase tag."""
    response: ModelResponse
    """Final canonical model response."""


AgentCheckpointPhase = Annotated[
    ReadyForTurn | TurnInFlight | Completed, Field(discriminator="state")
]
"""Persisted agent execution phase. New phases may appear: keep a default branch."""


class DurableConversationCheckpoint(_Closed):
    """Conversation commit preconditions carried through crash recovery."""

    conversation_id: str
    """Conversation receiving the completed turn."""
    namespace: str
    """Isolation namespace loaded before execution."""
    expected_version: int = Field(ge=0)
    """Transcript version loaded before execution (0: the conversation did not exist)."""
    persisted_prefix_len: int = Field(ge=0)
    """Number of leading runtime-only messages excluded from persistence."""


class AgentOutcome(_Closed):
    """The result of a completed agent execution."""

    response: ModelResponse
    """Final canonical model response."""
    transcript: list[Message]
    """Transcript at completion."""
    turns: int
    """Completed model turns."""
    tool_calls: int
    """Completed local tool attempts."""
    delegations: int
    """Completed successful delegations."""
    usage: Usage
    """Usage at completion."""


class Suspended(_Closed):
    """What `run_until` returns when the time left would not fit the next turn.

    Every finished turn is saved and no turn is in flight: invoke again (Step Functions
    loop, re-queue) to continue.
    """

    turns: int
    """Turns completed so far."""
    remaining_seconds: float
    """Time left when the runner stopped."""
    needed_seconds: float
    """Time the next turn was expected to need (its recent durations, with headroom)."""


TURN_HISTORY = 20
"""Turn durations an agent checkpoint keeps (the latest)."""


class AgentCheckpointState(BaseModel):
    """Versioned agent state stored in a domain-neutral checkpoint envelope."""

    model_config = ConfigDict(extra="allow")

    execution_id: str
    """Stable logical execution identity used for callable idempotency."""
    agent: str
    """Agent identity expected during recovery."""
    model: ModelRef
    """Model identity expected during recovery."""
    transcript: list[Message]
    """Canonical transcript at the last stable boundary."""
    turns: int = 0
    """Completed model turns."""
    tool_calls: int = 0
    """Completed local tool attempts."""
    delegations: int = 0
    """Completed successful delegations."""
    usage: Usage = Field(default_factory=Usage)
    """Shared usage snapshot at persistence time."""
    phase: AgentCheckpointPhase = Field(default_factory=ReadyForTurn)
    """Current recovery phase."""
    durable_conversation: DurableConversationCheckpoint | None = None
    """Atomic conversation commit metadata, when this is a durable turn (omitted if None)."""
    turn_seconds: list[float] = Field(default_factory=list)
    """How long the latest turns took, oldest first (at most `TURN_HISTORY`; omitted when
    empty): `run_until` plans from them."""
    abandoned_turns: list[int] = Field(default_factory=list)
    """Turns an operator abandoned after they were interrupted (`resolve`; omitted when
    empty)."""

    def outcome(self) -> AgentOutcome | None:
        """Return the outcome of a completed execution, None in any other phase."""
        if not isinstance(self.phase, Completed):
            return None
        return AgentOutcome(
            response=self.phase.response,
            transcript=list(self.transcript),
            turns=self.turns,
            tool_calls=self.tool_calls,
            delegations=self.delegations,
            usage=self.usage,
        )

    def to_payload(self, *, transcript: bool = True) -> dict[str, Any]:
        """Return the JSON payload as the Rust format serialises it (no `durable_conversation`).

        `transcript=False` leaves the transcript out (a log stores it as records).
        """
        payload = self.model_dump(
            mode="json", exclude_none=False, exclude=None if transcript else {"transcript"}
        )
        if self.durable_conversation is None:
            payload.pop("durable_conversation")
        for added in ("turn_seconds", "abandoned_turns"):  # not the Rust format's: only when used
            if not payload[added]:
                payload.pop(added)
        return payload


class ResumePolicy(Enum):
    """Recovery behaviour for a checkpoint captured during a turn. New policies may appear."""

    REJECT_AMBIGUOUS = "reject_ambiguous"
    """Reject recovery that could duplicate model cost or external effects (default)."""
    RETRY_INTERRUPTED_TURN = "retry_interrupted_turn"
    """Explicitly retry the entire interrupted model-and-callable turn."""
