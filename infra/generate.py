"""Generate `stashpoint.yaml`, the CloudFormation template, from the library's own schema.

The index table's keys and GSIs come from `stashpoint.index.schema`, the same definition
the code and the tests use, so the deployed table cannot drift from what the code expects.
A test fails if the committed template differs from what this prints.

    .venv/bin/python infra/generate.py > infra/stashpoint.yaml
"""

from __future__ import annotations

import sys
from typing import Any

import yaml

from stashpoint.index.schema import TTL_ATTRIBUTE, dynamodb_table_definition

RETAIN = {"DeletionPolicy": "Retain", "UpdateReplacePolicy": "Retain"}
NO_VALUE = {"Ref": "AWS::NoValue"}


def _if(condition: str, then: Any, otherwise: Any) -> dict[str, Any]:
    return {"Fn::If": [condition, then, otherwise]}


def _justified(*skips: tuple[str, str]) -> dict[str, Any]:
    """Checkov findings accepted on purpose, each with its reason (rendered in the template)."""
    return {"checkov": {"skip": [{"id": check, "comment": why} for check, why in skips]}}


def _bucket_arn(suffix: str = "") -> dict[str, Any]:
    return {"Fn::Sub": "arn:${AWS::Partition}:s3:::${CheckpointBucket}" + suffix}


def _worker_policy(*, with_kms: bool) -> dict[str, Any]:
    statements: list[dict[str, Any]] = [
        {
            "Sid": "StashObjects",
            "Effect": "Allow",
            "Action": [
                "s3:GetObject",
                "s3:GetObjectVersion",
                "s3:PutObject",
                "s3:DeleteObject",
                # `restore()` / `stashpoint restore` bring archived segments back.
                "s3:RestoreObject",
            ],
            "Resource": _bucket_arn("/${Prefix}/*"),
        },
        {
            # `stashpoint doctor` removes every version of its probe object; nothing else
            # deletes versions, so the permission is limited to the probe's prefix.
            "Sid": "DoctorProbeCleanup",
            "Effect": "Allow",
            "Action": ["s3:DeleteObjectVersion", "s3:GetObjectVersion"],
            "Resource": _bucket_arn("/${Prefix}/.doctor/*"),
        },
        {
            "Sid": "ListStash",
            "Effect": "Allow",
            "Action": ["s3:ListBucket", "s3:ListBucketVersions"],
            "Resource": _bucket_arn(),
            "Condition": {"StringLike": {"s3:prefix": [{"Fn::Sub": "${Prefix}/*"}]}},
        },
        {
            "Sid": "ReadVersioningAndLifecycle",
            "Effect": "Allow",
            # `stashpoint doctor` reports all three.
            "Action": [
                "s3:GetBucketVersioning",
                "s3:GetLifecycleConfiguration",
                "s3:GetBucketObjectLockConfiguration",
            ],
            "Resource": _bucket_arn(),
        },
        {
            "Sid": "Index",
            "Effect": "Allow",
            "Action": [
                "dynamodb:GetItem",
                # Listings read their page of items in one batch (runs list, stuck, due).
                "dynamodb:BatchGetItem",
                "dynamodb:PutItem",
                "dynamodb:DeleteItem",
                "dynamodb:Query",
                "dynamodb:DescribeTable",
                "dynamodb:DescribeTimeToLive",
            ],
            "Resource": [
                {"Fn::GetAtt": ["IndexTable", "Arn"]},
                {"Fn::Sub": "${IndexTable.Arn}/index/*"},
            ],
        },
    ]
    if with_kms:
        statements.append(
            {
                "Sid": "EncryptionKey",
                "Effect": "Allow",
                "Action": ["kms:Decrypt", "kms:GenerateDataKey"],
                "Resource": {"Ref": "KmsKeyArn"},
            }
        )
    return {"Version": "2012-10-17", "Statement": statements}


