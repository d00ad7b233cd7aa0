"""The queryable archive: the records of logs as Parquet files, queried with DuckDB.

A projection turns each log's records (a conversation's messages, `stash.logs`'
transcripts, a run's attempts) into rows of one table, `records`: where the row came from
(namespace, log id, tenant, version, position), when it was written, a message's role and
text, the record itself as JSON text, and the model and token counts it names; `query`
adds the views `messages`, `attempts`, `checkpoints` and `checkpoint_writes`.
Each log's rows go to files of their own under the stash's prefix,
`projection/{namespace}/{log id}/{life}-{first version}.parquet`, plain Parquet that DuckDB,
Athena, Spark or pyarrow read with no stashpoint code.

- **Incremental.** A rerun lists the projection's files and the logs' ids (with the tops the
  listing shows); a log with no key after its newest file's last version is up to date,
  with no request of its own: each file's *mark* (`_{life}-{first}-{last}.projected`, a
  small object written after it) names its last version (without a mark, the file is read); any
  other's head is read, and only the versions appended since are projected (one new file
  per log that grew). A file is created only if absent
  (If-None-Match, through the one write engine) and named by the first version it holds:
  two projectors at once name the same file, one creates it and the other finds it (judged
  by what it holds: a file of the same log, life and first version is as good as its own),
  so no row is projected twice. A file found there that is not such a projection
  (planted, damaged) is written over.
- **Erasure reaches it.** A purge of a log erases its projected files with everything else
  the log owns, named in the receipt (`purge._prefixes`); Object Lock and legal holds are
  checked on them as on the log. A projection never outlives its source: a run erases the
  files of a log that was deleted, and of a life the log no longer has; a file a run wrote
  while its log was purged or deleted is erased by that run when it sees so (a projector
  killed in between leaves it to the next run).
- **Encrypted stashes**: a file is sealed like every object, under its log's tenant's key
  (`encryption.locate`), so a tenant's shred makes its projected rows unreadable with its
  logs, and a read passes over them as erased. Only stashpoint reads such files.

Needs the `archive` extra (pyarrow, duckdb), imported only here.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC
from typing import TYPE_CHECKING, Any

from stashpoint.errors import (
    CheckpointNotFound,
    ConfigurationError,
    InvalidArgument,
    KeyShredded,
    StashpointError,
    StorageUnavailable,
)
from stashpoint.logs.format import SEGMENT_SPAN, LogEntry
from stashpoint.logs.head import LogHead
from stashpoint.logs.log import LogSteps
from stashpoint.steps import Parallel, Steps, ask, run_sync
from stashpoint.stores import writes
from stashpoint.stores.layout import (
    CONVERSATIONS,
    LANGGRAPH,
    LOGS,
    PROJECTION,
    RUN_LOGS,
    log_tenant,
)
from stashpoint.stores.objects import (
    Create,
    GetObject,
    ObjectInfo,
    PutObject,
    delete_every_version,
    every_key_page,
)
from stashpoint.stores.writes import Found

if TYPE_CHECKING:
    import pyarrow

    from stashpoint.stash import Stash

__all__ = [
    "PROJECTION_FORMAT",
    "SOURCES",
    "ProjectionReport",
    "project",
    "query",
    "table",
]

PROJECTION_FORMAT = "stashpoint.projection/1"
"""The format of a projected file (its Parquet key-value metadata `stashpoint`)."""
SOURCES = (CONVERSATIONS, LOGS, RUN_LOGS, LANGGRAPH)
"""The log namespaces projected by default: durable conversations, `stash.logs`, runs and
LangGraph threads."""
TABLE = "records"
"""The name `query` gives the projected rows."""
_THREAD_RECORDS = f"""
    select log_id as thread_key, tenant, version, written_at, day, cast(record as json) as r
    from {TABLE} where namespace = '{LANGGRAPH}' and record ->> 'op' <> 'rebase'
    union all
    select log_id, tenant, version, written_at, day,
           unnest(try_cast(cast(record as json) -> '$.records' as json[]))
    from {TABLE} where namespace = '{LANGGRAPH}' and record ->> 'op' = 'rebase'
