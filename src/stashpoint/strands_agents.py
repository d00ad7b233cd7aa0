"""Strands Agents on the stash: a session manager whose messages are a log, and a `Storage`.

Two ways to keep a Strands agent, as Strands offers two:

- `StashSessionManager(session_id, stash)`: Strands' message-log session manager
  (`RepositorySessionManager`, its agents, messages, redactions, conversation-manager
  state and multi-agent state) with the whole session as **one log** of namespace
  `strands-sessions`. Each message is one append (one request, O(message) bytes, where
  Strands' `S3SessionManager` PUTs one object per message and reads a session back with a
  LIST and one GET per message); a cold load reads the session's log in a few round trips
  whatever its length (sealed segments for the old part, one round of GETs for the rest).
- `StashStorage(stash)`: Strands' unified `Storage` (`write`/`read`/`delete`/`list` over
  bytes) for `SnapshotSessionManager` and anything else that takes a `Storage`: each key a
  head of namespace `strands-storage`, written by compare-and-swap.

Both keep everything where the rest of the stash is, under its encryption per tenant,
purge with receipts (`stash.purge(namespace="strands-sessions", ids=[...])`), Object Lock
and packing.

**Two invocations of one session** never interleave or overwrite each other. The session
manager writes an agent's records only after the version it last saw of that agent (its
message count and the version of its last agent record, kept in every entry's small
state): an invocation that loaded the session before another one appended gets
`SessionConflict` at its next write and writes nothing; it loads the session again (a
new `Agent` with a new manager) to go on from the other's messages. Agents of one session
written by different processes (a swarm's) do not conflict with each other. A
redaction is always written (a guardrail's redaction must reach storage). `StashStorage`
writes a key only over the revision it last read or wrote (a key it never read: only
if absent, or already holding the same bytes): a snapshot saved by another invocation
meanwhile is `StorageConflict`, never replaced.

The log's records, readable with `zstd -d | jq`:

    {"session": {...}}                       the session (`Session.to_dict()`)
    {"agent": {...}}                          an agent's record, created or updated
    {"message": {...}, "agent": ID}           a message (`SessionMessage.to_dict()`)
    {"redact": {...}, "agent": ID}            a message rewritten (a guardrail's redaction)
    {"multi_agent": {...}, "id": ID}          a graph's or swarm's state
    {"delete": true}                          `delete_session`: a new life starts after it

Needs `strands-agents` (`stashpoint[strands]`); imported only by this module.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from strands.hooks import AfterInvocationEvent, HookRegistry
from strands.hooks.registry import HookOrder
from strands.session.repository_session_manager import RepositorySessionManager
from strands.session.session_repository import SessionRepository
from strands.storage.storage import _NAMESPACED, StorageSearchResult
from strands.types.exceptions import SessionException, StorageError
from strands.types.session import Session, SessionAgent, SessionMessage

from stashpoint.envelope import Envelope
from stashpoint.errors import (
    CheckpointConflict,
    CheckpointNotFound,
    InvalidArgument,
    InvalidId,
    InvalidPayload,
    Purged,
    described,
)
from stashpoint.logs.format import check_log_id, entries_records
from stashpoint.logs.log import LogHead
from stashpoint.logs.state import Known, LoggedState
from stashpoint.steps import Now, Steps, ask, run_async, run_sync
from stashpoint.stores.cas import CompareAndSwap
from stashpoint.stores.layout import STRANDS_SESSIONS, STRANDS_STORAGE

if TYPE_CHECKING:
    from strands.multiagent.base import MultiAgentBase

    from stashpoint.stash import AsyncStash, Stash

T = TypeVar("T")

SESSION_KIND = "stashpoint.strands-session"
"""The session logs' entries' kind."""
STORAGE_KIND = "stashpoint.strands-storage"
"""The `Storage` heads' kind."""
SCHEMA_VERSION = 1
"""The schema version of both."""
_ALL = 2**62


