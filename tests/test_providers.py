"""Providers: profiles named in the URL (or inferred), unsafe ones refused before any
request, and the conformance kit (`doctor --conformance`) on every S3 we can run here:
SeaweedFS versioned and unversioned, the directory-bucket stand-in, moto."""

from __future__ import annotations

import json
import uuid
from typing import Any

import boto3
import jsonschema
import pytest
from moto import mock_aws

import stashpoint
from stashpoint import ConfigurationError
from stashpoint.stores.providers import PROVIDERS, provider_named
from tests import servers
from tests.cli.test_cli import cli
from tests.cli.test_cli_schemas import _schema


def test_a_profile_is_named_or_inferred_and_an_unsafe_one_refused() -> None:
    assert provider_named(None, "my-bucket").name == "aws"
    assert provider_named("", "logs--use1-az4--x-s3").name == "s3express"
    assert provider_named("r2").versioning is False
    with pytest.raises(ConfigurationError, match="unknown provider"):
        provider_named("gcs")
    with pytest.raises(ConfigurationError, match="cannot hold a stash"):
        provider_named("garage")  # no conditional writes: never used
    express = PROVIDERS["s3express"]
    assert (express.ordered_listing, express.start_after, express.versioning) == (
        False, False, False,
    )  # fmt: skip
    assert not express.seeks and PROVIDERS["aws"].seeks


def test_a_stash_uses_its_profile_and_refuses_one_for_another_scheme(
    memory_url: tuple[str, dict[str, Any]],
) -> None:
    with stashpoint.open("s3://b--use1-az4--x-s3/p") as express:  # no request is sent
        assert express.provider.name == "s3express"
        assert express.log_steps("logs").seeks is False  # listings read whole, no StartAfter
    with stashpoint.open("s3://bucket/p?provider=minio") as minio:
        assert minio.provider.name == "minio" and minio.log_steps("logs").seeks
    with pytest.raises(ConfigurationError):
        stashpoint.open("s3://bucket/p?provider=garage")
    with pytest.raises(ConfigurationError):
        stashpoint.open(memory_url[0], provider="r2")
    with stashpoint.open(memory_url[0]) as memory, pytest.raises(ConfigurationError):
        memory.admin.conformance()  # S3 only


def _kit(url: str) -> Any:
    with stashpoint.open(url) as stash:
        return stash.admin.conformance()


def _left(server: servers.S3Server, bucket: str, prefix: str) -> list[str]:
    client: Any = server.client()
    listed = client.list_objects_v2(Bucket=bucket, Prefix=f"{prefix}/.doctor/")
    return [item["Key"] for item in listed.get("Contents", [])]


def test_the_kit_on_seaweedfs_versioned_and_unversioned(seaweedfs: servers.S3Server) -> None:
    prefix = f"kit-{uuid.uuid4().hex[:6]}"
    versioned = _kit(seaweedfs.url(prefix) + "&provider=seaweedfs")
    assert (
        versioned.safe
        and versioned.cleaned
        and not _left(seaweedfs, servers.VERSIONED_BUCKET, prefix)
    )
    assert all(p.passed for p in versioned.probes), versioned.row()
    assert "seaweedfs" in versioned.matches and versioned.differences(PROVIDERS["seaweedfs"]) == []
    plain = _kit(seaweedfs.url(prefix, servers.UNVERSIONED_BUCKET) + "&provider=seaweedfs")
    found = {p.name: p.passed for p in plain.probes}
    assert plain.safe and found["versioning"] is False and found["delete markers"] is False
    assert plain.differences(PROVIDERS["seaweedfs"]) == ["versioning"]  # the bucket's own choice


def test_the_kit_tells_a_directory_bucket(
    seaweedfs: servers.S3Server, directory_bucket: str
) -> None:
    prefix = f"kit-{uuid.uuid4().hex[:6]}"
    url = seaweedfs.url(prefix, servers.UNVERSIONED_BUCKET, endpoint=directory_bucket)
    report = _kit(url + "&provider=s3express")
    found = {p.name: p.passed for p in report.probes}
    assert report.safe and report.cleaned
    assert found["listing order"] is False and found["start-after"] is False
    assert found["any delimiter"] is False  # only "/": a listing by ".." is refused
    assert found["versioning"] is False and found["etag is md5"] is False
    assert report.matches == ["s3express"] and report.differences(PROVIDERS["s3express"]) == []
    assert report.differences(PROVIDERS["aws"]) == [
        "ordered_listing", "start_after", "any_delimiter", "versioning", "etag_is_md5",
    ]  # fmt: skip
    assert report.row().endswith("| s3express |")


def test_the_kit_on_moto() -> None:
    with mock_aws():
        client = boto3.client("s3", region_name="us-east-1")
        client.create_bucket(Bucket="kit-bucket")
        client.put_bucket_versioning(
            Bucket="kit-bucket", VersioningConfiguration={"Status": "Enabled"}
        )
        report = _kit("s3://kit-bucket/p")
        assert report.cleaned
        found = {p.name: p.passed for p in report.probes}
        assert found["create-only"] and found["stale etag"] and found["listing order"]
        assert found["any delimiter"]


