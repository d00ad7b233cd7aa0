"""`StashpointSaver` and `AsyncStashpointSaver`: LangGraph checkpointers over a stash.

Both run the operations of `langgraph.steps`, one with the blocking driver and one with
asyncio. The blocking saver's async methods run its blocking ones on a worker thread (so a
blocking saver serves async graphs too); the async saver's blocking methods hand the work to
its event loop from another thread, as LangGraph's own async savers do.
"""

from __future__ import annotations

import asyncio
import builtins
import secrets
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from langgraph.checkpoint.base import (
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    DeltaChannelHistory,
)
from langgraph.checkpoint.serde.base import SerializerProtocol

from stashpoint.background import TaskBackground, ThreadBackground
from stashpoint.errors import ConfigurationError, described
from stashpoint.langgraph.loop import on_loop
from stashpoint.langgraph.steps import SaverSteps, TupleParts
from stashpoint.langgraph.thread import check_config
from stashpoint.steps import Steps, run_async, run_sync
from stashpoint.stores.layout import LANGGRAPH

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig

    from stashpoint.stash import AsyncStash, Stash

T = TypeVar("T")


class _Lock:
    """A `threading.Lock` that a weak reference can point at."""

    __slots__ = ("__weakref__", "_lock")

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def __enter__(self) -> None:
        self._lock.acquire()

    def __exit__(self, *exc: object) -> None:
        self._lock.release()


class _AsyncLock(asyncio.Lock):
    """An `asyncio.Lock` that a weak reference can point at."""


AllowedModules = Iterable[tuple[str, ...] | type] | Literal[True]
"""Types a stored value may name beyond LangGraph's safe list: `(module, name)` pairs or
classes; `True` allows any (LangGraph's permissive mode: a stored object can then run code
on read, so only where nobody else can write the bucket)."""


def _serde(serde: SerializerProtocol | None, allowed: AllowedModules) -> SerializerProtocol:
    """Return the serializer of a saver: the caller's, else LangGraph's in strict mode.

    Strict: a stored value may name only the types of LangGraph's safe list (datetimes,
    UUIDs, LangChain messages, `Send`, `Interrupt`, ...) and those in `allowed`; any other
    comes back as its plain fields (which a pydantic state validates again), never by
    importing and calling what the object names. Reading a thread never runs code that
    someone with write access to the bucket planted.
    """
    if serde is not None:
        return serde
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    if allowed is True:
        return JsonPlusSerializer(allowed_msgpack_modules=True)
    pairs: list[tuple[str, ...]] = []
    for item in allowed:
        if isinstance(item, type):
            pairs.append((item.__module__, item.__qualname__))
        elif isinstance(item, tuple) and all(isinstance(part, str) for part in item):
            pairs.append(item)
        else:
            raise ConfigurationError(
                "allowed_msgpack_modules takes (module, name) pairs or classes, not "
                f"{described(item)}"
            )
    return JsonPlusSerializer(allowed_msgpack_modules=pairs)


def _steps_of(stash: Stash | AsyncStash) -> SaverSteps:
    return SaverSteps(stash.log_steps(LANGGRAPH), stash.layout, stash.codec, indexed=stash.indexed)


def _tuple(parts: TupleParts | None) -> CheckpointTuple | None:
    if parts is None:
        return None
    return CheckpointTuple(
        config=parts.config,  # type: ignore[arg-type]
        checkpoint=parts.checkpoint,  # type: ignore[arg-type]
        metadata=parts.metadata,  # type: ignore[arg-type]
        parent_config=parts.parent_config,  # type: ignore[arg-type]
        pending_writes=parts.pending_writes,
    )


def _next_version(current: str | int | float | None) -> str:
    """Return a channel version after `current` that no other branch will also take.

    Versions are `{counter:032}.{random}`: they sort like the counter, and two branches
    forked from one checkpoint (time travel) never give a channel the same version, so a
    value stored for one branch is never mistaken for the other's.
    """
    if current is None:
        counter = 0
    elif isinstance(current, (int, float)):
        counter = int(current)
    else:
        counter = int(current.split(".")[0])
    return f"{counter + 1:032}.{secrets.randbelow(10**16):016}"


