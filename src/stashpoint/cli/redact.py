"""Keeping secrets out of what the command line prints: redaction of payload fields."""

from __future__ import annotations

from typing import Any

DEFAULT_REDACT = (
    "api_key",
    "apikey",
    "authorization",
    "cookie",
    "credential",
    "password",
    "passwd",
    "private_key",
    "secret",
    "token",
)
"""Field names hidden by default: a key is redacted when its lower-cased name, with `-` read
as `_`, contains one of these (so `OPENAI_API_KEY`, `x-api-key`, `access_token` are too)."""

REDACTED = "[redacted]"
"""What a redacted value is shown as."""


def parse(option: str | None, *, defaults: bool) -> tuple[str, ...]:
    """Return the names to redact: the defaults (unless off) and a `--redact a,b` list."""
    extra = tuple(p.strip().lower().replace("-", "_") for p in (option or "").split(",") if p)
    return (DEFAULT_REDACT if defaults else ()) + tuple(p for p in extra if p)


def redact(value: Any, names: tuple[str, ...]) -> Any:
    """Return `value` with the values of matching keys replaced, at any depth."""
    if not names:
        return value
    if isinstance(value, dict):
        return {
            key: REDACTED if _secret(key, names) else redact(item, names)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [redact(item, names) for item in value]
    return value


def _secret(key: object, names: tuple[str, ...]) -> bool:
    text = str(key).lower().replace("-", "_")
    return any(name in text for name in names)
