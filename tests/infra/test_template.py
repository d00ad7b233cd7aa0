"""The CloudFormation template: generated from the schema, lint-clean, deployable."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import boto3
import pytest
from moto import mock_aws

import stashpoint
from stashpoint import Envelope, RunStatus
from stashpoint.index.schema import SECONDARY_INDEXES

INFRA = Path(__file__).parents[2] / "infra"


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("infra_generate", INFRA / "generate.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_committed_template_is_what_the_schema_generates() -> None:
    assert (INFRA / "stashpoint.yaml").read_text() == _generator().render(), (
        "run: .venv/bin/python infra/generate.py > infra/stashpoint.yaml"
    )


def test_template_is_cfn_lint_clean() -> None:
    result = subprocess.run(
        [str(Path(sys.executable).parent / "cfn-lint"), str(INFRA / "stashpoint.yaml")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_bucket_is_versioned_private_and_encrypted() -> None:
    bucket = _generator().template()["Resources"]["CheckpointBucket"]
    properties = bucket["Properties"]
    assert properties["VersioningConfiguration"] == {"Status": "Enabled"}
    assert all(properties["PublicAccessBlockConfiguration"].values())
    rule = properties["LifecycleConfiguration"]["Rules"][0]
    assert rule["NoncurrentVersionTransitions"][0]["TransitionInDays"] == {
        "Ref": "NoncurrentArchiveDays"
    }
    assert rule["NoncurrentVersionExpiration"] == {
        "NoncurrentDays": {"Ref": "NoncurrentExpireDays"}
    }
    assert bucket["DeletionPolicy"] == "Retain"


def test_bucket_policy_denies_unconditional_puts_under_the_prefix() -> None:
    statements = _generator().template()["Resources"]["CheckpointBucketPolicy"]["Properties"][
        "PolicyDocument"]["Statement"]  # fmt: skip
    deny = next(s for s in statements if s["Sid"] == "DenyUnconditionalWrites")
    assert deny["Effect"] == "Deny" and deny["Action"] == "s3:PutObject"
    assert deny["Condition"] == {
        "Null": {"s3:if-none-match": "true", "s3:if-match": "true"},
        # Multipart parts take no conditional header: only object creation is checked.
        "Bool": {"s3:ObjectCreationOperation": "true"},
    }
    assert deny["Resource"] == {
        "Fn::Sub": "arn:${AWS::Partition}:s3:::${CheckpointBucket}/${Prefix}/*"
    }


@pytest.fixture
def deployed() -> Any:
    with mock_aws():
        cloudformation = boto3.client("cloudformation", region_name="us-east-1")
        cloudformation.create_stack(
            StackName="stashpoint",
            TemplateBody=(INFRA / "stashpoint.yaml").read_text(),
            Parameters=[
                {"ParameterKey": "BucketName", "ParameterValue": "team-checkpoints"},
                {"ParameterKey": "TableName", "ParameterValue": "team-index"},
                {"ParameterKey": "Prefix", "ParameterValue": "team-agents"},
            ],
            Capabilities=["CAPABILITY_IAM"],
        )
        stack = cloudformation.describe_stacks(StackName="stashpoint")["Stacks"][0]
        assert stack["StackStatus"] == "CREATE_COMPLETE"
        yield {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}


# moto's CloudFormation skips bucket policies (checked on the template above instead).
@pytest.mark.filterwarnings("ignore:Tried to parse AWS..S3..BucketPolicy:UserWarning")
def test_deployed_stack_on_moto_runs_the_library(deployed: dict[str, str]) -> None:
    assert deployed["BucketName"] == "team-checkpoints" and deployed["TableName"] == "team-index"
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.head_bucket(Bucket="team-checkpoints")
    # moto's CloudFormation creates the bucket but neither applies VersioningConfiguration
    # nor supports AWS::S3::BucketPolicy: those are checked on the template itself.
    table = boto3.client("dynamodb", region_name="us-east-1").describe_table(TableName="team-index")
    names = {g["IndexName"] for g in table["Table"]["GlobalSecondaryIndexes"]}
    assert names == {g.name for g in SECONDARY_INDEXES}
    policy = boto3.client("iam", region_name="us-east-1").get_policy(
        PolicyArn=deployed["WorkerPolicyArn"]
    )
    assert policy["Policy"]["DefaultVersionId"]

    with stashpoint.open(deployed["StashUrl"]) as stash:
        env = Envelope.initial("agent-1", None, "stashpoint.agent", 1, {"turns": 0})
        stash.checkpoints.compare_and_swap(env, None)
        stash.checkpoints.compare_and_swap(env.next({"turns": 1}), 0)
        run_id = stash.runs.create_run("graph")
        stash.runs.complete_run(run_id)
        assert [r.status for r in stash.runs.list_runs().items] == [RunStatus.COMPLETED]
        assert [c.status for c in stash.admin.doctor() if c.status == "fail"] == []
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="team-checkpoints").get("Contents", [])]
    assert sorted(keys) == [
        "team-agents/checkpoints/agent-1",
        *(f"team-agents/run-logs/{run_id}/{version:020d}" for version in (0, 1)),
    ]
    assert json.loads(json.dumps(deployed))["StashUrl"].startswith(
        "s3://team-checkpoints/team-agents?"
    )


def test_worker_policy_lets_doctor_remove_only_its_probe_versions() -> None:
    for with_kms in (True, False):
        statements = _generator()._worker_policy(with_kms=with_kms)["Statement"]
        deleting = [s for s in statements if "s3:DeleteObjectVersion" in json.dumps(s["Action"])]
        assert len(deleting) == 1
        assert "/.doctor/*" in json.dumps(deleting[0]["Resource"])


def test_table_encryption_follows_the_kms_key_and_access_logs_are_optional() -> None:
    template = _generator().template()
    sse = template["Resources"]["IndexTable"]["Properties"]["SSESpecification"]
    assert sse["Fn::If"][0] == "UseKms" and sse["Fn::If"][1]["SSEType"] == "KMS"
    logging = template["Resources"]["CheckpointBucket"]["Properties"]["LoggingConfiguration"]
    assert logging["Fn::If"][0] == "HasAccessLogs"


def test_sealed_segments_archive_by_prefix_and_workers_may_restore_them() -> None:
    template = _generator().template()
    rules = template["Resources"]["CheckpointBucket"]["Properties"]["LifecycleConfiguration"]
    sealed = rules["Rules"][1]["Fn::If"]
    assert sealed[0] == "ArchivesSealed" and sealed[2] == {"Ref": "AWS::NoValue"}
    rule = sealed[1]
    assert rule["Prefix"] == {"Fn::Sub": "${Prefix}/sealed/"}  # heads and entries stay hot
    assert rule["Transitions"] == [
        {"StorageClass": {"Ref": "SealedArchiveClass"},
         "TransitionInDays": {"Ref": "SealedArchiveDays"}}
    ]  # fmt: skip
    statements = {
        s["Sid"]: s
        for s in template["Resources"]["WorkerPolicy"]["Properties"]["PolicyDocument"]["Fn::If"][1][
            "Statement"
        ]
    }
    assert "s3:RestoreObject" in statements["StashObjects"]["Action"]
    assert "s3:GetLifecycleConfiguration" in statements["ReadVersioningAndLifecycle"]["Action"]
    assert (
        "s3:GetBucketObjectLockConfiguration" in statements["ReadVersioningAndLifecycle"]["Action"]
    )


def test_object_lock_is_a_parameter_off_by_default() -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("infra_branches", INFRA / "branches.py")
    assert spec is not None and spec.loader is not None
    branches = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(branches)
    template = _generator().template()
    assert template["Parameters"]["ObjectLockMode"]["Default"] == "NONE"
    assert template["Parameters"]["ObjectLockMode"]["AllowedValues"] == [
        "NONE", "GOVERNANCE", "COMPLIANCE",
    ]  # fmt: skip
    locked = branches.resolve(template, True)["Resources"]["CheckpointBucket"]["Properties"]
    assert locked["ObjectLockEnabled"] is True
    assert locked["ObjectLockConfiguration"] == {
        "ObjectLockEnabled": "Enabled",
        "Rule": {"DefaultRetention": {"Mode": {"Ref": "ObjectLockMode"},
                                      "Days": {"Ref": "ObjectLockDays"}}},
    }  # fmt: skip
    plain = branches.resolve(template, False)["Resources"]["CheckpointBucket"]["Properties"]
    assert "ObjectLockEnabled" not in plain and "ObjectLockConfiguration" not in plain
    assert plain["VersioningConfiguration"] == {"Status": "Enabled"}  # Object Lock needs it


def test_the_waker_is_off_by_default_and_sends_only_to_its_target() -> None:
    import stashpoint.wake

    template = _generator().template()
    assert template["Parameters"]["WakeTarget"]["Default"] == ""
    waker = {name: r for name, r in template["Resources"].items() if name.startswith("Wake")}
    assert set(waker) == {"WakeRole", "WakeFunction", "WakeSchedulerRole", "WakeSchedule"}
    assert all(r["Condition"] == "Wakes" for r in waker.values())  # nothing without a target
    function = waker["WakeFunction"]["Properties"]
    module, _, name = function["Handler"].rpartition(".")
    assert module == "stashpoint.wake" and callable(getattr(stashpoint.wake, name))
    assert function["ReservedConcurrentExecutions"] == 1
    assert set(function["Environment"]["Variables"]) == {
        "STASHPOINT_URL", "STASHPOINT_WAKE_TARGET", "STASHPOINT_WAKE_NAMESPACE",
        "STASHPOINT_WAKE_RESEND",
    }  # fmt: skip
    assert waker["WakeSchedule"]["Properties"]["ScheduleExpression"] == "rate(1 minute)"
    (send,) = waker["WakeRole"]["Properties"]["Policies"]
    queue, function_target = send["PolicyDocument"]["Statement"][0]["Fn::If"][1:]
    assert queue["Action"] == ["sqs:SendMessage", "sqs:GetQueueUrl"]
    assert function_target["Action"] == "lambda:InvokeFunction"
    assert queue["Resource"] == function_target["Resource"] == {"Ref": "WakeTarget"}
    rule = template["Rules"]["WakerNeedsItsCode"]
    assert len(rule["Assertions"]) == 2  # a target without a package is refused up front


def test_the_archive_database_is_off_by_default_and_its_policy_reaches_only_its_tables() -> None:
    template = _generator().template()
    assert template["Parameters"]["ArchiveDatabase"]["Default"] == ""
    archive = {n: r for n, r in template["Resources"].items() if n.startswith("Archive")}
    assert set(archive) == {"ArchiveCatalogDatabase", "ArchivePolicy"}
    assert all(r["Condition"] == "HasArchive" for r in archive.values())
    statements = archive["ArchivePolicy"]["Properties"]["PolicyDocument"]["Statement"]
    glue, s3 = statements
    assert all(a.startswith("glue:") and "Delete" not in a for a in glue["Action"])
    assert [r["Fn::Sub"].rsplit(":", 1)[1] for r in glue["Resource"]] == [
        "catalog", "database/${ArchiveDatabase}", "table/${ArchiveDatabase}/*",
    ]  # fmt: skip
    assert s3["Resource"]["Fn::Sub"].endswith("/${Prefix}/projection/_iceberg/*")
