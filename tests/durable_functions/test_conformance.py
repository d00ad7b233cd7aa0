"""AWS's durable execution conformance requirements, run against stashpoint's service.

The 155 requirements are read at test time from the published wheel
(`aws-durable-execution-conformance-tests` 1.0.0, downloaded from PyPI into `.cache/`,
never copied into the repository). Each is run through `DurableFunctions` with our
handler for it (`conformance_handlers`), on a fake clock, with the requirement's
callback actions sent as its async validator sends them; the history is judged by the
wheel's own matcher (`EventHistoryMatcher`: wildcards, bound ids, variables) and the
result by its own result check. Requirements we have no handler for yet, or that need
Lambda itself, are listed in `NOT_RUN` with the reason, and reported.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("aws_durable_execution_sdk_python")

import stashpoint
from stashpoint.clock import FakeClock
from stashpoint.durable_functions import DurableFunctions
from stashpoint.durable_functions.lambda_api import LambdaApi
from tests.downloads import fetching
from tests.durable_functions import conformance_handlers
from tests.durable_functions.conformance_handlers import HANDLERS, TARGETS, SimulatedCrash

WHEEL = "aws-durable-execution-conformance-tests==1.0.0"
ROOT = Path(__file__).resolve().parents[2]
CACHE = ROOT / ".cache" / "conformance"
LEASE_S = 60

NOT_RUN: dict[str, str] = {}
"""Requirement id -> why it is not run here (filled below for suites not yet handled)."""


def _package_dir() -> Path:
    """Download and unpack the requirements wheel once; return its package folder."""
    unpacked = CACHE / "unpacked"
    package = unpacked / "aws_durable_execution_conformance_tests"
    if package.is_dir():
        return package
    with fetching(CACHE):
        if not package.is_dir():  # another worker fetched it while this one waited
            _fetch(unpacked)
    return package


def _fetch(unpacked: Path) -> None:
    # The wheel says Python >= 3.14 for its CLI; its YAML files and matcher are data and
    # plain Python, so it is downloaded for 3.14 and unpacked, not installed.
    subprocess.run(
        [
            sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
            "--python-version", "3.14", "--only-binary=:all:", "--dest", str(CACHE), WHEEL,
        ],
        check=True,
    )  # fmt: skip
    wheel = next(CACHE.glob("aws_durable_execution_conformance_tests-1.0.0-*.whl"))
    partial = unpacked.with_name("unpacked.partial")
    shutil.rmtree(partial, ignore_errors=True)
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(partial)
    partial.rename(unpacked)  # whole or absent: a worker that looks without the lock sees it so


def _requirements() -> list[tuple[str, Path]]:
    package = _package_dir()
    if str(package.parent) not in sys.path:
        sys.path.insert(0, str(package.parent))
    found = []
    for path in sorted((package / "test_requirements").glob("*/*.yaml")):
        found.append((path.stem, path))
    return found


REQUIREMENTS = _requirements()
SUITES = sorted({path.parent.name for _, path in REQUIREMENTS})


def _key(req_id: str) -> tuple[int, int]:
    suite, number = req_id.split("-")
    return int(suite), int(number)


def _drive(
    functions: DurableFunctions, clock: FakeClock, arn: str, data: dict[str, Any], context: Any
) -> None:
    """Run the execution to its end, sending the requirement's callback actions as they come."""
    from aws_durable_execution_conformance_tests.callback import CallbackAction
    from aws_durable_execution_conformance_tests.validate import (
        extract_callback_events,
        find_matching_action,
    )

    api = LambdaApi(functions)
    actions = [CallbackAction.from_dict(raw) for raw in data.get("CallbackActions", [])]
    handled: set[str] = set()
    used: set[int] = set()
    for _ in range(200):  # bounded: every requirement ends in far fewer rounds
        try:
            functions.run_due()
        except SimulatedCrash:
            clock.advance(LEASE_S + 1)  # the crashed invocation's lease runs out
            continue
        if functions.service.read(arn).state.ended:
            return
        events = api.get_durable_execution_history(DurableExecutionArn=arn)["Events"]
        acted = False
        for event in extract_callback_events(events, handled):
            callback_id = event["CallbackStartedDetails"]["CallbackId"]
            action, index = find_matching_action(event, actions, used, context)
            if action is None:
                handled.add(callback_id)
                continue
            used.add(index)  # type: ignore[arg-type]
            if action.operation != "heartbeat":
                handled.add(callback_id)
            if action.delay_seconds:
                clock.advance(action.delay_seconds)
            payload = context.substitute(action.payload)
            if action.operation == "success":
                api.send_durable_execution_callback_success(
                    CallbackId=callback_id,
                    Result=None if payload is None else __import__("json").dumps(payload).encode(),
                )
            elif action.operation == "failure":
                api.send_durable_execution_callback_failure(CallbackId=callback_id, Error=payload)
            else:
                api.send_durable_execution_callback_heartbeat(CallbackId=callback_id)
            acted = True
            break  # the service invokes the execution before the next answer comes
        if acted:
            continue
        due = functions.service.next_due_ms()
        if due is None:
            return
        clock.advance(max(0.001, (due - functions.service.now_ms()) / 1000))


