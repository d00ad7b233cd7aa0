"""Keeping secrets out of what the command line prints: redaction of payload fields.

Two rules, applied to every value shown or exported:

- **By key**: a field whose name says it holds a secret has its value hidden. A name is
  split into words (`OPENAI_API_KEY`, `x-api-key`, `accessToken` -> `openai api key`,
  `x api key`, `access token`) and is secret when a word is (`password`, `passphrase`,
  `secret`, `credential(s)`, `cookie`, `authorization`, `dsn`, `jwt`, `bearer`, `apikey`)
  or when two are (`api key`, `private key`, `access key`, `session key`), or when it is
  `token` (singular): `access_token`, `id_token`; never `input_tokens`, `max_tokens` or
  `token_count`, which count.
- **By value**: a string that carries a credential inline has that part hidden:
  passwords in URLs (`https://user:pw@host`), `NAME=value` and `NAME: value` pairs whose
  name is secret (`AWS_SECRET_ACCESS_KEY=...`), bearer and basic authorization values,
  AWS access key ids, JSON Web Tokens and PEM private keys.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable
from typing import Any

SECRET_WORDS = frozenset(
    {
        "password", "passwd", "passphrase", "secret", "secrets", "credential", "credentials",
        "cookie", "cookies", "authorization", "dsn", "jwt", "bearer", "apikey", "privatekey",
        "token",
    }
)  # fmt: skip
"""Words that make a field name secret on their own (`token` only as the singular)."""
SECRET_PAIRS = frozenset({("api", "key"), ("private", "key"), ("access", "key"),
                          ("session", "key"), ("client", "secret"), ("auth", "token")})  # fmt: skip
"""Two consecutive words that make a field name secret."""
COUNTING = frozenset(
    {"count", "counts", "usage", "limit", "limits", "budget", "max", "min", "total", "input",
     "output", "prompt", "completion", "per", "num"}
)  # fmt: skip
"""Words that make `token` a count, not a credential (`token_count`, `max_token`)."""

DEFAULT_REDACT = tuple(sorted(SECRET_WORDS))
"""The secret words (kept for callers that listed the defaults)."""

REDACTED = "[redacted]"
"""What a redacted value is shown as."""

_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_INLINE = (
    # A password in a URL: keep the user, hide the password.
    (re.compile(r"(?P<keep>[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s:@]*:)[^/\s@]+(?=@)"), r"\g<keep>"),
    # NAME=value / NAME: value where NAME says secret (env files, headers, logs).
    (
        re.compile(
            r"(?P<keep>\b[A-Za-z0-9_.-]*(?:PASSWORD|PASSWD|PASSPHRASE|SECRET|TOKEN|API_?KEY|"
            r"ACCESS_?KEY|PRIVATE_?KEY|CREDENTIALS?|DSN|COOKIE)[A-Za-z0-9_.-]*"
            r"\s*[=:]\s*[\"']?)[^\s\"',;&]+",
            re.IGNORECASE,
        ),
        r"\g<keep>",
    ),
    (re.compile(r"(?P<keep>\b(?:Bearer|Basic|Token)\s+)[A-Za-z0-9._~+/=-]{8,}"), r"\g<keep>"),
    (re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), ""),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{5,}\.eyJ[A-Za-z0-9_-]{5,}\.[A-Za-z0-9_-]+"), ""),
    (
        re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S),
        "",
    ),
)


def parse(option: str | None, *, defaults: bool) -> tuple[str, ...]:
    """Return the extra names to redact from `--redact a,b` (the rules apply unless off).

    With `defaults` off (`--no-redact`), only the names given are hidden, by substring.
    """
    extra = tuple(p.strip().lower().replace("-", "_") for p in (option or "").split(",") if p)
    marker = ("*",) if defaults else ()
    return marker + tuple(p for p in extra if p)


def redact(value: Any, names: tuple[str, ...]) -> Any:
    """Return `value` with secret fields and inline credentials hidden, at any depth.

    `names`: from `parse`; `*` among them turns the built-in rules on.
    """
    if not names:
        return value
    rules = "*" in names
    extra = tuple(n for n in names if n != "*")
    return _redact(value, rules, extra)


def _redact(value: Any, rules: bool, extra: tuple[str, ...]) -> Any:
    if isinstance(value, dict):
        return {
            key: REDACTED if secret_key(key, rules, extra) else _redact(item, rules, extra)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [_redact(item, rules, extra) for item in value]
    if isinstance(value, str) and rules:
        return redact_text(value)
    return value


def secret_key(key: object, rules: bool = True, extra: tuple[str, ...] = ()) -> bool:
    """Whether a field name says its value is a secret."""
    text = str(key)
    lowered = text.lower().replace("-", "_")
    if any(name in lowered for name in extra):
        return True
    if not rules:
        return False
    words = [w.lower() for w in _WORDS.findall(text)]
    for word in words:
        if word == "token":
            if not COUNTING.intersection(words):
                return True
        elif word in SECRET_WORDS:
            return True
    return any(pair in SECRET_PAIRS for pair in itertools.pairwise(words))


def redact_text(text: str) -> str:
    """Return `text` with inline credentials (URL passwords, secret pairs, keys) hidden."""
    for pattern, keep in _INLINE:
        text = pattern.sub(_hidden(keep), text)
    return text


def _hidden(keep: str) -> Callable[[re.Match[str]], str]:
    """Return a replacement that keeps the `keep` template and hides the rest."""

    def replace(match: re.Match[str]) -> str:
        return match.expand(keep) + REDACTED

    return replace
