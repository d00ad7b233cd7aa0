"""AWS Lambda durable functions, anywhere: the stash as `@durable_execution`'s service.

Install with `pip install 'stashpoint[lambda-durable]'`.

- `DurableFunctions` (`runner`): register handlers, start executions, run invocations on
  any compute, complete callbacks, read executions and their history.
- `DurableService` (`service`): the checkpoint service itself (plain dicts in Lambda's
  wire shapes), kept in one stash log per execution (`executions`), with the service's
  rules in `operations` (free of I/O).
- `StashClient` (`client`): the SDK's `DurableServiceClient` over the service.
- `StashSerDes` (`serdes`): the SDK's `SerDes`, keeping values too large for a checkpoint
  in the stash (on Lambda as anywhere).

The SDK is imported only by `client`, `runner` and `serdes`, so `import stashpoint` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from stashpoint.durable_functions.client import StashClient
    from stashpoint.durable_functions.runner import DurableFunctions
    from stashpoint.durable_functions.serdes import StashSerDes
    from stashpoint.durable_functions.service import DurableService

__all__ = ["DurableFunctions", "DurableService", "StashClient", "StashSerDes"]

_HOMES = {
    "DurableFunctions": "stashpoint.durable_functions.runner",
    "DurableService": "stashpoint.durable_functions.service",
    "StashClient": "stashpoint.durable_functions.client",
    "StashSerDes": "stashpoint.durable_functions.serdes",
}


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'stashpoint.durable_functions' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(home), name)
