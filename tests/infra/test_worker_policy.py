"""The shipped least-privilege policy allows every AWS call the library makes, and no more.

Neither moto (without IAM) nor DynamoDB Local enforces IAM, so the policy is checked here:
a broad workload runs on moto in-process with every botocore call recorded (a client
event hook), each call is mapped to the IAM action and resource it needs, and a small
evaluator of the generated policy (Allow statements, wildcards, `s3:prefix` conditions)
must allow it. A call the map does not know fails the test, so a new call cannot ship
without its permission (issue 23 #10: `BatchGetItem` was missing, so `runs list`,
`runs stuck`, `runs due` and `list_due` were denied in a deployment using the policy).
"""

from __future__ import annotations

import fnmatch
import importlib.util
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

import stashpoint
from stashpoint.langgraph import StashpointSaver

INFRA = Path(__file__).parents[2] / "infra"
SRC = Path(__file__).parents[2] / "src" / "stashpoint"
BUCKET, PREFIX, TABLE = "policy-bucket", "stash", "policy-index"
ACCOUNT, REGION = "123456789012", "us-east-1"
TABLE_ARN = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{TABLE}"

# method -> (IAM action, how its resource is named); VersionId makes S3 calls *Version.
S3_OBJECT = {
    "PutObject": "s3:PutObject",
    "GetObject": "s3:GetObject",
    "HeadObject": "s3:GetObject",
    "DeleteObject": "s3:DeleteObject",
    "RestoreObject": "s3:RestoreObject",
    "PutObjectLegalHold": "s3:PutObjectLegalHold",
}
S3_BULK = {"DeleteObjects": "s3:DeleteObjectVersion"}
"""Calls that name many objects: each object needs the permission (purge deletes versions;
an object named without a version is a plain delete, `s3:DeleteObject`)."""
S3_BUCKET = {
    "ListObjectsV2": "s3:ListBucket",
    "ListObjectVersions": "s3:ListBucketVersions",
    "GetBucketVersioning": "s3:GetBucketVersioning",
    "GetBucketLifecycleConfiguration": "s3:GetLifecycleConfiguration",
    "GetObjectLockConfiguration": "s3:GetBucketObjectLockConfiguration",
}
DYNAMODB = {
    "GetItem": "dynamodb:GetItem",
    "PutItem": "dynamodb:PutItem",
    "DeleteItem": "dynamodb:DeleteItem",
    "Query": "dynamodb:Query",
    "BatchGetItem": "dynamodb:BatchGetItem",
    "BatchWriteItem": "dynamodb:BatchWriteItem",
    "UpdateItem": "dynamodb:UpdateItem",
    "DescribeTable": "dynamodb:DescribeTable",
    "DescribeTimeToLive": "dynamodb:DescribeTimeToLive",
}
GLUE = {
    "GetDatabase": ("glue:GetDatabase", ("catalog", "database")),
    "CreateDatabase": ("glue:CreateDatabase", ("catalog", "database")),
    "GetTable": ("glue:GetTable", ("catalog", "database", "table")),
    "GetTables": ("glue:GetTables", ("catalog", "database", "table")),
    "CreateTable": ("glue:CreateTable", ("catalog", "database", "table")),
    "UpdateTable": ("glue:UpdateTable", ("catalog", "database", "table")),
}
"""pyiceberg's Glue catalog calls: the IAM action and the resources it is checked on."""
ARCHIVE = "archive"
VERSIONED = {"GetObject": "s3:GetObjectVersion", "HeadObject": "s3:GetObjectVersion",
             "DeleteObject": "s3:DeleteObjectVersion"}  # fmt: skip


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("infra_generate", INFRA / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _resolve(value: Any) -> Any:
    """Resolve the template's intrinsic functions for this test's bucket, prefix, table."""
    if isinstance(value, list):
        return [_resolve(v) for v in value]
    if isinstance(value, dict):
        if "Fn::Sub" in value:
            text = value["Fn::Sub"]
            for name, replacement in {
                "AWS::Partition": "aws",
                "CheckpointBucket": BUCKET,
                "Prefix": PREFIX,
                "IndexTable.Arn": TABLE_ARN,
                "AWS::Region": REGION,
                "AWS::AccountId": ACCOUNT,
                "ArchiveDatabase": ARCHIVE,
            }.items():
                text = text.replace("${" + name + "}", replacement)
            assert "${" not in text, text
            return text
        if value.get("Fn::GetAtt") == ["IndexTable", "Arn"]:
            return TABLE_ARN
        return {k: _resolve(v) for k, v in value.items()}
    return value


def _allowed(policy: dict[str, Any], action: str, resource: str, prefix: str | None) -> bool:
    """Whether an Allow statement grants `action` on `resource` (IAM's wildcard rules)."""
    for statement in policy["Statement"]:
        if statement["Effect"] != "Allow":
            continue
        actions = statement["Action"]
        actions = [actions] if isinstance(actions, str) else actions
        resources = statement["Resource"]
        resources = [resources] if isinstance(resources, str) else resources
        if not any(fnmatch.fnmatchcase(action, a) for a in actions):
            continue
        if not any(fnmatch.fnmatchcase(resource, r) for r in resources):
            continue
        like = statement.get("Condition", {}).get("StringLike", {}).get("s3:prefix")
        if like is not None:
            patterns = like if isinstance(like, list) else [like]
            if prefix is None or not any(fnmatch.fnmatchcase(prefix, p) for p in patterns):
                continue
        return True
    return False


def _needs(operation: str, params: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    """Return every (IAM action, resource ARN, s3:prefix) one botocore call needs."""
    if operation in S3_BULK:
        return [
            (
                S3_BULK[operation] if item.get("VersionId") else "s3:DeleteObject",
                f"arn:aws:s3:::{params['Bucket']}/{item['Key']}",
                None,
            )
            for item in params["Delete"]["Objects"]
        ]
    if operation in GLUE:
        action, kinds = GLUE[operation]
        glue = f"arn:aws:glue:{REGION}:{ACCOUNT}"
        database = params.get("DatabaseName") or params.get("Name") or ""
        if operation == "CreateDatabase":
            database = params["DatabaseInput"]["Name"]
        table = params.get("TableInput", {}).get("Name") or params.get("Name") or "*"
        arns = {
            "catalog": f"{glue}:catalog",
            "database": f"{glue}:database/{database}",
            "table": f"{glue}:table/{database}/{table}",
        }
        return [(action, arns[kind], None) for kind in kinds]
    return [_needed(operation, params)]


def _denied(policy: dict[str, Any], calls: list[tuple[str, dict[str, Any]]]) -> list[Any]:
    return sorted(
        {(op, *need) for op, params in calls for need in _needs(op, params)
         if not _allowed(policy, *need)}
    )  # fmt: skip


def _needed(operation: str, params: dict[str, Any]) -> tuple[str, str, str | None]:
    """Return (IAM action, resource ARN, s3:prefix) one botocore call needs."""
    if operation in S3_OBJECT:
        action = S3_OBJECT[operation]
        if params.get("VersionId") and operation in VERSIONED:
            action = VERSIONED[operation]
        return action, f"arn:aws:s3:::{params['Bucket']}/{params['Key']}", None
    if operation in S3_BUCKET:
        return S3_BUCKET[operation], f"arn:aws:s3:::{params['Bucket']}", params.get("Prefix")
    if operation in DYNAMODB:
        if operation == "BatchGetItem":
            (table,) = params["RequestItems"]
        else:
            table = params["TableName"]
        arn = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{table}"
        if params.get("IndexName"):
            arn += f"/index/{params['IndexName']}"
        return DYNAMODB[operation], arn, None
    raise AssertionError(f"the library calls {operation}, which this test does not map")


@pytest.fixture
def recorded() -> Iterator[list[tuple[str, dict[str, Any]]]]:
    """Every botocore call made in the test: (operation, parameters)."""
    import botocore.session

    calls: list[tuple[str, dict[str, Any]]] = []
    # botocore's: boto3's clients are made there too, and stashpoint makes its own there.
    real_client = botocore.session.Session.create_client

    def client(self: Any, *args: Any, **kwargs: Any) -> Any:
        made = real_client(self, *args, **kwargs)

        def record(model: Any, params: dict[str, Any], **_: Any) -> None:
            calls.append((model.name, params))

        made.meta.events.register("provide-client-params.*.*", record)
        return made

    with mock_aws(), pytest.MonkeyPatch.context() as patch:
        patch.setattr(botocore.session.Session, "create_client", client)
        s3 = boto3.client("s3", region_name=REGION)
        s3.create_bucket(Bucket=BUCKET)
        s3.put_bucket_versioning(Bucket=BUCKET, VersioningConfiguration={"Status": "Enabled"})
        from stashpoint._backends.dynamodb import create_table

        create_table(boto3.client("dynamodb", region_name=REGION), TABLE)
        calls.clear()  # set-up is an operator's, not a worker's
        yield calls


def _workload(url: str) -> None:
    """What workers and operators do: every store, listing and maintenance command."""
    with stashpoint.open(url, blob_threshold=1024) as stash:
        head = stashpoint.Envelope.initial("job", None, "policy.job", 1, {"n": 0})
        stash.checkpoints.compare_and_swap(head, None)
        saved = stash.checkpoints.update("job", lambda e: {"n": 1})
        stash.checkpoints.load("job", revision=0)
        stash.checkpoints.history("job")
        stash.checkpoints.describe("job")
        stash.checkpoints.list_ids()
        stash.checkpoints.restore("job")
        stash.checkpoints.delete("job", saved.revision)
        log = None
        for n in range(70):
            log = stash.logs.append("log", [n], after=log, state={"n": n})
        stash.logs.tail("log", 5)
        stash.logs.restore("log")
        stash.logs.delete("log")
        runs = stash.runs
        run_id = runs.create_run("etl")
        attempt = runs.record_attempt(run_id, "extract", 1, {"big": "x" * 4096}, lease=60)
        runs.heartbeat(attempt)
        runs.complete_attempt(attempt, {"rows": 1})
        runs.suspend_run(run_id, until=datetime.now(UTC) + timedelta(seconds=1))
        runs.resume_run(run_id)
        runs.complete_run(run_id)
        runs.list_runs(graph_name="etl")
        runs.list_runs(status=stashpoint.RunStatus.COMPLETED)
        runs.list_attempts(abandoned=True)
        runs.list_due(datetime.now(UTC) + timedelta(days=1))
        runs.load_run(run_id)
        runs.reindex(resume=False)
        durable = runs.durable(f"d-{uuid.uuid4().hex[:6]}")
        durable.step("one", lambda: 1)
        durable.complete()
        saver = StashpointSaver(stash)
        from langgraph.checkpoint.base import empty_checkpoint

        checkpoint = empty_checkpoint()
        config = saver.put({"configurable": {"thread_id": "t", "checkpoint_ns": ""}},
                           checkpoint, {"source": "input", "step": -1}, {})  # fmt: skip
        saver.put_writes(config, [("ch", 1)], "task")
        saver.get_tuple(config)
        list(saver.list(config))
        saver.delete_thread("t")
        stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0), history=True)
        stash.admin.doctor()


