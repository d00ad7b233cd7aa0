"""A Strands model that answers from a script: no network, deterministic (tests and bench)."""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Callable, Sequence
from typing import Any

from strands.models import Model


class ScriptedModel(Model):
    """Answers each call with the next scripted reply: a text, or a tool call (`tool`, `input`).

    Past the script's end it echoes the last user text, so a long conversation needs no
    script at all.
    """

    def __init__(
        self,
        replies: Sequence[str | dict[str, Any]] = (),
        *,
        answer: Callable[[str], str] | None = None,
    ) -> None:
        self.replies = list(replies)
        self.answer = answer or (lambda prompt: f"echo: {prompt}")
        """What it says past the script: by default `echo: {the last user text}`."""
        self.calls = 0

    def update_config(self, **model_config: Any) -> None:
        """Nothing to configure."""

    def get_config(self) -> Any:
        """Nothing configured."""
        return {}

    async def structured_output(
        self, output_model: Any, prompt: Any, system_prompt: Any = None, **kwargs: Any
    ) -> Any:
        """Not used by these tests."""
        raise NotImplementedError
        yield

    async def stream(
        self,
        messages: Any,
        tool_specs: Any = None,
        system_prompt: Any = None,
        tool_choice: Any = None,
        **kwargs: Any,
    ) -> AsyncGenerator[Any, None]:
        """Stream the next reply as Bedrock-style events."""
        reply: str | dict[str, Any]
        if self.calls < len(self.replies):
            reply = self.replies[self.calls]
        else:
            last = next(
                (
                    b["text"]
                    for m in reversed(messages)
                    if m["role"] == "user"
                    for b in m["content"]
                    if "text" in b
                ),
                "",
            )
            reply = self.answer(last)
        self.calls += 1
        yield {"messageStart": {"role": "assistant"}}
        if isinstance(reply, dict):
            use = {"name": reply["tool"], "toolUseId": f"t{self.calls}"}
            yield {"contentBlockStart": {"start": {"toolUse": use}}}
            yield {
                "contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(reply["input"])}}}
            }
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "tool_use"}}
        else:
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": reply}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}
