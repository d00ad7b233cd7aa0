"""Receipt seals: a purge's plan is obeyed only when the erasing identity wrote it.

`gc` (and `stashpoint purge --resume`) carry on open purges from their receipts under
`purges/`, and sweep what lands beside a finished purge's ids. A worker may write objects
there (the shipped `WorkerPolicy` may PutObject anywhere under the stash's prefix), so a
receipt alone proves nothing: a planted one would turn the operator's `gc`, which may delete
object versions, into an eraser of any id (a confused deputy). So a purge seals its plan
(its id, actor, start, selector, targets, `reusable` and retention cutoff) with an HMAC
under the **erasure key**, a secret only the erasing identity holds, and maintenance obeys
a receipt only if its seal verifies under the key it was given:

- **An erasure key is set** (`Options.erasure_key`, or the `STASHPOINT_ERASURE_KEY`
  environment variable: at least 32 characters, or `file:PATH` naming a file that holds
  them): receipts are sealed; a receipt whose seal does not verify (planted, tampered,
  unsealed) is never obeyed, by `gc` or by an explicit resume, and `gc` reports it.
- **A local folder or `memory://` stash** with no key set uses a key of its own (a 0600
  file under the folder's `.locks/`, or one per process for `memory://`): there is no IAM
  there, whoever may write the folder may read it, but a receipt copied from elsewhere is
  still refused.
- **No key at all** (S3 without one): receipts are unsealed; `gc` obeys none of them (it
  reports open ones and sweeps no leftovers), and only an explicit resume by the operator
  (`resume_purges`, `stashpoint purge --resume`) carries one on. `stashpoint doctor` says
  so.

The HMAC is the standard library's (`hmac`, SHA-256); the key never leaves the process and
never appears in a receipt, an error or a log. A resumed receipt never shreds a tenant's
keys without the operator confirming it (`resume_purges(confirm_shred=True)`), whatever
its seal.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import secrets
import threading
from pathlib import Path
from typing import Any

from stashpoint.errors import ConfigurationError

ENVIRONMENT = "STASHPOINT_ERASURE_KEY"
"""The environment variable an erasure key is read from when no option names one."""
MIN_LENGTH = 32
"""Shortest erasure key accepted (bytes, or characters of the variable or file)."""
_SCHEME = "hmac-sha256:1:"
"""How a seal starts: the algorithm and the version of what is sealed."""
SEALED_FIELDS = ("purge_id", "actor", "started_at", "selector", "targets", "reusable", "cutoff")
"""The fields of a receipt's plan its seal covers (what a purge is asked to erase)."""

_process_keys: dict[str, bytes] = {}
_process_keys_lock = threading.Lock()


def resolve(option: bytes | str | None) -> bytes | None:
    """Return the erasure key an option (else the environment) names; None: none is set.

    `option`: the key's bytes, a string of at least `MIN_LENGTH` characters, or
    `file:PATH`. `ConfigurationError` for a key too short or a file that cannot be read
    (the message names the file, never the key).
    """
    if option is None:
        option = os.environ.get(ENVIRONMENT) or None
    if option is None:
        return None
    key = _key_bytes(option)
    if len(key) < MIN_LENGTH:
        raise ConfigurationError(f"an erasure key has at least {MIN_LENGTH} bytes")
    return key


def _key_bytes(option: object) -> bytes:
    """Return the bytes an erasure key option holds (a file's, for `file:PATH`)."""
    if isinstance(option, str) and option.startswith("file:"):
        path = Path(option.removeprefix("file:")).expanduser()
        try:
            return path.read_bytes().strip()
        except OSError as exc:
            raise ConfigurationError(
                f"cannot read the erasure key file {path}: {exc.strerror or exc}"
            ) from None
    if isinstance(option, str):
        return option.encode()
    if isinstance(option, bytes):
        return option
    raise ConfigurationError("erasure_key must be bytes, a str, or 'file:PATH'")


def folder_key(root: Path) -> bytes | None:
    """Return a local folder stash's own erasure key, made (0600) on first use.

    None where it can be neither read nor made (a read-only folder): receipts are then
    unsealed, as on a stash with no key.
    """
    path = root / ".locks" / ".erasure-key"
    try:
        key = path.read_bytes()
        if len(key) >= MIN_LENGTH:
            return key
    except FileNotFoundError:
        pass
    except OSError:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        try:  # another process made it first: theirs is the key
            key = path.read_bytes()
        except OSError:
            return None
        return key if len(key) >= MIN_LENGTH else None
    except OSError:
        return None
    key = secrets.token_bytes(32)
    with os.fdopen(descriptor, "wb") as file:
        file.write(key)
        file.flush()
        os.fsync(file.fileno())
    return key


def process_key(name: str) -> bytes:
    """Return the erasure key of the `memory://` stash `name`, made once per process."""
    with _process_keys_lock:
        return _process_keys.setdefault(name, secrets.token_bytes(32))


def seal(key: bytes, state: dict[str, Any]) -> str:
    """Return the seal of a receipt's plan (`SEALED_FIELDS` of its state)."""
    digest = hmac.new(key, _plan_bytes(state), hashlib.sha256).hexdigest()
    return _SCHEME + digest


def verifies(key: bytes | None, state: dict[str, Any]) -> bool:
    """Whether a receipt's state carries a seal of its plan under `key`."""
    given = state.get("seal")
    if key is None or not isinstance(given, str):
        return False
    return hmac.compare_digest(given, seal(key, state))


def _plan_bytes(state: dict[str, Any]) -> bytes:
    plan = {name: state.get(name) for name in SEALED_FIELDS}
    return json.dumps(plan, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()
