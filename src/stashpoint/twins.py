"""One mechanism for every blocking/asyncio pair: define an operation once, get both.

An API is a class whose operations are decorated with `@operation`: each has its real
signature, defaults and docstring, and returns `Steps` (`stashpoint.steps`). The blocking
class and the asyncio class both inherit that one definition and differ only in their base:

    class _StoreApi:
        @operation
        def load(self, checkpoint_id: str) -> Steps[Envelope]:
            "Return the latest envelope."
            return self._cas.load(checkpoint_id)

    class Store(Blocking, _StoreApi): ...        # store.load(id) -> Envelope
    class AsyncStore(Awaiting, _StoreApi): ...   # await store.load(id) -> Envelope

`operation` is a descriptor: read through a `Blocking` instance it is a method that runs
the steps with `run_sync` and the instance's `driver`; through an `Awaiting` instance, a
coroutine method that runs them with `run_async`. Go-to-definition and `help()` land on
the one definition; mypy sees `(checkpoint_id: str) -> Envelope` on one class and
`(checkpoint_id: str) -> Coroutine[..., Envelope]` on the other. Since the pair shares
every operation, they cannot drift apart; `tests/test_twins.py` checks the rest.

`classoperation` does the same for an alternative constructor whose first argument is a
twin (its driver runs the steps), such as `CheckpointCursor.create(handle, state)`.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Coroutine
from types import MethodType
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from stashpoint import tracing
from stashpoint.steps import Steps, run_async, run_sync

P = ParamSpec("P")
T = TypeVar("T")
S = TypeVar("S")


class Blocking:
    """Base of every blocking twin: its operations run with `run_sync` and `driver`."""


class Awaiting:
    """Base of every asyncio twin: its operations are coroutines run with `run_async`."""


Executor = Callable[[Any, tuple[Any, ...]], Callable[[Any], Any]]
"""Given the bound first argument and the other arguments, return the `execute` to use."""


def _drivers(steps: Callable[..., Steps[Any]], executor: Executor) -> tuple[Any, Any]:
    """Return the blocking function and the coroutine function that run `steps`."""
    name = steps.__name__

    def blocking(first: Any, /, *args: Any, **kwargs: Any) -> Any:
        with tracing.operation(name, args, kwargs) as span:
            result = run_sync(steps(first, *args, **kwargs), executor(first, args))
            tracing.finished(span, result)
            return result

    async def awaiting(first: Any, /, *args: Any, **kwargs: Any) -> Any:
        with tracing.operation(name, args, kwargs) as span:
            result = await run_async(steps(first, *args, **kwargs), executor(first, args))
            tracing.finished(span, result)
            return result

    for function in (blocking, awaiting):
        _describe(function, steps)
    return blocking, awaiting


def _describe(method: Callable[..., Any], steps: Callable[..., Any]) -> None:
    """Give `method` the operation's name, docstring and signature (for help() and editors).

    The signature returns what the steps return (`Steps[Envelope]` becomes `Envelope`).
    """
    functools.update_wrapper(method, steps)
    signature = inspect.signature(steps)
    annotation = signature.return_annotation
    if isinstance(annotation, str) and annotation.startswith("Steps[") and annotation[-1] == "]":
        annotation = annotation.removeprefix("Steps[")[:-1]
    method.__signature__ = signature.replace(return_annotation=annotation)  # type: ignore[attr-defined]


class operation(Generic[S, P, T]):
    """Decorator: an API operation, blocking on `Blocking` twins and awaitable on `Awaiting`.

    Read through an instance that is neither (a plain instance of the API class: a typed
    steps view, such as `RunOperations.owner_view()`), it returns the steps themselves, so
    logic can `yield from` another object's operations under one driver, with the name
    and arguments checked by mypy. Operations are never looked up by a string name.
    """

    def __init__(self, steps: Callable[Concatenate[S, P], Steps[T]]) -> None:
        self.steps = steps
        """The operation's definition: returns the steps that do the work."""
        self._blocking, self._awaiting = _drivers(steps, lambda owner, args: owner.driver)
        self.__doc__ = steps.__doc__

    @overload
    def __get__(self, instance: None, owner: type[Any]) -> Callable[..., Any]: ...
    @overload
    def __get__(
        self, instance: Awaiting, owner: type[Any]
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...
    @overload
    def __get__(self, instance: Blocking, owner: type[Any]) -> Callable[P, T]: ...
    @overload
    def __get__(self, instance: S, owner: type[Any]) -> Callable[P, Steps[T]]: ...
    def __get__(self, instance: Any, owner: type[Any]) -> Any:
        if instance is None:
            if issubclass(owner, Awaiting):
                return self._awaiting
            return self._blocking if issubclass(owner, Blocking) else self.steps
        if isinstance(instance, Awaiting):
            return MethodType(self._awaiting, instance)
        if isinstance(instance, Blocking):
            return MethodType(self._blocking, instance)
        return MethodType(self.steps, instance)


class classoperation(Generic[P, T]):
    """Decorator: an alternative constructor whose first argument's driver runs its steps.

    The steps receive the class first (annotate it `cls: type[Any]`), then the arguments;
    the first argument must be a twin (its `driver` runs the requests).
    """

    def __init__(self, steps: Callable[Concatenate[type[Any], P], Steps[T]]) -> None:
        self.steps = steps
        """The constructor's definition: returns the steps that build the object."""
        self._blocking, self._awaiting = _drivers(steps, lambda owner, args: args[0].driver)
        self.__doc__ = steps.__doc__

    @overload
    def __get__(
        self, instance: object, owner: type[Awaiting]
    ) -> Callable[P, Coroutine[Any, Any, T]]: ...
    @overload
    def __get__(self, instance: object, owner: type[Blocking]) -> Callable[P, T]: ...
    def __get__(self, instance: Any, owner: type[Any]) -> Any:
        if issubclass(owner, Awaiting):
            return MethodType(self._awaiting, owner)
        return MethodType(self._blocking, owner)