"""
"""A LangGraph thread's records, a rebase's (`prune`, `copy_thread`) taken apart."""
VIEWS = {
    "messages": f"select * from {TABLE} where role is not null",
    "attempts": f"""
        with recorded as (
            select log_id as run_id, record ->> 'attempt_id' as attempt_id,
                   record ->> 'node_id' as node_id,
                   try_cast(record ->> 'attempt' as integer) as attempt,
                   record ->> 'status' as status, record ->> 'error' as error,
                   try_cast(record ->> 'started_at' as timestamptz) as started_at,
                   try_cast(record ->> 'finished_at' as timestamptz) as finished_at,
                   tenant, day
            from {TABLE} where namespace = '{RUN_LOGS}' and record ->> 'op' = 'attempt'
        ), ended as (
            select record ->> 'attempt_id' as attempt_id, record ->> 'status' as status,
                   record ->> 'error' as error,
                   try_cast(record ->> 'finished_at' as timestamptz) as finished_at
            from {TABLE} where namespace = '{RUN_LOGS}' and record ->> 'op' = 'end'
        )
        select r.run_id, r.attempt_id, r.node_id, r.attempt,
               coalesce(e.status, r.status) as status, coalesce(e.error, r.error) as error,
               r.started_at, coalesce(e.finished_at, r.finished_at) as finished_at,
               r.tenant, r.day
        from recorded r left join ended e using (attempt_id)
    """,
    "checkpoints": f"""
        select thread_key, tenant, r ->> 'ns' as checkpoint_ns, r ->> 'id' as checkpoint_id,
               r ->> 'parent' as parent_id,
               try_cast(r ->> '$.metadata.msgpack.step' as bigint) as step,
               r ->> '$.metadata.msgpack.source' as source,
               try_cast(r ->> '$.checkpoint.msgpack.ts' as timestamptz) as checkpoint_ts,
               json_keys(r -> '$.checkpoint.msgpack.channel_versions') as channels,
               version, written_at, day
        from ({_THREAD_RECORDS}) where r ->> 'op' = 'put'
    """,
    "checkpoint_writes": f"""
        select thread_key, tenant, r ->> 'ns' as checkpoint_ns, r ->> 'id' as checkpoint_id,
               r ->> 'task' as task_id, r ->> 'path' as task_path,
               list_transform(try_cast(r -> '$.items' as json[]), lambda item: item ->> '$[1]')
                   as channels,
               version, written_at, day
        from ({_THREAD_RECORDS}) where r ->> 'op' = 'writes'
    """,
}
"""Views `query` defines over the rows: `messages` (the records that are messages),
`attempts` (a run's attempts with how each ended, from the `run-logs` records),
`checkpoints` and `checkpoint_writes` (a LangGraph thread's puts and its tasks' writes,
with the channels each names; values stay in the record)."""
WINDOW = 2 * SEGMENT_SPAN
"""Versions read at once: bounds a projection's memory however long a log is."""
FILE_READ_LIMIT = 1 << 30
"""Largest projected file read back (a log's rows of one run)."""
_FETCH = 32
"""Files fetched at once by `table`."""
PROJECTORS = 8
"""Logs a projection brings up to date at once (each on a thread of its own)."""
_META_KEY = b"stashpoint"
_DIGITS = 20
_MARK = ".projected"
"""The suffix of a mark's name (`_{life}-{first}-{last}.projected`: a leading `_` hides it
from Athena, Spark and Hive, which read every other file under a table's location)."""
_MARK_READ_LIMIT = 64 * 1024
"""Largest mark read back (a mark is a few hundred bytes of JSON)."""


@dataclass
class ProjectionReport:
    """What one projection run did."""

    logs: int = 0
    """Logs looked at."""
    rows: int = 0
    """Rows in the files of `files`."""
    files: list[str] = field(default_factory=list)
    """Keys of the files this run created (or found created, at that very moment, by
    another projector of the same rows)."""
    erased: list[str] = field(default_factory=list)
    """`namespace/log id` of each log whose projected files (or some) were erased because
    the log was deleted, purged or began a new life."""
    unreadable: list[str] = field(default_factory=list)
    """`namespace/log id: why` of each log skipped (it is projected on a later run)."""
    unchanged: int = 0
    """Logs found up to date from their newest file and the listing's top (or, for a long
    log, one short listing): nothing was written to them since it was projected."""


@dataclass(frozen=True, slots=True)
class _File:
    """One projected file, as its key names it."""

    key: str
    life: int
    first: int


@dataclass(frozen=True, slots=True)
class _Mark:
    """A projected file's mark: its name says the last version the file holds.

    Written after the file, so a rerun finds a log with nothing new from the listings alone.
    """

    key: str
    life: int
    first: int
    last: int


@dataclass
class _Projected:
    """One log's projected files and their marks, as the listing names them."""

    files: list[_File] = field(default_factory=list)
    """The Parquet files."""
    marks: list[_Mark] = field(default_factory=list)
    """The marks of some of them (a file whose writer was killed before its mark has none)."""

    def marked_last(self, file: _File) -> int | None:
        """Return the last version `file`'s marks say it holds (None: it has none)."""
        lasts = [
            m.last
            for m in self.marks
            if (m.life, m.first) == (file.life, file.first) and m.last >= file.first
        ]
        return max(lasts, default=None)

    def marks_of(self, file: _File) -> list[str]:
        """Return the keys of `file`'s marks."""
        return [m.key for m in self.marks if (m.life, m.first) == (file.life, file.first)]

    def keys(self) -> list[str]:
        """Return every key: the files' and the marks'."""
        return [f.key for f in self.files] + [m.key for m in self.marks]


def _arrow() -> tuple[Any, Any]:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:  # pragma: no cover - the extra is missing
        raise ConfigurationError(
            "the projection needs pyarrow: pip install 'stashpoint[archive]'"
        ) from None
    return pyarrow, pyarrow.parquet


def arrow_schema(pa: Any) -> Any:
    """Return the projected files' schema, in the Arrow module `pa`."""
    return pa.schema(
        [
            ("namespace", pa.string()),
            ("log_id", pa.string()),
            ("tenant", pa.string()),
            ("version", pa.int64()),
            ("position", pa.int64()),
            ("written_at", pa.timestamp("ms", tz="UTC")),
            ("day", pa.date32()),
            ("role", pa.string()),
            ("content", pa.string()),
            ("record", pa.string()),
            ("model", pa.string()),
            ("input_tokens", pa.int64()),
            ("output_tokens", pa.int64()),
        ]
    )


def _utf8(text: str) -> str:
    """`text` as valid UTF-8 (a lone surrogate, which JSON allows, written as its escape)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def _message(record: Any) -> dict[str, Any] | None:
    """Return the message a record holds: the record, or its `message` or `item` field."""
    if not isinstance(record, dict):
        return None
    if isinstance(record.get("role"), str):
        return record
    for name in ("message", "item"):
        inner = record.get(name)
        if isinstance(inner, dict) and isinstance(inner.get("role"), str):
            return inner
    return None


_MODEL_FIELDS = ("model", "model_name", "modelId", "model_id")
"""Where a message or record names its model (OpenAI and Anthropic, LangChain's metadata,
Pydantic AI, Bedrock)."""
_USAGE_PLACES = (
    ("usage",),
    ("usage_metadata",),
    ("metadata", "usage"),
    ("response_metadata", "usage"),
    ("response_metadata", "token_usage"),
)
"""Where a message or record keeps its token counts (OpenAI and Anthropic, LangChain,
Strands' and Bedrock's metadata, LangChain's provider metadata)."""
_INPUT_FIELDS = ("input_tokens", "prompt_tokens", "inputTokens", "request_tokens")
_OUTPUT_FIELDS = ("output_tokens", "completion_tokens", "outputTokens", "response_tokens")
_INT64_MAX = (1 << 63) - 1


def _model(holder: dict[str, Any]) -> str | None:
    """Return the model a message or record names, itself or in its provider metadata."""
    for place in (holder, holder.get("response_metadata")):
        if not isinstance(place, dict):
            continue
        for name in _MODEL_FIELDS:
            value = place.get(name)
            if isinstance(value, dict):  # stashpoint.agent's ModelRef: {provider, name}
                value = value.get("name")
            if isinstance(value, str):
                return value
    return None


def _count(usage: dict[str, Any], names: tuple[str, ...]) -> int | None:
    """Return the first of `names` in `usage` that is a token count (a non-negative int64)."""
    for name in names:
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _INT64_MAX:
            return value
    return None


def _tokens(holder: dict[str, Any]) -> tuple[int | None, int | None]:
    """Return the input and output token counts a message or record holds (None: not said)."""
    for path in _USAGE_PLACES:
        usage: Any = holder
        for name in path:
            usage = usage.get(name) if isinstance(usage, dict) else None
        if isinstance(usage, dict):
            counts = (_count(usage, _INPUT_FIELDS), _count(usage, _OUTPUT_FIELDS))
            if counts != (None, None):
                return counts
    return None, None


def usage_of(record: Any) -> tuple[str | None, int | None, int | None]:
    """Return the model, input tokens and output tokens a record says (None: not said).

    Looked for in the message the record holds, then in the record: the model under
    `model`, `model_name`, `modelId` or `model_id` (or in `response_metadata`); the counts
    in `usage`, `usage_metadata`, `metadata.usage` or `response_metadata`'s `usage` /
    `token_usage`, as `input_tokens` / `prompt_tokens` / `inputTokens` /
    `request_tokens` and `output_tokens` / `completion_tokens` / `outputTokens` /
    `response_tokens`. A count that is not a non-negative integer (int64) is not one.
    """
    if not isinstance(record, dict):
        return None, None, None
    message = _message(record)
    holders = [record] if message is None or message is record else [message, record]
    model = next((m for h in holders if (m := _model(h)) is not None), None)
    tokens = next((t for h in holders if (t := _tokens(h)) != (None, None)), (None, None))
    return None if model is None else _utf8(model), *tokens


def _text(content: Any) -> str | None:
    """Return a message's content as text: a string as is, a list's text parts joined."""
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, list):
        texts = [text for text in map(_part_text, content) if text is not None]
        if texts:
            return "\n".join(texts)
    return json.dumps(content, ensure_ascii=False, sort_keys=True)


def _part_text(part: Any) -> str | None:
    """Return the text of one part of a message's content (a string, or `{"text": ...}`)."""
    if isinstance(part, str):
        return part
    if isinstance(part, dict) and isinstance(part.get("text"), str):
        return str(part["text"])
    return None


tenant_of = log_tenant
"""Return the tenant a log names (`stores.layout.log_tenant`): its id's first segment."""


def rows_of(namespace: str, log_id: str, entries: Sequence[LogEntry]) -> dict[str, list[Any]]:
    """Return the rows of `entries` (one per record), as columns."""
    columns: dict[str, list[Any]] = {
        name: []
        for name in (
            "namespace", "log_id", "tenant", "version", "position", "written_at", "day",
            "role", "content", "record", "model", "input_tokens", "output_tokens",
        )
    }  # fmt: skip
    tenant = tenant_of(namespace, log_id)
    for entry in entries:
        written = entry.written_at.astimezone(UTC)
        for offset, record in enumerate(entry.records):
            message = _message(record)
            content = None if message is None else _text(message.get("content"))
            columns["namespace"].append(namespace)
            columns["log_id"].append(log_id)
            columns["tenant"].append(tenant)
            columns["version"].append(entry.version)
            columns["position"].append(entry.first_record + offset)
            columns["written_at"].append(written)
            columns["day"].append(written.date())
            columns["role"].append(None if message is None else _utf8(message["role"]))
            columns["content"].append(None if content is None else _utf8(content))
            columns["record"].append(_utf8(json.dumps(record, ensure_ascii=False)))
            model, input_tokens, output_tokens = usage_of(record)
            columns["model"].append(model)
            columns["input_tokens"].append(input_tokens)
            columns["output_tokens"].append(output_tokens)
    return columns


def encode_file(
    namespace: str, log_id: str, life: int, first: int, last: int, columns: dict[str, list[Any]]
) -> bytes:
    """One projected file: the rows as Parquet (zstd), what they came from in its metadata."""
    pa, pq = _arrow()
    described = {**_describe(namespace, log_id, life, first), "last": last}
    schema = arrow_schema(pa).with_metadata({_META_KEY: json.dumps(described).encode()})
    rows = pa.table(columns, schema=schema)
    out = io.BytesIO()
    pq.write_table(rows, out, compression="zstd")
    return out.getvalue()


def described_by(body: bytes) -> dict[str, Any] | None:
    """Return what a projected file says it holds (None: not a projected file)."""
    pa, pq = _arrow()
    try:
        metadata = pq.read_schema(pa.BufferReader(body)).metadata or {}
        described = json.loads(metadata[_META_KEY])
    except Exception:  # anything unreadable is not a projection
        return None
    if not isinstance(described, dict) or described.get("format") != PROJECTION_FORMAT:
        return None
    return described


class _Projector:
    """One run of a projection over some namespaces, as steps (free of I/O)."""

    def __init__(self, stash: Stash) -> None:
        from stashpoint.stash import Stash

        if not isinstance(stash, Stash):
            raise InvalidArgument(
                f"a projection needs a blocking stash (stashpoint.open), not {type(stash).__name__}"
            )
        self.layout = stash.layout
        self.retry = stash.retry
        self.stash = stash
        # Marks are names, never read: on an encrypted stash a file is read instead, so a
        # tenant's shred is found (and reported) as its files' keys are.
        self.marking = stash.encryption is None
        self.report = ProjectionReport()
        self.lock = threading.Lock()  # logs are projected on several threads at once

    def prefix(self, namespace: str, log_id: str = "") -> str:
        """Return the key prefix of a namespace's projected files (one log's: `log_id`)."""
        below = f"{namespace}/" if not log_id else f"{namespace}/{log_id}/"
        return self.layout.key(PROJECTION, below)

    def key(self, namespace: str, log_id: str, life: int, first: int) -> str:
        """Return the key of the file holding a log's life's versions from `first` on."""
        name = f"{life:0{_DIGITS}d}-{first:0{_DIGITS}d}.parquet"
        return self.prefix(namespace, log_id) + name

    def mark_key(self, namespace: str, log_id: str, life: int, first: int, last: int) -> str:
        """Return the key of the mark saying a file holds the versions up to `last`."""
        name = f"_{life:0{_DIGITS}d}-{first:0{_DIGITS}d}-{last:0{_DIGITS}d}{_MARK}"
        return self.prefix(namespace, log_id) + name

    def files(self, namespace: str, id_prefix: str = "") -> Steps[dict[str, _Projected]]:
        """Return the projected files and marks of a namespace's logs (ids from `id_prefix`)."""
        below = self.prefix(namespace)
        found: dict[str, _Projected] = {}
        for page in (yield from every_key_page(below + id_prefix)):
            for key in page.keys:
                log_id, _, name = key[len(below) :].rpartition("/")
                if not log_id:
                    continue
                parsed = parse_file_name(name)
                if parsed is not None:
                    found.setdefault(log_id, _Projected()).files.append(_File(key, *parsed))
                elif (marked := _parse_mark(name)) is not None:
                    found.setdefault(log_id, _Projected()).marks.append(_Mark(key, *marked))
        return found

    def work(
        self, namespaces: Sequence[str], id_prefix: str
    ) -> Steps[list[tuple[str, str, _Projected, int | None]]]:
        """Return each log of `namespaces` (ids from `id_prefix`) with its projected files.

        The logs listed, with their tops where the listing showed them (`list_tops`), and
        the logs that have files but are gone (their files are erased).
        """
        work: list[tuple[str, str, _Projected, int | None]] = []
        for namespace in namespaces:
            projected = yield from self.files(namespace, id_prefix)
            tops = yield from self.stash.log_steps(namespace).list_tops(id_prefix)
            for log_id in sorted(set(tops) | set(projected)):
                found = projected.get(log_id, _Projected())
                work.append((namespace, log_id, found, tops.get(log_id)))
        return work

    def bring_up_to_date(
        self, namespace: str, log_id: str, projected: _Projected, top: int | None
    ) -> None:
        """Run `log` for one log; a log that cannot be read is named in the report."""
        logs = self.stash.log_steps(namespace)
        try:
            run_sync(self.log(logs, namespace, log_id, projected, top), self.stash.driver)
        except StashpointError as exc:
            with self.lock:
                self.report.unreadable.append(f"{namespace}/{log_id}: {exc.kind.value}")

    def log(
        self,
        logs: LogSteps,
        namespace: str,
        log_id: str,
        projected: _Projected,
        top: int | None,
    ) -> Steps[None]:
        """Bring one log's projection up to its head (or erase it: the log is gone).

        `top`: the log's newest version as the run's listing showed it (None: not known).
        """
        judged: dict[str, int | None] = {}  # what `after` said of a file, by key: read once
        if (yield from self._unchanged(logs, namespace, log_id, projected, top, judged)):
            with self.lock:
                self.report.unchanged += 1
            return
        head = yield from _live_head(logs, log_id)
        if head is None:
            if projected.keys():
                yield from self.erase(namespace, log_id, projected.keys())
            return
        # The first version readers read: a log's base, or a later one its owner's state
        # names (a LangGraph thread's deletion or prune starts a life in its state).
        life = logs.life_of(head)
        current = yield from self._of_life(namespace, log_id, projected, life)
        start = yield from self._start(namespace, log_id, projected, current, head, judged, life)
        if start > head.version:
            return
        columns = yield from self.read(logs, namespace, log_id, start, head.version)
        written = yield from self._write(namespace, log_id, life, start, head.version, columns)
        # Purged or deleted while it was projected: what was just written must not outlive it.
        after = yield from _live_head(logs, log_id)
        if after is None or logs.life_of(after) != life:
            yield from self.erase(namespace, log_id, written)
            return
        with self.lock:
            self.report.files.append(written[0])
            self.report.rows += len(columns["record"])

    def _of_life(
        self, namespace: str, log_id: str, projected: _Projected, life: int
    ) -> Steps[list[_File]]:
        """Erase the files and marks of other lives; return this life's files, oldest first."""
        old = [f.key for f in projected.files if f.life != life]
        old += [m.key for m in projected.marks if m.life != life]
        if old:
            yield from self.erase(namespace, log_id, old)
        return sorted((f for f in projected.files if f.life == life), key=lambda f: f.first)

    def _unchanged(
        self,
        logs: LogSteps,
        namespace: str,
        log_id: str,
        projected: _Projected,
        top: int | None,
        judged: dict[str, int | None],
    ) -> Steps[bool]:
        """Whether the log is unchanged since its newest file, known without a head read.

        A rerun's common case: the newest file says the last version it holds (its mark's
        name, else the file itself), and no key after it (keys are never freed) means
        nothing was appended, deleted or purged since: the listing's top says so, or one
        short listing after it. A log that grew is judged from its files themselves, never
        from a mark. What a file was read to say is noted in `judged`.
        """
        files = projected.files
        if not files or len({f.life for f in files}) != 1:
            return False
        newest = max(files, key=lambda f: f.first)
        marked = projected.marked_last(newest) if self.marking else None
        if marked is not None:
            following: int | None = marked + 1
        else:
            following = yield from self.after(newest, namespace, log_id)
            judged[newest.key] = following
        if following is None:
            return False
        if top is not None:
            return top == following - 1
        return (yield from logs.written_after(log_id, following - 1)) is False

    def _start(
        self,
        namespace: str,
        log_id: str,
        projected: _Projected,
        current: list[_File],
        head: LogHead,
        judged: dict[str, int | None],
        life: int,
    ) -> Steps[int]:
        """Return the first version the next file holds (`head.version + 1`: none).

        The life's files (`current`, oldest first) are judged newest first; one that is
        not a projection is erased (with its marks). None left: the life's first version.
        """
        while current:
            newest = current[-1]
            if newest.key in judged:
                following = judged[newest.key]
            else:
                following = yield from self.after(newest, namespace, log_id)
            if following is not None:
                return following  # above the head we read: another run's, newer; skip
            # Not a projection: its marks go first (a file written at its name is not it).
            if projected.marks_of(newest):
                yield from self.erase(namespace, log_id, projected.marks_of(newest), said=False)
            if newest.first <= head.version:
                return newest.first  # not a projection: written over by this run's file
            # Not a projection, and named beyond the top: it would hold the log back.
            yield from self.erase(namespace, log_id, [newest.key])
            current.pop()
        return life

    def _write(
        self,
        namespace: str,
        log_id: str,
        life: int,
        start: int,
        top: int,
        columns: dict[str, list[Any]],
    ) -> Steps[list[str]]:
        """Write the file of versions `start`..`top` (and its mark); return their keys."""
        body = encode_file(namespace, log_id, life, start, top, columns)
        key = self.key(namespace, log_id, life, start)
        request = PutObject(
            key,
            body,
            Create(),
            content_type="application/vnd.apache.parquet",
            content_encoding=None,
        )
        found_last: list[object] = []  # what a file found under the name says it ends at
        judge = file_judge(namespace, log_id, life, start, found_last)
        yield from writes.create_named(
            request, judge, self.retry, what="projection", limit=FILE_READ_LIMIT, refresh=False
        )
        last = found_last[-1] if found_last else top
        written = [key]
        if self.marking and isinstance(last, int) and not isinstance(last, bool) and last >= start:
            written.append((yield from self._mark(namespace, log_id, life, start, last)))
        return written

    def _mark(self, namespace: str, log_id: str, life: int, start: int, last: int) -> Steps[str]:
        """Write the mark of the file from `start` that holds up to `last`; return its key."""
        mark = self.mark_key(namespace, log_id, life, start, last)
        said = {**_describe(namespace, log_id, life, start), "last": last}
        yield from writes.create_named(
            PutObject(mark, json.dumps(said).encode(), Create(), content_encoding=None),
            _mark_judge(said),
            self.retry,
            what="projection mark",
            limit=_MARK_READ_LIMIT,
            refresh=False,
        )
        return mark

    def after(self, newest: _File, namespace: str, log_id: str) -> Steps[int | None]:
        """Return the version after `newest`'s last (None: not a projection of it).

        None when the file is not a projection of this log's life from its first version
        (planted, damaged, another log's). Read from the file itself (its Parquet
        metadata): object metadata is not kept alike by every backend. A file is one run's
        increment of one log, so it is small.
        """
        info = yield from ask(GetObject(newest.key, None, FILE_READ_LIMIT))
        described = described_by(b"" if info is None or info.body is None else info.body)
        if described is None:
            return None
        last = described.get("last")
        said = (described.get("namespace"), described.get("log_id"), described.get("life"))
        if (
            said != (namespace, log_id, newest.life)
            or described.get("first") != newest.first
            or not isinstance(last, int)
            or isinstance(last, bool)
            or last < newest.first
        ):
            return None
        return last + 1

    def read(
        self, logs: LogSteps, namespace: str, log_id: str, start: int, stop: int
    ) -> Steps[dict[str, list[Any]]]:
        """Return the rows of versions `start..stop`, read a window at a time."""
        listing = yield from logs.listing(log_id)
        columns: dict[str, list[Any]] = {}
        at = start
        while at <= stop:
            until = min(stop, at - at % WINDOW + WINDOW - 1)
            entries = yield from logs.entries(log_id, at, until, listed=listing)
            for name, values in rows_of(namespace, log_id, entries).items():
                columns.setdefault(name, []).extend(values)
            at = until + 1
        return columns

    def erase(
        self, namespace: str, log_id: str, keys: Sequence[str], *, said: bool = True
    ) -> Steps[None]:
        """Erase every stored version of `keys` (a log's files it no longer derives).

        `said`: name the log in the report's `erased` (not for marks alone).
        """
        files = [k for k in keys if parse_file_name(k.rpartition("/")[2]) is not None]
        if files:  # a compacted file of the tenant may hold their rows: erased with them
            keys = [*keys, self.layout.compacted_prefix(namespace, log_id)]
        yield from erase_for_good(keys, "a projected file")
        if said:
            with self.lock:
                self.report.erased.append(f"{namespace}/{log_id}")


def erase_for_good(keys: Sequence[str], what: str) -> Steps[None]:
    """Erase every stored version under each of `keys` (a key, or a folder's prefix).

    `StorageUnavailable`, naming `what`, for a version storage keeps (a retention or a
    legal hold).
    """
    for key in keys:
        _, failures = yield from delete_every_version(key)
        if failures:
            raise StorageUnavailable(
                f"{what} could not be erased (a retention or legal hold?)", object_name=key
            )


def parse_file_name(name: str) -> tuple[int, int] | None:
    """Return `(life, first version)` of a projected file's name (None: not one)."""
    stem, dot, extension = name.partition(".")
    life, dash, first = stem.partition("-")
    if (dot, extension, dash) != (".", "parquet", "-") or not (life + first).isdigit():
        return None
    if len(life) != _DIGITS or len(first) != _DIGITS:
        return None
    return int(life), int(first)


def _parse_mark(name: str) -> tuple[int, int, int] | None:
    """`(life, first, last)` of a mark's name; None: not one."""
    stem = name.removeprefix("_").removesuffix(_MARK)
    parts = stem.split("-")
    if len(stem) != len(name) - 1 - len(_MARK) or len(parts) != 3:
        return None
    if not all(len(part) == _DIGITS and part.isdigit() for part in parts):
        return None
    life, first, last = (int(part) for part in parts)
    return life, first, last


def _describe(namespace: str, log_id: str, life: int, first: int) -> dict[str, Any]:
    """Return what a projected file (and its mark) says it is, but its last version."""
    return {
        "format": PROJECTION_FORMAT,
        "namespace": namespace,
        "log_id": log_id,
        "life": life,
        "first": first,
    }


def _mark_judge(said: dict[str, Any]) -> writes.Judge:
    """Judge an object found under a mark's name: the same mark is ours, anything else not."""

    def judge(found: ObjectInfo) -> Steps[Found]:
        try:
            same = json.loads(found.body or b"") == said
        except ValueError:
            same = False
        return Found.SAME if same else Found.OTHER
        yield  # a generator, like every step

    return judge


def _live_head(logs: LogSteps, log_id: str) -> Steps[LogHead | None]:
    """Return the log's head; None when it is gone (deleted, purged, never written)."""
    try:
        head = yield from logs.head(log_id)
    except CheckpointNotFound:  # Purged too
        return None
    return None if head.ended else head


def file_judge(
    namespace: str, log_id: str, life: int, first: int, found_last: list[object] | None = None
) -> writes.Judge:
    """Judge a file found under a projected file's name.

    The same log, life and first version is as good as ours (another projector's, perhaps
    ending earlier: the last version it says is appended to `found_last`); anything else
    is OTHER (written over).
    """

    def judge(found: ObjectInfo) -> Steps[Found]:
        described = described_by(found.body or b"")
        same = described is not None and (
            described.get("namespace"),
            described.get("log_id"),
            described.get("life"),
            described.get("first"),
        ) == (namespace, log_id, life, first)
        if same and described is not None and found_last is not None:
            found_last.append(described.get("last"))
        return Found.SAME if same else Found.OTHER
        yield  # a generator, like every step

    return judge


def check_namespaces(namespaces: Sequence[str]) -> list[str]:
    """Return `namespaces` as a list, each a log namespace (else `InvalidArgument`)."""
    from stashpoint.stores.layout import NAMESPACES, Shape

    chosen = list(namespaces)
    for namespace in chosen:
        settings = NAMESPACES.get(namespace)
        if settings is None or settings.shape is not Shape.LOGS or not settings.erasable:
            raise InvalidArgument(
                f"{namespace!r} is not a namespace of logs a projection reads "
                f"(the default: {', '.join(SOURCES)})",
                object_name=namespace,
            )
    return chosen


def project(
    stash: Stash, *, namespaces: Sequence[str] = SOURCES, prefix: str = ""
) -> ProjectionReport:
    """Project the records of the logs of `namespaces` whose ids start with `prefix`.

    Incremental: only versions appended since the last run are read and written. Raises
    `ConfigurationError` without the `archive` extra; a log that cannot be read (damaged,
    or its tenant's keys shredded) is skipped and named in the report.
    """
    from stashpoint.ids import validate_prefix

    chosen = check_namespaces(namespaces)
    validate_prefix(prefix)
    _arrow()
    projector = _Projector(stash)
    work = run_sync(projector.work(chosen, prefix), stash.driver)
    projector.report.logs = len(work)
    # Logs at once: a log's reads are a few rounds each, and most of a run is waiting.
    with ThreadPoolExecutor(PROJECTORS, thread_name_prefix="stashpoint-projection") as pool:
        done = [pool.submit(projector.bring_up_to_date, *item) for item in work]
        try:
            for future in done:
                future.result()
        finally:
            for future in done:
                future.cancel()  # after a failure, no log not yet begun
    return projector.report


def _fetch_all(keys: Sequence[str]) -> Steps[list[ObjectInfo | None]]:
    """Read projected files; one whose tenant's keys were shredded reads as erased (None)."""
    found: list[ObjectInfo | None] = []
    for start in range(0, len(keys), _FETCH):
        batch = tuple(GetObject(k, None, FILE_READ_LIMIT) for k in keys[start : start + _FETCH])
        try:
            found += yield from ask(Parallel(batch))
        except KeyShredded:
            for request in batch:  # which ones: read one by one
                try:
                    found.append((yield from ask(request)))
                except KeyShredded:
                    found.append(None)
    return found


def _projected_keys(projector: _Projector, namespaces: Sequence[str]) -> Steps[list[str]]:
    keys: list[str] = []
    for namespace in namespaces:
        by_log = yield from projector.files(namespace)
        keys += [f.key for projected in by_log.values() for f in projected.files]
    return keys


def table(stash: Stash, *, namespaces: Sequence[str] = SOURCES) -> pyarrow.Table:
    """Every projected row of `namespaces`, as one Arrow table (for pandas, Polars, ...).

    A file erased while it was read (a purge) is left out; one that is not a projection (a
    hostile object) is left out too.
    """
    pa, pq = _arrow()
    projector = _Projector(stash)
    chosen = check_namespaces(namespaces)

    def read() -> Steps[list[ObjectInfo | None]]:
        keys = yield from _projected_keys(projector, chosen)
        return (yield from _fetch_all(keys))

    tables = []
    for info in run_sync(read(), stash.driver):
        body = b"" if info is None or info.body is None else info.body
        if described_by(body) is None:
            continue
        # One small file at a time: pyarrow's thread pool costs more than it saves (2.5x).
        loaded = pq.read_table(pa.BufferReader(body), use_threads=False)
        tables.append(conformed(pa, loaded))
    if not tables:
        return arrow_schema(pa).empty_table()
    return pa.concat_tables(tables)


def conformed(pa: Any, loaded: Any) -> Any:
    """Return a file's rows in the current schema (a column added since it was written: null).

    Columns are only ever added (at the end), so every file a release wrote reads so.
    """
    schema = arrow_schema(pa)
    present = set(loaded.column_names)
    columns = [
        loaded.column(name)
        if name in present
        else pa.nulls(loaded.num_rows, schema.field(name).type)
        for name in schema.names
    ]
    return pa.Table.from_arrays(columns, schema=schema)


def query(stash: Stash, sql: str, *, namespaces: Sequence[str] = SOURCES) -> pyarrow.Table:
    """Run `sql` with DuckDB over the projected rows (`records` and its views).

    The table `records` holds every projected row; its views are `messages` (the records
    that are messages), `attempts` (runs' attempts, each with how it ended), and
    `checkpoints` and `checkpoint_writes` (LangGraph threads' puts and tasks' writes).
    Raises `InvalidArgument` for SQL DuckDB refuses: with DuckDB's message when it is about
    the SQL (a syntax error, an unknown column), with the error's type alone otherwise (a
    conversion error's message quotes the value it met, and errors never carry payloads).
    """
    try:
        import duckdb
    except ImportError:  # pragma: no cover - the extra is missing
        raise ConfigurationError("queries need duckdb: pip install 'stashpoint[archive]'") from None
    if not isinstance(sql, str) or not sql.strip():
        raise InvalidArgument("a query needs SQL text")
    rows = table(stash, namespaces=namespaces)
    connection = duckdb.connect(":memory:")
    try:
        connection.register(TABLE, rows)
        for name, view in VIEWS.items():
            connection.execute(f"create view {name} as {view}")
        try:
            result = connection.sql(sql)
            return (
                arrow_schema(_arrow()[0]).empty_table()
                if result is None
                else result.to_arrow_table()
            )
        except duckdb.Error as exc:
            about_sql = (duckdb.ParserException, duckdb.CatalogException, duckdb.BinderException)
            said = f": {str(exc).splitlines()[0]}" if isinstance(exc, about_sql) else ""
            raise InvalidArgument(f"the query failed ({type(exc).__name__}){said}") from None
    finally:
        connection.close()
