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
purge with receipts (`stash.admin.purge(namespace="strands-sessions", ids=[...])`), Object Lock
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

from stashpoint.strands_agents.session_log import (
    SCHEMA_VERSION,
    SESSION_KIND,
    SessionConflict,
    SessionForm,
    SessionMissing,
    SessionState,
    SessionSteps,
    SessionView,
)
from stashpoint.strands_agents.sessions import (
    SaveMode,
    StashSessionManager,
    StashSessionRepository,
)
from stashpoint.strands_agents.storage import (
    STORAGE_KIND,
    InvalidKey,
    StashStorage,
    StorageConflict,
    StorageSteps,
    normalized_key,
    storage_id,
    storage_key,
)

__all__ = [
    "SCHEMA_VERSION",
    "SESSION_KIND",
    "STORAGE_KIND",
    "InvalidKey",
    "SaveMode",
    "SessionConflict",
    "SessionForm",
    "SessionMissing",
    "SessionState",
    "SessionSteps",
    "SessionView",
    "StashSessionManager",
    "StashSessionRepository",
    "StashStorage",
    "StorageConflict",
    "StorageSteps",
    "normalized_key",
    "storage_id",
    "storage_key",
]