def test_the_worker_policy_allows_every_call_the_library_makes(
    recorded: list[tuple[str, dict[str, Any]]],
) -> None:
    url = f"s3://{BUCKET}/{PREFIX}?index=dynamodb://{TABLE}"
    _workload(url)
    operations = {name for name, _ in recorded}
    # The workload reached every kind of call: listings read their page with BatchGetItem.
    assert {"PutObject", "ListObjectsV2", "Query", "BatchGetItem", "PutItem"} <= operations
    for with_kms in (False, True):
        policy = _resolve(_generator()._worker_policy(with_kms=with_kms))
        assert _denied(policy, recorded) == []


def test_the_erasure_policy_with_the_worker_policy_allows_purges_and_holds(
    recorded: list[tuple[str, dict[str, Any]]],
) -> None:
    url = f"s3://{BUCKET}/{PREFIX}?index=dynamodb://{TABLE}"
    with stashpoint.open(url, blob_threshold=1024) as stash:
        stash.checkpoints.compare_and_swap(
            stashpoint.Envelope.initial("job", None, "policy.job", 1, {"big": "x" * 4096}), None
        )
        log = None
        for n in range(70):
            log = stash.logs.append("log", [n], after=log, state={"n": n})
        run_id = stash.runs.create_run("etl")
        stash.runs.record_attempt(run_id, "extract", 1, {"big": "y" * 4096})
        stash.admin.purge(log="log", dry_run=True)
        stash.admin.purge(log="log")
        stash.admin.purge(checkpoint="job", blob_min_age=timedelta(0))
        stash.admin.purge(run=run_id, blob_min_age=timedelta(0))
        stash.admin.resume_purges()
    worker = _resolve(_generator()._worker_policy(with_kms=False))
    both = {"Statement": worker["Statement"]
            + _resolve(_generator()._erasure_policy())["Statement"]}  # fmt: skip
    operations = {name for name, _ in recorded}
    assert {"DeleteObjects", "ListObjectVersions", "GetCallerIdentity"} <= operations
    recorded_s3 = [(op, p) for op, p in recorded if op != "GetCallerIdentity"]  # no permission
    assert _denied(both, recorded_s3) == []
    # The erasure needs what the worker policy alone does not grant: version deletes.
    assert any(op == "DeleteObjects" for op, *_ in _denied(worker, recorded_s3))


