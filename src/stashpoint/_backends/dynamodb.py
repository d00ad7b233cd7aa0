"""DynamoDB as the index: one table, its GSIs (see `index.schema`), boto3 and aiobotocore.

What each index request means in DynamoDB calls is written once (`dynamodb_calls`);
the sync and async transports only perform the calls. Writes are conditional on `revision`
(`attribute_not_exists(pk) OR revision < :revision`), so a stale writer never regresses an
item; its refusal is not an error.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import partial
from typing import Any

import botocore.config
import botocore.exceptions

from stashpoint._backends.aws import (
    NEVER_SENT,
    REFUSED,
    AsyncAwsTransport,
    AwsCall,
    AwsClientSettings,
    AwsTransport,
    setup_error,
)
from stashpoint.errors import ConfigurationError, StashpointError, StorageUnavailable
from stashpoint.index.requests import (
    DeleteItem,
    DescribeIndex,
    Expected,
    GetItem,
    GetItems,
    GetPartition,
    IndexDescription,
    IndexRequest,
    ItemPage,
    Malformed,
    PutItems,
    QueryItems,
    ReplaceItems,
)
from stashpoint.index.schema import (
    PARTITION_KEY,
    REVISION,
    SECONDARY_INDEXES,
    SORT_KEY,
    TTL_ATTRIBUTE,
    dynamodb_table_definition,
)
from stashpoint.steps import Parallel, Sleep, Steps, ask

DEFAULT_CLIENT_CONFIG = botocore.config.Config(
    connect_timeout=5,
    read_timeout=10,
    max_pool_connections=64,
)
"""Client settings used unless the caller's `index_client_config` says otherwise."""
DEFAULT_RETRIES = {"mode": "standard", "max_attempts": 5}
"""Retries unless `index_client_config`, `AWS_MAX_ATTEMPTS` / `AWS_RETRY_MODE` or the
profile say otherwise."""

_GSI = {gsi.name: gsi for gsi in SECONDARY_INDEXES}
_CONDITION = f"attribute_not_exists({PARTITION_KEY}) OR {REVISION} < :revision"
_BATCH_GET = 100
"""Most keys one BatchGetItem takes."""
_UNPROCESSED_BACKOFF = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 0.0)
"""Waits between asking again for keys DynamoDB left unprocessed (the last try: no wait)."""


@dataclass(frozen=True, kw_only=True)
class DynamoDBSettings(AwsClientSettings):
    """Everything a DynamoDB index transport needs."""

    table: str
    """The index table's name."""
    client_config: botocore.config.Config = DEFAULT_CLIENT_CONFIG
    """botocore client settings."""


@functools.cache
def _typed() -> tuple[Any, Any]:
    # Here, not at import: boto3's package costs ~20 ms of CPU over the botocore that S3
    # needs, and a cold process that only reads objects (a LangGraph `get_tuple` on a
    # stash with an index) never touches the index.
    from boto3.dynamodb.types import TypeDeserializer, TypeSerializer

    return TypeSerializer(), TypeDeserializer()


def to_attributes(item: Mapping[str, Any]) -> dict[str, Any]:
    """Return an item in DynamoDB's typed form, leaving out None values."""
    serialize = _typed()[0].serialize
    return {k: serialize(v) for k, v in item.items() if v is not None}


