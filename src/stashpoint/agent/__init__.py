"""Typed agent checkpoints: state, turn phases, resume policy, conversations.

Blocking handles work on `stash.checkpoints` (a `Store`), the `Async` ones on an
`AsyncStash`'s; both are made from one definition of the steps in `agent.logic`.
"""

from stashpoint.agent.checkpoint import (
    AgentCheckpoint,
    AsyncAgentCheckpoint,
    AsyncCheckpointCursor,
    CheckpointCursor,
)
from stashpoint.agent.conversation import AsyncConversationStore, ConversationStore
from stashpoint.agent.logic import (
    AsyncTurn,
    Turn,
    TurnNotStarted,
    TurnResult,
    after_turn,
    parse_state,
    resume_state,
)
from stashpoint.agent.models import (
    AGENT_KIND,
    AGENT_SCHEMA_VERSION,
    AgentCheckpointPhase,
    AgentCheckpointState,
    AgentOutcome,
    Completed,
    DurableConversationCheckpoint,
    Message,
    ModelRef,
    ModelResponse,
    ReadyForTurn,
    ResumePolicy,
    Suspended,
    ToolCall,
    TurnInFlight,
    Usage,
)
from stashpoint.agent.runner import AgentRunner, AsyncAgentRunner
from stashpoint.deadline import Deadline

__all__ = [
    "AGENT_KIND",
    "AGENT_SCHEMA_VERSION",
    "AgentCheckpoint",
    "AgentCheckpointPhase",
    "AgentCheckpointState",
    "AgentOutcome",
    "AgentRunner",
    "AsyncAgentCheckpoint",
    "AsyncAgentRunner",
    "AsyncCheckpointCursor",
    "AsyncConversationStore",
    "AsyncTurn",
    "CheckpointCursor",
    "Completed",
    "ConversationStore",
    "Deadline",
    "DurableConversationCheckpoint",
    "Message",
    "ModelRef",
    "ModelResponse",
    "ReadyForTurn",
    "ResumePolicy",
    "Suspended",
    "ToolCall",
    "Turn",
    "TurnInFlight",
    "TurnNotStarted",
    "TurnResult",
    "Usage",
    "after_turn",
    "parse_state",
    "resume_state",
]
