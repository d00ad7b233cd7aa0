"""What a store without S3's extras answers: the memory and local-folder transports.

Neither has Object Lock, an archive tier, lifecycle rules, or a way to read `s3://`
sources; each request about them gets the same answer from both, said here once.
"""

from __future__ import annotations

from typing import Any

from stashpoint.errors import ConfigurationError
from stashpoint.stores.objects import (
    GetLifecycle,
    GetObjectLock,
    ListSource,
    ObjectRequest,
    ReadSource,
    RestoreObject,
    RestoreState,
    SetLegalHold,
)

__all__ = ["EXTRAS", "answer_without_extras"]

EXTRAS: tuple[type[Any], ...] = (
    SetLegalHold,
    RestoreObject,
    GetLifecycle,
    GetObjectLock,
    ListSource,
    ReadSource,
)
"""The requests `answer_without_extras` answers."""


def answer_without_extras(request: ObjectRequest, where: str) -> Any:
    """Answer a request about an extra this store lacks; `where` names the store in errors."""
    match request:
        case SetLegalHold():
            raise ConfigurationError(f"{where} has no Object Lock")
        case RestoreObject():
            return RestoreState.NOT_ARCHIVED  # no archive tier here
        case GetLifecycle() | GetObjectLock():
            return None  # no lifecycle, no Object Lock here
        case ListSource() | ReadSource():
            scheme = request.url.partition("://")[0]
            raise ConfigurationError(
                f"{where} cannot read {scheme}:// sources: open the stash on S3 to map "
                "over S3 objects",
                object_name=request.url,
            )
    raise TypeError(f"{where} cannot execute {request!r}")
