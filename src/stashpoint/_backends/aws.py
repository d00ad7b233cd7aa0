"""One long-lived AWS client per transport, created on first use (never in a constructor)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import botocore.exceptions

from stashpoint.clock import REAL, answer, answer_async
from stashpoint.errors import ConfigurationError, LimitExceeded, StashpointError
from stashpoint.steps import Request, Sleep, Steps, run_async, run_sync


@dataclass(frozen=True, slots=True)
class AwsCall(Request[Any]):
    """One AWS API call, as a protocol describes it: the client method and its parameters."""

    method: str
    """Client method name, such as `put_object`."""
    params: dict[str, Any]
    """Keyword arguments of the call."""
    read_body: bool = False
    """Whether the driver must read the response's streaming `Body` into bytes."""
    max_body: int | None = None
    """Refuse (`LimitExceeded`) a body larger than this from its length, before reading it."""
    refusal: str | None = None
    """An error code that answers the call rather than failing it (a condition that did not
    hold): the call returns `REFUSED`, so calls sent at once each keep their own answer."""


REFUSED = object()
"""What a call answers when the service refused it with the call's `refusal` code."""


def _refused(call: AwsCall, exc: Exception) -> bool:
    return (
        call.refusal is not None
        and isinstance(exc, botocore.exceptions.ClientError)
        and exc.response.get("Error", {}).get("Code") == call.refusal
    )


def as_config(value: Any, option: str) -> Any:
    """Return a botocore `Config` from a `Config` or a dict of its keyword arguments."""
    import botocore.config

    if value is None or isinstance(value, botocore.config.Config):
        return value
    if isinstance(value, dict):
        try:
            return botocore.config.Config(**value)
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"{option} is not a valid botocore Config: {exc}") from None
    raise ConfigurationError(
        f"{option} must be a botocore.config.Config or a dict of its arguments, "
        f"not {type(value).__name__}"
    )


def retries_configured(profile: str | None, session: Any = None) -> bool:
    """Whether the AWS environment says how to retry.

    `AWS_MAX_ATTEMPTS` or `AWS_RETRY_MODE` set, or `max_attempts` / `retry_mode` in the
    profile's section of the AWS config file. `session`: the botocore session of that
    profile that will make the client, asked instead of a new one (a session's creation
    registers botocore's handlers again: ~10-20 ms of CPU).
    """
    import os

    if os.environ.get("AWS_MAX_ATTEMPTS") or os.environ.get("AWS_RETRY_MODE"):
        return True
    import botocore.exceptions
    import botocore.session

    try:
        if session is None:
            session = botocore.session.Session(profile=profile)
        scoped = session.get_scoped_config()
    except botocore.exceptions.BotoCoreError:
        return False  # no such profile: the client's creation says so
    return bool(scoped.get("max_attempts") or scoped.get("retry_mode"))


@dataclass(frozen=True, kw_only=True)
class AwsClientSettings:
    """How to make an AWS client; what the standard AWS environment says, unless given."""

    client_config: Any = None
    """botocore client settings: timeouts, pool size, addressing style, and retries when
    the caller set them."""
    default_retries: dict[str, Any] | None = None
    """Retries used only where neither `client_config`, the environment
    (`AWS_MAX_ATTEMPTS`, `AWS_RETRY_MODE`) nor the profile says how to retry."""
    endpoint_url: str | None = None
    """Explicit endpoint; None lets the AWS environment decide."""
    region_name: str | None = None
    """Explicit region; None lets the AWS environment decide."""
    profile_name: str | None = None
    """Named AWS profile; None uses the default credential chain."""
    session: Any = None
    """A `boto3.Session` the client is made from (blocking stashes); None: a new one."""
    client: Any = None
    """A ready boto3 client, used as it is and never closed by stashpoint (blocking)."""

    def client_kwargs(self, session: Any = None) -> dict[str, Any]:
        """Return the keyword arguments for creating the client.

        `session`: the botocore session of `profile_name` that will make it, if made.
        """
        config = self.client_config
        if (
            self.default_retries is not None
            and (config is None or config.retries is None)
            and not retries_configured(self.profile_name, session)
        ):
            import botocore.config

            ours = botocore.config.Config(retries=self.default_retries)  # type: ignore[arg-type]
            config = ours if config is None else config.merge(ours)
        kwargs: dict[str, Any] = {"config": config}
        if self.endpoint_url:
            kwargs["endpoint_url"] = self.endpoint_url
        if self.region_name:
            kwargs["region_name"] = self.region_name
        return kwargs


