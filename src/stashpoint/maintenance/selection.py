"""What a purge (or a legal hold) takes: one id, or every id a prefix selects.

Arguments are checked before any request (`InvalidArgument`): exactly one id, or a prefix
of ids (no `/`, no `..`) within one namespace or all of them, optionally only ids last
written longer ago than `older_than`; an empty prefix needs `all_of_namespace`; a tenant
goes with `shred` alone. `chosen_ids` lists the ids a prefix selects (as steps, free of
I/O); `purge.Purger` runs what this returns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

from stashpoint.agent.conversation_log import conversation_key
from stashpoint.encryption import TENANT_PATTERN
from stashpoint.errors import InvalidArgument, StashpointError, described
from stashpoint.ids import thread_key, validate_id, validate_prefix
from stashpoint.maintenance.receipts import Target
from stashpoint.steps import Steps
from stashpoint.stores.layout import (
    AGENTS,
    CHECKPOINTS,
    CONVERSATIONS,
    DATA_KEYS,
    DURABLE_EXECUTIONS,
    DURABLE_VALUES,
    FLEET,
    LANGGRAPH,
    LANGGRAPH_STORE,
    LOGS,
    NAMESPACES,
    OPENAI_SESSIONS,
    RUN_LOGS,
    STRANDS_SESSIONS,
    STRANDS_STORAGE,
    TEMPORAL_PAYLOADS,
    Layout,
    Shape,
    derived_id,
    derived_namespaces,
)
from stashpoint.stores.objects import every_version

if TYPE_CHECKING:
    from stashpoint.logs.log import LogSteps
    from stashpoint.stores.cas import CompareAndSwap

NAMESPACE_NAMES = {
    "checkpoints": CHECKPOINTS,
    "agents": AGENTS,
    "conversations": CONVERSATIONS,
    "runs": RUN_LOGS,
    "run-logs": RUN_LOGS,
    "logs": LOGS,
    "langgraph": LANGGRAPH,
    "threads": LANGGRAPH,
    "langgraph-store": LANGGRAPH_STORE,
    "store": LANGGRAPH_STORE,
    "fleet": FLEET,
    "durable-executions": DURABLE_EXECUTIONS,
    "executions": DURABLE_EXECUTIONS,
    "openai-agents-sessions": OPENAI_SESSIONS,
    "sessions": OPENAI_SESSIONS,
    "strands-sessions": STRANDS_SESSIONS,
    "strands-storage": STRANDS_STORAGE,
    "temporal-payloads": TEMPORAL_PAYLOADS,
    "durable-values": DURABLE_VALUES,
}
"""The names a purge's `namespace` takes (the layout's, and the CLI's words for them)."""


@dataclass(frozen=True)
class Selection:
    """What one purge erases: ids named by the caller, or every id a prefix selects."""

    targets: tuple[Target, ...] = ()
    """Ids named one by one."""
    prefix: str | None = None
    """Every id starting with it (in `namespaces`), when ids are not named."""
    namespaces: tuple[str, ...] = ()
    """The namespaces a prefix is looked for in."""
    older_than: timedelta | None = None
    """Only ids last written longer ago than this."""
    asked: dict[str, Any] = field(default_factory=dict)
    """The arguments as given, for the receipt."""


class Selector(TypedDict, total=False):
    """What to purge (or hold): exactly one id, or a prefix of ids (`Admin.purge`)."""

    checkpoint: str
    """A checkpoint envelope's id."""
    agent: str
    """An agent checkpoint's id (its transcript log)."""
    run: str
    """A run's id (its log, index items and the blobs only it references)."""
    thread: str
    """A LangGraph thread's id (its log and large values)."""
    conversation: tuple[str, str]
    """A durable conversation's (namespace, conversation id)."""
    log: str
    """A log of `stash.logs`."""
    values: tuple[str, str]
    """An owner's values in a content namespace: (`temporal-payloads`, a workflow's owner
    from `stashpoint.temporal.workflow_owner`) or (`durable-values`, an execution's owner
    from `StashSerDes.owner`): every stored version under it."""
    prefix: str
    """Every id starting with it (no `/`, no `..`), in every namespace or `namespace`."""
    namespace: str
    """With `prefix` or `older_than`: only this one (`checkpoints`, `agents`,
    `conversations`, `runs`, `threads`, `logs`)."""
    older_than: timedelta
    """Only ids last written longer ago (a retention policy: whole ids, never half)."""
    all_of_namespace: bool
    """Allow an empty prefix: every id (of `namespace`)."""
    tenant: str
    """With `shred`: an encryption tenant (`stashpoint.encryption.KeyRule.tenant`)."""
    shred: bool
    """Crypto-shred `tenant`: retire its master key and erase its data keys, so every
    object sealed for it is unreadable for good, locked or not."""


