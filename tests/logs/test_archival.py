"""Archived sealed segments: a typed error naming the restore command, then a restore.

moto (in-process) plays S3's archive tiers: a GET of a GLACIER object is refused with
`InvalidObjectState` until `RestoreObject` has run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import boto3
import pytest

import stashpoint
from stashpoint import ArchivedObject, ErrorKind
from stashpoint._backends import s3 as s3_backend
from stashpoint._backends.aws import AwsCall
from stashpoint.logs import SEGMENT_SPAN
from stashpoint.maintenance import doctor
from stashpoint.stores.layout import Layout
from stashpoint.stores.objects import GetLifecycle
from tests.cli.test_cli import cli
from tests.scripted import Script


def _archive(url: str, key: str) -> None:
    bucket = url.removeprefix("s3://").split("/")[0]
    client = boto3.client("s3", region_name="us-east-1")
    client.copy_object(
        Bucket=bucket, Key=key, CopySource={"Bucket": bucket, "Key": key},
        StorageClass="GLACIER", MetadataDirective="COPY",
    )  # fmt: skip


def test_an_archived_segment_names_the_restore_and_reads_once_restored(
    s3_moto_url: tuple[str, dict[str, Any]],
) -> None:
    url, options = s3_moto_url
    with stashpoint.open(url, **options) as stash:
        head = None
        for v in range(SEGMENT_SPAN + 2):
            head = stash.logs.append("kept", [v], after=head, state={"v": v})
        segment = stash.logs.steps.keys.segment("kept", 0)
        _archive(url, segment)
        with pytest.raises(ArchivedObject, match="stashpoint restore kept") as info:
            stash.logs.records("kept")
        assert info.value.kind is ErrorKind.ARCHIVED and info.value.object_name == segment
        assert stash.logs.tail("kept", 1)[1] == [SEGMENT_SPAN + 1]  # the hot end still reads
        report = stash.logs.restore("kept", days=2, tier="Bulk")
        assert (report.objects, report.started) == (1, 1) and not report.readable
        again = stash.logs.restore("kept", days=2, tier="Bulk")  # progress, not a second ask
        assert again.started == 0 and again.restored + again.in_progress == 1
        assert again.restored == 1  # moto restores at once; S3 takes minutes to hours
        assert stash.logs.records("kept") == list(range(SEGMENT_SPAN + 2))
        with pytest.raises(stashpoint.InvalidArgument):
            stash.logs.restore("kept", days=0)
        with pytest.raises(stashpoint.InvalidArgument):
            stash.logs.restore("kept", tier="Instant")


def test_an_archived_run_segment_names_the_restore_and_the_command_restores_it(
    s3_moto_url: tuple[str, dict[str, Any]],
) -> None:
    url, options = s3_moto_url
    with stashpoint.open(url, **options) as stash:
        run_id = stash.runs.create_run("g", run_id="old-run")
        for n in range(SEGMENT_SPAN // 2):
            attempt = stash.runs.record_attempt(run_id, f"n{n}", 1)
            stash.runs.complete_attempt(attempt, n)
        segment = stash.log_steps("run-logs").keys.segment(run_id, 0)
        _archive(url, segment)
        with pytest.raises(ArchivedObject, match="stashpoint restore old-run") as info:
            stash.runs.load_run(run_id)
        assert info.value.object_name == segment
        stash.runs.complete_run(run_id)  # the hot end still takes transitions
    from typer.testing import CliRunner

    from stashpoint.cli.app import app

    # In-process (moto lives in this process): the same command line as a user types.
    result = CliRunner().invoke(app, ["restore", run_id, "--json", "--url", url])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["what"] == "run log" and report["started"] == 1
    with stashpoint.open(url, **options) as stash:
        state = stash.runs.load_run(run_id)
        assert state is not None and len(state.attempts) == SEGMENT_SPAN // 2


def test_lifecycle_rules_are_read_from_s3_and_absent_locally(
    s3_moto_url: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    url, options = s3_moto_url
    bucket = url.removeprefix("s3://").split("/")[0]
    boto3.client("s3", region_name="us-east-1").put_bucket_lifecycle_configuration(
        Bucket=bucket,
        LifecycleConfiguration={"Rules": [{
            "ID": "archive-sealed", "Status": "Enabled", "Filter": {"Prefix": "p/sealed/"},
            "Transitions": [{"Days": 90, "StorageClass": "GLACIER"}],
        }]},
    )  # fmt: skip
    with stashpoint.open(url, **options) as stash:
        [rule] = stash.driver(GetLifecycle())
    assert (rule.prefix, rule.transitions, rule.enabled) == ("p/sealed/", ((90, "GLACIER"),), True)
    with stashpoint.open(f"local://{tmp_path}") as local:
        assert local.driver(GetLifecycle()) is None


def test_restore_command_reports_what_it_found(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        head = None
        for v in range(SEGMENT_SPAN + 1):
            head = stash.logs.append("plain", [v], after=head)
    report = json.loads(cli("restore", "plain", "--json", url=url).stdout)
    assert report["what"] == "log" and report["objects"] == 1 and report["readable"]
    assert report["not_archived"] == 1
    missing = cli("restore", "nothing-here", url=url, check=False)
    assert missing.returncode == 3  # not found


@pytest.mark.parametrize(
    ("prefix", "storage_class", "verdict"),
    [
        ("{p}/sealed/", "GLACIER", "pass"),  # what infra/ deploys
        ("{p}/", "GLACIER", "fail"),  # heads and entries would need a restore
        ("", "DEEP_ARCHIVE", "fail"),
        ("{p}/", "GLACIER_IR", "pass"),  # instant retrieval reads directly
    ],
)
def test_doctor_reports_the_lifecycle_and_fails_one_that_archives_hot_objects(
    s3_moto_url: tuple[str, dict[str, Any]], prefix: str, storage_class: str, verdict: str
) -> None:
    url, options = s3_moto_url
    bucket, stash_prefix = url.removeprefix("s3://").split("/", 1)
    boto3.client("s3", region_name="us-east-1").put_bucket_lifecycle_configuration(
        Bucket=bucket,
        LifecycleConfiguration={"Rules": [{
            "ID": "rule", "Status": "Enabled", "Filter": {"Prefix": prefix.format(p=stash_prefix)},
            "Transitions": [{"Days": 30, "StorageClass": storage_class}],
        }]},
    )  # fmt: skip
    with stashpoint.open(url, **options) as stash:
        [check] = [c for c in stash.admin.doctor() if c.name == "lifecycle"]
    assert check.status == verdict, check.detail
    if verdict == "pass":
        assert storage_class in check.detail


def test_doctor_reports_object_lock_on_s3_and_its_absence_locally(
    s3_moto_url: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    from stashpoint.stores.objects import GetObjectLock, ObjectLock

    url, options = s3_moto_url
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket="locked", ObjectLockEnabledForBucket=True)
    with stashpoint.open("s3://locked/p?index=none", **options) as stash:
        assert stash.driver(GetObjectLock()) == ObjectLock(enabled=True)
        [check] = [c for c in stash.admin.doctor() if c.name == "object lock"]
        assert check.status == "pass" and "no default retention" in check.detail
    client.put_object_lock_configuration(
        Bucket="locked",
        ObjectLockConfiguration={
            "ObjectLockEnabled": "Enabled",
            "Rule": {"DefaultRetention": {"Mode": "GOVERNANCE", "Days": 30}},
        },
    )
    with stashpoint.open("s3://locked/p?index=none", **options) as stash:
        assert stash.driver(GetObjectLock()) == ObjectLock(True, "GOVERNANCE", 30, None)
        checks = {c.name: c for c in stash.admin.doctor()}  # reports, never raises
        check = checks["object lock"]
        assert check.status == "warn" and "30 days in GOVERNANCE mode" in check.detail
        assert (
            checks["cleanup"].status == "warn"
            and "could not be removed" in checks["cleanup"].detail
        )
    with stashpoint.open(url, **options) as stash:  # versioned, not locked
        [check] = [c for c in stash.admin.doctor() if c.name == "object lock"]
        assert (check.status, check.detail) == ("pass", "off: nothing is retained past a delete")
    with stashpoint.open(f"local://{tmp_path}") as local:
        assert local.driver(GetObjectLock()) is None


def test_doctor_reports_the_templates_lifecycle_packs_moved_and_old_versions_expired(
    s3_moto_url: tuple[str, dict[str, Any]],
) -> None:
    """What infra/ deploys (issue 26 #4): sealed objects over 128 KB (packs) to Glacier,
    older revisions and bare delete markers expired; heads and entries untouched."""
    url, options = s3_moto_url
    bucket, stash_prefix = url.removeprefix("s3://").split("/", 1)
    boto3.client("s3", region_name="us-east-1").put_bucket_lifecycle_configuration(
        Bucket=bucket,
        LifecycleConfiguration={"Rules": [
            {
                "ID": "archive-then-expire-older-revisions", "Status": "Enabled",
                "Filter": {"Prefix": ""},
                "NoncurrentVersionExpiration": {"NoncurrentDays": 365},
                "Expiration": {"ExpiredObjectDeleteMarker": True},
            },
            {
                "ID": "archive-sealed-log-segments", "Status": "Enabled",
                "Filter": {"And": {
                    "Prefix": f"{stash_prefix}/sealed/", "ObjectSizeGreaterThan": 131072,
                }},
                "Transitions": [{"Days": 90, "StorageClass": "DEEP_ARCHIVE"}],
            },
        ]},
    )  # fmt: skip
    with stashpoint.open(url, **options) as stash:
        rules = stash.driver(GetLifecycle())
        [check] = [c for c in stash.admin.doctor() if c.name == "lifecycle"]
    assert (rules[0].noncurrent_expire_days, rules[0].expires_delete_markers) == (365, True)
    assert check.status == "pass", check.detail
    assert f"{stash_prefix}/sealed/ -> DEEP_ARCHIVE after 90 d" in check.detail
    assert "older revisions expire after 365 d" in check.detail
    assert "bare delete markers removed" in check.detail
    # moto keeps no size filter: what S3 answers is scripted (the same parser).
    answer = {"Rules": [{
        "ID": "archive-sealed-log-segments", "Status": "Enabled",
        "Filter": {"And": {"Prefix": "p/sealed/", "ObjectSizeGreaterThan": 131072}},
        "Transitions": [{"Days": 90, "StorageClass": "DEEP_ARCHIVE"}],
    }]}  # fmt: skip
    [sized] = Script([(AwsCall, answer)]).run(s3_backend._lifecycle("bucket"))
    assert (sized.prefix, sized.larger_than) == ("p/sealed/", 131072)
    [check] = [Script([(GetLifecycle, [sized])]).run(doctor._lifecycle(Layout("p")))]
    assert "p/sealed/ (objects over 131072 B) -> DEEP_ARCHIVE after 90 d" in check.detail