class SessionConflict(CheckpointConflict, SessionException):
    """Another invocation wrote this session's agent after this one last saw it.

    Nothing was written. Load the session again (a new agent and manager) and go on from
    what the other wrote. A Strands `SessionException` as well, so code that handles
    Strands' session errors handles this one.
    """


class SessionMissing(CheckpointNotFound, SessionException):
    """The session, agent or message a write names does not exist (Strands' own error too)."""


class InvalidKey(InvalidId, StorageError):
    """A `Storage` key Strands' own backends refuse (empty, a `..` segment, a backslash)."""


class StorageConflict(CheckpointConflict, StorageError):
    """A key changed since this `StashStorage` last read or wrote it: nothing was written.

    A Strands `StorageError` as well. Read the key again to see what the other writer left.
    """


# -- the session's state and records ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SessionState:
    """A session's small state, in every entry: where its life begins, and each agent's stamp."""

    start: int = 0
    """The first record of the current life."""
    since: int = 0
    """The log version holding that record (the first entry a read needs)."""
    created: bool = False
    """Whether the session record exists in this life."""
    agents: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """Per agent id: (its message count, the version of its latest agent record)."""
    multi_agents: Mapping[str, int] = field(default_factory=dict)
    """Per multi-agent id: the version of its latest state."""


class _Form:
    """How a `SessionState` is kept in its log's entries (`logs.state.StateForm`)."""

    kind = SESSION_KIND
    schema_version = SCHEMA_VERSION

    def parse(self, head: LogHead) -> SessionState:
        state = head.state
        bad = InvalidPayload("not a Strands session's state", object_name=head.log_id)
        if not isinstance(state, Mapping):
            raise bad
        start, since, created = state.get("start"), state.get("since"), state.get("created")
        agents, multi = state.get("agents"), state.get("multi_agents")
        if not (
            isinstance(start, int)
            and isinstance(since, int)
            and _count(start)
            and _count(since)
            and since <= head.version
            and type(created) is bool
            and isinstance(agents, Mapping)
            and isinstance(multi, Mapping)
        ):
            raise bad
        stamps: dict[str, tuple[int, int]] = {}
        for agent_id, stamp in agents.items():
            if not (isinstance(stamp, list) and len(stamp) == 2 and all(map(_count, stamp))):
                raise bad
            stamps[agent_id] = (stamp[0], stamp[1])
        if not all(_count(v) for v in multi.values()):
            raise bad
        return SessionState(start, since, created, stamps, dict(multi))

    def document(self, state: SessionState) -> dict[str, Any]:
        return {
            "start": state.start,
            "since": state.since,
            "created": state.created,
            "agents": {a: list(s) for a, s in state.agents.items()},
            "multi_agents": dict(state.multi_agents),
        }


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


@dataclass(slots=True)
class SessionView:
    """A session as its records leave it (the dicts Strands' types are made from)."""

    session: dict[str, Any] | None = None
    """The session record, None before it is created."""
    agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each agent's latest record."""
    messages: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    """Each agent's messages, by message id."""
    multi_agents: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Each multi-agent's latest state."""

    def apply(self, records: list[Any], log_id: str) -> None:
        """Fold `records` in; a record that is not one of the session's is `InvalidPayload`."""
        for record in records:
            if not isinstance(record, Mapping):
                raise InvalidPayload("not a Strands session record", object_name=log_id)
            if not self._apply(record):
                raise InvalidPayload("not a Strands session record", object_name=log_id)

    def _apply(self, record: Mapping[str, Any]) -> bool:
        if record.get("delete") is True:
            self.session, self.agents, self.messages, self.multi_agents = None, {}, {}, {}
            return True
        if isinstance(session := record.get("session"), Mapping):
            self.session = dict(session)
            return True
        if isinstance(agent := record.get("agent"), Mapping):
            agent_id = agent.get("agent_id")
            if not isinstance(agent_id, str):
                return False
            self.agents[agent_id] = dict(agent)
            self.messages.setdefault(agent_id, [])
            return True
        owner = record.get("agent")
        for name in ("message", "redact"):
            message = record.get(name)
            if not isinstance(message, Mapping):
                continue
            index = message.get("message_id")
            messages = self.messages.get(owner) if isinstance(owner, str) else None
            if messages is None or type(index) is not int:
                return False
            if name == "message" and index == len(messages):
                messages.append(dict(message))
                return True
            if name == "redact" and 0 <= index < len(messages):
                messages[index] = dict(message)
                return True
            return False
        multi, multi_id = record.get("multi_agent"), record.get("id")
        if isinstance(multi, Mapping) and isinstance(multi_id, str):
            self.multi_agents[multi_id] = dict(multi)
            return True
        return False

    def matches(self, state: SessionState) -> bool:
        """Whether these records leave what the state says (a check on the log's integrity)."""
        return (
            (self.session is not None) == state.created
            and self.agents.keys() == state.agents.keys()
            and all(len(self.messages[a]) == n for a, (n, _) in state.agents.items())
            and self.multi_agents.keys() == state.multi_agents.keys()
        )

    def copy(self) -> SessionView:
        """Return a copy whose lists and dicts can be changed without changing this one."""
        return SessionView(
            self.session,
            dict(self.agents),
            {a: list(m) for a, m in self.messages.items()},
            dict(self.multi_agents),
        )