def _erasure_policy() -> dict[str, Any]:
    """Return what an operator's purges need beyond a worker's (attach both to its role)."""
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                # `stashpoint purge` removes every stored version of what it erases; reading
                # retentions and legal holds first lets it refuse what Object Lock keeps
                # before it writes anything; `stashpoint hold` sets and clears legal holds.
                "Sid": "EraseVersions",
                "Effect": "Allow",
                "Action": [
                    "s3:DeleteObjectVersion",
                    "s3:GetObjectVersion",
                    "s3:GetObjectRetention",
                    "s3:GetObjectLegalHold",
                    "s3:PutObjectLegalHold",
                ],
                "Resource": _bucket_arn("/${Prefix}/*"),
            },
        ],
    }


def _archive_policy() -> dict[str, Any]:
    """Return what `stashpoint project --iceberg --catalog type=glue` needs beyond a worker's."""
    glue = "arn:${AWS::Partition}:glue:${AWS::Region}:${AWS::AccountId}"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                # pyiceberg's Glue catalog: the table's pointer to its metadata file, swapped
                # on the Glue table's version (a conditional commit), in ArchiveDatabase alone.
                "Sid": "ArchiveTable",
                "Effect": "Allow",
                "Action": [
                    "glue:GetDatabase",
                    "glue:GetTable",
                    "glue:GetTables",
                    "glue:CreateTable",
                    "glue:UpdateTable",
                ],
                "Resource": [
                    {"Fn::Sub": f"{glue}:catalog"},
                    {"Fn::Sub": f"{glue}:database/${{ArchiveDatabase}}"},
                    {"Fn::Sub": f"{glue}:table/${{ArchiveDatabase}}/*"},
                ],
            },
            {
                # A publish erases the manifests and metadata files of expired snapshots
                # (every stored version, as a purge does), under the table's folder alone.
                "Sid": "EraseExpiredTableMetadata",
                "Effect": "Allow",
                "Action": ["s3:DeleteObjectVersion", "s3:GetObjectVersion"],
                "Resource": _bucket_arn("/${Prefix}/projection/_iceberg/*"),
            },
        ],
    }


def _archive() -> dict[str, Any]:
    """Return the archive's Glue database and policy (with `ArchiveDatabase` set)."""
    return {
        "ArchiveCatalogDatabase": {
            "Type": "AWS::Glue::Database",
            "Condition": "HasArchive",
            "Properties": {
                "CatalogId": {"Ref": "AWS::AccountId"},
                "DatabaseInput": {
                    "Name": {"Ref": "ArchiveDatabase"},
                    "Description": "stashpoint's queryable archive: the Iceberg table "
                    "`stashpoint project --iceberg --catalog type=glue` keeps (Athena reads it).",
                    "LocationUri": {
                        "Fn::Sub": "s3://${CheckpointBucket}/${Prefix}/projection/_iceberg"
                    },
                },
            },
        },
        "ArchivePolicy": {
            "Type": "AWS::IAM::ManagedPolicy",
            "Condition": "HasArchive",
            "Properties": {
                "Description": "What stashpoint project --iceberg needs beyond a worker's: "
                "the archive's Iceberg table in the Glue database ArchiveDatabase.",
                "PolicyDocument": _archive_policy(),
            },
        },
    }


_STASH_URL = {"Fn::Sub": "s3://${CheckpointBucket}/${Prefix}?index=dynamodb://${IndexTable}"}


def _assumed_by(service: str) -> dict[str, Any]:
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Principal": {"Service": service}, "Action": "sts:AssumeRole"}
        ],
    }


