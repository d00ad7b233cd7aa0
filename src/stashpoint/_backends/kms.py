"""AWS KMS as the key service of client-side encryption (`stashpoint.encryption`).

`GenerateDataKey` (AES_256) makes a data key, `Decrypt` unwraps one, `ReEncrypt` re-wraps
one under another key without the plaintext leaving KMS, `EnableKeyRotation` /
`RotateKeyOnDemand` give a key new material, `ScheduleKeyDeletion` shreds. Each wrapped key
carries its encryption context (tenant, data-key id), which KMS checks and CloudTrail logs.
The client is made on the first request, from the standard AWS environment.
"""

from __future__ import annotations

import threading
from typing import Any

import botocore.exceptions

from stashpoint.encryption import (
    Encryption,
    GenerateDataKey,
    KeyRequest,
    NewDataKey,
    RewrapDataKey,
    RotateMasterKey,
    ShredMasterKey,
    UnwrapDataKey,
)
from stashpoint.errors import KeyShredded, KeyUnavailable, StorageUnavailable, Undecryptable

_SHREDDED = {"KMSInvalidStateException", "NotFoundException", "DisabledException"}
_REFUSED = {"AccessDeniedException", "InvalidGrantTokenException", "KeyUnavailableException"}
_WRONG = {"InvalidCiphertextException", "IncorrectKeyException"}


class KmsTransport:
    """Serves the key requests of `stashpoint.encryption` with AWS KMS."""

    def __init__(self, encryption: Encryption, session: Any = None) -> None:
        self.encryption = encryption
        """Where KMS is (endpoint, region, or a client of the caller's)."""
        self._session = session
        self._client: Any = encryption.kms_client
        self._lock = threading.Lock()

    @property
    def client(self) -> Any:
        """The KMS client, made on first use."""
        if self._client is None:
            with self._lock:
                if self._client is None:
                    import boto3

                    session = self._session or boto3.session.Session()
                    kwargs: dict[str, Any] = {}
                    if self.encryption.kms_endpoint_url:
                        kwargs["endpoint_url"] = self.encryption.kms_endpoint_url
                    if self.encryption.kms_region_name:
                        kwargs["region_name"] = self.encryption.kms_region_name
                    self._client = session.client("kms", **kwargs)
        return self._client

    def execute(self, request: KeyRequest) -> Any:
        """Execute one key request with KMS."""
        master = getattr(request, "master", "")
        try:
            return self._execute(request)
        except botocore.exceptions.ClientError as exc:
            code = str(exc.response.get("Error", {}).get("Code", ""))
            if code in _SHREDDED:
                raise KeyShredded(
                    f"KMS key is disabled, pending deletion or gone ({code})", object_name=master
                ) from None
            if code in _REFUSED:
                raise KeyUnavailable(
                    f"KMS refused the request ({code})", object_name=master
                ) from None
            if code in _WRONG:
                raise Undecryptable(
                    f"KMS cannot unwrap the data key with this key ({code})", object_name=master
                ) from None
            raise KeyUnavailable(f"KMS failed ({code or 'error'})", object_name=master) from None
        except botocore.exceptions.BotoCoreError as exc:
            raise StorageUnavailable(
                f"KMS could not be reached ({type(exc).__name__})", object_name=master
            ) from None

    def _execute(self, request: KeyRequest) -> Any:
        client = self.client
        if isinstance(request, GenerateDataKey):
            answer = client.generate_data_key(
                KeyId=request.master, KeySpec="AES_256", EncryptionContext=dict(request.context)
            )
            return NewDataKey(answer["Plaintext"], answer["CiphertextBlob"], answer["KeyId"])
        if isinstance(request, UnwrapDataKey):
            answer = client.decrypt(
                CiphertextBlob=request.wrapped,
                EncryptionContext=dict(request.context),
                KeyId=request.master,
            )
            return bytes(answer["Plaintext"])
        if isinstance(request, RewrapDataKey):
            answer = client.re_encrypt(
                CiphertextBlob=request.wrapped,
                SourceEncryptionContext=dict(request.context),
                SourceKeyId=request.master,
                DestinationKeyId=request.to,
                DestinationEncryptionContext=dict(request.context),
            )
            return bytes(answer["CiphertextBlob"]), str(answer["KeyId"])
        if isinstance(request, RotateMasterKey):
            client.enable_key_rotation(KeyId=_own(request.master))
            try:
                client.rotate_key_on_demand(KeyId=_own(request.master))
            except (botocore.exceptions.ClientError, AttributeError):
                return f"KMS key rotation enabled for {request.master} (yearly material)"
            return f"KMS key {request.master}: new key material now, rotation enabled"
        if isinstance(request, ShredMasterKey):
            answer = client.schedule_key_deletion(
                KeyId=_own(request.master), PendingWindowInDays=request.pending_days
            )
            when = answer.get("DeletionDate")
            shown = when.isoformat() if hasattr(when, "isoformat") else str(when)
            return f"KMS key {answer.get('KeyId', request.master)} deletion scheduled for {shown}"
        raise TypeError(f"not a key request: {type(request).__name__}")

    def close(self) -> None:
        """Nothing to release (the client's pool closes with it)."""


def _own(master: str) -> str:
    """Return a key ARN's key id (the calls that manage a key run in its own account).

    KMS takes either there; moto takes the id alone.
    """
    if master.startswith("arn:") and ":key/" in master:
        return master.rpartition(":key/")[2]
    return master
