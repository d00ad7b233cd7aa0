"""Callback tokens: event deliveries another system can make without knowing the run.

`DurableRun.callback(name)` makes a token naming the run, the event and a random secret,
and records it as step `callback:{name}`; `RunStore.redeem(token, payload)` reads the
token, checks the run recorded that very token (so a guessed or altered one is refused),
and signals the event with an id derived from the token, so redeeming twice is one
signal. Pure functions, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
from typing import Any

from stashpoint.errors import InvalidArgument

TOKEN_PREFIX = "spcb1."
"""How every callback token starts (format version 1)."""

_SECRET_BYTES = 16
"""Random bytes in a token: 128 bits, beyond guessing."""


def step_name(name: str) -> str:
    """Return the step that records the token of event `name`."""
    return f"callback:{name}"


def new_token(run_id: str, name: str) -> str:
    """Return a new token for event `name` of run `run_id`."""
    secret = base64.urlsafe_b64encode(secrets.token_bytes(_SECRET_BYTES)).decode().rstrip("=")
    body = json.dumps({"r": run_id, "n": name, "s": secret}, separators=(",", ":"))
    return TOKEN_PREFIX + base64.urlsafe_b64encode(body.encode()).decode().rstrip("=")


def parse_token(token: object) -> tuple[str, str]:
    """Return the run id and event name a token names; `InvalidArgument` if it is none."""
    if not isinstance(token, str) or not token.startswith(TOKEN_PREFIX) or len(token) > 2048:
        raise InvalidArgument("not a stashpoint callback token")
    raw = token[len(TOKEN_PREFIX) :]
    try:
        fields: Any = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
    except (binascii.Error, ValueError):
        raise InvalidArgument("not a stashpoint callback token (malformed)") from None
    if not isinstance(fields, dict) or not all(
        isinstance(fields.get(k), str) for k in ("r", "n", "s")
    ):
        raise InvalidArgument("not a stashpoint callback token (fields)")
    return fields["r"], fields["n"]


def same_token(recorded: object, token: str) -> bool:
    """Whether `recorded` (a step's output) holds exactly `token` (compared in constant time)."""
    held = recorded.get("token") if isinstance(recorded, dict) else None
    return isinstance(held, str) and hmac.compare_digest(held.encode(), token.encode())


def signal_id_of(token: str) -> str:
    """Return the signal id of redeeming `token`: the same for every redemption."""
    return "cb-" + hashlib.sha256(token.encode()).hexdigest()[:32]
