"""Client-side encryption on AWS KMS (moto in-process: S3 and KMS), the issue's must-show.

Every object in the bucket is ciphertext (a byte search of every version finds no payload);
`stashpoint decrypt` recovers one; after `purge --tenant T --shred` every load of that
tenant is a typed error and the other tenants load; KMS requests per 1,000 saves of one
tenant are counted.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint import Envelope
from stashpoint.encryption import MAGIC, Encryption, KeyRule, read_record
from stashpoint.errors import KeyShredded
from stashpoint.stores.objects import GetObject
from tests.purging import bodies, versions

SECRETS = {"acme": "acme-kms-secret-51c0", "globex": "globex-kms-secret-e7a2"}


@pytest.fixture
def kms_stash() -> Iterator[tuple[str, Any, Any, dict[str, str]]]:
    import boto3
    from moto import mock_aws

    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="enc-bucket")
        s3.put_bucket_versioning(Bucket="enc-bucket", VersioningConfiguration={"Status": "Enabled"})
        kms = boto3.client("kms", region_name="us-east-1")
        keys = {t: kms.create_key(Description=t)["KeyMetadata"]["Arn"] for t in SECRETS}
        keys["default"] = kms.create_key(Description="default")["KeyMetadata"]["KeyId"]
        kms.create_alias(AliasName="alias/stashpoint-default", TargetKeyId=keys["default"])
        yield f"s3://enc-bucket/p-{uuid.uuid4().hex[:8]}", s3, kms, keys


def _encryption(kms: Any, keys: dict[str, str]) -> Encryption:
    return Encryption(
        (
            KeyRule("acme", keys["acme"], prefix="acme-"),
            KeyRule("globex", keys["globex"], prefix="globex-"),
            KeyRule("default", "alias/stashpoint-default"),
        ),
        kms_client=kms,
    )


class _KmsCalls:
    """Counts the calls a boto3 KMS client sends."""

    def __init__(self, client: Any) -> None:
        self.calls: list[str] = []
        client.meta.events.register("before-call.kms.*", self._seen)

    def _seen(self, event_name: str, **_: Any) -> None:
        self.calls.append(event_name.rpartition(".")[2])


def test_an_encrypted_stash_on_kms_is_ciphertext_decryptable_and_shreddable(
    kms_stash: tuple[str, Any, Any, dict[str, str]],
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    url, _, kms, keys = kms_stash
    encryption = _encryption(kms, keys)
    counted = _KmsCalls(kms)
    with stashpoint.open(url, encryption=encryption) as stash:
        for tenant, secret in SECRETS.items():
            env = Envelope.initial(f"{tenant}-1", None, "demo", 1, {"secret": secret})
            stash.checkpoints.compare_and_swap(env, None)
            head = None
            for i in range(70):
                head = stash.logs.append(f"{tenant}-log", [{"m": f"{secret} {i}"}], after=head)
            run = stash.runs.create_run("etl", run_id=f"{tenant}-run")
            stash.runs.complete_attempt(
                stash.runs.record_attempt(run, "x", 1, {"big": secret * 4000}), {"ok": 1}
            )
    with stashpoint.open(url) as raw:  # no encryption: the bytes as stored
        stored = bodies(raw, versions(raw))
    assert counted.calls.count("GenerateDataKey") == 2  # one per tenant: a cached data key
    assert "Decrypt" not in counted.calls  # a writer reads its own data keys from memory
    assert len(stored) > 150
    for version, info in stored:
        if "/data-keys/" in f"/{version.key}":
            assert not info.body.startswith(MAGIC)
        else:
            assert info.body.startswith(MAGIC), version.key
        for secret in SECRETS.values():
            assert secret.encode() not in info.body, version.key

    from stashpoint.cli.app import main

    settings = tmp_path / "encryption.json"
    rules = [{"tenant": r.tenant, "prefix": r.prefix, "key": r.key} for r in encryption.rules]
    settings.write_text(json.dumps({"rules": rules, "kms_region_name": "us-east-1"}))
    capsys.readouterr()
    with pytest.raises(SystemExit) as done:
        main(["decrypt", "checkpoints/acme-1", "--url", f"{url}?encryption={settings}"])
    assert done.value.code == 0
    assert json.loads(capsys.readouterr().out)["payload"] == {"secret": SECRETS["acme"]}

    with stashpoint.open(url, encryption=_encryption(kms, keys)) as stash:  # a new process
        assert stash.checkpoints.load("acme-1").payload == {"secret": SECRETS["acme"]}
        receipt = stash.admin.purge(tenant="acme", shred=True, actor="dpo")
        assert receipt.verified and "deletion scheduled" in receipt.shredded[0]
        assert kms.describe_key(KeyId=keys["acme"])["KeyMetadata"]["KeyState"] == (
            "PendingDeletion"
        )
        for read in (
            lambda: stash.checkpoints.load("acme-1"),
            lambda: stash.logs.entries("acme-log"),
            lambda: stash.runs.load_run("acme-run"),
        ):
            with pytest.raises(KeyShredded) as error:
                read()
            assert SECRETS["acme"] not in str(error.value)
        assert stash.checkpoints.load("globex-1").payload == {"secret": SECRETS["globex"]}
        assert len(stash.logs.entries("globex-log")) == 70
        assert stash.runs.load_run("globex-run").attempts[0].output == {"ok": 1}
        with pytest.raises(KeyShredded):  # the shred's mark (and KMS) refuse new data keys
            stash.checkpoints.compare_and_swap(
                Envelope.initial("acme-2", None, "demo", 1, {}), None
            )


def test_kms_requests_per_thousand_saves_of_one_tenant(
    kms_stash: tuple[str, Any, Any, dict[str, str]],
) -> None:
    url, _, kms, keys = kms_stash
    counted = _KmsCalls(kms)
    with stashpoint.open(url, encryption=_encryption(kms, keys)) as stash:
        head = None
        for i in range(1000):
            head = stash.logs.append("acme-chat", [{"turn": i}], after=head)
    assert len(counted.calls) <= 2, counted.calls
    with stashpoint.open(url, encryption=_encryption(kms, keys)) as reader:
        assert len(reader.logs.entries("acme-chat")) == 1000
    assert counted.calls.count("Decrypt") == 1  # a new process unwraps the data key once


def test_rotation_on_kms_rewraps_under_the_rule_s_current_key(
    kms_stash: tuple[str, Any, Any, dict[str, str]],
) -> None:
    url, s3, kms, keys = kms_stash
    with stashpoint.open(url, encryption=_encryption(kms, keys)) as stash:
        stash.checkpoints.compare_and_swap(Envelope.initial("acme-1", None, "d", 1, {"a": 1}), None)
        before = s3.get_object(Bucket="enc-bucket", Key=f"{stash.layout.prefix}/checkpoints/acme-1")
    moved = dict(keys, acme=kms.create_key(Description="acme-2")["KeyMetadata"]["Arn"])
    with stashpoint.open(url, encryption=_encryption(kms, moved)) as stash:
        done = stash.admin.rotate_keys("acme")
        assert [(r.tenant, r.rewrapped) for r in done] == [("acme", 1)]
        after = s3.get_object(Bucket="enc-bucket", Key=f"{stash.layout.prefix}/checkpoints/acme-1")
        assert after["ETag"] == before["ETag"]  # the data object is not rewritten
    with stashpoint.open(url) as raw:  # the data key is wrapped under the new key alone
        (key,) = [v.key for v in versions(raw, "data-keys/acme/") if v.is_latest]
        record = read_record(raw.codec, raw.driver(GetObject(key)).body, key)
    assert record.master == moved["acme"]
    with stashpoint.open(url, encryption=_encryption(kms, moved)) as stash:
        assert stash.checkpoints.load("acme-1").payload == {"a": 1}


def test_a_shred_erases_a_tenant_whose_objects_object_lock_keeps() -> None:
    """A purge of a retained transcript is refused; the shred goes through and its objects,
    still kept by Object Lock, are unreadable; the other tenant reads on."""
    import boto3
    from moto import mock_aws

    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="locked-enc", ObjectLockEnabledForBucket=True)
        kms = boto3.client("kms", region_name="us-east-1")
        keys = {t: kms.create_key(Description=t)["KeyMetadata"]["Arn"] for t in SECRETS}
        keys["default"] = kms.create_key(Description="default")["KeyMetadata"]["KeyId"]
        kms.create_alias(AliasName="alias/stashpoint-default", TargetKeyId=keys["default"])
        url = "s3://locked-enc/p?index=none&retention=logs:GOVERNANCE:30"
        with stashpoint.open(url, encryption=_encryption(kms, keys)) as stash:
            for tenant, secret in SECRETS.items():
                head = None
                for i in range(3):
                    head = stash.logs.append(f"{tenant}-log", [f"{secret} {i}"], after=head)
            with pytest.raises(stashpoint.RetentionLocked):
                stash.admin.purge(log="acme-log")
            receipt = stash.admin.purge(tenant="acme", shred=True, actor="dpo")
            assert receipt.verified and receipt.shredded
            with pytest.raises(KeyShredded):
                stash.logs.entries("acme-log")
            assert len(stash.logs.entries("globex-log")) == 3
        with stashpoint.open(url) as raw:  # the locked objects are all still there
            kept = [v for v in versions(raw, "logs/acme-log/") if not v.is_delete_marker]
            assert len(kept) == 3
