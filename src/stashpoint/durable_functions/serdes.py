"""A `SerDes` for the SDK that keeps large values in the stash (on Lambda or anywhere).

Lambda's service holds at most 256 KB per operation. `StashSerDes` serialises a value with
the SDK's own serializer (the extended types by default); if the text is small it is the
checkpoint's payload as is, exactly what the SDK would have stored; if it is large it is
written to the stash under `durable-values/{owner}/{operation}/{sha256}` and the checkpoint
holds a small pointer (`{"$stashpoint_value": ..., "sha256": ..., "bytes": ...}`). As the
SDK's file-system SerDes does for S3 Files or EFS, but through the stash: the object is
created only if absent (If-None-Match) and judged by its content when one is found, named
by its hash (a retried step that computes another value writes another object; nothing
is ever overwritten), sealed with the tenant's key on an encrypted stash, and read back
checked against the hash the pointer names.

Values live as long as the executions that name them: `gc` cannot see pointers held by
Lambda's service, so it never collects these objects; `erase(arn)` deletes an execution's
values (every stored version), for retention or a person's erasure.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aws_durable_execution_sdk_python.constants import CHECKPOINT_SIZE_LIMIT_BYTES
from aws_durable_execution_sdk_python.serdes import EXTENDED_TYPES_SERDES, SerDes, SerDesContext

from stashpoint.errors import InvalidArgument, InvalidPayload, described
from stashpoint.steps import Steps, run_sync
from stashpoint.stores.layout import DURABLE_VALUES
from stashpoint.stores.named_values import NamedValues

if TYPE_CHECKING:
    from stashpoint.stash import Stash

POINTER_KEY = "$stashpoint_value"
"""The key that marks a checkpoint payload as a pointer to a value kept in the stash."""
VALUE_FORMAT = "stashpoint.durable-value"
"""The stored document's format (`zstd -d | jq` shows the ARN, operation and text)."""
DEFAULT_INLINE_LIMIT = CHECKPOINT_SIZE_LIMIT_BYTES - 1024
"""Serialised values up to this many bytes stay in the checkpoint (Lambda's 256 KB less
room for the operation around it)."""
_SAFE = re.compile(r"[A-Za-z0-9._-]{1,128}")


def default_owner(arn: str) -> str:
    """Return the id an execution's values are kept under: a hash of its ARN (no name leaks)."""
    return "x" + hashlib.blake2b(arn.encode(), digest_size=16).hexdigest()


class StashSerDes(SerDes[Any]):
    """The SDK's `SerDes`, keeping values larger than `inline_limit` bytes in `stash`.

    Pass it where the SDK takes a serdes (`StepConfig(serdes=...)`, `MapConfig`,
    `CallbackConfig`, ...). `serdes` turns values into text (the SDK's extended types by
    default); `owner(arn)` names the id an execution's values are kept under (encryption
    rules and `erase` match it; a hash of the ARN by default); `always` stores every value
    in the stash, however small.
    """

    def __init__(
        self,
        stash: Stash,
        *,
        inline_limit: int = DEFAULT_INLINE_LIMIT,
        serdes: SerDes[Any] = EXTENDED_TYPES_SERDES,
        owner: Callable[[str], str] = default_owner,
        always: bool = False,
    ) -> None:
        if type(inline_limit) is not int or inline_limit < 0:
            raise InvalidArgument(
                f"inline_limit must be an int >= 0, not {described(inline_limit)}"
            )
        self.stash = stash
        """The stash values are kept in."""
        self.inline_limit = inline_limit
        """Serialised values up to this many bytes stay in the checkpoint."""
        self.serdes = serdes
        """Turns values into text and back."""
        self.owner = owner
        """The id an execution's values are kept under, from its ARN."""
        self.always = always
        """Whether every value goes to the stash."""
        self._values = NamedValues(
            stash.layout,
            stash.codec,
            DURABLE_VALUES,
            VALUE_FORMAT,
            stash.retry,
        )

    # The SDK's interface.

    def serialize(self, value: Any, serdes_context: SerDesContext) -> str:
        """Return the checkpoint payload of `value`: its text, or a pointer to it."""
        text = self.serdes.serialize(value, serdes_context)
        raw = text.encode()
        if len(raw) <= self.inline_limit and not self.always and not _is_pointer(text):
            return text
        digest = hashlib.sha256(raw).hexdigest()
        key = self._key(serdes_context, digest)
        run_sync(self._store(key, digest, text, serdes_context), self.stash.driver)
        return json.dumps({POINTER_KEY: key, "sha256": digest, "bytes": len(raw)})

    def deserialize(self, data: str, serdes_context: SerDesContext) -> Any:
        """Return the value of a checkpoint payload (fetching it if it is a pointer)."""
        if _is_pointer(data):
            text = run_sync(self._fetch(json.loads(data)), self.stash.driver)
            return self.serdes.deserialize(text, serdes_context)
        return self.serdes.deserialize(data, serdes_context)

    # Retention and erasure.

    def erase(self, arn: str) -> int:
        """Delete every stored version of the values of the execution `arn`; return how many."""
        if not isinstance(arn, str) or not arn:
            raise InvalidArgument(f"arn must be a non-empty str, not {described(arn)}")
        erased: int = run_sync(self._erase(self._owner_of(arn)), self.stash.driver)
        return erased

    # Steps.

    def _key(self, context: SerDesContext, digest: str) -> str:
        operation = context.operation_id
        if not _SAFE.fullmatch(operation):
            operation = "h" + hashlib.blake2b(operation.encode(), digest_size=16).hexdigest()
        return f"{self._owner_of(context.durable_execution_arn)}/{operation}/{digest}"

    def _owner_of(self, arn: str) -> str:
        owner = self.owner(arn)
        if not isinstance(owner, str) or not _SAFE.fullmatch(owner):
            raise InvalidArgument(
                f"owner(arn) must return 1-128 characters of [A-Za-z0-9._-], not {described(owner)}"
            )
        return owner

    def _store(self, key: str, digest: str, text: str, context: SerDesContext) -> Steps[None]:
        document = {
            "arn": context.durable_execution_arn,
            "operation": context.operation_id,
            "text": text,
        }
        yield from self._values.store(key, document, _holding(digest), what="durable value")

    def _fetch(self, pointer: dict[str, Any]) -> Steps[str]:
        key, digest = pointer.get(POINTER_KEY), pointer.get("sha256")
        if not isinstance(key, str) or not isinstance(digest, str):
            raise InvalidPayload("a durable value pointer is malformed")
        document = yield from self._values.fetch(key, _holding(digest), what="durable value")
        text: str = document["text"]
        return text

    def _erase(self, owner: str) -> Steps[int]:
        return (yield from self._values.erase(f"{owner}/"))


def _holding(digest: str) -> Callable[[dict[str, Any]], bool]:
    """Judge a stored value by the hash of its text (its name's)."""

    def holds(document: dict[str, Any]) -> bool:
        text = document.get("text")
        return isinstance(text, str) and _digest(text) == digest

    return holds


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _is_pointer(text: str) -> bool:
    """Whether a payload is a pointer: a JSON object whose first key is ours.

    A value whose own text would look so is always stored in the stash, so a pointer
    is never a user's value.
    """
    if not text.startswith('{"' + POINTER_KEY + '"'):
        return False
    try:
        parsed = json.loads(text)
    except ValueError:
        return False
    return isinstance(parsed, dict) and POINTER_KEY in parsed
