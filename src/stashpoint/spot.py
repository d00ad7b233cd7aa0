"""The end of this compute, seen coming: spot notices, rebalance hints and SIGTERM.

For a loop that should flush and exit before it is killed:

    with SpotWatcher() as watcher:
        for item in work:
            process(item)
            if watcher.stopping.is_set():
                save(); break        # two minutes at most after a notice, often less

`SpotWatcher` polls the instance metadata service (IMDSv2: a session token from `PUT
/latest/api/token`, then `spot/instance-action` and `events/recommendations/rebalance`)
on a daemon thread, and catches SIGTERM (AWS Batch and ECS send it before SIGKILL). It
honours `AWS_EC2_METADATA_SERVICE_ENDPOINT` and `AWS_EC2_METADATA_DISABLED`, as the AWS
SDKs do. Off EC2 the first token request fails fast on the thread and polling stops: no
cost and no delay for the caller. Only the standard library is used.

The clock trusted for the deadline is the notice's own `time` (set by EC2, in UTC): the
watcher reports it as given; it never guesses an end from the local clock alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from types import FrameType, TracebackType
from typing import Any

DEFAULT_ENDPOINT = "http://169.254.169.254"
"""Where the instance metadata service answers on EC2."""
TOKEN_TTL_SECONDS = 21600
"""Lifetime asked for each IMDSv2 session token (the maximum)."""
_TOKEN_PATH = "/latest/api/token"
_ACTION_PATH = "/latest/meta-data/spot/instance-action"
_REBALANCE_PATH = "/latest/meta-data/events/recommendations/rebalance"
_INSTANCE_PATH = "/latest/meta-data/instance-id"


@dataclass(frozen=True, slots=True)
class Notice:
    """Why this compute is ending, and when."""

    source: str
    """`spot` (an EC2 interruption notice) or `signal` (SIGTERM)."""
    action: str
    """`terminate`, `stop` or `hibernate` for a spot notice; the signal's name otherwise."""
    deadline: datetime | None
    """When EC2 acts (the notice's `time`, UTC); None for a signal."""


def compute_identity(environ: dict[str, str] | None = None) -> dict[str, str]:
    """Return what identifies this compute in its environment, to record with an attempt.

    AWS Batch's job id, attempt and array index; the ECS task metadata endpoint; the
    Lambda function and log stream. The EC2 instance id comes from `SpotWatcher`.
    """
    env = os.environ if environ is None else environ
    names = {
        "batch_job_id": "AWS_BATCH_JOB_ID",
        "batch_job_attempt": "AWS_BATCH_JOB_ATTEMPT",
        "batch_array_index": "AWS_BATCH_JOB_ARRAY_INDEX",
        "ecs_task_metadata": "ECS_CONTAINER_METADATA_URI_V4",
        "lambda_function": "AWS_LAMBDA_FUNCTION_NAME",
        "lambda_log_stream": "AWS_LAMBDA_LOG_STREAM_NAME",
    }
    return {field: env[name] for field, name in names.items() if env.get(name)}


