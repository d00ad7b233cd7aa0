"""Stash URLs: where a stash lives, in one string.

local://PATH                              a folder (the embedded default)
memory://[NAME]                           in-process; a NAME is shared within the process
s3://BUCKET[/PREFIX][?index=dynamodb://TABLE]   S3 or any S3-compatible store
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, urlsplit

from stashpoint.errors import ConfigurationError, described

DEFAULT_URL = "local://./.stashpoint"
"""Where `stashpoint.open()` goes when neither a URL nor `STASHPOINT_URL` is given."""
ENV_VAR = "STASHPOINT_URL"
"""The environment variable naming the stash when no URL is given."""
SCHEMES = ("local", "memory", "s3")
"""The schemes `open` understands."""


@dataclass(frozen=True, slots=True)
class StashUrl:
    """A parsed stash URL."""

    scheme: str
    """`local`, `memory` or `s3`."""
    location: str
    """The folder (local), the name (memory) or the bucket (s3)."""
    prefix: str = ""
    """Key prefix inside the bucket (s3), without leading or trailing '/'."""
    params: dict[str, str] = field(default_factory=dict)
    """Query parameters, such as `index`."""


_USERINFO = re.compile(r"(?<=://)[^/@?#]*@")


def without_credentials(url: str) -> str:
    """Return a URL as output may show it: any `user:password@` replaced by `***@`."""
    return _USERINFO.sub("***@", url)


def shown(url: object) -> str:
    """Return a URL as errors may show it: quoted, without credentials (`user:password@`)."""
    return repr(without_credentials(url)) if isinstance(url, str) else described(url)


def resolve_url(url: str | None) -> str:
    """Return `url`, else `$STASHPOINT_URL`, else the embedded default."""
    return url or os.environ.get(ENV_VAR) or DEFAULT_URL


def parse_url(url: str) -> StashUrl:
    """Parse a stash URL; raise `ConfigurationError` naming what is wrong."""
    if not isinstance(url, str):
        raise ConfigurationError(f"a stash URL is a str, not {described(url)}")
    scheme, sep, rest = url.partition("://")
    if not sep:
        raise ConfigurationError(
            f"not a stash URL: {shown(url)}; use local://PATH, memory:// or s3://BUCKET/PREFIX"
        )
    scheme = scheme.lower()
    rest, _, query = rest.partition("?")
    params = dict(parse_qsl(query, keep_blank_values=True))
    if scheme == "local":
        if not rest:
            raise ConfigurationError("local:// needs a folder, e.g. local://./.stashpoint")
        return StashUrl("local", rest, params=params)
    if scheme == "memory":
        return StashUrl("memory", rest, params=params)
    if scheme == "s3":
        parts = urlsplit(f"s3://{rest}")
        bucket = parts.netloc
        if not bucket:
            raise ConfigurationError(f"s3 URL without a bucket: {shown(url)}")
        return StashUrl("s3", bucket, parts.path.strip("/"), params)
    raise ConfigurationError(
        f"unknown scheme {scheme!r} in {shown(url)}; known schemes: {', '.join(SCHEMES)}"
    )


STASH_OPTIONS = (
    "index", "encryption", "provider", "ttl_days", "blob_threshold", "nested_prefix",
)  # fmt: skip
"""URL options every kind of stash takes (its backend's own come beside them)."""
_SUGGESTIONS = {"table": "index=dynamodb://TABLE", "sqlite": "index=sqlite://PATH"}


def unknown_options(kind: str, unknown: set[str], accepted: set[str]) -> ConfigurationError:
    """Return the error for URL or `open` options a backend does not know.

    The accepted ones are listed, with the right spelling of a common wrong one (`table=`
    is `index=dynamodb://TABLE`).
    """
    hints = [
        f"{name}: use {_SUGGESTIONS[name]}" for name in sorted(unknown) if name in _SUGGESTIONS
    ]
    said = f"unknown {kind} options: {', '.join(sorted(unknown))}"
    if hints:
        said += f" ({'; '.join(hints)})"
    return ConfigurationError(f"{said}; accepted: {', '.join(sorted({*accepted, *STASH_OPTIONS}))}")
