"""Wake due runs on AWS: a Lambda handler that EventBridge Scheduler calls every minute.

A durable run that waits (`run.wait`, `run.wait_for`, a retry's delay) is suspended: no
process runs until something invokes its handler again. This module is that something,
deployed by `infra/stashpoint.yaml` when its `WakeTarget` parameter is set: every minute it
lists the due runs (`stash.runs.list_due`, from the index) and sends each to the target, an
SQS queue or a Lambda function, as a JSON message:

    {"run_id": "refund-42", "namespace": "default", "graph_name": "agent",
     "wake_at": "2026-12-03T12:00:00+00:00", "dedup": "<sha256 of run, wake time, window>"}

**Idempotent.** A run stays due until its worker runs it, so the poller sees it every
minute; it is sent once per `resend_after` (15 minutes by default) for a wake time
(`RunStore.claim_wake`: one conditional index write decides, whichever pollers race), and
again only if it is still due a window later: a message or a worker lost on the way costs
a delay, never the run. A worker that gets a run twice is harmless: a durable run replays
what it did, and a step running under a live lease answers `RunClaimed`.

    STASHPOINT_URL           the stash (with its index)
    STASHPOINT_WAKE_TARGET   arn:aws:sqs:... or arn:aws:lambda:...
    STASHPOINT_WAKE_NAMESPACE   the runs' namespace (default: default)
    STASHPOINT_WAKE_RESEND   seconds between sends of a run still due (default: 900)
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import timedelta
from typing import Any

import stashpoint
from stashpoint.errors import ConfigurationError, StashpointError

log = logging.getLogger("stashpoint")

Send = Callable[[Sequence[dict[str, Any]]], list[bool]]
"""Sends messages to the target; returns which were accepted."""


@dataclass(frozen=True)
class WakeReport:
    """What one poll did."""

    due: int
    """Due runs listed."""
    sent: int
    """Runs sent to the target."""
    skipped: int
    """Due runs already sent in this window (by this poller or another)."""
    failed: int
    """Runs the target did not accept (sent again a window later)."""


def message(row: Any, window: int) -> dict[str, Any]:
    """Return the message that wakes one due run (`row`: its `RunRow`) in send `window`."""
    wake_at = row.wake_at.isoformat() if row.wake_at is not None else None
    dedup = hashlib.sha256(f"{row.run_id}|{wake_at}|{window}".encode()).hexdigest()
    return {
        "run_id": row.run_id,
        "namespace": row.namespace,
        "graph_name": row.graph_name,
        "wake_at": wake_at,
        "dedup": dedup,
    }


def wake_due(
    stash: stashpoint.Stash,
    send: Send,
    *,
    namespace: str = "default",
    resend_after: timedelta = timedelta(minutes=15),
    limit: int = 1000,
) -> WakeReport:
    """Send every due run of `namespace` (at most `limit`) that no poller sent this window."""
    runs = stash.runs
    due = sent = skipped = failed = 0
    cursor = None
    while due < limit:
        page = runs.list_due(namespace=namespace, limit=min(100, limit - due), cursor=cursor)
        chosen = []
        for row in page.items:
            due += 1
            window = None
            if row.wake_at is not None:
                window = runs.claim_wake(row.run_id, row.wake_at, every=resend_after)
            if window is None:
                skipped += 1
            else:
                chosen.append(message(row, window))
        if chosen:
            accepted = send(chosen)
            sent += sum(accepted)
            failed += len(chosen) - sum(accepted)
        cursor = page.cursor
        if cursor is None:
            break
    if failed:
        log.warning("stashpoint wake: the target refused %d of %d due runs", failed, failed + sent)
    return WakeReport(due=due, sent=sent, skipped=skipped, failed=failed)


def handler(event: Any = None, context: Any = None) -> dict[str, Any]:
    """Poll the due runs once and send them on (the Lambda handler; set up by the environment)."""
    from stashpoint._backends.targets import target_of

    target = os.environ.get("STASHPOINT_WAKE_TARGET", "")
    if not target:
        raise ConfigurationError("set STASHPOINT_WAKE_TARGET to an SQS queue or Lambda ARN")
    resend = float(os.environ.get("STASHPOINT_WAKE_RESEND", "900"))
    namespace = os.environ.get("STASHPOINT_WAKE_NAMESPACE", "default")
    try:
        with stashpoint.open() as stash:
            report = wake_due(
                stash, target_of(target).send, namespace=namespace,
                resend_after=timedelta(seconds=resend),
            )  # fmt: skip
    except StashpointError as exc:
        log.error("stashpoint wake: %s", exc.kind.value)
        raise
    return asdict(report)
