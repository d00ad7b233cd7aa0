"""`stashpoint runs show RUN --html FILE`: a run as one self-contained HTML page.

The page (`report_page.html`, beside this module) needs no network (no CDN, no fonts, no
images): its data is one JSON document in a `<script type="application/json">`, drawn by
the page's own script. Every stored string
reaches the page as data and is shown with `textContent`, never parsed as HTML, so a
hostile node name or error cannot run in the reader's browser. Payload fields are
redacted as `show` redacts them.

What it shows: the run's header (status, times, counts, errors, a wait's due time); the
attempts as a timeline, a lane per step (map items `name[i]` share their step's lane,
packed into rows by overlap), coloured by status, retries outlined, waits drawn to their
wake time, takeovers (epochs) as vertical lines; a filterable table of the attempts; the
state snapshot; and for an agent (`--agent ID`) its transcript with tool calls.
"""

from __future__ import annotations

import html
import json
import os
import re
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from stashpoint.cli.output import rfc3339

_ITEM = re.compile(r"^(?P<base>.*)\[(?P<index>\d+)\]$")
_SNAPSHOT_LIMIT = 200_000
"""Characters of the snapshot's JSON the page shows (the rest is cut, and says so)."""


def _ms(value: datetime | None) -> int | None:
    return None if value is None else int(value.timestamp() * 1000)


def _lane(node_id: str) -> str:
    match = _ITEM.match(node_id)
    return match.group("base") if match else node_id


def report_data(
    state: Any, *, stash: str, redacted: dict[str, Any], transcript: list[Any] | None
) -> dict[str, Any]:
    """Return what the page draws: plain JSON (times in ms since the epoch, and RFC 3339).

    `redacted` is the run's JSON with secret fields hidden (`show`'s redaction).
    """
    attempts = []
    for record, dumped in zip(state.attempts, redacted.get("attempts", []), strict=True):
        output = dumped.get("output")
        wake = output.get("wake_at") if isinstance(output, dict) else None
        attempts.append(
            {
                "id": record.attempt_id, "node": record.node_id, "lane": _lane(record.node_id),
                "attempt": record.attempt, "status": record.status.value,
                "start": _ms(record.started_at), "end": _ms(record.finished_at),
                "error": record.error, "epoch": record.epoch,
                "wake": _ms(datetime.fromisoformat(wake)) if isinstance(wake, str) else None,
                "input": dumped.get("input"), "output": output,
            }
        )  # fmt: skip
    snapshot = json.dumps(redacted.get("state_snapshot", {}), indent=2, ensure_ascii=False)
    cut = len(snapshot) > _SNAPSHOT_LIMIT
    return {
        "run": {
            "id": state.run_id,
            "graph": state.graph_name,
            "status": state.status.value,
            "namespace": state.namespace,
            "created": rfc3339(state.created_at),
            "updated": rfc3339(state.updated_at),
            "error": state.error,
            "wake": None if state.wake_at is None else rfc3339(state.wake_at),
            "interrupted": None
            if state.interrupted is None
            else {
                "node": state.interrupted.node_id,
                "reason": str(state.interrupted.reason),
            },
            "now": _ms(state.updated_at),
        },
        "stash": stash,
        "attempts": attempts,
        "snapshot": snapshot[:_SNAPSHOT_LIMIT],
        "snapshot_cut": cut,
        "transcript": transcript,
    }


_OPERATION_STATUS = {
    "SUCCEEDED": "completed", "FAILED": "failed", "TIMED_OUT": "failed", "STARTED": "running",
    "READY": "running", "PENDING": "waiting", "CANCELLED": "cancelled", "STOPPED": "cancelled",
}  # fmt: skip
"""A durable operation's status as the page colours it."""
_EXECUTION_STATUS = {"SUCCEEDED": "completed", "RUNNING": "running", "STOPPED": "cancelled"}


def execution_report_data(view: Any, *, arn: str, stash: str) -> dict[str, Any]:
    """Return what the page draws for a Lambda durable execution (`durable history --html`).

    Each operation (step, wait, callback, invoke, child context) is a bar in the lane of
    its name; payloads (inputs, results) are left out entirely, errors keep their type.
    """
    state = view.state
    attempts = [_operation_bar(op) for op in view.operations.values()]
    attempts.sort(key=lambda a: (a["start"] or 0, a["id"]))
    started = datetime.fromtimestamp(state.started_ms / 1000, tz=UTC)
    ended = (
        started if state.ended_ms is None else datetime.fromtimestamp(state.ended_ms / 1000, tz=UTC)
    )
    return {
        "run": {
            "id": arn, "graph": state.function, "namespace": "durable-executions",
            "status": _EXECUTION_STATUS.get(state.status, "failed"),
            "created": rfc3339(started), "updated": rfc3339(ended),
            "error": None if state.status in _EXECUTION_STATUS else state.status,
            "wake": None, "interrupted": None, "now": state.ended_ms or state.started_ms,
        },
        "kind": "durable execution", "stash": stash, "attempts": attempts, "snapshot": "",
        "snapshot_cut": False, "transcript": None,
    }  # fmt: skip


def _operation_bar(op: dict[str, Any]) -> dict[str, Any]:
    """Return one operation of a durable execution as a bar of the page (no payloads)."""
    details = op.get("StepDetails") or {}
    name = op.get("Name") or op["Id"]
    wake = (op.get("WaitDetails") or {}).get("ScheduledEndTimestamp")
    # `Attempt` counts the tries that failed: one more is running or succeeded.
    tries = int(details.get("Attempt") or 0)
    attempt = tries + (1 if op["Status"] in ("SUCCEEDED", "STARTED", "READY") else 0) or 1
    return {
        "id": op["Id"], "node": name, "lane": f"{op.get('SubType') or op['Type']} {name}",
        "attempt": attempt,
        "status": _OPERATION_STATUS.get(op["Status"], op["Status"].lower()),
        "start": op.get("StartTimestamp"), "end": op.get("EndTimestamp"),
        "error": _error_type(op, details),
        "epoch": 0, "wake": wake, "input": None, "output": None,
    }  # fmt: skip


def _error_type(op: dict[str, Any], details: dict[str, Any]) -> Any:
    """Return the type of the error an operation that did not succeed ended with."""
    error = details.get("Error") or (op.get("ContextDetails") or {}).get("Error")
    if isinstance(error, dict) and op["Status"] != "SUCCEEDED":
        return error.get("ErrorType")
    return None


def _script_json(data: dict[str, Any]) -> str:
    # Inside <script>, only "</" (and "<!--") could end or change the element: escaped.
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)
    return text.replace("<", "\\u003c").replace("\u2028", "\\u2028").replace("\u2029", "\\u2029")


def write_report(target: Path, data: dict[str, Any]) -> None:
    """Write the page to `target`, owner-only, whole or not at all (renamed into place)."""
    title = html.escape(f"{data.get('kind', 'run')} {data['run']['id']} — stashpoint")
    template = resources.files("stashpoint.cli").joinpath("report_page.html").read_text("utf-8")
    head, tail = template.split("__DATA__")  # the data is placed, never searched for markers
    page = head.replace("__TITLE__", title) + _script_json(data) + tail
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    # Owner-only, like an export: redacted, but still the run's data.
    descriptor = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write(page)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
