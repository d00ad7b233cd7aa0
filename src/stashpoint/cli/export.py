"""`stashpoint export`: checkpoints, logs and runs to JSON Lines, streamed.

Logs (agent transcripts, `stash.logs`) are read in version order a window of sealed
segments at a time, so memory stays bounded however long they are; each version becomes one
line. Output is plain `.jsonl`, or zstd-compressed when the file name ends in `.zst`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import stashpoint
from stashpoint import StashpointError
from stashpoint.cli.redact import redact
from stashpoint.logs import LogEntry
from stashpoint.logs.format import SEGMENT_SPAN

LOG_EXPORT_FORMAT = "stashpoint.log-export/1"
"""The `format` of an exported log version's line."""
RUN_EXPORT_FORMAT = "stashpoint.run-export/1"
"""The `format` of an exported run's line."""
EXECUTION_EXPORT_FORMAT = "stashpoint.durable-execution-export/1"
"""The `format` of an exported durable execution's line (`stashpoint durable export`)."""
WINDOW = 2 * SEGMENT_SPAN
"""Versions read at once (two sealed segments, aligned): bounds the memory of an export.
A packed range is read once per window (its pack each time): memory, not requests, is
what an export of any length must bound."""


@dataclass
class Tally:
    """What an export wrote and skipped."""

    lines: int = 0
    """Lines written."""
    unreadable: list[str] = field(default_factory=list)
    """Objects skipped, each with why."""


def log_lines(
    logs: stashpoint.LogStore, namespace: str, log_id: str, top: int, first: int = 0
) -> Iterator[dict[str, Any]]:
    """Yield one export line per version of a log, oldest first, a window at a time.

    `first`: the oldest version kept (a LangGraph thread rewritten by `prune` starts later).
    """
    from stashpoint.cli.output import rfc3339
    from stashpoint.steps import run_sync

    # One listing for every window: listing the log again per window costs the square of
    # its length where storage cannot start a listing after a key (a directory bucket).
    listing = run_sync(logs.steps.listing(log_id), logs.driver)
    start = first
    while start <= top:
        stop = min(top, start - start % WINDOW + WINDOW - 1)
        entries: list[LogEntry] = run_sync(
            logs.steps.entries(log_id, start, stop, listed=listing), logs.driver
        )
        start = stop + 1
        for entry in entries:
            yield {
                "format": LOG_EXPORT_FORMAT,
                "namespace": namespace,
                "log": log_id,
                **entry.fields(whole=True),
                "written_at": rfc3339(entry.written_at),
            }
        del entries


