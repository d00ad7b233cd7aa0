"""Client-side envelope encryption of every stored object, one data key per tenant.

Encryption sits between the codec and the transport, once for every object kind: the
stash's object transport is wrapped (`stashpoint._backends.encrypting`) so that every
`PutObject` body is sealed and every `GetObject` body opened, whatever wrote or reads it
(envelopes, log entries, sealed segments, blobs, LangGraph values, run heads, markers,
receipts). This module is the logic, free of I/O: the frame, the key rules, the data-key
cache and the steps that make, find, re-wrap and shred data keys; the key services
(AWS KMS, a local keyring file) are transports of their own.

**The frame** (self-describing, so that it can be read in ten years without this library):

    b"SPE1" | header length (4 bytes, big-endian) | header (UTF-8 JSON) | AES-256-GCM ciphertext

The header names the format (`stashpoint.encrypted/1`), the algorithm, the tenant, the data
key (an object of its own under `data-keys/{tenant}/{id}`, holding the data key wrapped by
the tenant's master key), the 96-bit nonce, the object's key under the stash prefix and its
kind (namespace). The first `8 + header length` bytes are the additional authenticated data:
changing any header byte, or moving the object to another key, fails authentication. The
plaintext is the object as it would be stored without encryption (a zstd frame of JSON).

**Data keys** are made by the key service (`GenerateDataKey`), stored wrapped under
`data-keys/` before any object sealed with them is written, and reused for at most
`Encryption.max_age` and `Encryption.max_uses` objects: about one KMS request per tenant
per five minutes per process, however many saves. Readers unwrap a data key once and keep
it (the one bounded cache). **Rotation** re-wraps the data-key objects under the tenant's
current master key: no data object is rewritten. **Shredding** removes every version of a
tenant's data-key objects and retires its master key (KMS `ScheduleKeyDeletion`, or the
keyring entry): every object of the tenant is then unreadable (`KeyShredded`), locked or not.
"""

from __future__ import annotations

import base64
import json
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

from stashpoint.cache import Lru
from stashpoint.codec import SEALED_MAGIC, Codec
from stashpoint.errors import (
    CheckpointConflict,
    ConfigurationError,
    KeyShredded,
    StashpointError,
    Undecryptable,
    described,
)
from stashpoint.ids import thread_id_of
from stashpoint.retry import DEFAULT_RETRY, RetryPolicy
from stashpoint.steps import NewId, Now, Request, Steps, ask
from stashpoint.stores import writes
from stashpoint.stores.layout import (
    BLOBS,
    DATA_KEYS,
    LANGGRAPH,
    LANGGRAPH_VALUES,
    NAMESPACES,
    PROJECTION,
    QUARANTINE,
    SEALED,
    Layout,
)
from stashpoint.stores.objects import (
    Create,
    GetObject,
    Match,
    ObjectInfo,
    PutObject,
    StoredVersion,
    every_version,
)

MAGIC = SEALED_MAGIC
"""The first four bytes of every encrypted object (never the start of a zstd frame)."""
FRAME_FORMAT = "stashpoint.encrypted/1"
"""The `format` field of an encrypted object's header."""
ALGORITHM = "AES-256-GCM"
"""The one algorithm this version writes (and reads)."""
DATA_KEY_FORMAT = "stashpoint.data-key"
"""The format name of a data-key object (`data-keys/{tenant}/{id}`)."""
_MAX_HEADER = 16 * 1024
_NONCE_BYTES = 12
_KEY_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TENANT_PATTERN = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
"""What a tenant's name may be (it appears in keys: `data-keys/{tenant}/`, blob names)."""