def selection(**selector: Unpack[Selector]) -> Selection:
    """Check a purge's arguments and say what it erases; `InvalidArgument` before any I/O.

    Exactly one id (`checkpoint`, `agent`, `run`, `thread`, `conversation` as its
    (namespace, id), `log`, `values` as (content namespace, owner)) or a `prefix` (of
    ids: no `/`, no `..`), optionally within one `namespace`. An empty prefix selects
    everything: refused unless `older_than` bounds it or `all_of_namespace` says so, so no
    slip ever erases a whole stash.
    """
    unknown = sorted(set(selector) - set(Selector.__annotations__))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s): {', '.join(unknown)}")
    if "tenant" in selector or "shred" in selector:
        return _shred_selection(selector)
    named = {name: selector.get(name) for name in _ID_ARGUMENTS if selector.get(name) is not None}
    asked = _asked(named, selector)
    if named:
        return _id_selection(named, selector, asked)
    return _prefix_selection(
        selector.get("prefix"),
        selector.get("namespace"),
        selector.get("older_than"),
        bool(selector.get("all_of_namespace", False)),
        asked,
    )


def _id_selection(named: dict[str, object], selector: Selector, asked: dict[str, Any]) -> Selection:
    """Check a purge of one id: alone, without a prefix, age or namespace."""
    alone = len(named) == 1 and all(
        selector.get(argument) is None for argument in ("prefix", "older_than")
    )
    if not alone:
        raise InvalidArgument(
            "purge one thing at a time: one id (checkpoint, agent, run, thread, "
            "conversation, log, values) or a prefix"
        )
    if selector.get("namespace") is not None or selector.get("all_of_namespace", False):
        raise InvalidArgument("namespace and all_of_namespace go with a prefix, not an id")
    ((which, value),) = named.items()
    return Selection(targets=(_target(which, value),), asked=asked)


def _prefix_selection(
    prefix: str | None,
    namespace: str | None,
    older_than: timedelta | None,
    all_of_namespace: bool,
    asked: dict[str, Any],
) -> Selection:
    """Check a purge by prefix (or age): never an empty prefix unbounded by mistake."""
    if prefix is None and older_than is None and not all_of_namespace:
        raise InvalidArgument("say what to purge: an id, a prefix, or older_than")
    prefix = validate_prefix("" if prefix is None else prefix)
    if prefix and not prefix.strip("."):
        raise InvalidArgument(f"a prefix of dots ({prefix!r}) names no tenant: refused")
    if prefix == "" and older_than is None and not all_of_namespace:
        raise InvalidArgument(
            "an empty prefix selects every id: pass all_of_namespace=True "
            "(--all-of-namespace) to purge them all, or a prefix, or older_than"
        )
    return Selection(
        prefix=prefix, namespaces=_namespaces(namespace), older_than=older_than, asked=asked
    )


_ID_ARGUMENTS = ("checkpoint", "agent", "run", "thread", "conversation", "log", "values")
"""The arguments that name one id, in the order an error lists them."""


def _asked(named: dict[str, Any], selector: Selector) -> dict[str, Any]:
    """Return what the receipt records as asked (JSON); check `older_than`."""
    asked: dict[str, Any] = {k: list(v) if isinstance(v, tuple) else v for k, v in named.items()}
    for argument in ("prefix", "namespace"):
        given = selector.get(argument)
        if given is not None:
            asked[argument] = given
    older_than = selector.get("older_than")
    if older_than is not None:
        if not isinstance(older_than, timedelta) or older_than <= timedelta(0):
            raise InvalidArgument(
                f"older_than must be a positive timedelta, not {described(older_than)}"
            )
        asked["older_than_seconds"] = older_than.total_seconds()
    if selector.get("all_of_namespace", False):
        asked["all_of_namespace"] = True
    return asked


def _namespaces(namespace: str | None) -> tuple[str, ...]:
    """Return the namespaces a prefix is looked for in: `namespace`, or every erasable one."""
    if namespace is None:
        return tuple(
            n.name for n in NAMESPACES.values()
            if n.erasable and (n.shape in (Shape.HEADS, Shape.LOGS) or n.owned)
        )  # fmt: skip
    if namespace in NAMESPACE_NAMES:
        return (NAMESPACE_NAMES[namespace],)
    raise InvalidArgument(
        f"unknown namespace {described(namespace)}: use one of {', '.join(sorted(NAMESPACE_NAMES))}"
    )


def _shred_selection(selector: Selector) -> Selection:
    tenant, shred = selector.get("tenant"), selector.get("shred")
    if set(selector) - {"tenant", "shred"}:
        raise InvalidArgument("a shred takes a tenant alone: no id, prefix or namespace")
    if shred is not True:
        raise InvalidArgument(
            "tenant goes with shred=True (--shred); to erase a tenant's ids, purge its prefix"
        )
    if not isinstance(tenant, str) or not TENANT_PATTERN.fullmatch(tenant):
        raise InvalidArgument(f"tenant must be a tenant's name, not {described(tenant)}")
    return Selection(targets=(Target(DATA_KEYS, tenant),), asked={"tenant": tenant, "shred": True})


def _target(name: str, value: Any) -> Target:
    if name == "conversation":
        return _conversation(value)
    if name == "values":
        return _values(value)
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a str, not {described(value)}")
    if name == "thread":
        return Target(LANGGRAPH, thread_key(value))
    namespace = {"checkpoint": CHECKPOINTS, "agent": AGENTS, "run": RUN_LOGS, "log": LOGS}[name]
    return Target(namespace, validate_id(value, what=f"{name} id"))


