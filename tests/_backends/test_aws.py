"""The clients of `_backends.aws`: every stash of a process makes its clients from the
service models the first one loaded, while each keeps its own profile and credentials."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import botocore.session
import pytest

from stashpoint._backends.aws import (
    AwsClientSettings,
    LazyClient,
    iso_timestamp,
    with_fast_timestamps,
    with_shared_models,
)


@pytest.fixture
def two_profiles(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """An AWS environment with two profiles of different keys and regions."""
    credentials = tmp_path / "credentials"
    credentials.write_text(
        "[one]\naws_access_key_id = KEYONE\naws_secret_access_key = s1\n"
        "[two]\naws_access_key_id = KEYTWO\naws_secret_access_key = s2\n"
    )
    config = tmp_path / "config"
    config.write_text("[profile one]\nregion = eu-west-1\n[profile two]\nregion = ap-south-1\n")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    for name in ("AWS_PROFILE", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_REGION"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)


def test_every_new_session_shares_the_models_the_first_one_loaded() -> None:
    first = with_shared_models(botocore.session.Session())
    second = with_shared_models(botocore.session.Session())
    assert second.get_component("data_loader") is first.get_component("data_loader")


@pytest.mark.parametrize(
    "value",
    [
        "2026-12-05T11:40:00.000Z",  # S3's listings
        "2026-12-05T11:40:00Z",
        "2026-12-05T11:40:00.123456+02:00",
        "2026-12-05T11:40:00",  # no zone: botocore's parser decides (UTC)
        "2026-12-05",  # a date alone: the same
        "Sat, 05 Dec 2026 11:40:00 GMT",  # HTTP headers (Last-Modified)
        "1764934800",  # epoch seconds, as text
        1764934800,  # and as a number (DynamoDB's control plane)
        1764934800.5,
    ],
)
def test_a_fast_timestamp_is_the_datetime_botocore_would_give(value: object) -> None:
    from botocore.utils import parse_timestamp

    mine, theirs = iso_timestamp(value), parse_timestamp(value)
    assert mine == theirs
    assert mine.utcoffset() == theirs.utcoffset()


def test_a_made_client_lists_without_botocores_timestamp_parser(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A listing's `LastModified`s are read by `iso_timestamp`, never by dateutil."""
    from datetime import UTC, datetime

    import botocore.parsers
    from botocore.awsrequest import AWSResponse

    listing = (
        '<?xml version="1.0" encoding="UTF-8"?><ListBucketResult '
        'xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name><Prefix></Prefix>'
        "<KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><IsTruncated>false</IsTruncated>"
        + "".join(
            f"<Contents><Key>k{i}</Key><LastModified>2026-12-05T11:40:0{i}.000Z</LastModified>"
            f'<ETag>"e{i}"</ETag><Size>{i}</Size><StorageClass>STANDARD</StorageClass></Contents>'
            for i in range(2)
        )
        + "</ListBucketResult>"
    ).encode()

    class _Raw:
        def stream(self, *_: Any, **__: Any) -> Any:
            yield listing

    def answer(request: Any, **_: Any) -> AWSResponse:
        return AWSResponse(request.url, 200, {}, _Raw())

    def refused(value: Any) -> Any:
        raise AssertionError(f"botocore's parser was asked for {value!r}")

    monkeypatch.setattr(botocore.parsers, "DEFAULT_TIMESTAMP_PARSER", refused)
    session = with_fast_timestamps(with_shared_models(botocore.session.Session()))
    client = session.create_client(
        "s3", region_name="us-east-1", aws_access_key_id="k", aws_secret_access_key="s"
    )
    client.meta.events.register("before-send.s3.ListObjectsV2", answer)
    found = client.list_objects_v2(Bucket="b")["Contents"]
    assert [item["LastModified"] for item in found] == [
        datetime(2026, 12, 5, 11, 40, i, tzinfo=UTC) for i in range(2)
    ]


class _Sent(Exception):
    """Raised by the hook below instead of sending: carries the signed request."""

    def __init__(self, authorization: str) -> None:
        self.authorization = authorization


def _signed_with(client: Any) -> str:
    """Return the Authorization header `client` signs a request with (nothing is sent)."""

    def stop(request: Any, **_: Any) -> None:
        raise _Sent(request.headers["Authorization"].decode())

    client.meta.events.register("before-send", stop)
    with pytest.raises(_Sent) as sent:
        client.list_buckets()
    return sent.value.authorization


def test_clients_of_two_profiles_keep_their_own_keys_and_regions(two_profiles: None) -> None:
    clients = [
        LazyClient("s3", AwsClientSettings(profile_name=name)).get() for name in ("one", "two")
    ]
    signed = [_signed_with(c) for c in clients]
    assert "Credential=KEYONE/" in signed[0] and "/eu-west-1/" in signed[0]
    assert "Credential=KEYTWO/" in signed[1] and "/ap-south-1/" in signed[1]


def test_a_second_client_is_made_from_parsed_models_in_a_fraction_of_the_time() -> None:
    """The first S3 client of a process parses the model; later ones reuse it (about 6x
    faster here). Compared within this run, best of five each, with a fresh botocore
    session per client as stashpoint made them before. Timed in this process's CPU, not
    the wall clock: the suite starts its heaviest tests beside this one, and a busy
    machine's other processes are no part of what a client costs."""
    settings = AwsClientSettings(
        endpoint_url="http://127.0.0.1:9", region_name="us-east-1", client_config=None
    )

    def best(make: object) -> float:
        times = []
        for _ in range(5):
            start = time.process_time()
            make()  # type: ignore[operator]
            times.append(time.process_time() - start)
        return min(times)

    LazyClient("s3", settings).get()  # the models are loaded once
    shared = best(lambda: LazyClient("s3", settings).get())
    alone = best(lambda: botocore.session.Session().create_client("s3", **settings.client_kwargs()))
    assert shared < alone / 2