class Sink:
    """A JSON Lines file written beside its destination, renamed over it when complete.

    Created readable by its owner only (0600); zstd-compressed when the name ends in
    `.zst`. A failed or empty export never truncates an existing file.
    """

    def __init__(self, target: Path) -> None:
        self.target = target
        self.partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
        try:
            descriptor = os.open(self.partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        except OSError as exc:
            from stashpoint.errors import ConfigurationError

            # Named by the file asked for, not the hidden one written beside it.
            raise ConfigurationError(
                f"cannot write the export to {target}: {exc.strerror or exc}; choose a "
                "folder you may write to",
                object_name=str(target),
            ) from None
        self._raw = os.fdopen(descriptor, "wb")
        self._out: IO[bytes] = self._raw
        if target.name.endswith(".zst"):
            import zstandard

            compressor = zstandard.ZstdCompressor(level=9, write_checksum=True)
            self._out = compressor.stream_writer(self._raw, closefd=False)

    def write(self, line: dict[str, Any]) -> None:
        """Write one line."""
        self._out.write(json.dumps(line, ensure_ascii=False).encode() + b"\n")

    def commit(self) -> None:
        """Finish the file and move it over the destination."""
        self._finish()
        os.replace(self.partial, self.target)

    def close(self) -> None:
        """Close the file; an uncommitted one is removed (nothing half-written is left)."""
        self._finish()
        self.partial.unlink(missing_ok=True)

    def _finish(self) -> None:
        if self._raw.closed:
            return
        if self._out is not self._raw:
            self._out.close()  # writes the end of the zstd frame
        self._raw.close()


def export_logs(
    sink: Sink,
    logs: stashpoint.LogStore,
    namespace: str,
    ids: list[str],
    hide: tuple[str, ...],
    tally: Tally,
    advance: Callable[[int], None],
) -> None:
    """Export every version of each log in `ids`; unreadable logs are skipped and named."""
    for log_id in ids:
        try:
            head = logs.head(log_id)
            first = _kept_from(head) if namespace == "langgraph" else 0
            for line in log_lines(logs, namespace, log_id, head.version, first):
                if hide:
                    line["state"] = redact(line["state"], hide)
                    line["records"] = redact(line["records"], hide)
                sink.write(line)
                tally.lines += 1
                advance(1)
        except stashpoint.CheckpointNotFound:
            continue  # deleted since it was listed
        except StashpointError as exc:
            tally.unreadable.append(f"{namespace}/{log_id}: {exc}")


def _kept_from(head: stashpoint.LogHead) -> int:
    """Return the first version a LangGraph thread keeps (its last rewrite or tombstone)."""
    state = head.state
    base = state.get("base", 0) if isinstance(state, dict) else 0
    return base if isinstance(base, int) and 0 <= base <= head.version else 0


def run_export(
    stash: stashpoint.Stash,
    target: Path,
    *,
    prefix: str | None,
    runs: list[str],
    with_history: bool,
    hide: str | None,
    as_json: bool,
    document: Callable[[stashpoint.Envelope, tuple[str, ...]], dict[str, Any]],
) -> int:
    """Export what `prefix` and `runs` name from `stash` to `target`; return the exit status.

    `document` turns an envelope into its line (redacted by the names given).
    """
    from stashpoint.cli.output import Output
    from stashpoint.cli.progress import counting
    from stashpoint.cli.redact import parse
    from stashpoint.cli.safe import safe

    output = Output(as_json=as_json)
    names = parse(hide, defaults=False)
    tally = Tally()
    sink = Sink(target)
    try:
        logs_by_namespace, envelope_ids, total = _selected(stash, prefix)
        with counting("exporting", quiet=as_json, total=total + len(runs)) as tick:

            def advance(count: int) -> None:
                for _ in range(count):
                    tick()

            for namespace, logs, ids in logs_by_namespace:
                export_logs(sink, logs, namespace, ids, names, tally, advance)
            for checkpoint_id in envelope_ids:
                for envelope in _envelopes(stash, checkpoint_id, with_history, tally):
                    sink.write(document(envelope, names))
                    tally.lines += 1
                tick()
            for run_id in runs:
                _export_run(stash, run_id, sink, names)
                tally.lines += 1
                tick()
        if tally.lines == 0 and target.exists():
            raise stashpoint.InvalidArgument(f"nothing matched: {target} is left as it was")
        sink.commit()
    finally:
        sink.close()
    if as_json:
        output.emit({"file": str(target), "records": tally.lines, "unreadable": tally.unreadable})
    else:
        output.say(f"wrote {tally.lines} records to {safe(str(target))}")
        for problem in tally.unreadable:
            output.warn(f"[yellow]skipped, unreadable:[/] {safe(problem)}")
    return 1 if tally.unreadable else 0


def _selected(
    stash: stashpoint.Stash, prefix: str | None
) -> tuple[list[tuple[str, stashpoint.LogStore, list[str]]], list[str], int]:
    """Return what `prefix` selects, and how many versions and envelopes that is.

    Each log namespace's ids, and the ids of the envelopes that are not agents' logs.
    """
    from stashpoint.stores.layout import AGENTS, CONVERSATIONS, DURABLE_EXECUTIONS, LANGGRAPH

    if prefix is None:
        return [], [], 0
    namespaces = (
        ("agents", stash.logs_in(AGENTS)), ("conversations", stash.logs_in(CONVERSATIONS)),
        ("logs", stash.logs), ("langgraph", stash.logs_in(LANGGRAPH)),
        ("durable-executions", stash.logs_in(DURABLE_EXECUTIONS)),
    )  # fmt: skip
    logs_by_namespace: list[tuple[str, stashpoint.LogStore, list[str]]] = []
    total = 0
    for namespace, logs in namespaces:
        ids = logs.list_ids(prefix)
        logs_by_namespace.append((namespace, logs, ids))
        total += sum(_versions(logs, i) for i in ids)
    in_logs = set(logs_by_namespace[0][2])
    envelope_ids = [i for i in stash.checkpoints.list_ids(prefix) if i not in in_logs]
    return logs_by_namespace, envelope_ids, total + len(envelope_ids)


def _envelopes(
    stash: stashpoint.Stash, checkpoint_id: str, with_history: bool, tally: Tally
) -> list[stashpoint.Envelope]:
    """Return a checkpoint's head (and its history).

    None if it was deleted since it was listed; none and a tally line if unreadable.
    """
    try:
        envelopes = [stash.checkpoints.load(checkpoint_id)]
        if with_history:
            envelopes += stash.checkpoints.history(checkpoint_id)
    except stashpoint.CheckpointNotFound:
        return []
    except StashpointError as exc:
        tally.unreadable.append(f"{checkpoint_id}: {exc}")
        return []
    return envelopes


def _export_run(stash: stashpoint.Stash, run_id: str, sink: Sink, names: Any) -> None:
    """Write a run's state as one line (redacted by `names`)."""
    state = stash.runs.load_run(run_id)
    if state is None:
        raise stashpoint.RunNotFound("no run with this id", object_name=run_id)
    dumped = redact(state.model_dump(mode="json"), names)
    sink.write({"format": RUN_EXPORT_FORMAT, **dumped})


def _versions(logs: stashpoint.LogStore, log_id: str) -> int:
    try:
        return logs.head(log_id).version + 1
    except StashpointError:
        return 0  # reported when it is exported