class StashpointSaver(BaseCheckpointSaver[str]):
    """A LangGraph checkpointer over a stash (any backend: memory, local, S3, S3 + index).

    Each `put` and each `put_writes` is one conditional PUT (plus one per new large value);
    the latest checkpoint reads in three round trips whatever the thread's length. Two
    invocations that resume the same latest checkpoint cannot both proceed: the second
    `put` raises `stashpoint.CheckpointConflict` and stores nothing as the thread's latest.
    Values go only through `self.serde`: by default LangGraph's serializer in strict mode,
    so reading a thread never imports and calls what a stored object names; list your own
    classes in `allowed_msgpack_modules` to have them rebuilt (or pass a `serde`).

    A put never seals or cleans up before it returns: the range of 64 versions a put
    completes is sealed after the call, on a thread of the saver's own (`background=False`:
    at `flush()`), and `stashpoint gc` seals what a process that ended first left. No read
    depends on a seal.
    """

    def __init__(
        self,
        stash: Stash,
        *,
        serde: SerializerProtocol | None = None,
        allowed_msgpack_modules: AllowedModules = (),
        background: bool = True,
    ) -> None:
        super().__init__(serde=_serde(serde, allowed_msgpack_modules))
        self.stash = stash
        """The stash the threads live in."""
        self._steps = _steps_of(stash)
        self._locks: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        self._locks_lock = threading.Lock()
        # What puts leave for after their calls (seals, clean-up): on a thread of the
        # saver's own, or, with `background=False`, at `flush()` (or by `stashpoint gc`).
        self._background = ThreadBackground(
            lambda: run_sync(self._steps.background(), self.stash.driver), threaded=background
        )
        stash.on_close(self.flush)  # the stash waits for the seals before it closes

    @classmethod
    @contextmanager
    def from_url(cls, url: str | None = None, **options: Any) -> Iterator[StashpointSaver]:
        """Open a stash from `url` (see `stashpoint.open`) and yield a saver; close it after."""
        from stashpoint.stash import open as open_stash

        with open_stash(url, **options) as stash:
            yield cls(stash)  # the stash waits for the saver's seals as it closes

    @classmethod
    @contextmanager
    def from_conn_string(cls, url: str | None = None, **options: Any) -> Iterator[StashpointSaver]:
        """`from_url` under the name LangGraph's Postgres and SQLite savers use."""
        with cls.from_url(url, **options) as saver:
            yield saver

    def setup(self) -> None:
        """Prepare the stash for this saver: no tables or migrations, at most one walk.

        Kept for code written for the SQL savers, which must call it once. The DynamoDB
        index, where there is one, comes with the deployment (`infra/stashpoint.yaml`).
        On a stash with an index, the first call writes which threads hold which runs for
        the threads already stored (one walk of every thread, then a marker), so that
        `delete_for_runs` reads the index instead of walking; later calls are one request.
        Without an index, no request.
        """
        self._run(self._steps.index_runs(self.serde))

    @property
    def steps(self) -> SaverSteps:
        """Return the saver's operations as steps, with the thread heads it remembers."""
        return self._steps

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        """Return the next channel version (unique across branches of a thread)."""
        return _next_version(current)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait for the work puts left for after their calls (seals, clean-up).

        Returns False if `timeout` seconds ran out first. Never needed for correctness
        (what is not done, `stashpoint gc` does); call it before a process ends to leave
        every range sealed. The stash calls it as it closes.
        """
        return self._background.flush(timeout)

    def _run(self, steps: Steps[T]) -> T:
        result = run_sync(steps, self.stash.driver)
        if self._steps.has_background_work:
            self._background.poke()  # after the call's own requests, never inside them
        return result

    def _writing(self, config: RunnableConfig) -> _Lock:
        """Return the lock that orders this saver's appends to one thread.

        LangGraph stores a checkpoint while the next step's writes arrive; both extend the
        same log, and taking turns here saves a lost append and a re-read each time.
        """
        check_config(config)
        key = str(config["configurable"]["thread_id"])
        with self._locks_lock:
            lock = self._locks.get(key)
            if lock is None:  # held only while in use: idle threads' locks go away
                lock = self._locks[key] = _Lock()
            return lock

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Return the checkpoint `config` names, or the thread's latest without an id."""
        return _tuple(self._run(self._steps.get_tuple(config, self.serde)))  # type: ignore[arg-type]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """Yield matching checkpoints, newest first (metadata `filter` before `limit`)."""
        found = self._run(
            self._steps.list(config, self.serde, filter=filter, before=before, limit=limit)  # type: ignore[arg-type]
        )
        for parts in found:
            tuple_ = _tuple(parts)
            assert tuple_ is not None
            yield tuple_

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint; raises `CheckpointConflict` instead of forking silently."""
        with self._writing(config):
            return self._run(  # type: ignore[return-value]
                self._steps.put(config, checkpoint, metadata, new_versions, self.serde)  # type: ignore[arg-type]
            )

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes in one PUT (first write wins, special ones replace)."""
        with self._writing(config):
            self._run(self._steps.put_writes(config, writes, task_id, task_path, self.serde))  # type: ignore[arg-type]

    def delete_thread(self, thread_id: str) -> None:
        """Delete a thread and leave a tombstone so that no late write revives it."""
        self._run(self._steps.delete_thread(str(thread_id)))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints and writes of the given runs from every thread."""
        self._run(self._steps.delete_for_runs(run_ids, self.serde))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread, every checkpoint and write, to a thread that has none."""
        self._run(self._steps.copy_thread(source_thread_id, target_thread_id, self.serde))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep each namespace's latest checkpoint (`keep_latest`) or delete all (`delete`)."""
        self._run(self._steps.prune(thread_ids, strategy, self.serde))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Return each channel's writes and seed along the parent chain, in one read."""
        if not channels:
            return {}
        found = self._run(self._steps.delta_history(config, channels, self.serde))  # type: ignore[arg-type]
        return found  # type: ignore[return-value]

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """`get_tuple` on a worker thread."""
        return await asyncio.to_thread(self.get_tuple, config)

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """`list` on a worker thread."""
        found = await asyncio.to_thread(
            lambda: [*self.list(config, filter=filter, before=before, limit=limit)]
        )
        for tuple_ in found:
            yield tuple_

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """`put` on a worker thread."""
        return await asyncio.to_thread(self.put, config, checkpoint, metadata, new_versions)

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """`put_writes` on a worker thread."""
        await asyncio.to_thread(self.put_writes, config, writes, task_id, task_path)

    async def adelete_thread(self, thread_id: str) -> None:
        """`delete_thread` on a worker thread."""
        await asyncio.to_thread(self.delete_thread, thread_id)

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """`delete_for_runs` on a worker thread."""
        await asyncio.to_thread(self.delete_for_runs, run_ids)

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """`copy_thread` on a worker thread."""
        await asyncio.to_thread(self.copy_thread, source_thread_id, target_thread_id)

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`prune` on a worker thread."""
        await asyncio.to_thread(self.prune, thread_ids, strategy=strategy)

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """`get_delta_channel_history` on a worker thread."""
        return await asyncio.to_thread(
            lambda: self.get_delta_channel_history(config=config, channels=channels)
        )


class AsyncStashpointSaver(BaseCheckpointSaver[str]):
    """The asyncio twin of `StashpointSaver`, over an `AsyncStash`.

    Its blocking methods may be called from other threads while its event loop runs
    (LangGraph's sync APIs on an async saver); from the loop's own thread they raise.
    """

    def __init__(
        self,
        stash: AsyncStash,
        *,
        serde: SerializerProtocol | None = None,
        allowed_msgpack_modules: AllowedModules = (),
        background: bool = True,
    ) -> None:
        super().__init__(serde=_serde(serde, allowed_msgpack_modules))
        self.stash = stash
        """The stash the threads live in."""
        self._steps = _steps_of(stash)
        self._locks: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
        # What puts leave for after their calls: a task of the loop, or at `aflush()`.
        self._background = TaskBackground(
            lambda: run_async(self._steps.background(), self.stash.driver), tasked=background
        )
        stash.on_close(self.aflush)  # the stash waits for the seals before it closes
        try:
            self.loop: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
            """The event loop blocking calls are handed to (the one it was made on)."""
        except RuntimeError:
            self.loop = None

    @classmethod
    @asynccontextmanager
    async def from_url(
        cls, url: str | None = None, **options: Any
    ) -> AsyncIterator[AsyncStashpointSaver]:
        """Open an async stash from `url` and yield a saver; close it after."""
        from stashpoint.stash import open_async

        async with open_async(url, **options) as stash:
            yield cls(stash)  # the stash waits for the saver's seals as it closes

    @classmethod
    @asynccontextmanager
    async def from_conn_string(
        cls, url: str | None = None, **options: Any
    ) -> AsyncIterator[AsyncStashpointSaver]:
        """`from_url` under the name LangGraph's Postgres and SQLite savers use."""
        async with cls.from_url(url, **options) as saver:
            yield saver

    async def setup(self) -> None:
        """Prepare the stash for this saver (see `StashpointSaver.setup`)."""
        await self._arun(self._steps.index_runs(self.serde))

    @property
    def steps(self) -> SaverSteps:
        """Return the saver's operations as steps, with the thread heads it remembers."""
        return self._steps

    def get_next_version(self, current: str | None, channel: None = None) -> str:
        """Return the next channel version (unique across branches of a thread)."""
        return _next_version(current)

    def _writing(self, config: RunnableConfig) -> _AsyncLock:
        """Return the lock that orders this saver's appends to one thread (see the twin's)."""
        check_config(config)
        key = str(config["configurable"]["thread_id"])
        lock = self._locks.get(key)
        if lock is None:  # held only while in use: idle threads' locks go away
            lock = self._locks[key] = _AsyncLock()
        return lock

    async def aflush(self) -> None:
        """Wait for the work puts left for after their calls (see `StashpointSaver.flush`)."""
        await self._background.flush()

    def flush(self) -> None:
        """`aflush`, from a thread other than the event loop's."""
        self._blocking(self.aflush)

    async def _arun(self, steps: Steps[T]) -> T:
        if self.loop is None:
            self.loop = asyncio.get_running_loop()
        result = await run_async(steps, self.stash.driver)
        if self._steps.has_background_work:
            self._background.poke()  # after the call's own requests, never inside them
        return result

    def _blocking(self, work: Callable[[], Any]) -> Any:
        """Run the coroutine `work()` makes on the saver's loop, from another thread."""
        return on_loop(self.loop, work, type(self).__name__)

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """Return the checkpoint `config` names, or the thread's latest without an id."""
        return _tuple(await self._arun(self._steps.get_tuple(config, self.serde)))  # type: ignore[arg-type]

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        """Yield matching checkpoints, newest first (metadata `filter` before `limit`)."""
        found = await self._arun(
            self._steps.list(config, self.serde, filter=filter, before=before, limit=limit)  # type: ignore[arg-type]
        )
        for parts in found:
            tuple_ = _tuple(parts)
            assert tuple_ is not None
            yield tuple_

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """Store a checkpoint; raises `CheckpointConflict` instead of forking silently."""
        async with self._writing(config):
            return await self._arun(
                self._steps.put(config, checkpoint, metadata, new_versions, self.serde)  # type: ignore[arg-type]
            )

    async def aput_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """Store a task's pending writes in one PUT (first write wins, special ones replace)."""
        async with self._writing(config):
            await self._arun(
                self._steps.put_writes(config, writes, task_id, task_path, self.serde)  # type: ignore[arg-type]
            )

    async def adelete_thread(self, thread_id: str) -> None:
        """Delete a thread and leave a tombstone so that no late write revives it."""
        await self._arun(self._steps.delete_thread(str(thread_id)))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        """Delete the checkpoints and writes of the given runs from every thread."""
        await self._arun(self._steps.delete_for_runs(run_ids, self.serde))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """Copy a thread, every checkpoint and write, to a thread that has none."""
        await self._arun(self._steps.copy_thread(source_thread_id, target_thread_id, self.serde))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep each namespace's latest checkpoint (`keep_latest`) or delete all (`delete`)."""
        await self._arun(self._steps.prune(thread_ids, strategy, self.serde))

    async def aget_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """Return each channel's writes and seed along the parent chain, in one read."""
        if not channels:
            return {}
        found = await self._arun(self._steps.delta_history(config, channels, self.serde))  # type: ignore[arg-type]
        return found  # type: ignore[return-value]

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        """`aget_tuple`, from a thread other than the event loop's."""
        return self._blocking(lambda: self.aget_tuple(config))  # type: ignore[no-any-return]

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        """`alist`, from a thread other than the event loop's."""

        async def collect() -> builtins.list[CheckpointTuple]:
            return [t async for t in self.alist(config, filter=filter, before=before, limit=limit)]

        yield from self._blocking(collect)

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        """`aput`, from a thread other than the event loop's."""
        return self._blocking(lambda: self.aput(config, checkpoint, metadata, new_versions))  # type: ignore[no-any-return]

    def put_writes(
        self,
        config: RunnableConfig,
        writes: Sequence[tuple[str, Any]],
        task_id: str,
        task_path: str = "",
    ) -> None:
        """`aput_writes`, from a thread other than the event loop's."""
        self._blocking(lambda: self.aput_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        """`adelete_thread`, from a thread other than the event loop's."""
        self._blocking(lambda: self.adelete_thread(thread_id))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        """`adelete_for_runs`, from a thread other than the event loop's."""
        self._blocking(lambda: self.adelete_for_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        """`acopy_thread`, from a thread other than the event loop's."""
        self._blocking(lambda: self.acopy_thread(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """`aprune`, from a thread other than the event loop's."""
        self._blocking(lambda: self.aprune(thread_ids, strategy=strategy))

    def get_delta_channel_history(
        self, *, config: RunnableConfig, channels: Sequence[str]
    ) -> Mapping[str, DeltaChannelHistory]:
        """`aget_delta_channel_history`, from a thread other than the event loop's."""
        return self._blocking(  # type: ignore[no-any-return]
            lambda: self.aget_delta_channel_history(config=config, channels=channels)
        )
