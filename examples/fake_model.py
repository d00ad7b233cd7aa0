"""A deterministic stand-in for a model provider, so the examples run anywhere.

Turns 1-3 ask for a tool and get its result; turn 4 answers. The same transcript always
gets the same reply, so a resumed run can be compared with an uninterrupted one.
"""

from __future__ import annotations

import hashlib

from stashpoint.agent import (
    AgentCheckpointState,
    Message,
    ModelRef,
    ModelResponse,
    ToolCall,
    TurnResult,
    Usage,
)

MODEL = ModelRef(provider="fake", name="deterministic-1")
FINAL_TURN = 4


def opening(question: str = "What is 6 x 7?") -> list[Message]:
    return [
        Message(role="system", content="You are a careful research agent."),
        Message(role="user", content=question),
    ]


def turn(state: AgentCheckpointState, number: int) -> TurnResult:
    """One model call (and its tool call): a pure function of the transcript."""
    digest = hashlib.sha256("".join(str(m.content) for m in state.transcript).encode()).hexdigest()[
        :8
    ]
    usage = Usage(input_tokens=10 * len(state.transcript), output_tokens=5)
    if number >= FINAL_TURN:
        answer = Message(role="assistant", content=f"The answer is 42 (checked {digest}).")
        response = ModelResponse(message=answer, stop_reason="end_turn", usage=usage)
        return TurnResult(messages=[answer], response=response, usage=usage)
    call = ToolCall(id=f"call-{number}", name="calculator", arguments={"step": number})
    ask = Message(role="assistant", content=None, tool_calls=[call])
    result = Message(role="tool", tool_call_id=call.id, content=f"step {number} ok {digest}")
    return TurnResult(messages=[ask, result], usage=usage, tool_calls=1)
