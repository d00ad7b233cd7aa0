"""Strands' session repository and manager over a stash (`session_log` driven)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from strands.hooks import AfterInvocationEvent, HookRegistry
from strands.hooks.registry import HookOrder
from strands.session.repository_session_manager import RepositorySessionManager
from strands.session.session_repository import SessionRepository
from strands.types.session import Session, SessionAgent, SessionMessage

from stashpoint.errors import (
    InvalidArgument,
    described,
)
from stashpoint.logs.state import LoggedState
from stashpoint.steps import Steps, run_sync
from stashpoint.stores.layout import STRANDS_SESSIONS
from stashpoint.strands_agents.session_log import Plan, SessionForm, SessionSteps, SessionView

if TYPE_CHECKING:
    from strands.multiagent.base import MultiAgentBase

    from stashpoint.stash import Stash

T = TypeVar("T")

SaveMode = Literal["message", "turn"]
"""When a session's messages are written: each as it is added, or a turn's at its end."""


@dataclass(slots=True)
class _Pending:
    """A write held until the turn ends (`save="turn"`): what it is, for a redaction."""

    plan: Plan
    agent_id: str
    message_id: int | None


class StashSessionRepository(SessionRepository):
    """Strands' `SessionRepository` over a stash: each session one log.

    One repository is one view of its sessions: what it read or wrote of an agent is what
    its next write of that agent is checked against (`SessionConflict`). Give each
    invocation its own (as `StashSessionManager` does). `stash` is a blocking `Stash`
    (Strands calls repositories from its hooks, which block); it is not closed here.

    `save="message"` (the default, Strands' own semantics) appends each message as it is
    added: one request per message. `save="turn"` holds a turn's messages and agent
    updates and appends them as one entry when `flush` is called (the manager calls it
    when the invocation ends): one request per turn, a turn stored whole or not at all,
    and a redaction applied before the message is ever stored.
    """

    def __init__(self, stash: Stash, *, save: SaveMode = "message") -> None:
        from stashpoint.stash import Stash

        if not isinstance(stash, Stash):
            raise InvalidArgument(f"stash must be an opened Stash, not {described(stash)}")
        if save not in ("message", "turn"):
            raise InvalidArgument(f"save must be 'message' or 'turn', not {described(save)}")
        self.stash = stash
        """Where the sessions are kept."""
        self.save: SaveMode = save
        """When messages are written (`"message"` or `"turn"`)."""
        logs = stash.log_steps(STRANDS_SESSIONS)
        self._state = LoggedState(logs, SessionForm())
        # The append that completes a range of 64 seals it after the call, not in it.
        self._sealer = stash.seal_later(logs)
        self._sessions: dict[str, SessionSteps] = {}
        self._pending: dict[str, list[_Pending]] = {}

    def steps(self, session_id: str) -> SessionSteps:
        """Return a session's operations as steps (one per session id)."""
        found = self._sessions.get(session_id)
        if found is None:
            found = self._sessions[session_id] = SessionSteps(session_id, self._state)
        return found

    def _run(self, steps: Steps[T]) -> T:
        try:
            return run_sync(steps, self.stash.driver)
        finally:
            self._sealer.poke()

    def _view(self, session_id: str) -> SessionView:
        self.flush(session_id)
        return self._run(self.steps(session_id).view(fresh=False))

    def _write(
        self,
        session_id: str,
        plan: Callable[[SessionSteps], Plan],
        *,
        turn: tuple[str, int | None] | None = None,
    ) -> None:
        """Write `plan` now, or hold it until the turn ends (`turn`: its agent and message)."""
        steps = self.steps(session_id)
        if self.save == "turn" and turn is not None:
            self._pending.setdefault(session_id, []).append(_Pending(plan(steps), *turn))
            return
        held = self._pending.pop(session_id, [])
        self._run(steps.write(*(p.plan for p in held), plan(steps)))

    def flush(self, session_id: str | None = None) -> None:
        """Write the held writes of a session (every session: None) as one entry each.

        With `save="turn"`, what a turn added reaches storage here: whole, or not at all
        (`SessionConflict` if another invocation wrote the agent meanwhile: nothing of
        this turn is stored, and it is dropped). Nothing to do with `save="message"`.
        """
        for sid in [session_id] if session_id is not None else list(self._pending):
            held = self._pending.pop(sid, [])
            if held:
                self._run(self.steps(sid).write(*(p.plan for p in held)))

    def _redacted_in_turn(
        self, session_id: str, agent_id: str, message_id: int, record: dict[str, Any]
    ) -> bool:
        """Replace a held message by its redaction (the original never stored); False: none."""
        for held in self._pending.get(session_id, []):
            if (held.agent_id, held.message_id) == (agent_id, message_id):
                held.plan = self.steps(session_id).add_message(agent_id, record)
                return True
        return False

    def create_session(self, session: Session, **kwargs: Any) -> Session:
        """Create the session (`SessionConflict` if it exists)."""
        kind = session.session_type
        record = {**session.to_dict(), "session_type": str(getattr(kind, "value", kind))}
        self._write(session.session_id, lambda s: s.create_session(record))
        return session

    def read_session(self, session_id: str, **kwargs: Any) -> Session | None:
        """Read the session as stored now (a fresh read; the agents' reads then use it)."""
        view = self._run(self.steps(session_id).view(fresh=True))
        return None if view.session is None else Session.from_dict(view.session)

    def delete_session(self, session_id: str, **kwargs: Any) -> None:
        """Delete the session: its messages are gone from it (kept in the log until purged)."""
        self._write(session_id, lambda s: s.delete())

    def create_agent(self, session_id: str, session_agent: SessionAgent, **kwargs: Any) -> None:
        """Create an agent in the session (`SessionConflict` if another invocation did)."""
        record = session_agent.to_dict()
        self._write(session_id, lambda s: s.put_agent(record, create=True))

    def read_agent(self, session_id: str, agent_id: str, **kwargs: Any) -> SessionAgent | None:
        """Read an agent from the session as this repository last read it."""
        agent = self._view(session_id).agents.get(agent_id)
        return None if agent is None else SessionAgent.from_dict(agent)

    def update_agent(self, session_id: str, session_agent: SessionAgent, **kwargs: Any) -> None:
        """Update an agent this repository read or created (`SessionConflict` if stale)."""
        record = session_agent.to_dict()
        self._write(
            session_id,
            lambda s: s.put_agent(record, create=False),
            turn=(session_agent.agent_id, None),
        )

    def create_message(
        self, session_id: str, agent_id: str, session_message: SessionMessage, **kwargs: Any
    ) -> None:
        """Append a message (one request; `SessionConflict` on a stale view)."""
        record = session_message.to_dict()
        self._write(
            session_id,
            lambda s: s.add_message(agent_id, record),
            turn=(agent_id, session_message.message_id),
        )

    def read_message(
        self, session_id: str, agent_id: str, message_id: int, **kwargs: Any
    ) -> SessionMessage | None:
        """Read one message."""
        found = self._view(session_id).messages.get(agent_id, [])
        if type(message_id) is not int or not 0 <= message_id < len(found):
            return None
        return SessionMessage.from_dict(found[message_id])

    def update_message(
        self, session_id: str, agent_id: str, session_message: SessionMessage, **kwargs: Any
    ) -> None:
        """Rewrite a message (a redaction)."""
        record = session_message.to_dict()
        if self._redacted_in_turn(session_id, agent_id, session_message.message_id, record):
            return
        self._write(session_id, lambda s: s.redact(agent_id, record))

    def list_messages(
        self,
        session_id: str,
        agent_id: str,
        limit: int | None = None,
        offset: int = 0,
        **kwargs: Any,
    ) -> list[SessionMessage]:
        """List an agent's messages from `offset` (at most `limit`)."""
        if type(offset) is not int or offset < 0:
            raise InvalidArgument(f"offset must be an int >= 0, not {described(offset)}")
        if limit is not None and (type(limit) is not int or limit < 0):
            raise InvalidArgument(f"limit must be an int >= 0 or None, not {described(limit)}")
        found = self._view(session_id).messages.get(agent_id, [])
        chosen = found[offset:] if limit is None else found[offset : offset + limit]
        return [SessionMessage.from_dict(m) for m in chosen]

    def create_multi_agent(
        self, session_id: str, multi_agent: MultiAgentBase, **kwargs: Any
    ) -> None:
        """Store a graph's or swarm's state for the first time."""
        state = multi_agent.serialize_state()
        self._write(session_id, lambda s: s.put_multi_agent(multi_agent.id, state, create=True))

    def read_multi_agent(
        self, session_id: str, multi_agent_id: str, **kwargs: Any
    ) -> dict[str, Any] | None:
        """Read a graph's or swarm's state."""
        return self._view(session_id).multi_agents.get(multi_agent_id)

    def update_multi_agent(
        self, session_id: str, multi_agent: MultiAgentBase, **kwargs: Any
    ) -> None:
        """Store a graph's or swarm's state over the one this repository saw."""
        state = multi_agent.serialize_state()
        self._write(session_id, lambda s: s.put_multi_agent(multi_agent.id, state, create=False))


class StashSessionManager(RepositorySessionManager, StashSessionRepository):
    """Strands' session manager with the session kept as one log in a stash.

    Everything `RepositorySessionManager` does (restoring an agent's messages, state,
    conversation manager and interrupts; redactions; multi-agent state) over a stash:
    pass `StashSessionManager("user-42", stash)` as `Agent(session_manager=...)`. The
    manager is its own repository, as Strands' file and S3 managers are: each manager is
    one invocation's view. `stash` is a blocking `Stash`; the manager does not close it.
    """

    def __init__(
        self, session_id: str, stash: Stash, *, save: SaveMode = "message", **kwargs: Any
    ) -> None:
        StashSessionRepository.__init__(self, stash, save=save)
        RepositorySessionManager.__init__(
            self, session_id=session_id, session_repository=self, **kwargs
        )

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        """Strands' hooks, and with `save="turn"` the turn's write when an invocation ends."""
        super().register_hooks(registry, **kwargs)
        if self.save == "turn":
            # Last: after Strands' own sync of the agent on the same event.
            registry.add_callback(
                AfterInvocationEvent, lambda event: self.flush(), order=HookOrder.SDK_LAST
            )