def run_requirement(
    req_id: str, path: Path, url: str = "memory://", options: dict[str, Any] | None = None
) -> list[str]:
    """Run one requirement; return the matcher's and the result check's errors."""
    from datetime import timedelta

    from aws_durable_execution_conformance_tests.history import EventHistoryMatcher
    from aws_durable_execution_conformance_tests.validate import _validate_execution_result
    from aws_durable_execution_conformance_tests.variables import PlaceholderContext

    data = yaml.safe_load(path.read_text())
    context = PlaceholderContext()
    context.resolve_variables(data.get("Variables"))
    conformance_handlers.ATTEMPTS.clear()
    conformance_handlers.LOG_LINES.clear()
    clock = FakeClock()
    with stashpoint.open(url, clock=clock, **(options or {})) as stash, _handler_logs():
        functions = DurableFunctions(stash, lease=timedelta(seconds=LEASE_S))
        for name, handler in HANDLERS.items():
            functions.register(f"r{name}", handler)
        for name, handler in TARGETS.items():
            functions.register(name, handler)
        arn = functions.start(f"r{req_id}", context.substitute(data.get("Input")))
        conformance_handlers.RECORDED.history = lambda: functions.service.read(arn).events
        _drive(functions, clock, arn, data, context)
        api = LambdaApi(functions)
        events = api.get_durable_execution_history(DurableExecutionArn=arn)["Events"]
        errors = list(
            EventHistoryMatcher(context=context)
            .match(data["ExpectedExecutionHistory"], events)
            .errors
        )
        if data.get("ExpectedResult"):
            errors += _validate_execution_result(arn, data["ExpectedResult"], api, context)
    if data.get("ExpectedLogs"):
        from aws_durable_execution_conformance_tests.cloudwatch import CloudWatchLogValidator

        lines = [
            {"message": line, "timestamp": i}
            for i, line in enumerate(conformance_handlers.LOG_LINES)
        ]
        errors += (
            CloudWatchLogValidator().validate(data["ExpectedLogs"], lines, context=context).errors
        )
    return errors


class _Lines(logging.Handler):
    """Keeps what handlers log through the SDK's context and step loggers (the root logger)."""

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "root":
            conformance_handlers.LOG_LINES.append(record.getMessage())


@contextlib.contextmanager
def _handler_logs() -> Iterator[None]:
    root = logging.getLogger()
    handler, level = _Lines(logging.INFO), root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


@pytest.fixture(params=["local", "s3-dynamodb"])
def backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """The embedded default, and SeaweedFS with DynamoDB Local (the production shape)."""
    name = {"local": "local_url", "s3-dynamodb": "s3_dynamo_url"}[request.param]
    url, options = request.getfixturevalue(name)
    return url, options


@pytest.mark.parametrize(("req_id", "path"), REQUIREMENTS, ids=[r for r, _ in REQUIREMENTS])
def test_requirement(req_id: str, path: Path, backend: tuple[str, dict[str, Any]]) -> None:
    """The requirement's history and result, judged by the wheel's own matcher."""
    if req_id not in HANDLERS:
        pytest.skip(NOT_RUN.get(req_id, "no handler written for this requirement yet"))
    url, options = backend
    errors = run_requirement(req_id, path, url, options)
    assert not errors, "\n".join(errors)


def test_every_requirement_has_a_handler() -> None:
    """The score: every one of the 155 published requirements runs here."""
    assert len(REQUIREMENTS) == 155
    missing = sorted((r for r, _ in REQUIREMENTS if r not in HANDLERS), key=_key)
    assert missing == sorted(NOT_RUN, key=_key), missing
