"""The index's one schema definition, from which every table is generated.

The DynamoDB table, the SQLite table and the infra template all come from these constants,
so they cannot drift apart.

Layout 2 (sharded, keys only; `runs/indexing.py` builds the items, `docs/run-index.md` explains):

    pk = run#{run_id}   sk = run                  one item per run
    pk = run#{run_id}   sk = attempt#{attempt_id} one item per attempt
    GSI runs_by_namespace: rnpk = runs#{ns}#{shard}                  rnsk = {created_at}#{run_id}
    GSI runs_by_status:    rspk = status#{ns}#{status}#{shard}       rssk = {created_at}#{run_id}
    GSI runs_by_graph:     rgpk = graph#{ns}#{graph}#{status}#{shard} rgsk = {created_at}#{run_id}
    GSI attempts_by_status: aspk = attempt-status#{ns}#{status}#{shard} assk = {started_at}#{id}
                            aspk = lease#{ns}#{shard}             assk = {lease expiry}#{id}
    TTL attribute: expires_at (epoch seconds), set when a retention is configured.

    pk = lgrun#{prefix}#{run_id}   sk = thread#{thread log id}   (`langgraph/run_threads.py`)
    pk = dx#{prefix}#{execution id} sk = due    (`durable_functions/due_index.py`; GSI
         runs_by_status: rspk = dxdue#{prefix}#{shard}  rssk = {due ms}#{execution id})

`shard` is a hash of the run id modulo `SHARDS`: no GSI partition takes more than its share
of a namespace's writes, and a listing queries every shard at once and merges them. The GSIs
project keys only, so a transition that changes no key writes no GSI; a listing reads the
items of its page afterwards (one batch get). Completed attempts are in no GSI (they are
most attempts, and a run's attempts are read from its log).

Format v1 has this layout (2) only: the index is derived from storage, so a table or file of
an earlier pre-release layout is rebuilt (`stashpoint reindex`), never migrated.
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


LAYOUT = 2
"""Version of the index layout these definitions describe."""
SHARDS = 8
"""Write shards of every GSI partition (changing it needs `stashpoint reindex`)."""

RUNS_BY_NAMESPACE = SecondaryIndex("runs_by_namespace", "rnpk", "rnsk")
"""All runs of a namespace, newest first."""
RUNS_BY_STATUS = SecondaryIndex("runs_by_status", "rspk", "rssk")
"""Runs in one status, newest first."""
RUNS_BY_GRAPH = SecondaryIndex("runs_by_graph", "rgpk", "rgsk")
"""Runs of one graph in one status, newest first (a graph's runs: every status at once)."""
ATTEMPTS_BY_STATUS = SecondaryIndex("attempts_by_status", "aspk", "assk")
"""Attempts that are not completed, by status; running attempts with a lease, by expiry."""
SECONDARY_INDEXES = (RUNS_BY_NAMESPACE, RUNS_BY_STATUS, RUNS_BY_GRAPH, ATTEMPTS_BY_STATUS)
"""Every secondary index of the table (layout 2)."""

KEY_ATTRIBUTES = (
    PARTITION_KEY,
    SORT_KEY,
    *(attr for gsi in SECONDARY_INDEXES for attr in (gsi.partition_key, gsi.sort_key)),
)
"""Every attribute used as a key somewhere (all strings)."""


def execution_due_pk(prefix: str, execution_id: str) -> str:
    """Return the partition key of a durable execution's due item (a purge deletes it)."""
    return f"dx#{prefix or '-'}#{execution_id}"


def dynamodb_table_definition(table_name: str) -> dict[str, Any]:
    """Return `CreateTable` parameters: on-demand billing, the GSIs, keys only."""
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
                "Projection": {"ProjectionType": "KEYS_ONLY"},
            }
            for gsi in SECONDARY_INDEXES
        ],
    }


def sqlite_schema() -> list[str]:
    """Return the SQLite statements creating the same model (idempotent).

    A file of an earlier layout keeps its table (`sqlite_missing_columns` tells it apart).
    """
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


def sqlite_missing_columns(columns: set[str]) -> list[str]:
    """Return the `ALTER TABLE` statements a file of an earlier layout would need."""
    return [
        f"ALTER TABLE items ADD COLUMN {name} TEXT"
        for name in KEY_ATTRIBUTES[2:]
        if name not in columns
    ]