@dataclass(frozen=True, slots=True)
class KeyRule:
    """Which master key protects which ids: the first rule that matches an object wins."""

    tenant: str
    """The tenant's name (`[a-z0-9][a-z0-9_-]{0,62}`): data keys live under it, and
    `purge --tenant NAME --shred` shreds it."""
    key: str
    """The master key: `keyring:NAME` (a key of the local keyring file), or a KMS key id,
    ARN or `alias/...`."""
    prefix: str = ""
    """The ids it covers: those that start with it (`""`: every id)."""
    namespaces: tuple[str, ...] = ()
    """The namespaces it covers (empty: every one), e.g. `("agents", "conversations")`."""

    def __post_init__(self) -> None:
        if not isinstance(self.tenant, str) or not TENANT_PATTERN.fullmatch(self.tenant):
            raise ConfigurationError(
                f"a key rule's tenant must match [a-z0-9][a-z0-9_-]{{0,62}}, not "
                f"{described(self.tenant)}"
            )
        if not isinstance(self.key, str) or not self.key.strip():
            raise ConfigurationError(f"the key of tenant {self.tenant!r} must be a key id")
        if not isinstance(self.prefix, str):
            raise ConfigurationError(f"the prefix of tenant {self.tenant!r} must be a str")
        unknown = [n for n in self.namespaces if n not in NAMESPACES]
        if unknown:
            raise ConfigurationError(
                f"tenant {self.tenant!r} names unknown namespaces: {', '.join(unknown)}"
            )

    @property
    def local(self) -> bool:
        """Whether its master key is in the local keyring file (else in AWS KMS)."""
        return self.key.startswith("keyring:")

    def covers(self, namespace: str, object_id: str) -> bool:
        """Whether an object of `object_id` in `namespace` is this rule's."""
        if self.namespaces and namespace not in self.namespaces:
            return False
        return object_id.startswith(self.prefix)

    @property
    def catch_all(self) -> bool:
        """Whether it covers every object (what the other rules leave)."""
        return not self.prefix and not self.namespaces


@dataclass(frozen=True)
class Encryption:
    """Client-side encryption settings of a stash (`stashpoint.open(..., encryption=...)`).

    `rules` are tried in order; the last must cover every object (no prefix, no
    namespaces): receipts, probes and ids no tenant claims use it.
    """

    rules: tuple[KeyRule, ...]
    """The key rules, first match wins; the last covers everything."""
    keyring: str | None = None
    """The local keyring file (`keyring:NAME` keys); made, mode 0600, on first use."""
    max_age: timedelta = timedelta(minutes=5)
    """Longest time a process seals objects with one data key before asking for a new one."""
    max_uses: int = 1_000_000
    """Most objects one data key seals (far below AES-GCM's 2^32 random-nonce bound)."""
    shred_check: timedelta = timedelta(minutes=1)
    """Longest time a process seals or opens objects with a tenant's keys held in memory
    before it reads the tenant's shred mark again: a process opened before a shred gets
    `KeyShredded` within this bound (one GET per tenant per bound)."""
    allow_plaintext: bool = False
    """Read objects stored in plain (written before encryption was turned on); by default
    a plain object in an encrypted stash is refused (`Undecryptable`)."""
    kms_endpoint_url: str | None = None
    """KMS endpoint (default: the AWS environment's, `AWS_ENDPOINT_URL_KMS`)."""
    kms_region_name: str | None = None
    """KMS region (default: the AWS environment's)."""
    kms_client: Any = field(default=None, compare=False)
    """A boto3 KMS client to use (tests: moto); made from the environment when None."""

    def __post_init__(self) -> None:
        rules = _checked_rules(self.rules)
        object.__setattr__(self, "rules", rules)
        if any(r.local for r in rules) and not self.keyring:
            raise ConfigurationError("keyring: keys need Encryption(keyring=PATH)")
        _check_bounds(self.max_age, self.max_uses, self.shred_check)

    @classmethod
    def local(cls, keyring: str | Path, *tenants: tuple[str, str]) -> Encryption:
        """Encrypt with a local keyring file, for the embedded default and tests.

        One key per `(tenant, id prefix)`, then a catch-all tenant `default`.
        """
        rules = [KeyRule(t, f"keyring:{t}", prefix=p) for t, p in tenants]
        rules.append(KeyRule("default", "keyring:default"))
        return cls(tuple(rules), keyring=str(keyring))

    @classmethod
    def from_file(cls, path: str | Path) -> Encryption:
        """Read settings from a JSON file (the `?encryption=PATH` URL option, the CLI).

        For example `{"rules": [{"tenant": "acme", "prefix": "acme-", "key":
        "alias/acme"}, {"tenant": "default", "key": "alias/stashpoint"}], "keyring":
        "keyring.json", "max_age_seconds": 300}` (a relative keyring is the file's sibling).
        """
        where = Path(path).expanduser()
        try:
            document = json.loads(where.read_text())
        except (OSError, ValueError) as exc:
            raise ConfigurationError(
                f"cannot read encryption settings: {type(exc).__name__}", object_name=str(where)
            ) from None
        if not isinstance(document, dict) or not isinstance(document.get("rules"), list):
            raise ConfigurationError(
                "encryption settings must be an object with a list of rules",
                object_name=str(where),
            )
        try:
            rules = tuple(
                KeyRule(
                    r["tenant"],
                    r["key"],
                    prefix=r.get("prefix", ""),
                    namespaces=tuple(r.get("namespaces", ())),
                )
                for r in document["rules"]
            )
        except (KeyError, TypeError):
            raise ConfigurationError(
                "each rule needs a tenant and a key", object_name=str(where)
            ) from None
        keyring = document.get("keyring")
        if keyring is not None:
            keyring = str((where.parent / str(keyring)).expanduser())
        age = document.get("max_age_seconds", 300)
        if not isinstance(age, int | float) or isinstance(age, bool):
            raise ConfigurationError("max_age_seconds must be a number", object_name=str(where))
        return cls(
            rules,
            keyring=keyring,
            max_age=timedelta(seconds=age),
            max_uses=document.get("max_uses", 1_000_000),
            allow_plaintext=bool(document.get("allow_plaintext", False)),
            kms_endpoint_url=document.get("kms_endpoint_url"),
            kms_region_name=document.get("kms_region_name"),
        )

    def tenant(self, name: str) -> KeyRule:
        """Return the rule of tenant `name`; `ConfigurationError` if there is none."""
        for rule in self.rules:
            if rule.tenant == name:
                return rule
        raise ConfigurationError(f"no key rule names tenant {name!r}", object_name=name)

    def rule_for(self, namespace: str, object_id: str) -> KeyRule:
        """Return the rule that covers an object of `object_id` in `namespace`."""
        for rule in self.rules:
            if rule.covers(namespace, object_id):
                return rule
        return self.rules[-1]  # unreachable: the last rule covers everything


