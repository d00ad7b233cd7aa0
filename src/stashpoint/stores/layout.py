"""The one registry of namespaces: where things live under a store's prefix.

S3 and the local folder alike:

    {prefix}/checkpoints/{id}                       mutable head envelope (If-Match CAS)
    {prefix}/{log namespace}/{log_id}/{v:020d}      log entry (If-None-Match)
    {prefix}/sealed/{log namespace}/{log_id}/{a}-{b}  sealed segment of 64 versions
    {prefix}/blobs/{sha256}                         content-addressed large value
    {prefix}/langgraph-values/{thread}/{name}       a LangGraph thread's large values
    {prefix}/langgraph-store/{item id}              a LangGraph store item (If-Match CAS)
    {prefix}/langgraph-store-catalog/{ns id}        a derived copy of one namespace's items
    {prefix}/quarantine/{key}.{etag}                what a log repair moved aside
    {prefix}/purges/{purge_id}/{v:020d}             an erasure receipt (a log)
    {prefix}/data-keys/{tenant}/{key_id}            a wrapped data key (client-side encryption)
    {prefix}/fleet/{map_id}:{part}/{v:020d}         a fleet map's plan, batches, marks, end (logs)

Every namespace is declared here, once, with its shape: what kind of objects it holds and
how they are written. Maintenance (`gc`), export and purge walk this registry, so a new
namespace is one line here, never a list kept in several places.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from stashpoint.errors import ConfigurationError


class Shape(Enum):
    """What kind of objects a namespace holds (new shapes may appear in later versions)."""

    HEADS = "heads"
    """Mutable head envelopes, one per id, updated by compare-and-swap."""
    LOGS = "logs"
    """Append-only logs: one entry per version, sealed into segments (`stashpoint.logs`)."""
    SEGMENTS = "segments"
    """The sealed segments of every log namespace (`sealed/{namespace}/...`)."""
    CONTENT = "content"
    """Immutable objects named by their content's hash."""
    PROBES = "probes"
    """Short-lived objects maintenance writes and deletes at once (storage's clock)."""
    QUARANTINE = "quarantine"
    """Objects a repair moved aside, kept until an operator deletes them (never read)."""
    KEYS = "keys"
    """Wrapped data keys of client-side encryption (stored as is; only a shred removes them)."""
    DERIVED = "derived"
    """Files derived from logs (`stashpoint.projection`), under `{source namespace}/{log id}/`:
    erased with the log they were derived from, rebuilt from it."""


@dataclass(frozen=True, slots=True)
class Namespace:
    """One namespace of the layout: its name under the prefix and how it is written."""

    name: str
    """The folder under the store's prefix."""
    shape: Shape
    """What its objects are."""
    full_state_every: int = 16
    """Logs only: versions that are a multiple of this store their whole state (every
    writer and reader of the namespace must agree)."""
    references_blobs: bool = False
    """Whether its objects may reference blobs (so `gc` reads them for references)."""
    erasable: bool = True
    """Whether it holds what users store, by id (a purge of a prefix walks it)."""
    owned: bool = False
    """Content only: each object lives under the id of what owns it (`{owner}/...`, a
    Temporal workflow's payloads, a durable execution's values), so a purge of that id
    (or of a prefix of owners) erases them, with a receipt."""
    values: str | None = None
    """Logs only: the namespace holding each log's large values, by log id
    (`{values}/{log_id}/...`), erased with the log."""
    life_field: str | None = None
    """Logs only: the field of the log's state that names the first version of its
    owner's current life, for owners that start lives in their state (a LangGraph
    thread's deletion or rebase). Readers never read below it; `gc` vacates the entries
    there and seals and packs only above it."""
    derived_from: str | None = None
    """Heads only: the namespace whose heads these copy (the LangGraph store's catalogs
    copy its items). A derived head is sealed by its source's key rules, and a purge of a
    source head erases the derived head its id names (`derived_id`) after it, whatever
    its age, leaving a reusable tombstone: derived data never outlives its source."""