def _waker() -> dict[str, Any]:
    """Return the optional waker: a schedule invoking a small Lambda that sends due runs on."""
    send = _if(
        "WakesQueue",
        {
            "Effect": "Allow",
            "Action": ["sqs:SendMessage", "sqs:GetQueueUrl"],
            "Resource": {"Ref": "WakeTarget"},
        },
        {"Effect": "Allow", "Action": "lambda:InvokeFunction", "Resource": {"Ref": "WakeTarget"}},
    )
    return {
        "WakeRole": {
            "Type": "AWS::IAM::Role",
            "Condition": "Wakes",
            "Properties": {
                "Description": "The waker: reads the stash and its index (WorkerPolicy), logs, "
                "and sends to WakeTarget alone.",
                "AssumeRolePolicyDocument": _assumed_by("lambda.amazonaws.com"),
                "ManagedPolicyArns": [
                    {"Ref": "WorkerPolicy"},
                    {
                        "Fn::Sub": "arn:${AWS::Partition}:iam::aws:policy/service-role/"
                        "AWSLambdaBasicExecutionRole"
                    },
                ],
                "Policies": [
                    {
                        "PolicyName": "send-due-runs",
                        "PolicyDocument": {"Version": "2012-10-17", "Statement": [send]},
                    }
                ],
            },
        },
        "WakeFunction": {
            "Type": "AWS::Lambda::Function",
            "Condition": "Wakes",
            "Metadata": _justified(
                (
                    "CKV_AWS_116",
                    "invoked by EventBridge Scheduler every minute: a failed poll "
                    "is the next minute's, so a dead-letter queue would only collect noise",
                ),
                (
                    "CKV_AWS_117",
                    "reaches S3, DynamoDB and the target over AWS endpoints; put "
                    "it in a VPC (with endpoints) by editing the function if your account needs",
                ),
                (
                    "CKV_AWS_173",
                    "its environment holds an ARN, a namespace and the stash URL, "
                    "no secret: Lambda's own key encrypts it at rest",
                ),
                (
                    "CKV_AWS_272",
                    "code signing is an account-wide choice (a signing profile); "
                    "the package is stashpoint's own wheel",
                ),
            ),
            "Properties": {
                "Description": "stashpoint waker: sends due runs to WakeTarget (stashpoint.wake).",
                "Runtime": "python3.12",
                "Handler": "stashpoint.wake.handler",
                "Code": {
                    "S3Bucket": _if("HasWakeCode", {"Ref": "WakeCodeBucket"}, NO_VALUE),
                    "S3Key": _if("HasWakeCode", {"Ref": "WakeCodeKey"}, NO_VALUE),
                },
                "Role": {"Fn::GetAtt": ["WakeRole", "Arn"]},
                "Timeout": 60,
                "MemorySize": 256,
                # One poller at a time is enough; claims make a second one harmless anyway.
                "ReservedConcurrentExecutions": 1,
                "TracingConfig": {"Mode": "Active"},
                "Environment": {
                    "Variables": {
                        "STASHPOINT_URL": _STASH_URL,
                        "STASHPOINT_WAKE_TARGET": {"Ref": "WakeTarget"},
                        "STASHPOINT_WAKE_NAMESPACE": {"Ref": "WakeNamespace"},
                        "STASHPOINT_WAKE_RESEND": {"Ref": "WakeResendSeconds"},
                    }
                },
            },
        },
        "WakeSchedulerRole": {
            "Type": "AWS::IAM::Role",
            "Condition": "Wakes",
            "Properties": {
                "Description": "EventBridge Scheduler invokes the waker, nothing else.",
                "AssumeRolePolicyDocument": _assumed_by("scheduler.amazonaws.com"),
                "Policies": [
                    {
                        "PolicyName": "invoke-waker",
                        "PolicyDocument": {
                            "Version": "2012-10-17",
                            "Statement": [
                                {
                                    "Effect": "Allow",
                                    "Action": "lambda:InvokeFunction",
                                    "Resource": {"Fn::GetAtt": ["WakeFunction", "Arn"]},
                                }
                            ],
                        },
                    }
                ],
            },
        },
        "WakeSchedule": {
            "Type": "AWS::Scheduler::Schedule",
            "Condition": "Wakes",
            "Properties": {
                "Description": "Every minute: send the due runs on (stashpoint.wake).",
                "ScheduleExpression": "rate(1 minute)",
                "FlexibleTimeWindow": {"Mode": "OFF"},
                "Target": {
                    "Arn": {"Fn::GetAtt": ["WakeFunction", "Arn"]},
                    "RoleArn": {"Fn::GetAtt": ["WakeSchedulerRole", "Arn"]},
                    # A missed poll is the next minute's: no retries piling up behind it.
                    "RetryPolicy": {"MaximumRetryAttempts": 0},
                },
            },
        },
    }