# Requests to the key service (served by `_backends.kms` or `_backends.keyring`).


class KeyRequest(Request[Any]):
    """Base of the requests the key service executes (not object storage)."""

    __slots__ = ()

    for_keys: ClassVar[bool] = True
    """Served by the key service."""


@dataclass(frozen=True, slots=True)
class NewDataKey:
    """A data key fresh from the key service."""

    plaintext: bytes = field(repr=False)
    """The 32-byte AES key (never stored, never logged)."""
    wrapped: bytes
    """The same key encrypted by the master key."""
    master: str
    """The master key that wrapped it, as the service names it (a KMS key ARN)."""


@dataclass(frozen=True, slots=True)
class GenerateDataKey(KeyRequest):
    """Request: a new 256-bit data key, wrapped under `master` with `context`."""

    master: str
    """The master key (a rule's `key`)."""
    context: Mapping[str, str]
    """Bound to the wrapped key (KMS encryption context): tenant and data-key id."""


@dataclass(frozen=True, slots=True)
class UnwrapDataKey(KeyRequest):
    """Request: the plaintext of a wrapped data key (bytes)."""

    master: str
    """The master key that wrapped it."""
    wrapped: bytes
    """The wrapped key."""
    context: Mapping[str, str]
    """The context it was wrapped with."""


@dataclass(frozen=True, slots=True)
class RewrapDataKey(KeyRequest):
    """Request: the same data key wrapped under `to` (result: `(wrapped, master)`)."""

    master: str
    """The master key that wrapped it."""
    wrapped: bytes
    """The wrapped key."""
    context: Mapping[str, str]
    """The context it was wrapped with (kept)."""
    to: str
    """The master key to wrap it under now (for a keyring key: its newest version)."""


@dataclass(frozen=True, slots=True)
class RotateMasterKey(KeyRequest):
    """Request: give `master` new key material (keyring: a new version; KMS: rotate now).

    Result: a line saying what was done.
    """

    master: str
    """The master key."""


@dataclass(frozen=True, slots=True)
class ShredMasterKey(KeyRequest):
    """Request: retire `master` for good (result: a line saying what was done).

    KMS: `ScheduleKeyDeletion` after `pending_days` (7-30; the key is disabled at once);
    keyring: the key is removed from the file and its name refused from then on.
    """

    master: str
    """The master key."""
    pending_days: int = 7
    """KMS only: the waiting period before deletion."""


# The frame.


def is_sealed(body: bytes | None) -> bool:
    """Whether stored bytes are an encrypted object."""
    return body is not None and body[:4] == MAGIC


