"""Where things live under a store's prefix (S3 and the local folder alike).

{prefix}/checkpoints/{checkpoint_id}    head envelope of an agent/job checkpoint
{prefix}/runs/{run_id}                  head envelope of a graph run
{prefix}/blobs/{sha256}                 immutable content-addressed blobs
"""

from __future__ import annotations

from dataclasses import dataclass

CHECKPOINTS = "checkpoints"
"""Namespace of agent and job checkpoint heads."""
RUNS = "runs"
"""Namespace of graph-run heads."""
BLOBS = "blobs"
"""Namespace of immutable content-addressed blobs."""
CLOCK = "clock"
"""Namespace of the probe objects maintenance writes to read storage's clock (each
deleted at once)."""


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