CHECKPOINTS = "checkpoints"
"""Namespace of checkpoint heads (envelopes)."""
BLOBS = "blobs"
"""Namespace of immutable content-addressed blobs."""
CLOCK = "clock"
"""Namespace of the probe objects maintenance writes to read storage's clock."""
SEALED = "sealed"
"""Namespace of the sealed segments of every log namespace (archivable by prefix)."""
AGENTS = "agents"
"""Log namespace of agent checkpoints (records: transcript messages)."""
CONVERSATIONS = "conversations"
"""Log namespace of durable conversations."""
RUN_LOGS = "run-logs"
"""Log namespace of graph runs (records: attempts and their ends)."""
LOGS = "logs"
"""Log namespace of `stash.logs`, the application's own logs."""
LANGGRAPH = "langgraph"
"""Log namespace of LangGraph threads (one log per thread)."""
LANGGRAPH_VALUES = "langgraph-values"
"""Namespace of LangGraph threads' large values and list snapshots."""
LANGGRAPH_STORE = "langgraph-store"
"""Namespace of LangGraph store items (`StashpointStore`: long-term memory, one head each)."""
LANGGRAPH_STORE_CATALOG = "langgraph-store-catalog"
"""Namespace of the LangGraph store's catalogs: per item namespace, one head holding a copy
of its items, which a search reads in one GET instead of one per item (`langgraph.catalog`;
derived from `langgraph-store`, checked against its listing, never trusted over it)."""
QUARANTINE = "quarantine"
"""Namespace of the objects `repair_log` moved from above a log's gap (by original key)."""
PURGES = "purges"
"""Log namespace of erasure receipts (one log per purge: its plan, progress and result)."""
DATA_KEYS = "data-keys"
"""Namespace of the wrapped data keys of client-side encryption (`stashpoint.encryption`)."""
FLEET = "fleet"
"""Log namespace of fleet maps (`runs.fleet`): per map a plan, a log per batch (claims,
leases, results), a done mark per batch and the map's end, all under `{map_id}:`."""

DURABLE_EXECUTIONS = "durable-executions"
"""Log namespace of AWS Lambda durable functions' executions (`stashpoint.durable_functions`):
one log per execution, its records the operations and history events."""
DURABLE_VALUES = "durable-values"
"""Namespace of durable functions' values too large for a checkpoint
(`durable_functions.serdes.StashSerDes`), named `{owner}/{operation}/{sha256}`."""

OPENAI_SESSIONS = "openai-agents-sessions"
"""Log namespace of OpenAI Agents SDK sessions (`stashpoint.openai_agents`): one log per
session, its records the items."""

STRANDS_SESSIONS = "strands-sessions"
"""Log namespace of Strands Agents sessions (`stashpoint.strands_agents`): one log per
session, its records the session, its agents, their messages and multi-agent states."""
STRANDS_STORAGE = "strands-storage"
"""Head namespace of Strands' `Storage` values (`strands_agents.StashStorage`): one head per
key (snapshots of `SnapshotSessionManager`, and whatever else a Strands `Storage` holds)."""

TEMPORAL_PAYLOADS = "temporal-payloads"
"""Namespace of Temporal's externally stored payloads (`temporal.StashStorageDriver`),
named `{owner}/{sha256}`."""

PROJECTION = "projection"
"""Namespace of the queryable archive (`stashpoint.projection`): Parquet files of logs'
records, `{source namespace}/{log id}/{life}-{first version}.parquet`."""

COMPACTED = "_compacted"
"""The folder of the projection's compacted files (`stashpoint.compaction`):
`projection/_compacted/{source namespace}/{tenant}/`. A leading `_`: not a source
namespace, and hidden from Hive-style readers (Athena, Spark) of `projection/`."""


def log_tenant(namespace: str, log_id: str) -> str:
    """Return the tenant a log names: its id's first dot-separated segment.

    `acme.t1`: `acme`; a conversation's, that of the namespace it was committed in.
    """
    if namespace == CONVERSATIONS:
        # `conversation.{len(namespace)}.{namespace}.{conversation id}` (agent.logic)
        _, _, rest = log_id.partition(".")
        length, _, rest = rest.partition(".")
        if length.isdigit():
            log_id = rest[: int(length)]
    return log_id.split(".", 1)[0]