@dataclass(frozen=True, slots=True)
class _Planned:
    state: SessionState
    records: list[dict[str, Any]]


Plan = Callable[[Known[SessionState]], _Planned]
"""A change to a session: its new state and records, planned on the latest state."""


class SessionSteps:
    """A Strands session's operations as steps (free of I/O; `StashSessionManager` drives them).

    Keeps what this process last saw of the session (each agent's stamp, and the session
    as of the version it read or wrote) so that a write made on a stale view is refused.
    """

    def __init__(self, session_id: str, state: LoggedState[SessionState]) -> None:
        self.log_id = check_log_id(session_id)
        """The session's log."""
        self.state = state
        """The sessions' one log-backed state."""
        self.seen_agents: dict[str, tuple[int, int]] = {}
        """Each agent's stamp as this process last read or wrote it."""
        self.seen_multi: dict[str, int] = {}
        """Each multi-agent's version as this process last read or wrote it."""
        self._view: tuple[int, SessionView] | None = None

    def view(self, *, fresh: bool) -> Steps[SessionView]:
        """Return the session as this process last saw it, or as stored now (`fresh`)."""
        if self._view is not None and not fresh:
            return self._view[1]
        form = self.state.form
        try:
            head, entries = yield from self.state.logs.tail(
                self.log_id, _ALL, since=lambda h: form.parse(h).start
            )
        except Purged:
            raise  # erased: not read as empty
        except CheckpointNotFound:
            self._view = (-1, SessionView())
            return self._view[1]
        known = Known(form.parse(head), head)
        self.state.remember(self.log_id, known)
        view = SessionView()
        view.apply(entries_records(entries, known.state.start), self.log_id)
        if not view.matches(known.state):
            raise InvalidPayload(
                "the session's records do not match its state", object_name=self.log_id
            )
        self.seen_agents = dict(known.state.agents)
        self.seen_multi = dict(known.state.multi_agents)
        self._view = (known.version, view)
        return view

    def write(self, *plans: Plan) -> Steps[bool]:
        """Append what `plans` ask, in order, as one entry (one request when current).

        A lost race is planned again on the winner's version: a plan refuses it (a
        `SessionConflict`) when the winner touched what this write depends on. Several
        plans (a turn's messages) land together or not at all.
        """

        def change(known: Known[SessionState], fresh: bool) -> Steps[_Planned | None]:
            return self._composed(plans, known)
            yield  # a generator: a change is steps

        def write(known: Known[SessionState], planned: _Planned | None) -> Steps[bool]:
            if planned is None:
                return False
            written = yield from self.state.append(
                self.log_id, known.log, planned.records, planned.state
            )
            self._follow(known, written, planned)
            return True

        return (yield from self.state.update(self.log_id, change, write, initial=SessionState))

    def _composed(self, plans: tuple[Plan, ...], known: Known[SessionState]) -> _Planned | None:
        """Plan `plans` one after the other on `known`, each seeing the ones before it."""
        seen = dict(self.seen_agents), dict(self.seen_multi)
        records: list[dict[str, Any]] = []
        current = known
        try:
            for plan in plans:
                planned = plan(current)
                records += planned.records
                self._see(current.state, planned.state)  # this entry's own changes are seen
                current = Known(planned.state, known.log, known.ended)
        finally:
            self.seen_agents, self.seen_multi = seen
        return _Planned(current.state, records) if records else None

    def _follow(
        self, before: Known[SessionState], after: Known[SessionState], planned: _Planned
    ) -> None:
        """Keep this process's view current after its own append (or drop it)."""
        if self._view is not None and self._view[0] == before.version:
            view = self._view[1].copy()
            view.apply(planned.records, self.log_id)
            self._view = (after.version, view)
        else:
            self._view = None
        self._see(before.state, planned.state)

    def _see(self, before: SessionState, after: SessionState) -> None:
        """Note the stamps `after` changed from `before` as seen by this process."""
        self.seen_agents.update(
            {a: s for a, s in after.agents.items() if before.agents.get(a) != s}
        )
        self.seen_multi.update(
            {m: v for m, v in after.multi_agents.items() if before.multi_agents.get(m) != v}
        )

    # -- the plans ---------------------------------------------------------------------------

    def _stamped(self, state: SessionState, agent_id: str) -> tuple[int, int]:
        """Return the agent's stamp, refusing a write on a view older than the stored one."""
        if not state.created:
            raise SessionMissing(f"session {self.log_id} does not exist", object_name=self.log_id)
        stamp = state.agents.get(agent_id)
        if stamp is None:
            raise SessionMissing(
                f"agent {agent_id} does not exist in session {self.log_id}",
                object_name=self.log_id,
            )
        seen = self.seen_agents.get(agent_id)
        if seen is not None and seen != stamp:
            raise self._conflict(f"agent {agent_id} was written by another invocation")
        return stamp

    def _conflict(self, why: str) -> SessionConflict:
        return SessionConflict(
            self.log_id, expected_revision=None, message=f"{why} of session {self.log_id}"
        )

    def create_session(self, session: dict[str, Any]) -> Plan:
        """Plan the session's creation (refused if it exists)."""

        def plan(known: Known[SessionState]) -> _Planned:
            state = known.state
            if state.created:
                raise self._conflict("the session already exists")
            new = SessionState(state.start, state.since, True, state.agents, state.multi_agents)
            return _Planned(new, [{"session": session}])

        return plan

    def put_agent(self, agent: dict[str, Any], *, create: bool) -> Plan:
        """Plan an agent's record: a new agent (`create`) or an update of one this process saw."""
        agent_id = agent["agent_id"]

        def plan(known: Known[SessionState]) -> _Planned:
            state = known.state
            if create:
                if not state.created:
                    raise SessionMissing(
                        f"session {self.log_id} does not exist", object_name=self.log_id
                    )
                if agent_id in state.agents:
                    raise self._conflict(f"agent {agent_id} already exists")
                count = 0
            else:
                count, _ = self._stamped(state, agent_id)
            agents = {**state.agents, agent_id: (count, known.next_version)}
            new = SessionState(state.start, state.since, True, agents, state.multi_agents)
            return _Planned(new, [{"agent": agent}])

        return plan

    def add_message(self, agent_id: str, message: dict[str, Any]) -> Plan:
        """Plan a message: the agent's next one, on the agent as this process saw it."""

        def plan(known: Known[SessionState]) -> _Planned:
            state = known.state
            count, revision = self._stamped(state, agent_id)
            if message["message_id"] != count:
                raise self._conflict(
                    f"message {message['message_id']} of agent {agent_id} is not its next"
                )
            agents = {**state.agents, agent_id: (count + 1, revision)}
            new = SessionState(state.start, state.since, True, agents, state.multi_agents)
            return _Planned(new, [{"message": message, "agent": agent_id}])

        return plan

    def redact(self, agent_id: str, message: dict[str, Any]) -> Plan:
        """Plan a message's rewrite (always written when the message exists)."""

        def plan(known: Known[SessionState]) -> _Planned:
            state = known.state
            stamp = state.agents.get(agent_id) if state.created else None
            if stamp is None or not 0 <= message["message_id"] < stamp[0]:
                raise SessionMissing(
                    f"message {message['message_id']} does not exist in session {self.log_id}",
                    object_name=self.log_id,
                )
            return _Planned(state, [{"redact": message, "agent": agent_id}])

        return plan

    def put_multi_agent(self, multi_id: str, data: dict[str, Any], *, create: bool) -> Plan:
        """Plan a multi-agent's state: created, or updated over the one this process saw."""

        def plan(known: Known[SessionState]) -> _Planned:
            state = known.state
            if not state.created:
                raise SessionMissing(
                    f"session {self.log_id} does not exist", object_name=self.log_id
                )
            stored = state.multi_agents.get(multi_id)
            seen = self.seen_multi.get(multi_id)
            if stored is None and not create:
                raise SessionMissing(
                    f"multi-agent {multi_id} does not exist in session {self.log_id}",
                    object_name=self.log_id,
                )
            # A create over a stored state this process never saw, or an update over one
            # newer than it saw: another invocation's, refused.
            if stored is not None and stored != seen and (create or seen is not None):
                raise self._conflict(f"multi-agent {multi_id} was written by another invocation")
            multi = {**state.multi_agents, multi_id: known.next_version}
            new = SessionState(state.start, state.since, True, state.agents, multi)
            return _Planned(new, [{"multi_agent": data, "id": multi_id}])

        return plan

    def delete(self) -> Plan:
        """Plan the session's deletion: a new life (the records stay until a purge)."""

        def plan(known: Known[SessionState]) -> _Planned:
            if not known.state.created or known.log is None:
                raise SessionMissing(
                    f"session {self.log_id} does not exist", object_name=self.log_id
                )
            new = SessionState(start=known.log.next_record + 1, since=known.next_version)
            return _Planned(new, [{"delete": True}])

        return plan


