"""Client-side encryption: the cost of a save, and KMS requests per 1,000 saves.

Measured in one run, interleaved round by round so that the machine's noise falls on both
sides alike:

1. **Encrypted save / plain save**, 1 KB and 100 KB checkpoints (`update` of one id:
   a GET-free compare-and-swap with a cached ETag), on the local folder and on SeaweedFS,
   the data key cached (the steady state: one data key per tenant per five minutes).
2. **KMS requests per 1,000 saves of one tenant** (moto KMS in-process, counted by the
   client's own event hook), and the reads of a new process.
3. **The primitive**: sealing a 1 KB / 100 KB body with `cryptography`'s AES-256-GCM (what
   stashpoint uses) against the AWS Encryption SDK's `encrypt` with a raw AES keyring and
   the same key (committed suite, key commitment, its own message format), when the SDK is
   installed (`pip install aws-encryption-sdk`); it is not a dependency.

    .venv/bin/python -m bench.encryption_bench --rounds 5 --saves 200
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import stashpoint
from stashpoint import Envelope
from stashpoint.encryption import Encryption, KeyRule


def _payload(size: int) -> dict[str, Any]:
    words = "the agent called the search tool with a query and read the result " * 4
    text = (words * (size // len(words) + 1))[:size]
    return {"text": text, "turn": 0}


def _saves(url: str, size: int, saves: int, **options: Any) -> float:
    """Seconds per save of `saves` updates of one checkpoint (after a warm-up save)."""
    payload = _payload(size)
    with stashpoint.open(url, **options) as stash:
        checkpoint_id = f"acme-{os.urandom(4).hex()}"
        stash.checkpoints.compare_and_swap(
            Envelope.initial(checkpoint_id, None, "bench", 1, payload), None
        )
        start = time.perf_counter()
        for turn in range(saves):
            stash.checkpoints.update(checkpoint_id, lambda e, t=turn: {**payload, "turn": t})
        return (time.perf_counter() - start) / saves


def _ratio(plain_url: str, sealed_url: str, encryption: Encryption, size: int,
           rounds: int, saves: int) -> dict[str, float]:  # fmt: skip
    plain: list[float] = []
    sealed: list[float] = []
    for _ in range(rounds):
        plain.append(_saves(plain_url, size, saves))
        sealed.append(_saves(sealed_url, size, saves, encryption=encryption))
    p, s = statistics.median(plain), statistics.median(sealed)
    return {"plain_ms": round(p * 1000, 3), "encrypted_ms": round(s * 1000, 3),
            "ratio": round(s / p, 3)}  # fmt: skip


def _kms_counts(saves: int) -> dict[str, Any]:
    import boto3
    from moto import mock_aws

    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="bench")
        kms = boto3.client("kms", region_name="us-east-1")
        key = kms.create_key()["KeyMetadata"]["Arn"]
        calls: list[str] = []
        kms.meta.events.register(
            "before-call.kms.*", lambda event_name, **_: calls.append(event_name.split(".")[-1])
        )
        encryption = Encryption((KeyRule("acme", key),), kms_client=kms)
        with stashpoint.open("s3://bench/p", encryption=encryption) as stash:
            head = None
            for turn in range(saves):
                head = stash.logs.append("acme-chat", [{"turn": turn}], after=head)
        written = list(calls)
        with stashpoint.open("s3://bench/p", encryption=encryption) as reader:
            assert len(reader.logs.entries("acme-chat")) == saves
        return {"saves": saves, "kms_requests_writing": len(written),
                "kms_requests_new_reader": len(calls) - len(written),
                "calls": sorted(set(calls))}  # fmt: skip


def _primitives(rounds: int) -> dict[str, Any]:
    """Microseconds (and bytes added) to seal one body: ours against the AWS Encryption SDK."""
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    key = AESGCM.generate_key(256)
    result: dict[str, Any] = {}
    try:
        import aws_encryption_sdk
        from aws_encryption_sdk.identifiers import (
            Algorithm,
            CommitmentPolicy,
            EncryptionKeyType,
            WrappingAlgorithm,
        )
        from aws_encryption_sdk.internal.crypto.wrapping_keys import WrappingKey
        from aws_encryption_sdk.key_providers.raw import RawMasterKey
    except ImportError:
        aws_encryption_sdk = None
        result["esdk"] = "not installed (pip install aws-encryption-sdk to compare)"
    for size in (1024, 100 * 1024):
        body = os.urandom(size)
        start = time.perf_counter()
        for _ in range(rounds):
            AESGCM(key).encrypt(os.urandom(12), body, b"header")
        result[f"cryptography_aesgcm_{size}_us"] = round(
            (time.perf_counter() - start) / rounds * 1e6, 1
        )
        if aws_encryption_sdk is None:
            continue
        client = aws_encryption_sdk.EncryptionSDKClient(
            commitment_policy=CommitmentPolicy.REQUIRE_ENCRYPT_REQUIRE_DECRYPT
        )
        master = RawMasterKey(
            provider_id="bench", key_id=b"k",
            wrapping_key=WrappingKey(
                wrapping_algorithm=WrappingAlgorithm.AES_256_GCM_IV12_TAG16_NO_PADDING,
                wrapping_key=key, wrapping_key_type=EncryptionKeyType.SYMMETRIC,
            ),
        )  # fmt: skip
        suites = {
            "esdk_default_signed": Algorithm.AES_256_GCM_HKDF_SHA512_COMMIT_KEY_ECDSA_P384,
            "esdk_committed_unsigned": Algorithm.AES_256_GCM_HKDF_SHA512_COMMIT_KEY,
        }
        for name, suite in suites.items():
            sealed, _ = client.encrypt(source=body, key_provider=master, algorithm=suite)
            start = time.perf_counter()
            for _ in range(max(1, rounds // 10)):
                client.encrypt(source=body, key_provider=master, algorithm=suite)
            result[f"{name}_{size}_us"] = round(
                (time.perf_counter() - start) / max(1, rounds // 10) * 1e6, 1
            )
            result[f"{name}_{size}_added_bytes"] = len(sealed) - size
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--saves", type=int, default=200)
    parser.add_argument("--no-seaweed", action="store_true")
    args = parser.parse_args()
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        encryption = Encryption(
            (KeyRule("acme", "keyring:acme", prefix="acme-"), KeyRule("default", "keyring:d")),
            keyring=str(root / "keyring.json"),
        )
        for size in (1024, 100 * 1024):
            results[f"local_{size // 1024}KB"] = _ratio(
                f"local://{root / 'plain'}", f"local://{root / 'encrypted'}", encryption, size,
                args.rounds, args.saves,
            )  # fmt: skip
        if not args.no_seaweed:
            from tests import servers

            os.environ.setdefault("AWS_ACCESS_KEY_ID", servers.ACCESS_KEY)
            os.environ.setdefault("AWS_SECRET_ACCESS_KEY", servers.SECRET_KEY)
            (root / "seaweed").mkdir()
            server = servers.start_seaweedfs(root / "seaweed")
            try:
                for size in (1024, 100 * 1024):
                    results[f"seaweedfs_{size // 1024}KB"] = _ratio(
                        server.url("bench-plain"), server.url("bench-encrypted"), encryption, size,
                        args.rounds, max(20, args.saves // 4),
                    )  # fmt: skip
            finally:
                servers.stop(server)
    results["kms"] = _kms_counts(1000)
    results["primitive"] = _primitives(2000)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