def _checked_rules(given: object) -> tuple[KeyRule, ...]:
    """Return the key rules as a tuple: one per tenant, the last a catch-all."""
    rules = tuple(given) if isinstance(given, list | tuple) else None
    if not rules or not all(isinstance(r, KeyRule) for r in rules):
        raise ConfigurationError("encryption needs a non-empty list of KeyRule")
    if not rules[-1].catch_all:
        raise ConfigurationError(
            "the last key rule must cover every object (no prefix, no namespaces): "
            "receipts, probes and ids no tenant claims are sealed with it"
        )
    names = [r.tenant for r in rules]
    if len(set(names)) != len(names):
        raise ConfigurationError("each tenant may have one key rule")
    return rules


def _check_bounds(max_age: object, max_uses: object, shred_check: object) -> None:
    """Refuse a data key's age or use bound, or a shred check period, out of range."""
    if not isinstance(max_age, timedelta) or max_age <= timedelta(0):
        raise ConfigurationError("max_age must be a positive timedelta")
    if type(max_uses) is not int or not 1 <= max_uses <= 1 << 32:
        raise ConfigurationError("max_uses must be an int from 1 to 2**32")
    if not isinstance(shred_check, timedelta) or shred_check <= timedelta(0):
        raise ConfigurationError("shred_check must be a positive timedelta")


def read_header(data: bytes, name: str) -> tuple[dict[str, Any], bytes, bytes]:
    """Return `(header, authenticated bytes, ciphertext)` of a frame, checked for shape.

    `Undecryptable` (naming `name`) for anything that is no frame this version reads.
    """
    if not is_sealed(data) or len(data) < 8:
        raise Undecryptable("not an encrypted object", object_name=name)
    length = int.from_bytes(data[4:8], "big")
    if length > _MAX_HEADER or len(data) < 8 + length:
        raise Undecryptable("damaged encryption header (length)", object_name=name)
    try:
        header = json.loads(data[8 : 8 + length])
    except (ValueError, UnicodeDecodeError):
        raise Undecryptable("damaged encryption header (not JSON)", object_name=name) from None
    if not isinstance(header, dict):
        raise Undecryptable("damaged encryption header", object_name=name)
    if header.get("format") != FRAME_FORMAT:
        raise Undecryptable(
            f"unknown encryption format {str(header.get('format'))[:40]!r}: upgrade "
            "stashpoint to read it",
            object_name=name,
        )
    if header.get("alg") != ALGORITHM:
        raise Undecryptable(f"unknown algorithm {str(header.get('alg'))[:40]!r}", object_name=name)
    for field_name in ("tenant", "data_key", "nonce", "object", "kind"):
        if not isinstance(header.get(field_name), str):
            raise Undecryptable(f"encryption header lacks {field_name}", object_name=name)
    # Checked before they name an object to read: a planted header cannot point elsewhere.
    if not TENANT_PATTERN.fullmatch(header["tenant"]) or not _KEY_ID.fullmatch(header["data_key"]):
        raise Undecryptable("damaged encryption header (tenant or data key)", object_name=name)
    return header, data[: 8 + length], data[8 + length :]


def _aesgcm(key: bytes) -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:  # pragma: no cover - the extra is missing
        raise ConfigurationError(
            "encryption needs the cryptography package: pip install 'stashpoint[encryption]'"
        ) from None
    return AESGCM(key)


def seal(plaintext: bytes, key: bytes, header: Mapping[str, str]) -> bytes:
    """Return the frame of `plaintext` sealed with `key` under `header` (plus a nonce)."""
    nonce = os.urandom(_NONCE_BYTES)
    text = json.dumps(
        {**header, "nonce": base64.b64encode(nonce).decode()}, sort_keys=True
    ).encode()
    authenticated = MAGIC + len(text).to_bytes(4, "big") + text
    return authenticated + bytes(_aesgcm(key).encrypt(nonce, plaintext, authenticated))


def open_frame(data: bytes, key: bytes, name: str) -> bytes:
    """Return the plaintext of a frame; `Undecryptable` if it fails authentication."""
    header, authenticated, ciphertext = read_header(data, name)
    try:
        nonce = base64.b64decode(header["nonce"], validate=True)
    except ValueError:
        raise Undecryptable("damaged encryption header (nonce)", object_name=name) from None
    from cryptography.exceptions import InvalidTag

    try:
        return bytes(_aesgcm(key).decrypt(nonce, ciphertext, authenticated))
    except (InvalidTag, ValueError):
        raise Undecryptable(
            "failed authentication: tampered, or not sealed with the key its header names",
            object_name=name,
        ) from None


