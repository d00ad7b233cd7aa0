"""A Strands session as one log: its state, records, view and plans (free of I/O)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from strands.types.exceptions import SessionException

from stashpoint.errors import (
    CheckpointConflict,
    CheckpointNotFound,
    InvalidPayload,
)
from stashpoint.logs.format import check_log_id
from stashpoint.logs.log import LogHead
from stashpoint.logs.state import Known, LoggedState
from stashpoint.steps import Steps

if TYPE_CHECKING:
    pass


SESSION_KIND = "stashpoint.strands-session"
"""The session logs' entries' kind."""
SCHEMA_VERSION = 1
"""The entries' schema version."""


class SessionConflict(CheckpointConflict, SessionException):
    """Another invocation wrote this session's agent after this one last saw it.

    Nothing was written. Load the session again (a new agent and manager) and go on from
    what the other wrote. A Strands `SessionException` as well, so code that handles
    Strands' session errors handles this one.
    """


class SessionMissing(CheckpointNotFound, SessionException):
    """The session, agent or message a write names does not exist (Strands' own error too)."""


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


class SessionForm:
    """How a `SessionState` is kept in its log's entries (`logs.state.StateForm`)."""

    kind = SESSION_KIND
    schema_version = SCHEMA_VERSION

    def parse(self, head: LogHead) -> SessionState:
        """Return the typed state of a log head (`InvalidPayload` if it is not one)."""
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
        """Return the state as kept in an entry."""
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
        found = yield from self.state.read_life(self.log_id, lambda state: state.start)
        if found is None:  # never written, or deleted
            self._view = (-1, SessionView())
            return self._view[1]
        known, records = found
        view = SessionView()
        view.apply(records, self.log_id)
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
