"""Every blocking/asyncio pair is made from one definition and stays identical.

The pairs are found, not listed: every `Blocking` twin in the package must have an
`Awaiting` twin named `Async{name}` (and the reverse), with the same public names, the same
parameters and docstrings, coroutines on the asyncio side and plain methods on the other
(async generators and generators for iterators).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from typing import Any

import pytest

import stashpoint
from stashpoint.twins import Awaiting, Blocking


def _all_classes() -> dict[str, type[Any]]:
    found: dict[str, type[Any]] = {}
    for info in pkgutil.walk_packages(stashpoint.__path__, "stashpoint."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == info.name:
                found[value.__name__] = value
    return found


CLASSES = _all_classes()
BLOCKING = sorted(n for n, c in CLASSES.items() if issubclass(c, Blocking) and c is not Blocking)
AWAITING = sorted(n for n, c in CLASSES.items() if issubclass(c, Awaiting) and c is not Awaiting)


def test_every_twin_has_its_pair() -> None:
    assert {f"Async{n}" for n in BLOCKING} == set(AWAITING)
    # The public pairs the README promises are among them.
    assert {"Store", "RunStore", "Stash", "AgentCheckpoint", "CheckpointCursor",
            "AgentRunner", "ConversationStore"} <= set(BLOCKING)  # fmt: skip


def _public(cls: type[Any]) -> dict[str, Any]:
    return {
        name: inspect.getattr_static(cls, name) for name in dir(cls) if not name.startswith("_")
    }


@pytest.mark.parametrize("name", BLOCKING)
def test_pair_has_the_same_methods_parameters_and_docstrings(name: str) -> None:
    blocking, awaiting = CLASSES[name], CLASSES[f"Async{name}"]
    sync_members, async_members = _public(blocking), _public(awaiting)
    assert sync_members.keys() == async_members.keys()
    for member in sync_members:
        sync_attr, async_attr = getattr(blocking, member), getattr(awaiting, member)
        if isinstance(sync_members[member], property | type(stashpoint.Stash.runs)):
            assert inspect.getdoc(sync_members[member]) == inspect.getdoc(async_members[member])
            continue
        if not callable(sync_attr):
            continue
        assert inspect.getdoc(sync_attr), f"{name}.{member} has no docstring"
        assert inspect.getdoc(sync_attr) == inspect.getdoc(async_attr), member
        sync_sig, async_sig = inspect.signature(sync_attr), inspect.signature(async_attr)
        assert list(sync_sig.parameters.values()) == list(async_sig.parameters.values()), member
        is_async = inspect.iscoroutinefunction(async_attr)
        same_plain_helper = sync_attr is async_attr or (
            getattr(sync_attr, "__func__", None) is getattr(async_attr, "__func__", object())
        )
        if same_plain_helper:
            continue  # one pure function shared by both (new, existing, loaded, next)
        if inspect.isasyncgenfunction(async_attr):  # an iterator: a generator on the other side
            assert inspect.isgeneratorfunction(sync_attr), f"{name}.{member} is no generator"
            assert async_sig.return_annotation == f"Async{sync_sig.return_annotation}", member
            continue
        assert is_async, f"Async{name}.{member} is not a coroutine function"
        assert not inspect.iscoroutinefunction(sync_attr), f"{name}.{member} is a coroutine"
        assert sync_sig.return_annotation == async_sig.return_annotation, member


def test_operations_show_their_real_signature_in_help() -> None:
    signature = inspect.signature(stashpoint.Store.load)
    assert list(signature.parameters) == ["self", "checkpoint_id", "revision"]
    assert signature.return_annotation == "Envelope"
    assert "older `revision`" in (stashpoint.AsyncStore.load.__doc__ or "")
    assert inspect.iscoroutinefunction(stashpoint.AsyncStore.load)