# Where an object belongs.


@dataclass(frozen=True, slots=True)
class Located:
    """An object key seen by the encryption: what it is and whose key seals it."""

    relative: str
    """The key under the stash prefix (bound into the frame)."""
    kind: str
    """Its namespace (`sealed/agents` for a sealed segment of agent logs)."""
    tenant: str | None
    """The tenant whose key seals it; None: stored as is (data keys, outside the stash)."""


def locate(layout: Layout, encryption: Encryption, key: str) -> Located:
    """Return what `key` is, and which tenant's key seals it."""
    prefix = f"{layout.prefix}/" if layout.prefix else ""
    if not key.startswith(prefix):
        return Located(key, "", None)
    relative = key[len(prefix) :]
    namespace, _, rest = relative.partition("/")
    if namespace == DATA_KEYS:
        return Located(relative, namespace, None)
    kind, object_id = _owner(namespace, rest)
    if namespace == BLOBS and "~" in rest:
        return Located(relative, kind, rest.rpartition("~")[2])
    ruled = kind.split("/")[-1]
    settings = NAMESPACES.get(ruled)
    if settings is not None and settings.derived_from is not None:
        # A derived head (a store catalog) is its source's, by the id prefix they share.
        ruled = settings.derived_from
    return Located(relative, kind, encryption.rule_for(ruled, object_id).tenant)


def _owner(namespace: str, rest: str) -> tuple[str, str]:
    """Return (kind, id) of an object `{namespace}/{rest}`: the id the rules match."""
    if namespace in (SEALED, PROJECTION):
        # A sealed segment, or the archive's projection of a log: its log's tenant's.
        inner, _, rest = rest.partition("/")
        return f"{namespace}/{inner}", _id_of(inner, rest)
    if namespace == QUARANTINE:
        original = rest.rpartition(".")[0]  # `{key}.{etag}`: the key it was moved from
        inner, _, inner_rest = original.partition("/")
        return namespace, _owner(inner, inner_rest)[1]
    return namespace, _id_of(namespace, rest)


def _id_of(namespace: str, rest: str) -> str:
    object_id = rest.partition("/")[0]
    if namespace in (LANGGRAPH, LANGGRAPH_VALUES):
        return thread_id_of(object_id) or object_id
    return object_id


# Data keys.


@dataclass(frozen=True, slots=True)
class Rotation:
    """What a key rotation did for one tenant (`Admin.rotate_keys`)."""

    tenant: str
    """The tenant."""
    master: str
    """What the key service did with its master key."""
    rewrapped: int
    """Data keys re-wrapped under the new key material (no data object rewritten)."""


@dataclass(frozen=True, slots=True)
class DataKey:
    """A tenant's data key, as a writer holds it."""

    tenant: str
    """Whose it is."""
    key_id: str
    """Its object's name under `data-keys/{tenant}/`."""
    plaintext: bytes = field(repr=False)
    """The AES key."""
    made: datetime
    """When this process made it (its age bounds its use)."""
    uses: int = 0
    """Objects sealed with it so far."""


@dataclass(frozen=True, slots=True)
class DataKeyRecord:
    """What a data-key object holds: the wrapped key and who wrapped it (no secret)."""

    tenant: str
    """Whose data key it is."""
    key_id: str
    """Its id."""
    master: str
    """The master key that wrapped it (KMS ARN, or `keyring:NAME#VERSION`)."""
    wrapped: bytes
    """The data key wrapped by `master`."""
    created_at: str
    """When it was made (ISO 8601)."""

    @property
    def context(self) -> dict[str, str]:
        """The context it is wrapped with (KMS encryption context)."""
        return context_of(self.tenant, self.key_id)


def context_of(tenant: str, key_id: str) -> dict[str, str]:
    """Return the key-service context of a data key: its tenant and id."""
    return {"stashpoint:tenant": tenant, "stashpoint:data-key": key_id}