def from_attributes(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Return a plain item from DynamoDB's typed form (numbers as int)."""
    deserialize = _typed()[1].deserialize
    item = {k: deserialize(v) for k, v in attributes.items()}
    return {k: int(v) if isinstance(v, Decimal) else v for k, v in item.items()}


def _failure(exc: Exception, table: str) -> StashpointError:
    if isinstance(exc, NEVER_SENT):
        return setup_error(exc, table)
    if isinstance(exc, botocore.exceptions.ClientError):
        code = exc.response.get("Error", {}).get("Code", "")
        if code == "ResourceNotFoundException":
            return ConfigurationError(
                f"index table {table!r} does not exist; deploy infra/ or call "
                "stashpoint._backends.dynamodb.create_table",
                object_name=table,
            )
        if code in (
            "UnrecognizedClientException",
            "AccessDeniedException",
            "InvalidSignatureException",
            "ExpiredTokenException",
        ):
            return ConfigurationError(
                f"DynamoDB refused the credentials or the permission ({code}): check the AWS "
                f"credentials and the IAM policy: {exc}",
                object_name=table,
            )
        return StorageUnavailable(f"DynamoDB {code}: {exc}", object_name=table)
    return StorageUnavailable(
        f"DynamoDB unreachable: {type(exc).__name__}: {exc}", object_name=table
    )


def _conditional_call(
    operation: str, params: dict[str, Any], condition: str, values: dict[str, Any] | None
) -> AwsCall:
    """Return the call of `operation` under `condition` (answering `REFUSED` if it fails)."""
    params = {**params, "ConditionExpression": condition}
    if values:
        params["ExpressionAttributeValues"] = values
    return AwsCall(operation, params, refusal="ConditionalCheckFailedException")


def _conditional(
    operation: str, params: dict[str, Any], condition: str, values: dict[str, Any] | None
) -> Steps[bool]:
    """Call `operation` under `condition`; return False if the condition refused it."""
    return (yield from ask(_conditional_call(operation, params, condition, values))) is not REFUSED


def _puts(table: str, puts: list[tuple[Any, str, dict[str, Any] | None]]) -> Steps[int]:
    """Put items, each under its condition, all at once; return how many were written.

    A transition's items (the run's and an attempt's) go out together: one round trip.
    """
    calls = [
        _conditional_call(
            "put_item", {"TableName": table, "Item": to_attributes(item)}, cond, values
        )
        for item, cond, values in puts
    ]
    if len(calls) == 1:
        answers = [(yield from ask(calls[0]))]
    else:
        answers = yield from ask(Parallel(tuple(calls)))
    return sum(answer is not REFUSED for answer in answers)


def _expecting(expected: Expected) -> tuple[str, dict[str, Any] | None]:
    """Return the condition (and its values) that finds the stored revision `expected`."""
    if expected is None:
        return f"attribute_not_exists({PARTITION_KEY})", None
    if isinstance(expected, Malformed):
        number = {":number": {"S": "N"}}
        return (
            f"attribute_not_exists({REVISION}) OR NOT attribute_type({REVISION}, :number)",
            number,
        )
    return f"{REVISION} = :expected", {":expected": {"N": str(expected)}}


def dynamodb_calls(request: IndexRequest, table: str) -> Steps[Any]:
    """Carry out one index request as DynamoDB calls; return the request's result."""
    try:
        match request:
            case PutItems(items):
                return (
                    yield from _puts(table, [
                        (item, _CONDITION, {":revision": {"N": str(item[REVISION])}})
                        for item in items
                    ])
                )  # fmt: skip
            case ReplaceItems(pairs):
                return (yield from _puts(table, [(i, *_expecting(e)) for i, e in pairs]))
            case GetPartition(pk):
                partition: list[dict[str, Any]] = []
                query: dict[str, Any] = {
                    "TableName": table,
                    "KeyConditionExpression": f"{PARTITION_KEY} = :pk",
                    "ExpressionAttributeValues": {":pk": {"S": pk}},
                    "ConsistentRead": True,
                }
                while True:
                    page = yield from ask(AwsCall("query", query))
                    partition.extend(from_attributes(i) for i in page.get("Items", []))
                    if not page.get("LastEvaluatedKey"):
                        return partition
                    query = {**query, "ExclusiveStartKey": page["LastEvaluatedKey"]}
            case GetItems(keys):
                return (yield from _get_items(keys, table))
            case GetItem(pk, sk):
                key = {PARTITION_KEY: {"S": pk}, SORT_KEY: {"S": sk}}
                response = yield from ask(
                    AwsCall("get_item", {"TableName": table, "Key": key, "ConsistentRead": True})
                )
                found = response.get("Item")
                return None if found is None else from_attributes(found)
            case DeleteItem(pk, sk, expected):
                key = {PARTITION_KEY: {"S": pk}, SORT_KEY: {"S": sk}}
                params: dict[str, Any] = {"TableName": table, "Key": key}
                if expected is None:
                    yield from ask(AwsCall("delete_item", params))
                else:  # refused: the item changed since it was judged, so it stays
                    yield from _conditional("delete_item", params, *_expecting(expected))
                return None
            case QueryItems():
                return (yield from _query(request, table))
            case DescribeIndex():
                return (yield from _describe(table))
    except StashpointError:
        raise
    except Exception as exc:
        raise _failure(exc, table) from exc
    raise TypeError(f"DynamoDB index cannot execute {request!r}")


def _describe(table: str) -> Steps[IndexDescription]:
    try:
        described = yield from ask(AwsCall("describe_table", {"TableName": table}))
    except botocore.exceptions.ClientError as exc:
        if exc.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
            return IndexDescription(False, (), None)
        raise
    names = tuple(g["IndexName"] for g in described["Table"].get("GlobalSecondaryIndexes", []))
    ttl = yield from ask(AwsCall("describe_time_to_live", {"TableName": table}))
    spec = ttl.get("TimeToLiveDescription", {})
    enabled = spec.get("TimeToLiveStatus") in ("ENABLED", "ENABLING")
    return IndexDescription(True, names, spec.get("AttributeName") if enabled else None)


def _query(request: QueryItems, table: str) -> Steps[ItemPage]:
    gsi = _GSI[request.index]
    names = {"#p": gsi.partition_key}
    values: dict[str, Any] = {":p": {"S": request.partition}}
    condition = "#p = :p"
    limit = request.limit
    if request.sort_at_least is not None and request.sort_below is not None:
        names["#s"] = gsi.sort_key
        # BETWEEN is inclusive at both ends and the upper bound may be a key (the last one
        # listed): ask for one more and drop it.
        condition += " AND #s BETWEEN :since AND :below"
        values[":since"] = {"S": request.sort_at_least}
        values[":below"] = {"S": request.sort_below}
        limit += 1
    elif request.sort_at_least is not None:
        names["#s"] = gsi.sort_key
        condition += " AND #s >= :since"
        values[":since"] = {"S": request.sort_at_least}
    elif request.sort_below is not None:
        names["#s"] = gsi.sort_key
        condition += " AND #s < :below"
        values[":below"] = {"S": request.sort_below}
    params: dict[str, Any] = {
        "TableName": table,
        "IndexName": gsi.name,
        "KeyConditionExpression": condition,
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        "ScanIndexForward": request.ascending,
        "Limit": limit,
    }
    response = yield from ask(AwsCall("query", params))
    items = [from_attributes(i) for i in response.get("Items", [])]
    more = bool(response.get("LastEvaluatedKey"))
    items = [i for i in items if i.get(gsi.sort_key) != request.sort_below]
    if len(items) > request.limit:
        items, more = items[: request.limit], True
    return ItemPage(items, more)


def _get_items(keys: tuple[tuple[str, str], ...], table: str) -> Steps[list[Any]]:
    """BatchGetItem in chunks of 100, asking again for what DynamoDB left unprocessed."""
    found: dict[tuple[str, str], dict[str, Any]] = {}
    wanted = list(dict.fromkeys(keys))
    for start in range(0, len(wanted), _BATCH_GET):
        pending: list[dict[str, Any]] = [
            {PARTITION_KEY: {"S": pk}, SORT_KEY: {"S": sk}}
            for pk, sk in wanted[start : start + _BATCH_GET]
        ]
        for delay in _UNPROCESSED_BACKOFF:
            request = {table: {"Keys": pending, "ConsistentRead": True}}
            response = yield from ask(AwsCall("batch_get_item", {"RequestItems": request}))
            for raw in response.get("Responses", {}).get(table, []):
                item = from_attributes(raw)
                found[(str(item[PARTITION_KEY]), str(item[SORT_KEY]))] = item
            pending = response.get("UnprocessedKeys", {}).get(table, {}).get("Keys", [])
            if not pending:
                break
            yield from ask(Sleep(delay))
        else:
            raise StorageUnavailable(
                "DynamoDB left keys unprocessed after every retry (throttled)", object_name=table
            )
    return [found.get(key) for key in keys]


def dynamodb_transport(settings: DynamoDBSettings) -> AwsTransport:
    """Return a blocking (boto3) transport for index requests."""
    return AwsTransport(
        "dynamodb", partial(dynamodb_calls, table=settings.table), settings
    )  # fmt: skip


def async_dynamodb_transport(settings: DynamoDBSettings) -> AsyncAwsTransport:
    """Return an asyncio (aiobotocore) transport for index requests."""
    return AsyncAwsTransport(
        "dynamodb", partial(dynamodb_calls, table=settings.table), settings
    )  # fmt: skip


def create_table(client: Any, table: str, *, wait: bool = True) -> None:
    """Create the index table from the schema, with TTL on `expires_at`.

    For tests and tools; production deploys `infra/`.
    """
    client.create_table(**dynamodb_table_definition(table))
    if wait:
        client.get_waiter("table_exists").wait(
            TableName=table, WaiterConfig={"Delay": 1, "MaxAttempts": 60}
        )
    client.update_time_to_live(
        TableName=table,
        TimeToLiveSpecification={"Enabled": True, "AttributeName": TTL_ATTRIBUTE},
    )
