"""The one registry of namespaces: where things live under a store's prefix.

S3 and the local folder alike:

    {prefix}/checkpoints/{id}                       mutable head envelope (If-Match CAS)
    {prefix}/{log namespace}/{log_id}/{v:020d}      log entry (If-None-Match)
    {prefix}/sealed/{log namespace}/{log_id}/{a}-{b}  sealed segment of 64 versions
    {prefix}/blobs/{sha256}                         content-addressed large value
    {prefix}/langgraph-values/{thread}/{name}       a LangGraph thread's large values

Every namespace is declared here, once, with its shape: what kind of objects it holds and
how they are written. Maintenance (`gc`), export and purge walk this registry, so a new
namespace is one line here, never a list kept in several places.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


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


CHECKPOINTS = "checkpoints"
"""Namespace of checkpoint heads (envelopes)."""
RUNS = "runs"
"""Namespace of whole-envelope runs written by stashpoint before runs were logs."""
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

NAMESPACES: dict[str, Namespace] = {
    namespace.name: namespace
    for namespace in (
        Namespace(CHECKPOINTS, Shape.HEADS, references_blobs=True),
        Namespace(RUNS, Shape.HEADS, references_blobs=True),
        Namespace(BLOBS, Shape.CONTENT),
        Namespace(CLOCK, Shape.PROBES),
        Namespace(SEALED, Shape.SEGMENTS),
        Namespace(AGENTS, Shape.LOGS),
        Namespace(CONVERSATIONS, Shape.LOGS),
        Namespace(RUN_LOGS, Shape.LOGS, references_blobs=True),
        Namespace(LOGS, Shape.LOGS),
        # A thread's state is small and read on every get: every entry stands alone.
        Namespace(LANGGRAPH, Shape.LOGS, full_state_every=1),
        Namespace(LANGGRAPH_VALUES, Shape.CONTENT),
    )
}
"""Every namespace of the layout, by name."""


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