class SpotWatcher:
    """Watches for a spot interruption notice, a rebalance recommendation and SIGTERM.

    `stopping` is set on a notice or a signal; `notice` says which. `rebalance` holds the
    time of a rebalance recommendation (EC2's early hint that the instance is at elevated
    risk: a good moment to checkpoint, not yet to stop). `on_notice` is called once, from
    the watcher thread or the signal handler, with the `Notice`.
    """

    def __init__(
        self,
        *,
        interval: float = 5.0,
        on_notice: Callable[[Notice], None] | None = None,
        endpoint: str | None = None,
        timeout: float = 1.0,
        catch_sigterm: bool = True,
    ) -> None:
        self.interval = interval
        """Seconds between two polls (EC2 posts the notice two minutes ahead)."""
        self.on_notice = on_notice
        """Called once with the first `Notice`."""
        self.endpoint = (
            endpoint or os.environ.get("AWS_EC2_METADATA_SERVICE_ENDPOINT") or DEFAULT_ENDPOINT
        ).rstrip("/")
        """The metadata service's base URL."""
        self.timeout = timeout
        """Seconds each metadata request may take."""
        self.catch_sigterm = catch_sigterm
        """Whether SIGTERM sets `stopping` (only possible from the main thread)."""
        self.stopping = threading.Event()
        """Set when the compute is ending: flush and exit."""
        self.notice: Notice | None = None
        """The first notice seen."""
        self.rebalance: datetime | None = None
        """When EC2 recommended a rebalance, if it did."""
        self.instance_id: str | None = None
        """This EC2 instance's id, once the metadata service answered."""
        self.on_ec2: bool | None = None
        """Whether the metadata service answered (None until the first attempt ends)."""
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._token: str | None = None
        self._previous_handler: Any = None
        self._lock = threading.Lock()

    @property
    def disabled(self) -> bool:
        """Whether `AWS_EC2_METADATA_DISABLED` turns metadata polling off."""
        return os.environ.get("AWS_EC2_METADATA_DISABLED", "").lower() == "true"

    def start(self) -> SpotWatcher:
        """Start watching (idempotent); returns the watcher."""
        if self.catch_sigterm and threading.current_thread() is threading.main_thread():
            self._previous_handler = signal.signal(signal.SIGTERM, self._on_signal)
        if self._thread is None and not self.disabled:
            self._thread = threading.Thread(
                target=self._poll, name="stashpoint-spot-watcher", daemon=True
            )
            self._thread.start()
        return self

    def close(self) -> None:
        """Stop watching and give SIGTERM back to its previous handler."""
        self._closed.set()
        if self._previous_handler is not None:
            signal.signal(signal.SIGTERM, self._previous_handler)
            self._previous_handler = None
        if self._thread is not None:
            self._thread.join(timeout=self.timeout + 1)

    def __enter__(self) -> SpotWatcher:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._notify(Notice("signal", signal.Signals(signum).name, None))

    def _notify(self, notice: Notice) -> None:
        with self._lock:
            if self.notice is not None:
                return
            self.notice = notice
        self.stopping.set()
        if self.on_notice is not None:
            self.on_notice(notice)

    # -- the metadata service ---------------------------------------------------------------

    def _poll(self) -> None:
        try:
            self._refresh_token()
        except OSError:
            self.on_ec2 = False  # not on EC2 (or IMDS off): nothing more to poll
            return
        self.on_ec2 = True
        try:
            self.instance_id = self._get(_INSTANCE_PATH)
        except OSError:
            self.instance_id = None
        while not self._closed.is_set() and not self.stopping.is_set():
            with contextlib.suppress(OSError):  # a blip: the next poll tries again
                self._check()
            self._closed.wait(self.interval)

    def _check(self) -> None:
        if self.rebalance is None:
            body = self._get(_REBALANCE_PATH)
            if body is not None:
                self.rebalance = _time(json.loads(body).get("noticeTime")) or datetime.now(UTC)
        body = self._get(_ACTION_PATH)
        if body is not None:
            action = json.loads(body)
            kind = str(action.get("action", "terminate"))
            self._notify(Notice("spot", kind, _time(action.get("time"))))

    def _refresh_token(self) -> None:
        request = urllib.request.Request(
            self.endpoint + _TOKEN_PATH,
            method="PUT",
            headers={"X-aws-ec2-metadata-token-ttl-seconds": str(TOKEN_TTL_SECONDS)},
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            self._token = response.read().decode()

    def _get(self, path: str, *, retried: bool = False) -> str | None:
        """Return a metadata document, None when absent (404)."""
        request = urllib.request.Request(
            self.endpoint + path, headers={"X-aws-ec2-metadata-token": self._token or ""}
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return str(response.read().decode())
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            if exc.code == 401 and not retried:  # the token expired: get another
                self._refresh_token()
                return self._get(path, retried=True)
            raise


def _time(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