_MODELS: Any = None
"""The process's one botocore data loader (AWS service models and endpoints), once made."""
_MODELS_LOCK = threading.Lock()


def with_shared_models(session: Any) -> Any:
    """Give a new botocore session the process's service models; return the session.

    Each botocore session parses the service's model (about a megabyte of JSON for S3)
    again when it makes its first client: about 130 ms, against 20 ms from models already
    parsed. A process that opens many stashes (a worker per task, a test suite, a CLI
    command per call in one interpreter) makes each client from the models the first
    session loaded. Credentials, profile and region stay each session's own; the models
    are read-only once loaded.
    """
    global _MODELS
    with _MODELS_LOCK:
        if _MODELS is None:
            _MODELS = session.get_component("data_loader")
        else:
            session.register_component("data_loader", _MODELS)
    return session


def iso_timestamp(value: Any) -> Any:
    """Parse a response's timestamp: ISO 8601 in C, anything else as botocore does.

    botocore parses every timestamp with dateutil, in Python: a 1,000-key S3 listing (each
    key's `LastModified`) costs about 40 ms of CPU in it, two thirds of the listing's
    parse, and a cold read of a long log lists that many keys. `datetime.fromisoformat`
    reads S3's form (`2026-12-05T11:40:00.000Z`) in microseconds; what it does not read,
    or reads without a zone (a date alone), goes to botocore's own parser, so the values
    are the same aware datetimes either way.
    """
    from botocore.utils import parse_timestamp

    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            pass
        else:
            if parsed.tzinfo is not None:
                return parsed
    return parse_timestamp(value)


def with_fast_timestamps(session: Any) -> Any:
    """Make a botocore session's clients parse timestamps with `iso_timestamp`; return it."""
    session.get_component("response_parser_factory").set_parser_defaults(
        timestamp_parser=iso_timestamp
    )
    return session


class LazyClient:
    """A boto3 client made on first use, shared by every thread (they are thread-safe).

    Made from the settings' `session`, or the settings' own ready `client`, else from a
    new botocore session of their profile (`with_shared_models`).
    """

    def __init__(self, service: str, settings: AwsClientSettings) -> None:
        self.instance: Any = settings.client
        """The client, once made (or as given)."""
        self._service = service
        self._settings = settings
        self._owned = settings.client is None  # a caller's client is the caller's to close
        self._lock = threading.Lock()

    def get(self) -> Any:
        """Return the client, making it on first use."""
        if self.instance is None:
            with self._lock:
                if self.instance is None:
                    session = self._settings.session
                    if session is not None:
                        kwargs = self._settings.client_kwargs()
                        self.instance = session.client(self._service, **kwargs)
                    else:
                        import botocore.session

                        core = botocore.session.Session(profile=self._settings.profile_name)
                        kwargs = self._settings.client_kwargs(core)
                        self.instance = with_fast_timestamps(
                            with_shared_models(core)
                        ).create_client(self._service, **kwargs)
        return self.instance

    def close(self) -> None:
        """Close the client's connection pool (unless the client was the caller's)."""
        if self.instance is not None and self._owned:
            self.instance.close()
            self.instance = None


class AsyncLazyClient:
    """An aiobotocore client made on first use inside the running event loop."""

    def __init__(self, service: str, settings: AwsClientSettings) -> None:
        if settings.session is not None or settings.client is not None:
            raise ConfigurationError(
                "session= and client= give boto3 objects, for blocking stashes "
                "(stashpoint.open); an asyncio stash makes its own aiobotocore clients from "
                "the AWS environment, profile_name and client_config"
            )
        import importlib.util

        if importlib.util.find_spec("aiobotocore") is None:
            # Refused where the stash is opened, not at its first request in the loop.
            raise ConfigurationError(
                f"an asyncio stash on AWS ({service}) needs aiobotocore: "
                "pip install 'stashpoint[async]'"
            )
        self.instance: Any = None
        """The client, once made."""
        self._service = service
        self._settings = settings
        self._context: Any = None
        self._lock: Any = None  # an asyncio.Lock, made inside the running loop

    async def get(self) -> Any:
        """Return the client, making it on first use."""
        if self.instance is None:
            if self._lock is None:
                import asyncio  # here: sync users (Lambda cold starts) never import it

                self._lock = asyncio.Lock()
            async with self._lock:
                if self.instance is None:
                    from aiobotocore.session import AioSession

                    session = with_fast_timestamps(
                        with_shared_models(AioSession(profile=self._settings.profile_name))
                    )
                    kwargs = self._settings.client_kwargs(session)
                    self._context = session.create_client(self._service, **kwargs)
                    self.instance = await self._context.__aenter__()
        return self.instance

    async def close(self) -> None:
        """Close the client and its connection pool."""
        if self._context is not None:
            context, self._context, self.instance = self._context, None, None
            await context.__aexit__(None, None, None)


