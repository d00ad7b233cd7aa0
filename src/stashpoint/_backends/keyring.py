"""A local keyring file: the master keys of the embedded default and of tests.

    {"format": "stashpoint.keyring/1",
     "keys": {"acme": [{"version": 1, "material": "<base64 of 32 bytes>", "created_at": ...}]},
     "shredded": {"globex": "2026-12-02T10:00:00+00:00"}}

A master key wraps data keys with AES-256-GCM (`cryptography`), the wrapped key binding the
data key's context (tenant and id) as authenticated data; a wrapped key is
`version (4 bytes) | nonce (12) | ciphertext`. A key is made on its first use; rotation
adds a version (older ones stay, to unwrap older data keys until they are re-wrapped); a
shred removes every version and keeps the name, so a shredded tenant's key is never made
again unnoticed. The file is written whole (a temporary file renamed over it, mode 0600)
under an exclusive lock, so processes of one machine sharing it never lose a key. A
keyring protects data at rest in a bucket or a copy of a folder; whoever reads the file
reads everything: keep it apart from the data (KMS is the production choice).
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from stashpoint.encryption import (
    GenerateDataKey,
    KeyRequest,
    NewDataKey,
    RewrapDataKey,
    RotateMasterKey,
    ShredMasterKey,
    UnwrapDataKey,
)
from stashpoint.errors import ConfigurationError, KeyShredded, Undecryptable

FORMAT = "stashpoint.keyring/1"
"""The `format` field of a keyring file."""


def _name(master: str) -> tuple[str, int | None]:
    """Return (key name, version or None) of `keyring:NAME` or `keyring:NAME#VERSION`."""
    if not master.startswith("keyring:"):
        raise ConfigurationError(f"{master!r} is no keyring key (keyring:NAME)")
    name, _, version = master.removeprefix("keyring:").partition("#")
    return name, (int(version) if version.isdigit() else None)


def _aad(context: Mapping[str, str]) -> bytes:
    return json.dumps(dict(context), sort_keys=True).encode()


class KeyringTransport:
    """Serves the key requests of `stashpoint.encryption` from a keyring file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        """The keyring file."""
        self._lock = threading.Lock()

    def execute(self, request: KeyRequest) -> Any:
        """Execute one key request."""
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        if isinstance(request, GenerateDataKey):
            name, _ = _name(request.master)
            version, material = self._newest(name, make=True)
            plaintext = AESGCM.generate_key(256)
            wrapped = self._wrap(version, material, plaintext, request.context)
            return NewDataKey(plaintext, wrapped, f"keyring:{name}#{version}")
        if isinstance(request, UnwrapDataKey):
            return self._unwrap(request.master, request.wrapped, request.context)
        if isinstance(request, RewrapDataKey):
            plaintext = self._unwrap(request.master, request.wrapped, request.context)
            name, _ = _name(request.to)
            version, material = self._newest(name, make=False)
            wrapped = self._wrap(version, material, plaintext, request.context)
            return wrapped, f"keyring:{name}#{version}"
        if isinstance(request, RotateMasterKey):
            name, _ = _name(request.master)
            with self._locked() as keys:
                if name in keys.get("shredded", {}):
                    raise KeyShredded(f"keyring key {name!r} was shredded", object_name=name)
                versions = keys.setdefault("keys", {}).setdefault(name, [])
                newest = max((v["version"] for v in versions), default=0) + 1
                versions.append(_fresh(newest))
            return f"keyring key {name!r}: version {newest} made"
        if isinstance(request, ShredMasterKey):
            name, _ = _name(request.master)
            with self._locked() as keys:
                removed = len(keys.get("keys", {}).pop(name, []))
                keys.setdefault("shredded", {})[name] = datetime.now(UTC).isoformat()
            return f"keyring key {name!r}: {removed} version(s) removed from {self.path.name}"
        raise TypeError(f"not a key request: {type(request).__name__}")

    def close(self) -> None:
        """Nothing to release: the file is opened per request."""

    def _wrap(
        self, version: int, material: bytes, plaintext: bytes, context: Mapping[str, str]
    ) -> bytes:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        nonce = os.urandom(12)
        sealed = AESGCM(material).encrypt(nonce, plaintext, _aad(context))
        return version.to_bytes(4, "big") + nonce + sealed

    def _unwrap(self, master: str, wrapped: bytes, context: Mapping[str, str]) -> bytes:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        name, _ = _name(master)
        keys = self._read()
        if name in keys.get("shredded", {}):
            raise KeyShredded(f"keyring key {name!r} was shredded", object_name=name)
        version = int.from_bytes(wrapped[:4], "big")
        material = next(
            (_material(v) for v in keys.get("keys", {}).get(name, []) if v["version"] == version),
            None,
        )
        if material is None:
            raise KeyShredded(
                f"keyring key {name!r} version {version} is not in the keyring "
                f"{self.path.name} (removed, or another keyring)",
                object_name=name,
            )
        try:
            return bytes(AESGCM(material).decrypt(wrapped[4:16], wrapped[16:], _aad(context)))
        except (InvalidTag, ValueError):
            raise Undecryptable(
                f"a data key does not unwrap under keyring key {name!r}", object_name=name
            ) from None

    def _newest(self, name: str, *, make: bool) -> tuple[int, bytes]:
        keys = self._read()
        if name in keys.get("shredded", {}):
            raise KeyShredded(
                f"keyring key {name!r} was shredded: nothing more is sealed with it",
                object_name=name,
            )
        versions = keys.get("keys", {}).get(name)
        if not versions:
            if not make:
                raise KeyShredded(f"keyring key {name!r} is not in the keyring", object_name=name)
            with self._locked() as current:
                if name in current.get("shredded", {}):
                    raise KeyShredded(f"keyring key {name!r} was shredded", object_name=name)
                versions = current.setdefault("keys", {}).setdefault(name, [])
                if not versions:
                    versions.append(_fresh(1))
        newest = max(versions, key=lambda v: int(v["version"]))
        return int(newest["version"]), _material(newest)

    def _read(self) -> dict[str, Any]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {"format": FORMAT, "keys": {}, "shredded": {}}
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read the keyring: {type(exc).__name__}", object_name=str(self.path)
            ) from None
        try:
            keys = json.loads(text)
        except ValueError:
            raise ConfigurationError(
                "the keyring is not JSON", object_name=str(self.path)
            ) from None
        if not isinstance(keys, dict) or keys.get("format") != FORMAT:
            raise ConfigurationError(
                f"the keyring is not a {FORMAT} file", object_name=str(self.path)
            )
        return keys

    @contextmanager
    def _locked(self) -> Iterator[dict[str, Any]]:
        """Read, let the caller change, and write the keyring back, under an exclusive lock."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        with self._lock, open(lock_path, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                keys = self._read()
                yield keys
                temporary = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
                descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(descriptor, "w") as out:
                    json.dump(keys, out, indent=1, sort_keys=True)
                    out.flush()
                    os.fsync(out.fileno())
                os.replace(temporary, self.path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _fresh(version: int) -> dict[str, Any]:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    material = AESGCM.generate_key(256)
    return {
        "version": version,
        "material": base64.b64encode(material).decode(),
        "created_at": datetime.now(UTC).isoformat(),
    }


def _material(version: Mapping[str, Any]) -> bytes:
    return base64.b64decode(str(version["material"]))