# -- the session repository and manager -----------------------------------------------------


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
        self._state = LoggedState(stash.log_steps(STRANDS_SESSIONS), _Form())
        self._sessions: dict[str, SessionSteps] = {}
        self._pending: dict[str, list[_Pending]] = {}

    def steps(self, session_id: str) -> SessionSteps:
        """Return a session's operations as steps (one per session id)."""
        found = self._sessions.get(session_id)
        if found is None:
            found = self._sessions[session_id] = SessionSteps(session_id, self._state)
        return found

    def _run(self, steps: Steps[T]) -> T:
        return run_sync(steps, self.stash.driver)

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


# -- Storage ----------------------------------------------------------------------------------

_PLAIN = re.compile(r"[A-Za-z0-9._-]")
_SLASHES = re.compile(r"/+")


def normalized_key(key: str, *, prefix: bool = False) -> str:
    """Return `key` as Strands' path-based backends keep it (`InvalidKey` if they refuse it).

    Runs of `/` collapse; a key loses its leading and trailing `/` (a prefix keeps its
    trailing one); a backslash, a `..` segment or an empty key is refused.
    """
    if not isinstance(key, str):
        raise InvalidKey(f"a storage key must be a str, not {described(key)}")
    if "\\" in key:
        raise InvalidKey("a storage key must not hold a backslash")
    collapsed = _SLASHES.sub("/", key)
    shown = collapsed.lstrip("/") if prefix else collapsed.strip("/")
    if ".." in shown.split("/"):
        raise InvalidKey("a storage key must not hold a '..' path segment")
    if not shown and not prefix:
        raise InvalidKey("a storage key must not be empty")
    return shown