class Sealer:
    """Seals and opens stored objects, as steps: the logic of the encrypting transport."""

    def __init__(
        self,
        encryption: Encryption,
        layout: Layout,
        codec: Codec,
        retry: RetryPolicy = DEFAULT_RETRY,
    ) -> None:
        self.encryption = encryption
        """The rules and bounds."""
        self.layout = layout
        """Where objects and data keys live."""
        self.codec = codec
        """Encodes data-key objects."""
        self.retry = retry
        """Bounds the resends of a data-key object."""
        self._current: Lru[str, DataKey] = Lru(1024)
        self._known: Lru[str, bytes] = Lru(4096)
        self._checked: Lru[str, datetime] = Lru(1024)  # by tenant: its shred mark read then
        self._making = threading.Lock()

    def data_key_object(self, tenant: str, key_id: str) -> str:
        """Return the object key of a data key."""
        return self.layout.key(DATA_KEYS, f"{tenant}/{key_id}")

    def shred_mark(self, tenant: str) -> str:
        """Return the key of the mark a shred leaves: no process makes a data key after it."""
        return self.layout.key(DATA_KEYS, f"{tenant}.shredded")

    def sealing(self, request: PutObject) -> Steps[PutObject]:
        """Return `request` with its body sealed (unchanged for data keys)."""
        where = locate(self.layout, self.encryption, request.key)
        if where.tenant is None:
            return request
        data_key = yield from self._data_key(where.tenant)
        header = _header(where, where.tenant, data_key.key_id)
        return replace(request, body=seal(request.body, data_key.plaintext, header))

    def overhead(self, key: str) -> int:
        """Return the most bytes sealing adds to an object stored under `key` (its frame)."""
        where = locate(self.layout, self.encryption, key)
        if where.tenant is None:
            return 0
        # The header `seal` writes, with ids and nonce of their fixed lengths (a UUID, the
        # base64 of 12 bytes), plus the tag.
        header = {**_header(where, where.tenant, "0" * 36), "nonce": "0" * 16}
        return len(MAGIC) + 4 + len(json.dumps(header, sort_keys=True).encode()) + 16

    def opening(self, key: str, info: ObjectInfo | None) -> Steps[ObjectInfo | None]:
        """Return `info` with its body opened; `Undecryptable` (typed) when it cannot be."""
        if info is None or info.body is None:
            return info
        where = locate(self.layout, self.encryption, key)
        if where.tenant is None:
            return info
        if not is_sealed(info.body):
            if self.encryption.allow_plaintext:
                return info
            raise Undecryptable(
                "stored in plain where this stash encrypts every object (open with "
                "allow_plaintext to read objects written before encryption)",
                object_name=key,
            )
        header, _, _ = read_header(info.body, key)
        if header["object"] != where.relative:
            raise Undecryptable(
                "sealed for another key: the object was moved or copied here",
                object_name=key,
            )
        if header["tenant"] != where.tenant:
            # The rules say whose key seals an object; one sealed with another tenant's key
            # (planted, or copied in) would outlive the rightful tenant's shred.
            raise Undecryptable(
                f"sealed with tenant {header['tenant']!r}'s key where the key rules assign "
                f"tenant {where.tenant!r}",
                object_name=key,
            )
        plaintext_key = yield from self._unwrapped(header["tenant"], header["data_key"], key)
        return replace(info, body=open_frame(info.body, plaintext_key, key))

    def heading(self, key: str, info: ObjectInfo | None) -> Steps[ObjectInfo | None]:
        """Return a HEAD's answer: its body opened when it carries one that opens.

        A HEAD asks for metadata: a body that cannot be opened (a shredded tenant's, a
        damaged one) is dropped rather than failing the HEAD; a GET of it says why.
        """
        try:
            return (yield from self.opening(key, info))
        except StashpointError:
            return None if info is None else replace(info, body=None)

    def _data_key(self, tenant: str) -> Steps[DataKey]:
        """Return the tenant's current data key, counted as used once; made when due."""
        now = yield from ask(Now())
        bound = self.encryption

        def use(current: DataKey | None) -> DataKey | None:
            if current is None or current.uses >= bound.max_uses:
                return None
            if now - current.made >= bound.max_age or now < current.made:
                return None
            return replace(current, uses=current.uses + 1)

        current = self._current.update(tenant, use)
        if current is not None:
            yield from self._still_live(tenant, now)
            return current
        made = yield from self._make(tenant, now)
        self._current.put(tenant, replace(made, uses=1))
        return made

    def _make(self, tenant: str, now: datetime) -> Steps[DataKey]:
        """Make a data key and store it wrapped before any object is sealed with it."""
        rule = self.encryption.tenant(tenant)
        mark = yield from ask(GetObject(self.shred_mark(tenant)))
        if mark is not None:
            raise KeyShredded(
                f"tenant {tenant!r} was shredded: nothing more is sealed for it",
                object_name=tenant,
            )
        self._checked.put(tenant, now)
        key_id = yield from ask(NewId())
        fresh = yield from ask(GenerateDataKey(rule.key, context_of(tenant, key_id)))
        record = DataKeyRecord(tenant, key_id, fresh.master, fresh.wrapped, now.isoformat())
        yield from self._store(record, Create())
        self._known.put(f"{tenant}/{key_id}", fresh.plaintext)
        return DataKey(tenant, key_id, fresh.plaintext, now)

    def _store(self, record: DataKeyRecord, condition: Create | Match) -> Steps[None]:
        key = self.data_key_object(record.tenant, record.key_id)
        body = yield from self.codec.document_encoding(_record_document(record), name=key)
        if isinstance(condition, Match):
            judged = condition.etag

            def rewrapped(tracker: writes.WriteTracker) -> Steps[writes.Verdict]:
                found = yield from ask(GetObject(key, None, self.codec.limits.max_compressed_bytes))
                if found is not None and found.etag == judged:
                    return writes.NotLanded()  # still the one judged: the same write again
                try:
                    now = None if found is None else read_record(self.codec, found.body or b"", key)
                except StashpointError:
                    now = None
                if now is not None and now.wrapped == record.wrapped:
                    return writes.Landed(found.etag if found is not None else None)
                return writes.Refused(
                    CheckpointConflict(
                        key,
                        expected_revision=None,
                        message="the data key changed while it was re-wrapped: run the "
                        "rotation again",
                    )
                )

            yield from writes.put(
                PutObject(key, body, condition), rewrapped, self.retry, what="data key re-wrap"
            )
            return

        def judge(existing: ObjectInfo) -> Steps[writes.Found]:
            try:
                found = read_record(self.codec, existing.body or b"", key)
            except StashpointError:
                return writes.Found.OTHER
            return writes.Found.OURS if found.wrapped == record.wrapped else writes.Found.OTHER
            yield  # a generator, like every judge

        yield from writes.create_named(
            PutObject(key, body, condition),
            judge,
            self.retry,
            what="data key",
            limit=self.codec.limits.max_compressed_bytes,
            refresh=False,
        )

    def _unwrapped(self, tenant: str, key_id: str, name: str) -> Steps[bytes]:
        """Return a data key's plaintext: known, or read and unwrapped (then known)."""
        now = yield from ask(Now())
        known = self._known.get(f"{tenant}/{key_id}")
        if known is not None:
            yield from self._still_live(tenant, now)
            return known
        record = yield from self.record(tenant, key_id, name)
        try:
            plaintext: bytes = yield from ask(
                UnwrapDataKey(record.master, record.wrapped, record.context)
            )
        except Undecryptable as exc:  # named after the object read, not the key
            raise type(exc)(f"{exc.message} (key {exc.object_name})", object_name=name) from None
        self._known.put(f"{tenant}/{key_id}", plaintext)
        if self._checked.get(tenant) is None:
            self._checked.put(tenant, now)  # the key read and unwrapped just now
        return plaintext

    def _still_live(self, tenant: str, now: datetime) -> Steps[None]:
        """Raise `KeyShredded` if the tenant was shredded; read at most once per bound.

        A key held in memory outlives the objects a shred erases: this is what bounds how
        long a process opened before a shred keeps using it (`Encryption.shred_check`).
        """
        checked = self._checked.get(tenant)
        if checked is not None and checked <= now < checked + self.encryption.shred_check:
            return
        mark = yield from ask(GetObject(self.shred_mark(tenant)))
        if mark is not None:
            self.forget(tenant)
            raise KeyShredded(
                f"tenant {tenant!r} was shredded: its keys are no longer used",
                object_name=tenant,
            )
        self._checked.put(tenant, now)

    def record(self, tenant: str, key_id: str, name: str) -> Steps[DataKeyRecord]:
        """Read a data-key object; `KeyShredded` if it is gone."""
        key = self.data_key_object(tenant, key_id)
        info = yield from ask(GetObject(key, None, self.codec.limits.max_compressed_bytes))
        if info is None or info.body is None:
            raise KeyShredded(
                f"its data key {tenant}/{key_id} is gone: tenant {tenant!r} was shredded "
                "(or its data keys removed)",
                object_name=name,
            )
        record = read_record(self.codec, info.body, key)
        if record.tenant != tenant or record.key_id != key_id:
            raise Undecryptable("its data-key object names another key", object_name=name)
        return record

    def records(self, tenant: str) -> Steps[list[tuple[str, DataKeyRecord, str]]]:
        """Return `(object key, record, etag)` of every data key of `tenant`."""
        prefix = self.layout.key(DATA_KEYS, f"{tenant}/")
        found: list[tuple[str, DataKeyRecord, str]] = []
        for version in (yield from every_version(prefix)):
            if not version.is_latest or version.is_delete_marker:
                continue
            info = yield from ask(GetObject(version.key))
            if info is None or info.body is None:
                continue
            found.append((version.key, read_record(self.codec, info.body, version.key), info.etag))
        return found

    def rotating(self, tenant: str) -> Steps[tuple[str, int]]:
        """Give the tenant's master key new material, re-wrap every data key under it.

        Returns (what the key service did, data keys re-wrapped). No data object is
        rewritten: each holds the id of its data key, whose object alone changes.
        """
        rule = self.encryption.tenant(tenant)
        done: str = yield from ask(RotateMasterKey(rule.key))
        rewrapped = 0
        for _key, record, etag in (yield from self.records(tenant)):
            wrapped, master = yield from ask(
                RewrapDataKey(record.master, record.wrapped, record.context, rule.key)
            )
            if master == record.master and wrapped == record.wrapped:
                continue
            yield from self._store(replace(record, wrapped=wrapped, master=master), Match(etag))
            rewrapped += 1
        self._current.pop(tenant)  # new objects get a data key under the new material
        return done, rewrapped

    def data_key_versions(self, tenant: str) -> Steps[list[StoredVersion]]:
        """Every stored version (and delete marker) under the tenant's data keys."""
        return (yield from every_version(self.layout.key(DATA_KEYS, f"{tenant}/")))

    def decrypting(self, body: bytes, key: str | None) -> Steps[bytes]:
        """Return the plaintext of a frame read from `key` (default: the key it names)."""
        if key is None:
            header, _, _ = read_header(body, "the object")
            key = (
                self.layout.prefix + "/" + header["object"]
                if self.layout.prefix
                else header["object"]
            )
        opened = yield from self.opening(key, ObjectInfo(etag="", body=body))
        return b"" if opened is None or opened.body is None else opened.body

    def forget(self, tenant: str) -> None:
        """Drop what this process holds of a tenant's data keys (after a shred)."""
        self._current.pop(tenant)
        self._checked.pop(tenant)
        # Unwrapped keys are found by `{tenant}/{id}`: an Lru cannot list them, so the
        # shredded tenant's entries are dropped by clearing the whole map (rare).
        self._known = Lru(self._known.capacity)