NAMESPACES: dict[str, Namespace] = {
    namespace.name: namespace
    for namespace in (
        Namespace(CHECKPOINTS, Shape.HEADS, references_blobs=True),
        Namespace(BLOBS, Shape.CONTENT),
        Namespace(CLOCK, Shape.PROBES),
        Namespace(SEALED, Shape.SEGMENTS),
        Namespace(AGENTS, Shape.LOGS),
        Namespace(CONVERSATIONS, Shape.LOGS),
        Namespace(RUN_LOGS, Shape.LOGS, references_blobs=True),
        Namespace(LOGS, Shape.LOGS),
        # A thread's state is small and read on every get: every entry stands alone.
        Namespace(
            LANGGRAPH, Shape.LOGS, full_state_every=1, values=LANGGRAPH_VALUES, life_field="base"
        ),
        Namespace(LANGGRAPH_VALUES, Shape.CONTENT),
        Namespace(LANGGRAPH_STORE, Shape.HEADS),
        Namespace(LANGGRAPH_STORE_CATALOG, Shape.HEADS, derived_from=LANGGRAPH_STORE),
        Namespace(QUARANTINE, Shape.QUARANTINE),
        # Receipts hold ids and version ids, no payload: kept when what they name is erased.
        Namespace(PURGES, Shape.LOGS, full_state_every=1, erasable=False),
        # Data keys are a tenant's, not an id's: a purge of ids keeps them, a shred erases them.
        Namespace(DATA_KEYS, Shape.KEYS, erasable=False),
        # Small states read from the newest entry alone; item chunks and large results are blobs.
        Namespace(FLEET, Shape.LOGS, full_state_every=1, references_blobs=True),
        # The newest entry's small state says where an execution stands (a worker's scan).
        Namespace(DURABLE_EXECUTIONS, Shape.LOGS, full_state_every=1),
        # Named by their hash, referenced from checkpoints (Lambda's or ours): never collected.
        Namespace(DURABLE_VALUES, Shape.CONTENT, owned=True),
        # The newest entry's small state says where the current life's records start.
        Namespace(OPENAI_SESSIONS, Shape.LOGS, full_state_every=1),
        # The newest entry's small state holds each agent's stamp and where the life starts.
        Namespace(STRANDS_SESSIONS, Shape.LOGS, full_state_every=1),
        Namespace(STRANDS_STORAGE, Shape.HEADS),
        # Named by their hash, referenced from Temporal's histories: never collected.
        Namespace(TEMPORAL_PAYLOADS, Shape.CONTENT, owned=True),
        # Derived from logs, erased with them (a purge of a log reaches its projection).
        Namespace(PROJECTION, Shape.DERIVED, erasable=False),
    )
}
"""Every namespace of the layout, by name."""


def derived_id(namespace: str, object_id: str) -> str | None:
    """Return the id of the derived head that copies the head `object_id` of `namespace`.

    A LangGraph store item `{namespace labels}.` + `.{key}` is copied into the catalog of
    its namespace, `{namespace labels}.` (the labels are escaped: the first `..` ends them).
    None where `namespace` has no derived heads, or the id names no item.
    """
    if namespace != LANGGRAPH_STORE:
        return None
    labels, separator, _ = object_id.partition("..")
    return labels + "." if separator and labels else None


def derived_namespaces(namespace: str) -> list[str]:
    """Return the namespaces of heads derived from `namespace`'s (`Namespace.derived_from`)."""
    return [n.name for n in NAMESPACES.values() if n.derived_from == namespace]


def check_prefix(prefix: str, *, nested: bool = False) -> str:
    """Return a store prefix, refused if a segment of it is a namespace of the layout.

    A stash at `acme` keeps its segments under `acme/sealed/`, its agents under
    `acme/agents/`: a stash at `acme/sealed` or `acme/agents` would share those keys with
    it, and each would read the other's objects as its own. An object store cannot say
    whether a stash lives at the prefix above without a request on every open, so a
    namespace segment is refused unless the caller says the prefix above holds no stash
    (`nested=True`, the `nested_prefix=allow` option). Raises `ConfigurationError`.
    """
    for segment in prefix.split("/"):
        if segment in (".", ".."):
            raise ConfigurationError(
                f"prefix segment {segment!r} is not allowed", object_name=prefix
            )
        if not nested and is_namespace_name(segment):
            raise ConfigurationError(
                f"prefix segment {segment!r} is a namespace of stashpoint's layout: a stash "
                f"at the prefix above it would share this stash's keys; choose another "
                f"prefix (for example with '-data' appended to {segment!r}), or, if no "
                f"stash lives above it, open with nested_prefix=allow",
                object_name=prefix,
            )
    return prefix


def is_namespace_name(segment: str) -> bool:
    """Whether a key segment is the name of a namespace of the layout (or the probe's)."""
    return segment in NAMESPACES or segment == ".doctor"


def of_shape(shape: Shape) -> tuple[Namespace, ...]:
    """Return the namespaces of one shape, in registry order."""
    return tuple(n for n in NAMESPACES.values() if n.shape is shape)


@dataclass(frozen=True, slots=True)
class Layout:
    """Where things live under a store's prefix: `{prefix}/{namespace}/{id}`."""

    prefix: str = ""
    """Key prefix shared by every object of this store (no leading or trailing '/')."""

    def key(self, namespace: str, object_id: str) -> str:
        """Return the object key of `object_id` in `namespace`."""
        return f"{self.namespace_prefix(namespace)}{object_id}"

    def namespace_prefix(self, namespace: str) -> str:
        """Return the key prefix of every object in `namespace`."""
        return f"{self.prefix}/{namespace}/" if self.prefix else f"{namespace}/"

    def compacted_prefix(self, namespace: str, log_id: str) -> str:
        """Return the prefix of the compacted files that may hold a log's projected rows.

        Those of its tenant (`log_tenant`): a purge or an erasure of the log's projected
        files erases them too (the next compaction writes the others' rows again).
        """
        tenant = log_tenant(namespace, log_id)
        return self.key(PROJECTION, f"{COMPACTED}/{namespace}/{tenant}/")