def template() -> dict[str, Any]:
    """Return the template as a dict."""
    table = dynamodb_table_definition("unused")
    del table["TableName"]
    return {
        "AWSTemplateFormatVersion": "2010-09-09",
        "Description": "stashpoint: versioned checkpoint bucket (conditional writes enforced), "
        "run index table, least-privilege worker policy.",
        "Parameters": {
            "BucketName": {
                "Type": "String",
                "Default": "",
                "Description": "Bucket name; empty for a generated one.",
            },
            "ArchiveDatabase": {
                "Type": "String",
                "Default": "",
                "AllowedPattern": "^[a-z0-9_]*$",
                "Description": "Glue database of the archive's Iceberg table (stashpoint "
                "project --iceberg --catalog type=glue --table DATABASE.records); empty for none.",
            },
            "Prefix": {
                "Type": "String",
                "Default": "stashpoint",
                "AllowedPattern": "^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$",
                "Description": "Key prefix of the stash inside the bucket.",
            },
            "TableName": {
                "Type": "String",
                "Default": "",
                "Description": "Index table name; empty for a generated one.",
            },
            "KmsKeyArn": {
                "Type": "String",
                "Default": "",
                "Description": "KMS key for SSE-KMS; empty for SSE-S3.",
            },
            "AccessLogBucket": {
                "Type": "String",
                "Default": "",
                "Description": "Bucket receiving S3 server access logs; empty for none.",
            },
            "NoncurrentArchiveDays": {
                "Type": "Number",
                "Default": 30,
                "MinValue": 1,
                "Description": "Days before older revisions move to Glacier Flexible Retrieval.",
            },
            "NoncurrentExpireDays": {
                "Type": "Number",
                "Default": 365,
                "MinValue": 2,
                "Description": "Days before older revisions are deleted "
                "(must exceed NoncurrentArchiveDays).",
            },
            "SealedArchiveDays": {
                "Type": "Number",
                "Default": 90,
                "MinValue": 0,
                "Description": "Days before sealed log segments (agent transcripts, logs) move "
                "to SealedArchiveClass; 0 keeps them in the standard tier. Heads and recent "
                "entries always stay hot.",
            },
            "SealedArchiveClass": {
                "Type": "String",
                "Default": "GLACIER",
                "AllowedValues": ["GLACIER_IR", "GLACIER", "DEEP_ARCHIVE", "STANDARD_IA"],
                "Description": "Storage class of archived sealed segments (GLACIER and "
                "DEEP_ARCHIVE must be restored before reading: stashpoint restore ID).",
            },
            "SealedArchiveMinBytes": {
                "Type": "Number",
                "Default": 131072,
                "MinValue": 0,
                "Description": "Only sealed objects larger than this move to SealedArchiveClass: "
                "Glacier adds 40 KB to every object, so small segments stay in the standard "
                "tier while packs (stashpoint gc --pack: 1,024 versions each) move.",
            },
            "ObjectLockMode": {
                "Type": "String",
                "Default": "NONE",
                "AllowedValues": ["NONE", "GOVERNANCE", "COMPLIANCE"],
                "Description": "S3 Object Lock for the bucket (only at creation, never undone): "
                "NONE; or the mode of the default retention ObjectLockDays sets. Locked "
                "versions cannot be deleted before their date, by stashpoint or anyone "
                "(COMPLIANCE: not even by the root user). stashpoint doctor reports it.",
            },
            "WakeTarget": {
                "Type": "String",
                "Default": "",
                "Description": "ARN of an SQS queue or a Lambda function that due runs are sent "
                "to every minute (stashpoint.wake: EventBridge Scheduler invokes a small Lambda "
                "that lists due runs and sends each once per WakeResendSeconds); empty for none.",
            },
            "WakeTargetKind": {
                "Type": "String",
                "Default": "sqs",
                "AllowedValues": ["sqs", "lambda"],
                "Description": "What WakeTarget is: an SQS queue or a Lambda function.",
            },
            "WakeNamespace": {
                "Type": "String",
                "Default": "default",
                "Description": "The runs' namespace whose due runs are sent.",
            },
            "WakeResendSeconds": {
                "Type": "Number",
                "Default": 900,
                "MinValue": 60,
                "Description": "A run still due this long after it was sent is sent again.",
            },
            "WakeCodeBucket": {
                "Type": "String",
                "Default": "",
                "Description": "Bucket of the waker's deployment package (a zip of "
                "`pip install stashpoint -t .`); needed with WakeTarget.",
            },
            "WakeCodeKey": {
                "Type": "String",
                "Default": "",
                "Description": "Key of the waker's deployment package in WakeCodeBucket.",
            },
            "ObjectLockDays": {
                "Type": "Number",
                "Default": 0,
                "MinValue": 0,
                "Description": "Days every new object version is retained by default when "
                "ObjectLockMode is set; 0 enables Object Lock without a default retention.",
            },
        },
        "Conditions": {
            "UsesObjectLock": {"Fn::Not": [{"Fn::Equals": [{"Ref": "ObjectLockMode"}, "NONE"]}]},
            "HasDefaultRetention": {
                "Fn::And": [
                    {"Condition": "UsesObjectLock"},
                    {"Fn::Not": [{"Fn::Equals": [{"Ref": "ObjectLockDays"}, 0]}]},
                ]
            },
            "HasBucketName": {"Fn::Not": [{"Fn::Equals": [{"Ref": "BucketName"}, ""]}]},
            "HasTableName": {"Fn::Not": [{"Fn::Equals": [{"Ref": "TableName"}, ""]}]},
            "UseKms": {"Fn::Not": [{"Fn::Equals": [{"Ref": "KmsKeyArn"}, ""]}]},
            "HasAccessLogs": {"Fn::Not": [{"Fn::Equals": [{"Ref": "AccessLogBucket"}, ""]}]},
            "ArchivesSealed": {"Fn::Not": [{"Fn::Equals": [{"Ref": "SealedArchiveDays"}, 0]}]},
            "Wakes": {"Fn::Not": [{"Fn::Equals": [{"Ref": "WakeTarget"}, ""]}]},
            "HasArchive": {"Fn::Not": [{"Fn::Equals": [{"Ref": "ArchiveDatabase"}, ""]}]},
            "HasWakeCode": {
                "Fn::Not": [
                    {
                        "Fn::Or": [
                            {"Fn::Equals": [{"Ref": "WakeCodeBucket"}, ""]},
                            {"Fn::Equals": [{"Ref": "WakeCodeKey"}, ""]},
                        ]
                    }
                ]
            },
            "WakesQueue": {
                "Fn::And": [
                    {"Condition": "Wakes"},
                    {"Fn::Equals": [{"Ref": "WakeTargetKind"}, "sqs"]},
                ]
            },
        },
        "Rules": {
            "WakerNeedsItsCode": {
                "RuleCondition": {"Fn::Not": [{"Fn::Equals": [{"Ref": "WakeTarget"}, ""]}]},
                "Assertions": [
                    {
                        "Assert": {"Fn::Not": [{"Fn::Equals": [{"Ref": "WakeCodeBucket"}, ""]}]},
                        "AssertDescription": "WakeTarget needs WakeCodeBucket and WakeCodeKey: "
                        "a zip of `pip install stashpoint -t .` in S3",
                    },
                    {
                        "Assert": {"Fn::Not": [{"Fn::Equals": [{"Ref": "WakeCodeKey"}, ""]}]},
                        "AssertDescription": "WakeTarget needs WakeCodeKey",
                    },
                ],
            }
        },
        "Resources": {
            "CheckpointBucket": {
                "Type": "AWS::S3::Bucket",
                **RETAIN,
                "Metadata": _justified(
                    (
                        "CKV_AWS_18",
                        "server access logging is the AccessLogBucket parameter: "
                        "the log bucket is an account-wide choice (CloudTrail data events are "
                        "the other way to audit object access)",
                    ),
                ),
                "Properties": {
                    "BucketName": _if("HasBucketName", {"Ref": "BucketName"}, NO_VALUE),
                    "VersioningConfiguration": {"Status": "Enabled"},
                    "ObjectLockEnabled": _if("UsesObjectLock", True, NO_VALUE),
                    "ObjectLockConfiguration": _if(
                        "UsesObjectLock",
                        {
                            "ObjectLockEnabled": "Enabled",
                            "Rule": _if(
                                "HasDefaultRetention",
                                {
                                    "DefaultRetention": {
                                        "Mode": {"Ref": "ObjectLockMode"},
                                        "Days": {"Ref": "ObjectLockDays"},
                                    }
                                },
                                NO_VALUE,
                            ),
                        },
                        NO_VALUE,
                    ),
                    "LoggingConfiguration": _if(
                        "HasAccessLogs",
                        {
                            "DestinationBucketName": {"Ref": "AccessLogBucket"},
                            "LogFilePrefix": {"Fn::Sub": "${Prefix}/"},
                        },
                        NO_VALUE,
                    ),
                    "OwnershipControls": {"Rules": [{"ObjectOwnership": "BucketOwnerEnforced"}]},
                    "PublicAccessBlockConfiguration": {
                        "BlockPublicAcls": True,
                        "BlockPublicPolicy": True,
                        "IgnorePublicAcls": True,
                        "RestrictPublicBuckets": True,
                    },
                    "BucketEncryption": {
                        "ServerSideEncryptionConfiguration": [
                            {
                                "BucketKeyEnabled": True,
                                "ServerSideEncryptionByDefault": {
                                    "SSEAlgorithm": _if("UseKms", "aws:kms", "AES256"),
                                    "KMSMasterKeyID": _if("UseKms", {"Ref": "KmsKeyArn"}, NO_VALUE),
                                },
                            }
                        ]
                    },
                    "LifecycleConfiguration": {
                        # S3's default since 2024-09, said: nothing under 128 KB transitions.
                        "TransitionDefaultMinimumObjectSize": "all_storage_classes_128K",
                        "Rules": [
                            {
                                "Id": "archive-then-expire-older-revisions",
                                "Status": "Enabled",
                                "NoncurrentVersionTransitions": [
                                    {
                                        "StorageClass": "GLACIER",
                                        "TransitionInDays": {"Ref": "NoncurrentArchiveDays"},
                                    }
                                ],
                                "NoncurrentVersionExpiration": {
                                    "NoncurrentDays": {"Ref": "NoncurrentExpireDays"}
                                },
                                "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7},
                                # A delete marker whose older versions all expired hides
                                # nothing: it goes too (keys of logs are never deleted).
                                "ExpiredObjectDeleteMarker": True,
                            },
                            _if(
                                "ArchivesSealed",
                                {
                                    # Sealed segments are immutable and never read on the hot
                                    # path (resumes read the newest objects): archive them by
                                    # prefix, while heads and entries stay in standard.
                                    "Id": "archive-sealed-log-segments",
                                    "Status": "Enabled",
                                    "Prefix": {"Fn::Sub": "${Prefix}/sealed/"},
                                    "ObjectSizeGreaterThan": {"Ref": "SealedArchiveMinBytes"},
                                    "Transitions": [
                                        {
                                            "StorageClass": {"Ref": "SealedArchiveClass"},
                                            "TransitionInDays": {"Ref": "SealedArchiveDays"},
                                        }
                                    ],
                                },
                                NO_VALUE,
                            ),
                        ],
                    },
                },
            },
            "CheckpointBucketPolicy": {
                "Type": "AWS::S3::BucketPolicy",
                "Properties": {
                    "Bucket": {"Ref": "CheckpointBucket"},
                    "PolicyDocument": {
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Sid": "DenyInsecureTransport",
                                "Effect": "Deny",
                                "Principal": "*",
                                "Action": "s3:*",
                                "Resource": [_bucket_arn(), _bucket_arn("/*")],
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            },
                            {
                                # AWS: "enforce conditional writes". A PUT under the prefix
                                # must carry If-None-Match or If-Match: no blind overwrite.
                                "Sid": "DenyUnconditionalWrites",
                                "Effect": "Deny",
                                "Principal": "*",
                                "Action": "s3:PutObject",
                                "Resource": _bucket_arn("/${Prefix}/*"),
                                # s3:ObjectCreationOperation is true for PutObject and
                                # CompleteMultipartUpload only: CreateMultipartUpload and
                                # UploadPart(Copy) take no conditional header and stay
                                # allowed, as AWS documents for multipart uploads.
                                "Condition": {
                                    "Null": {"s3:if-none-match": "true", "s3:if-match": "true"},
                                    "Bool": {"s3:ObjectCreationOperation": "true"},
                                },
                            },
                        ],
                    },
                },
            },
            "IndexTable": {
                "Type": "AWS::DynamoDB::Table",
                **RETAIN,
                "Metadata": _justified(
                    (
                        "CKV_AWS_119",
                        "encrypted at rest always; with KmsKeyArn set, with that "
                        "customer-managed key (the index holds no payloads, only ids and status)",
                    ),
                ),
                "Properties": {
                    "TableName": _if("HasTableName", {"Ref": "TableName"}, NO_VALUE),
                    **table,
                    "TimeToLiveSpecification": {"AttributeName": TTL_ATTRIBUTE, "Enabled": True},
                    "PointInTimeRecoverySpecification": {"PointInTimeRecoveryEnabled": True},
                    "SSESpecification": _if(
                        "UseKms",
                        {
                            "SSEEnabled": True,
                            "SSEType": "KMS",
                            "KMSMasterKeyId": {"Ref": "KmsKeyArn"},
                        },
                        {"SSEEnabled": True},
                    ),
                },
            },
            "WorkerPolicy": {
                "Type": "AWS::IAM::ManagedPolicy",
                "Properties": {
                    "Description": "What a stashpoint worker needs: the stash prefix and the "
                    "index table, nothing else.",
                    # Two whole documents rather than an Fn::If inside the statement list:
                    # some CloudFormation implementations mishandle AWS::NoValue in lists.
                    "PolicyDocument": _if(
                        "UseKms",
                        _worker_policy(with_kms=True),
                        _worker_policy(with_kms=False),
                    ),
                },
            },
            "ErasurePolicy": {
                "Type": "AWS::IAM::ManagedPolicy",
                "Properties": {
                    "Description": "What stashpoint purge and hold need beyond a worker's: "
                    "deleting stored versions and reading or setting Object Lock holds, on the "
                    "stash prefix alone.",
                    "PolicyDocument": _erasure_policy(),
                },
            },
            **_waker(),
            **_archive(),
        },
        "Outputs": {
            "BucketName": {"Value": {"Ref": "CheckpointBucket"}},
            "TableName": {"Value": {"Ref": "IndexTable"}},
            "WorkerPolicyArn": {"Value": {"Ref": "WorkerPolicy"}},
            "ErasurePolicyArn": {
                "Description": "Attach beside WorkerPolicy to whoever runs stashpoint purge.",
                "Value": {"Ref": "ErasurePolicy"},
            },
            "ArchivePolicyArn": {
                "Condition": "HasArchive",
                "Description": "Attach beside WorkerPolicy to whoever runs stashpoint project "
                "--iceberg.",
                "Value": {"Ref": "ArchivePolicy"},
            },
            "StashUrl": {
                "Description": "Set STASHPOINT_URL to this.",
                "Value": _STASH_URL,
            },
            "WakeFunctionArn": {
                "Condition": "Wakes",
                "Description": "The Lambda that sends due runs to WakeTarget every minute.",
                "Value": {"Fn::GetAtt": ["WakeFunction", "Arn"]},
            },
        },
    }


class _NoAliases(yaml.SafeDumper):
    """CloudFormation rejects YAML aliases: write shared values out in full."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def render() -> str:
    """Return the template as YAML, with its do-not-edit header."""
    header = "# Generated by infra/generate.py from stashpoint's schema. Do not edit by hand.\n"
    return header + yaml.dump(template(), Dumper=_NoAliases, sort_keys=False, width=100)


if __name__ == "__main__":
    sys.stdout.write(render())