def storage_id(key: str) -> str:
    """Return the head id of a Storage key (every byte outside `[A-Za-z0-9._-]` as `:hh`).

    One-to-one, and a prefix of a key is a prefix of its id, so a listing by prefix is
    one listing of ids.
    """
    if not isinstance(key, str):
        raise InvalidArgument(f"a storage key must be a str, not {described(key)}")
    return "".join(
        c if _PLAIN.fullmatch(c) else "".join(f":{b:02x}" for b in c.encode()) for c in key
    )


def storage_key(object_id: str) -> str:
    """Return the Storage key a head id stands for (the inverse of `storage_id`)."""
    out = bytearray()
    i = 0
    while i < len(object_id):
        if object_id[i] == ":":
            out.append(int(object_id[i + 1 : i + 3], 16))
            i += 3
        else:
            out += object_id[i].encode()
            i += 1
    return out.decode()


def _payload(data: bytes) -> dict[str, str]:
    try:
        return {"text": data.decode("utf-8")}  # JSON snapshots: kept readable, compressed well
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


def _bytes(envelope: Envelope) -> bytes:
    payload = envelope.payload
    if envelope.kind != STORAGE_KIND or not isinstance(payload, Mapping):
        raise InvalidPayload("not a Strands storage value", object_name=envelope.id)
    if isinstance(text := payload.get("text"), str):
        return text.encode("utf-8")
    if isinstance(coded := payload.get("base64"), str):
        try:
            return base64.b64decode(coded, validate=True)
        except ValueError:  # binascii.Error: not base64
            raise InvalidPayload("not a Strands storage value", object_name=envelope.id) from None
    raise InvalidPayload("not a Strands storage value", object_name=envelope.id)