NEVER_SENT = (  # errors raised before any byte went out: never ambiguous
    botocore.exceptions.NoCredentialsError,
    botocore.exceptions.PartialCredentialsError,
    botocore.exceptions.NoRegionError,
    botocore.exceptions.ParamValidationError,
)


def setup_error(exc: Exception, key: str) -> StashpointError:
    """Return the configuration error for a client that could not even send."""
    return ConfigurationError(
        f"AWS client setup: {exc} (credentials and region come from the AWS environment)",
        object_name=key,
    )


def _too_large(call: AwsCall, response: dict[str, Any]) -> bool:
    length = response.get("ContentLength")
    return call.max_body is not None and length is not None and int(length) > call.max_body


def _body_refused(call: AwsCall, response: dict[str, Any]) -> LimitExceeded:
    return LimitExceeded(
        f"object is {response.get('ContentLength')} bytes, over the limit of "
        f"{call.max_body}; refused from its size, body not downloaded",
        object_name=str(call.params.get("Key")),
    )


class _AwsTransportBase:
    """A service's call mapping and its lazily made client, shared by both transports."""

    def __init__(
        self, service: str, calls: Callable[[Any], Steps[Any]], settings: AwsClientSettings
    ) -> None:
        self.client = self._client_type(service, settings)
        """The client, made on first use (or set `client.instance` to your own)."""
        self._calls = calls

    _client_type: Any = None


class AwsTransport(_AwsTransportBase):
    """Executes requests by running a service's call mapping with one lazily made boto3 client.

    The mapping (S3's, DynamoDB's) says which calls a request takes; this only makes them.
    """

    _client_type = LazyClient

    def execute(self, request: Request[Any]) -> Any:
        """Execute one request."""
        return run_sync(self._calls(request), self._call)

    def _call(self, call: AwsCall | Sleep) -> Any:
        if isinstance(call, Sleep):  # a throttling backoff: the real clock's
            return answer(REAL, call)
        try:
            response = getattr(self.client.get(), call.method)(**call.params)
        except Exception as exc:
            if _refused(call, exc):
                return REFUSED
            raise
        if call.read_body:
            if _too_large(call, response):
                response["Body"].close()
                raise _body_refused(call, response)
            response["Body"] = response["Body"].read()
        return response

    def close(self) -> None:
        """Close the client's connection pool."""
        self.client.close()


class AsyncAwsTransport(_AwsTransportBase):
    """The aiobotocore twin of `AwsTransport`."""

    _client_type = AsyncLazyClient

    async def execute(self, request: Request[Any]) -> Any:
        """Execute one request."""
        return await run_async(self._calls(request), self._call)

    async def _call(self, call: AwsCall | Sleep) -> Any:
        if isinstance(call, Sleep):  # a throttling backoff: the real clock's
            return await answer_async(REAL, call)
        try:
            response = await getattr(await self.client.get(), call.method)(**call.params)
        except Exception as exc:
            if _refused(call, exc):
                return REFUSED
            raise
        if call.read_body:
            async with response["Body"] as stream:
                if _too_large(call, response):
                    raise _body_refused(call, response)
                response["Body"] = await stream.read()
        return response

    async def close(self) -> None:
        """Close the client and its connection pool."""
        await self.client.close()


def caller_identity(settings: AwsClientSettings) -> str | None:
    """Return the caller's AWS identity (its ARN, from STS), None where it cannot be asked.

    Not asked of a custom endpoint (MinIO, SeaweedFS, a test server): it has no STS, and
    its credentials name no AWS principal. Any failure is None: the caller then names
    the local user.
    """
    if settings.endpoint_url:
        return None
    try:
        session = settings.session
        if session is None:
            import boto3

            session = boto3.session.Session(profile_name=settings.profile_name)
        kwargs = {"region_name": settings.region_name} if settings.region_name else {}
        return str(session.client("sts", **kwargs).get_caller_identity()["Arn"])
    except Exception:
        return None