def test_doctor_conformance_prints_a_row_and_fails_a_profile_the_endpoint_belies(
    seaweedfs: servers.S3Server, directory_bucket: str
) -> None:
    prefix = f"kit-{uuid.uuid4().hex[:6]}"
    url = seaweedfs.url(prefix, servers.UNVERSIONED_BUCKET, endpoint=directory_bucket)
    shown = cli("doctor", "--conformance", "--json", url=url + "&provider=s3express")
    document = json.loads(shown.stdout)
    jsonschema.Draft202012Validator(_schema("doctor")).validate(document)
    assert document["ok"] and document["matches"] == ["s3express"] and document["missing"] == []
    wrong = cli("doctor", "--conformance", url=url + "&provider=aws", check=False)
    assert wrong.returncode == 1
    assert "the aws profile claims what this endpoint lacks" in wrong.stdout
    assert "ordered_listing" in wrong.stdout and "| s3express |" in wrong.stdout


def test_doctor_reports_the_profile_and_checks_a_directory_bucket(
    seaweedfs: servers.S3Server, directory_bucket: str
) -> None:
    prefix = f"doc-{uuid.uuid4().hex[:6]}"
    url = seaweedfs.url(prefix, servers.UNVERSIONED_BUCKET, endpoint=directory_bucket)
    report = json.loads(cli("doctor", "--json", url=url + "&provider=s3express").stdout)
    checks = {c["name"]: c for c in report["checks"]}
    assert report["ok"], report
    assert checks["provider"]["detail"].startswith("s3express: S3 Express One Zone")
    assert "without ordered listings" in checks["provider"]["detail"]
    assert checks["versioning"]["status"] == "warn"
    assert "not offered by s3express" in checks["versioning"]["detail"]
    assert checks["cleanup"]["status"] == "pass"  # the probe went, with no version listing


def test_gc_packing_and_export_work_on_a_directory_bucket_and_listings_cost_what_is_said(
    seaweedfs: servers.S3Server, directory_bucket: str, tmp_path: Any
) -> None:
    from datetime import timedelta

    from tests.meter import Meter

    prefix = f"dir-{uuid.uuid4().hex[:6]}"
    url = seaweedfs.url(prefix, servers.UNVERSIONED_BUCKET, endpoint=directory_bucket)
    # The log is written straight to the bucket behind the stand-in (appends through it
    # are the contract suite's): what is measured here is gc, packing and reading.
    with stashpoint.open(seaweedfs.url(prefix, servers.UNVERSIONED_BUCKET)) as writer:
        head = None
        for n in range(1100):  # 17 segments sealed, a pack's worth and more
            head = writer.logs.append("long", [{"n": n}], after=head, state={"n": n})
    with stashpoint.open(url + "&provider=s3express") as stash:
        report = stash.admin.collect_garbage(dry_run=False, pack=True, min_age=timedelta(0))
        assert report.packs == 1 and report.unreadable == []
    with stashpoint.open(url + "&provider=s3express") as fresh:  # a new process: no hint
        meter = Meter(fresh)
        assert fresh.logs.head("long").state == {"n": 1099}
        # The log's two pages of 1,100 entries (every page is read, its top taken from
        # all of them) and the segments' listing: 3, what an ordered bucket also sends
        # (its first page, the segments, then the entries after the last sealed version).
        assert meter.requests.get("ListKeys", 0) == 3
        assert [r["n"] for r in fresh.logs.records("long")] == list(range(1100))
    out = tmp_path / "dump.jsonl.zst"
    cli("export", "--prefix", "long", "--out", str(out), url=url + "&provider=s3express")
    import zstandard

    lines = zstandard.decompress(out.read_bytes(), max_output_size=1 << 26).splitlines()
    assert len(lines) == 1100
    from stashpoint.cli.export import WINDOW, log_lines

    with stashpoint.open(url + "&provider=s3express") as fresh:
        meter = Meter(fresh)
        exported = [line["version"] for line in log_lines(fresh.logs, "logs", "long", 1099)]
        assert exported == list(range(1100))
        # The log is listed once for all its windows (two pages of entries, the
        # segments): a listing per window grows with the square of the length on a
        # bucket that cannot start a listing after a key.
        assert 1100 // WINDOW >= 8 and meter.requests.get("ListKeys", 0) == 3, meter.requests


# -- issue 47: provider facts a purge and a lock depend on ------------------------------------


def test_retention_on_r2_is_refused_with_the_reason() -> None:
    with pytest.raises(stashpoint.ConfigurationError) as refused:
        stashpoint.open("s3://bucket/p?provider=r2&retention=sealed:GOVERNANCE:30&index=none")
    assert "bucket lock" in str(refused.value) and "Object Lock" in str(refused.value)


def test_a_purge_on_a_store_that_keeps_copies_says_what_it_did_not_reach(
    s3_moto_url: tuple[str, dict[str, Any]],
) -> None:
    url, options = s3_moto_url
    with stashpoint.open(f"{url}?index=none&provider=tigris", **options) as stash:
        stash.logs.append("t1", [{"text": "x"}], after=None)
        receipt = stash.admin.purge(log="t1")
        assert "snapshots" in receipt.beyond_reach
        assert stash.admin.purge_receipt(receipt.purge_id).beyond_reach == receipt.beyond_reach
    with stashpoint.open(f"{url}?index=none", **options) as stash:  # aws: replicas
        stash.logs.append("t2", [{"text": "x"}], after=None)
        assert "replication" in stash.admin.purge(log="t2").beyond_reach


def test_minio_s_profile_says_its_repository_is_archived() -> None:
    from stashpoint.stores.providers import PROVIDERS

    assert "archived" in PROVIDERS["minio"].description
    assert not PROVIDERS["r2"].object_lock and PROVIDERS["aws"].object_lock