class StorageSteps:
    """`StashStorage`'s operations as steps over one head namespace (free of I/O)."""

    def __init__(self, cas: CompareAndSwap) -> None:
        self.cas = cas
        """The compare-and-swap engine of the `strands-storage` namespace."""
        self.known: dict[str, Envelope | None] = {}
        """Each key's head as this storage last read or wrote it (None: absent)."""

    def read(self, key: str) -> Steps[bytes | None]:
        """Return the key's bytes (None: absent) and remember its revision."""
        object_id = storage_id(key)
        try:
            envelope = yield from self.cas.load(object_id)
        except Purged:
            raise
        except CheckpointNotFound:
            self.known[object_id] = None
            return None
        data = _bytes(envelope)
        self.known[object_id] = envelope
        return data

    def write(self, key: str, data: bytes) -> Steps[None]:
        """Store `data` over the revision last seen (a key never seen: only if absent or equal)."""
        if not isinstance(data, bytes | bytearray):
            raise InvalidArgument(f"data must be bytes, not {described(data)}")
        object_id = storage_id(key)
        payload = _payload(bytes(data))
        now = yield from ask(Now())
        seen = self.known.get(object_id)
        if seen is not None:
            envelope = seen.next(payload, at=now)
            expected: int | None = seen.revision
        else:
            envelope = Envelope.initial(
                object_id, None, STORAGE_KIND, SCHEMA_VERSION, payload, at=now
            )
            expected = None
        try:
            yield from self.cas.compare_and_swap(envelope, expected)
        except Purged:
            raise
        except (CheckpointConflict, CheckpointNotFound):
            self.known.pop(object_id, None)
            if seen is None:
                # A key this storage knew as absent or never read, found taken: a create that
                # finds the same bytes is this write (a resent create, or the same snapshot).
                try:
                    stored = yield from self.cas.load(object_id)
                except CheckpointNotFound:
                    stored = None
                if stored is not None and _bytes(stored) == bytes(data):
                    self.known[object_id] = stored
                    return
            raise StorageConflict(
                object_id,
                expected_revision=expected,
                message=f"{object_id} was written by another writer since this one saw it",
            ) from None
        self.known[object_id] = envelope

    def delete(self, key: str) -> Steps[None]:
        """Delete the key (conditional on the revision last seen; absent: nothing happens)."""
        object_id = storage_id(key)
        seen = self.known.pop(object_id, None)
        try:
            yield from self.cas.delete(object_id, None if seen is None else seen.revision)
        except CheckpointNotFound:
            pass
        except CheckpointConflict:
            raise StorageConflict(
                object_id,
                expected_revision=None if seen is None else seen.revision,
                message=f"{object_id} was written by another writer since this one saw it",
            ) from None
        self.known[object_id] = None

    def list(self, prefix: str) -> Steps[builtins.list[str]]:
        """Return the keys starting with `prefix`, sorted."""
        ids = yield from self.cas.list_ids(storage_id(prefix) if prefix else "")
        return sorted(storage_key(i) for i in ids)