def test_every_aws_call_in_the_source_is_mapped_to_its_permission() -> None:
    """A static check: every call the backends can make is one this test maps."""
    names = set()
    for path in (SRC / "_backends").glob("*.py"):
        names |= set(re.findall(r'AwsCall\(\s*"([a-z_0-9]+)"', path.read_text()))
        names |= set(
            re.findall(r'"(get_object|head_object|put_object|delete_object)"', path.read_text())
        )
    known = {
        re.sub(r"(?<!^)(?=[A-Z])", "_", op).lower()
        for op in (*S3_OBJECT, *S3_BULK, *S3_BUCKET, *DYNAMODB)
    }
    assert names and names <= known, names - known


def test_the_policy_evaluator_denies_what_the_policy_does_not_grant() -> None:
    policy = _resolve(_generator()._worker_policy(with_kms=False))
    key = f"arn:aws:s3:::{BUCKET}/{PREFIX}/checkpoints/job"
    assert _allowed(policy, "s3:PutObject", key, None)
    assert not _allowed(policy, "s3:PutObject", f"arn:aws:s3:::{BUCKET}/elsewhere/job", None)
    assert not _allowed(policy, "s3:DeleteObjectVersion", key, None)
    assert not _allowed(policy, "s3:ListBucket", f"arn:aws:s3:::{BUCKET}", "elsewhere/")
    assert not _allowed(policy, "dynamodb:Scan", TABLE_ARN, None)