def _conversation(value: Any) -> Target:
    if not (isinstance(value, tuple) and len(value) == 2):
        raise InvalidArgument(
            f"conversation must be its (namespace, conversation id), not {described(value)}"
        )
    return Target(CONVERSATIONS, conversation_key(*value))


def _values(value: Any) -> Target:
    owned = sorted(n.name for n in NAMESPACES.values() if n.owned)
    if not (isinstance(value, tuple) and len(value) == 2 and value[0] in owned):
        raise InvalidArgument(
            f"values must be (namespace, owner) with a namespace of {', '.join(owned)}, "
            f"not {described(value)}"
        )
    return Target(value[0], validate_id(value[1], what="owner"))


# -- the ids a prefix selects ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IdSources:
    """Where a prefix's ids are looked for: the stash's steps of each kind of namespace."""

    layout: Layout
    """Where the stash's objects live (owned content is listed under it)."""
    heads: Callable[[str], CompareAndSwap]
    """Makes the compare-and-swap steps of a head namespace."""
    logs: Callable[[str], LogSteps]
    """Makes the log steps of a log namespace."""


def with_derived(targets: Sequence[Target]) -> list[Target]:
    """Return `targets`, then the derived heads that copy them (a store item's catalog).

    Derived heads come last, once each: a purge ends them after every source it erases,
    so a copy read before a source's tombstone can never be saved after theirs
    (`stores.layout.derived_id`).
    """
    chosen = list(targets)
    derived: dict[Target, None] = {}
    for target in chosen:
        for name in derived_namespaces(target.namespace):
            copy = derived_id(target.namespace, target.object_id)
            if copy is not None:
                derived[Target(name, copy)] = None
    last = [t for t in chosen if t in derived] + list(derived)
    return [t for t in chosen if t not in derived] + list(dict.fromkeys(last))


def chosen_ids(
    sources: IdSources, prefix: str, namespaces: Sequence[str], older_than: datetime | None
) -> Steps[list[Target]]:
    """Return every id starting with `prefix` in `namespaces`, namespace by namespace.

    With `older_than`, only ids last written before it (a log's newest entry, a head's
    storage time).
    """
    targets: list[Target] = []
    for name in namespaces:
        namespace = NAMESPACES[name]
        if namespace.shape is Shape.HEADS:
            targets += yield from _heads(sources, name, prefix, older_than)
        elif namespace.shape is Shape.LOGS:
            targets += yield from _logs(sources, name, prefix, older_than)
        elif namespace.owned:
            targets += yield from _owners(sources, name, prefix, older_than)
    return targets


def _heads(
    sources: IdSources, name: str, prefix: str, older_than: datetime | None
) -> Steps[list[Target]]:
    """Return the heads of namespace `name` starting with `prefix` (and older than it)."""
    cas = sources.heads(name)
    targets: list[Target] = []
    for object_id in (yield from cas.list_ids(prefix)):
        try:
            facts = yield from cas.read_head(cas.key(object_id))
        except StashpointError:
            if older_than is None:  # unreadable: erased by a prefix, never by age
                targets.append(Target(name, object_id))
            continue
        if facts is None or facts.purge is not None:
            continue  # gone, or purged already
        if _old_enough(facts.written_at, older_than):
            targets.append(Target(name, object_id))
    return targets


def _logs(
    sources: IdSources, name: str, prefix: str, older_than: datetime | None
) -> Steps[list[Target]]:
    """Return the logs of namespace `name` starting with `prefix` (and older than it)."""
    logs = sources.logs(name)
    targets: list[Target] = []
    for log_id in (yield from logs.list_ids(prefix)):
        try:
            top = yield from logs.top(log_id)
        except StashpointError:
            if older_than is None:
                targets.append(Target(name, log_id))  # unreadable: erased all the same
            continue  # its age is unknown: never purged by age
        if top.purge_id is None and _old_enough(top.written_at, older_than):
            targets.append(Target(name, log_id))  # (one purged already is not chosen)
    return targets


def _old_enough(written: datetime | None, older_than: datetime | None) -> bool:
    """Whether an id last written at `written` (None: unknown) is chosen by `older_than`."""
    return older_than is None or (written is not None and written < older_than)


def _owners(
    sources: IdSources, name: str, prefix: str, older_than: datetime | None
) -> Steps[list[Target]]:
    """Return the owners starting with `prefix` of a content namespace's values.

    With `older_than`, only owners whose newest value was written before it (one of
    unknown age is never chosen by age).
    """
    base = sources.layout.namespace_prefix(name)
    newest: dict[str, datetime | None] = {}
    for version in (yield from every_version(base + prefix)):
        owner, slash, _ = version.key[len(base) :].partition("/")
        if not slash or version.is_delete_marker:
            continue  # not an owner's value (planted at the top): no id to purge
        written = version.last_modified
        known = newest.get(owner, written)
        newest[owner] = None if known is None or written is None else max(known, written)
    return [
        Target(name, owner)
        for owner, written in sorted(newest.items())
        if _old_enough(written, older_than)
    ]