class StashStorage:
    """Strands' `Storage` protocol over a stash (for `SnapshotSessionManager` and the rest).

    `StashStorage(stash)` takes a `Stash` (its calls run on a worker thread) or an
    `AsyncStash` (awaited on the loop). Each key is a head written by compare-and-swap;
    its bytes round-trip unchanged (UTF-8 text is kept as text, anything else base64).
    Keys are normalized as Strands' own backends normalize them. `namespace(prefix)` is
    a view under `prefix/` sharing what this storage has seen.
    """

    def __init__(
        self, stash: Stash | AsyncStash, *, prefix: str = "", steps: StorageSteps | None = None
    ) -> None:
        from stashpoint.stash import AsyncStash, Stash

        if not isinstance(stash, Stash | AsyncStash):
            raise InvalidArgument(f"stash must be an opened stash, not {described(stash)}")
        if steps is not None and not isinstance(steps, StorageSteps):
            raise InvalidArgument(f"steps must be a StorageSteps, not {described(steps)}")
        self.stash = stash
        """Where the values are kept."""
        self.steps = steps or StorageSteps(stash.head_steps(STRANDS_STORAGE))
        """The operations as steps (shared by the views of one storage)."""
        scope = normalized_key(prefix, prefix=True).rstrip("/")
        self.prefix = f"{scope}/" if scope else ""
        """What every key of this view starts with (`namespace`)."""
        if self.prefix:
            self._namespaced = _NAMESPACED  # Strands' marker: a view already scoped

    def namespace(self, prefix: str) -> StashStorage:
        """Return a view of this storage under `prefix/` (Strands' namespacing)."""
        return StashStorage(self.stash, prefix=f"{self.prefix}{prefix}", steps=self.steps)

    async def _run(self, steps: Steps[T]) -> T:
        from stashpoint.stash import AsyncStash

        if isinstance(self.stash, AsyncStash):
            return await run_async(steps, self.stash.driver)
        return await asyncio.to_thread(run_sync, steps, self.stash.driver)

    def _key(self, key: str) -> str:
        return normalized_key(f"{self.prefix}{normalized_key(key)}")

    async def write(self, key: str, data: bytes) -> None:
        """Store `data` under `key` (`StorageConflict` if another writer changed it since)."""
        await self._run(self.steps.write(self._key(key), data))

    async def read(self, key: str) -> bytes | None:
        """Return the bytes under `key`, None if there are none."""
        return await self._run(self.steps.read(self._key(key)))

    async def delete(self, key: str) -> None:
        """Delete `key` (nothing happens if it is absent)."""
        await self._run(self.steps.delete(self._key(key)))

    async def list(self, query: str = "") -> builtins.list[str]:
        """Return the keys starting with `query`, sorted (relative to this view)."""
        if not isinstance(query, str):
            raise InvalidArgument(f"query must be a str prefix, not {described(query)}")
        wanted = self.prefix + normalized_key(query, prefix=True)
        keys = await self._run(self.steps.list(wanted))
        return [k[len(self.prefix) :] for k in keys]

    async def search(self, query: str) -> builtins.list[StorageSearchResult]:
        """Search the values by keywords (Strands' own keyword strategy over this storage)."""
        from strands.storage.search.keyword import KeywordSearchStrategy

        return await KeywordSearchStrategy().search(self, query)


__all__ = [
    "InvalidKey",
    "SaveMode",
    "SessionConflict",
    "SessionMissing",
    "SessionState",
    "SessionSteps",
    "SessionView",
    "StashSessionManager",
    "StashSessionRepository",
    "StashStorage",
    "StorageConflict",
    "StorageSteps",
]