def _header(where: Located, tenant: str, key_id: str) -> dict[str, str]:
    """Return the header of an object's frame, without its nonce (`seal` adds it)."""
    return {
        "format": FRAME_FORMAT,
        "alg": ALGORITHM,
        "tenant": tenant,
        "data_key": key_id,
        "object": where.relative,
        "kind": where.kind,
    }


def _record_document(record: DataKeyRecord) -> dict[str, Any]:
    return {
        "format": f"{DATA_KEY_FORMAT}/1",
        "tenant": record.tenant,
        "key_id": record.key_id,
        "master": record.master,
        "algorithm": ALGORITHM,
        "wrapped": base64.b64encode(record.wrapped).decode(),
        "created_at": record.created_at,
    }


def read_record(codec: Codec, body: bytes, name: str) -> DataKeyRecord:
    """Return what a data-key object holds; `Undecryptable`/`InvalidPayload` if damaged."""
    document = codec.parse_document(
        codec.unwrap(body, name=name), name=name, format_name=DATA_KEY_FORMAT, format_version=1
    )
    try:
        return DataKeyRecord(
            str(document["tenant"]),
            str(document["key_id"]),
            str(document["master"]),
            base64.b64decode(document["wrapped"], validate=True),
            str(document.get("created_at", "")),
        )
    except (KeyError, TypeError, ValueError):
        raise Undecryptable("damaged data-key object", object_name=name) from None