def test_the_archive_policy_with_the_worker_policy_allows_publishing_to_glue(
    recorded: list[tuple[str, dict[str, Any]]],
) -> None:
    """`stashpoint project --iceberg --catalog type=glue` on an S3 stash: every S3 call is
    the worker's (the table's metadata through the stash), every Glue call is in
    ArchiveDatabase, and every write is conditional, as the bucket policy demands."""
    pytest.importorskip("pyiceberg")
    from stashpoint import iceberg, projection

    url = f"s3://{BUCKET}/{PREFIX}?index=dynamodb://{TABLE}"
    boto3.client("glue", region_name=REGION).create_database(DatabaseInput={"Name": ARCHIVE})
    recorded.clear()  # the database is the stack's (infra/: ArchiveCatalogDatabase)
    with stashpoint.open(url) as stash:
        for n in range(3):
            stash.logs.append(f"acme.t{n}", [{"role": "user", "content": "hi"}], after=None)
        projection.project(stash)  # a worker's
        catalog = {"type": "glue", "glue.region": REGION}
        publishing = list(recorded)
        recorded.clear()
        iceberg.publish(stash, catalog=catalog, table=f"{ARCHIVE}.records")
        publishing += recorded
        stash.admin.purge(log="acme.t0")  # the erasure policy's
        projection.project(stash)
        recorded.clear()
        report = iceberg.publish(
            stash, catalog=catalog, table=f"{ARCHIVE}.records", grace=timedelta(0)
        )
        assert len(report.removed) == 1 and report.expired_snapshots == 1
        recorded[:0] = publishing
    operations = {name for name, _ in recorded}
    assert {"GetTable", "CreateTable", "UpdateTable", "PutObject", "DeleteObjects"} <= operations
    generator = _generator()
    policies = [generator._worker_policy(with_kms=False), generator._archive_policy()]
    both = {"Statement": [s for p in policies for s in _resolve(p)["Statement"]]}
    calls = [(op, p) for op, p in recorded if op != "GetCallerIdentity"]
    assert _denied(both, calls) == []
    unconditional = [p["Key"] for op, p in recorded
                     if op == "PutObject" and not (p.get("IfNoneMatch") or p.get("IfMatch"))]  # fmt: skip
    assert unconditional == []
