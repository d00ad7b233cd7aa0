"""The index's one schema definition, from which every table is generated.

The DynamoDB table, the SQLite table and the infra template all come from these constants,
so they cannot drift apart.

    pk = run#{run_id}   sk = run                  one item per run
    pk = run#{run_id}   sk = attempt#{attempt_id} one item per attempt
    GSI by_graph:     gpk = graph#{namespace}#{graph_name}      gsk = {created_at}#{run_id}
    GSI by_status:    spk = status#{namespace}#{status}         ssk = {updated_at}#{run_id}
                      spk = attempt-status#{namespace}#{status} ssk = {started_at}#{attempt_id}
    GSI by_namespace: npk = runs#{namespace}                    nsk = {created_at}#{run_id}
    TTL attribute: expires_at (epoch seconds), set when a retention is configured.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

PARTITION_KEY = "pk"
"""Table partition key attribute."""
SORT_KEY = "sk"
"""Table sort key attribute."""
REVISION = "revision"
"""Attribute holding the run revision an item describes; writes never move it backwards."""
TTL_ATTRIBUTE = "expires_at"
"""Attribute DynamoDB's TTL reads (epoch seconds)."""


@dataclass(frozen=True, slots=True)
class SecondaryIndex:
    """One global secondary index: its name and key attributes."""

    name: str
    """Index name."""
    partition_key: str
    """Partition key attribute."""
    sort_key: str
    """Sort key attribute."""


BY_GRAPH = SecondaryIndex("by_graph", "gpk", "gsk")
"""Runs of one graph, newest first."""
BY_STATUS = SecondaryIndex("by_status", "spk", "ssk")
"""Runs (and attempts) in one status, most recently updated first."""
BY_NAMESPACE = SecondaryIndex("by_namespace", "npk", "nsk")
"""All runs of a namespace, newest first."""
SECONDARY_INDEXES = (BY_GRAPH, BY_STATUS, BY_NAMESPACE)
"""Every secondary index of the table."""

KEY_ATTRIBUTES = (
    PARTITION_KEY,
    SORT_KEY,
    *(attr for gsi in SECONDARY_INDEXES for attr in (gsi.partition_key, gsi.sort_key)),
)
"""Every attribute used as a key somewhere (all strings)."""


def dynamodb_table_definition(table_name: str) -> dict[str, Any]:
    """Return `CreateTable` parameters: on-demand billing, the three GSIs."""
    return {
        "TableName": table_name,
        "BillingMode": "PAY_PER_REQUEST",
        "AttributeDefinitions": [
            {"AttributeName": name, "AttributeType": "S"} for name in KEY_ATTRIBUTES
        ],
        "KeySchema": [
            {"AttributeName": PARTITION_KEY, "KeyType": "HASH"},
            {"AttributeName": SORT_KEY, "KeyType": "RANGE"},
        ],
        "GlobalSecondaryIndexes": [
            {
                "IndexName": gsi.name,
                "KeySchema": [
                    {"AttributeName": gsi.partition_key, "KeyType": "HASH"},
                    {"AttributeName": gsi.sort_key, "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": "ALL"},
            }
            for gsi in SECONDARY_INDEXES
        ],
    }


def sqlite_schema() -> list[str]:
    """Return the SQLite statements creating the same model (idempotent)."""
    key_columns = ", ".join(f"{name} TEXT" for name in KEY_ATTRIBUTES[2:])
    statements = [
        f"CREATE TABLE IF NOT EXISTS items ({PARTITION_KEY} TEXT NOT NULL, "
        f"{SORT_KEY} TEXT NOT NULL, {key_columns}, {REVISION} INTEGER NOT NULL, "
        f"{TTL_ATTRIBUTE} INTEGER, item TEXT NOT NULL, "
        f"PRIMARY KEY ({PARTITION_KEY}, {SORT_KEY})) WITHOUT ROWID"
    ]
    statements += [
        f"CREATE INDEX IF NOT EXISTS {gsi.name} ON items ({gsi.partition_key}, {gsi.sort_key})"
        for gsi in SECONDARY_INDEXES
    ]
    return statements
