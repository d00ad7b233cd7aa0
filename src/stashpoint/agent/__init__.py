"""Typed agent checkpoints (seed 000): state, turn phases, resume policy, conversations."""

from stashpoint.agent.checkpoint import AgentCheckpoint, CheckpointCursor, parse_state
from stashpoint.agent.conversation import ConversationStore
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
    ToolCall,
    TurnInFlight,
    Usage,
)
from stashpoint.agent.runner import AgentRunner, Turn, TurnResult, after_turn, resume_state

__all__ = [
    "AGENT_KIND",
    "AGENT_SCHEMA_VERSION",
    "AgentCheckpoint",
    "AgentCheckpointPhase",
    "AgentCheckpointState",
    "AgentOutcome",
    "AgentRunner",
    "CheckpointCursor",
    "Completed",
    "ConversationStore",
    "DurableConversationCheckpoint",
    "Message",
    "ModelRef",
    "ModelResponse",
    "ReadyForTurn",
    "ResumePolicy",
    "ToolCall",
    "Turn",
    "TurnInFlight",
    "TurnResult",
    "Usage",
    "after_turn",
    "parse_state",
    "resume_state",
]
