"""Where a shred meets the keys a process holds and the tenant rules (issue 47, items 6-7).

A process opened before a shred keeps the tenant's keys in memory; it gets `KeyShredded`
within `Encryption.shred_check` (a fake clock here), whether it reads or writes. An object
sealed with another tenant's key than the rules assign is `Undecryptable`, so it cannot
outlive the rightful tenant's shred.
"""

from __future__ import annotations

import contextlib
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint import Envelope
from stashpoint.clock import FakeClock
from stashpoint.encryption import Encryption, KeyRule
from stashpoint.errors import KeyShredded, Undecryptable
from tests.test_encryption import _encryption


def test_a_process_opened_before_a_shred_gets_key_shredded_within_the_bound(
    tmp_path: Path,
) -> None:
    url = f"local://{tmp_path / 's'}"
    encryption = _encryption(tmp_path, shred_check=timedelta(seconds=30))
    clock = FakeClock()
    with (
        stashpoint.open(url, encryption=encryption, clock=clock) as before,
        stashpoint.open(url, encryption=_encryption(tmp_path)) as operator,
    ):
        before.checkpoints.compare_and_swap(
            Envelope.initial("acme-1", None, "demo", 1, {"n": 1}), None
        )
        before.checkpoints.compare_and_swap(
            Envelope.initial("globex-1", None, "demo", 1, {"n": 1}), None
        )
        assert before.checkpoints.load("acme-1").payload == {"n": 1}  # its key is held
        operator.admin.purge(tenant="acme", shred=True)
        clock.advance(31)
        with pytest.raises(KeyShredded):
            before.checkpoints.load("acme-1")
        with pytest.raises(KeyShredded):  # and nothing more is sealed with the held key
            before.checkpoints.compare_and_swap(
                Envelope.initial("acme-2", None, "demo", 1, {"n": 2}), None
            )
        assert before.checkpoints.load("globex-1").payload == {"n": 1}


def test_a_writer_holding_a_data_key_stops_sealing_for_a_shredded_tenant(
    tmp_path: Path,
) -> None:
    url = f"local://{tmp_path / 's'}"
    clock = FakeClock()
    with (
        stashpoint.open(url, encryption=_encryption(tmp_path), clock=clock) as writer,
        stashpoint.open(url, encryption=_encryption(tmp_path)) as operator,
    ):
        head = writer.logs.append("acme-log", [{"m": 1}], after=None)
        operator.admin.purge(tenant="acme", shred=True)
        clock.advance(61)  # the default bound: one minute
        with pytest.raises(KeyShredded):
            writer.logs.append("acme-log", [{"m": 2}], after=head)


def test_the_bound_is_the_window_a_held_key_is_used_in_after_a_shred(tmp_path: Path) -> None:
    """The documented window, both ways: within the bound a held key still opens (no
    request to check it), past the bound it never does."""
    url = f"local://{tmp_path / 's'}"
    clock = FakeClock()
    with (
        stashpoint.open(url, encryption=_encryption(tmp_path), clock=clock) as held,
        stashpoint.open(url, encryption=_encryption(tmp_path)) as operator,
    ):
        held.logs.append("acme-log", [{"m": 1}], after=None)
        assert held.logs.records("acme-log") == [{"m": 1}]
        operator.admin.purge(tenant="acme", shred=True)
        clock.advance(59)
        assert held.logs.records("acme-log") == [{"m": 1}]  # within the bound: held
        clock.advance(2)
        with pytest.raises(KeyShredded):
            held.logs.records("acme-log")
        with pytest.raises(KeyShredded):
            held.logs.append("acme-log", [{"m": 2}], after=None)


def test_an_object_sealed_with_another_tenants_key_is_undecryptable(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 's'}"
    with stashpoint.open(url, encryption=_encryption(tmp_path)) as stash:
        stash.checkpoints.compare_and_swap(
            Envelope.initial("globex-1", None, "demo", 1, {"who": "globex"}), None
        )
    # An identity that may seal with globex's key plants an object under an acme id: a
    # stash whose rule for acme- ids names globex's tenant seals it so (object name and
    # all right, only the tenant wrong). whose only rule for acme- ids is globex's key would have sealed it so; here
    # the planted object carries globex's tenant under an acme id (with its own object name).
    planter = Encryption(
        (
            KeyRule("globex", "keyring:globex", prefix="acme-"),
            KeyRule("default", "keyring:default"),
        ),
        keyring=str(tmp_path / "keyring.json"),
    )
    with stashpoint.open(url, encryption=planter) as other:
        other.checkpoints.compare_and_swap(
            Envelope.initial("acme-planted", None, "demo", 1, {"who": "payload-9f2e"}), None
        )
    with stashpoint.open(url, encryption=_encryption(tmp_path)) as stash:
        with pytest.raises(Undecryptable) as refused:
            stash.checkpoints.load("acme-planted")
        assert "globex" in str(refused.value) and "payload-9f2e" not in str(refused.value)
        stash.admin.purge(tenant="acme", shred=True)
        with pytest.raises((Undecryptable, KeyShredded)):
            stash.checkpoints.load("acme-planted")  # never readable after acme's shred
        assert stash.checkpoints.load("globex-1").payload == {"who": "globex"}


# -- item 4: a shred never wedges maintenance ---------------------------------------------


def test_after_a_shred_gc_skips_the_tenant_and_a_prefix_purge_erases_it_unread(
    tmp_path: Path, erasure_url: str
) -> None:
    from tests.purging import versions
    from tests.test_encryption import SECRETS, _fill

    sep = "&" if "?" in erasure_url else "?"
    url = f"{erasure_url}{sep}blob_threshold=1024"
    with stashpoint.open(url, encryption=_encryption(tmp_path)) as stash:
        for tenant in SECRETS:
            _fill(stash, tenant)
        stash.admin.purge(tenant="acme", shred=True)
        report = stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
        assert report.shredded and all("acme" in key for key in report.shredded)
        assert report.unreadable == []
        receipt = stash.admin.purge(prefix="acme-")
        assert receipt.status == "complete" and receipt.verified
        assert set(receipt.keyless) >= {"checkpoints/acme-1", "logs/acme-log", "run-logs/acme-run"}
        assert stash.admin.resume_purges() == []
        assert [v.key for v in versions(stash) if "acme-" in v.key] == []
        again = stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
        assert again.shredded == [] and again.open_purges == []
        assert stash.checkpoints.load("globex-1").payload["secret"] == SECRETS["globex"]
        assert stash.runs.load_run("globex-run").attempts[0].output == {"ok": SECRETS["globex"]}


def test_the_catch_all_tenant_cannot_be_shredded(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 's'}"
    with stashpoint.open(url, encryption=_encryption(tmp_path)) as stash:
        stash.checkpoints.compare_and_swap(Envelope.initial("other-1", None, "d", 1, {}), None)
        sent: list[Any] = []
        with (
            stash.intercept(lambda request, proceed: sent.append(request) or proceed()),
            pytest.raises(stashpoint.ConfigurationError) as refused,
        ):
            stash.admin.purge(tenant="default", shred=True)
        assert sent == [] and "catch-all" in str(refused.value)
        assert stash.admin.purge(checkpoint="other-1").status == "complete"


# -- item 8 and the must-show scan: nothing of a shredded tenant is readable anywhere ------


def _plain_forms(data: bytes) -> list[bytes]:
    """The bytes as stored, and every zstd frame in them decompressed."""
    import zstandard

    forms = [data]
    with contextlib.suppress(zstandard.ZstdError):
        forms.append(zstandard.ZstdDecompressor().decompress(data, max_output_size=1 << 26))
    return forms


def test_after_a_shred_no_byte_of_the_tenant_is_readable_in_objects_or_the_index(
    tmp_path: Path,
) -> None:
    from tests.test_encryption import SECRETS, _fill

    root = tmp_path / "s"
    url = f"local://{root}"
    with stashpoint.open(url, encryption=_encryption(tmp_path)) as stash:
        for tenant in SECRETS:
            _fill(stash, tenant)
            run = stash.runs.create_run("etl", run_id=f"{tenant}-failing")
            attempt = stash.runs.record_attempt(run, "x", 1, None)
            stash.runs.fail_attempt(attempt, f"ValueError: {SECRETS[tenant]} in row 7")
            stash.runs.fail_run(run, f"{SECRETS[tenant]} broke it")
        failed = stash.runs.list_runs(status=stashpoint.RunStatus.FAILED).items
        assert {r.error for r in failed} == {
            f"error ({len(SECRETS[t]) + 9} characters: sealed in the run's log)" for t in SECRETS
        }
        assert stash.runs.load_run("globex-failing").error == f"{SECRETS['globex']} broke it"
        stash.admin.purge(tenant="acme", shred=True)
    found = [
        str(path.relative_to(root))
        for path in root.rglob("*")
        if path.is_file()
        for form in _plain_forms(path.read_bytes())
        if SECRETS["acme"].encode() in form
    ]
    assert found == []
    with stashpoint.open(url, encryption=_encryption(tmp_path)) as stash:
        assert stash.runs.load_run("globex-failing").error == f"{SECRETS['globex']} broke it"


def test_after_a_shred_no_index_item_on_dynamodb_holds_the_tenants_text(
    s3_dynamo_url: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    import boto3

    from tests.test_encryption import SECRETS

    url, options = s3_dynamo_url
    with stashpoint.open(url, encryption=_encryption(tmp_path), **options) as stash:
        run = stash.runs.create_run("etl", run_id="acme-failing")
        attempt = stash.runs.record_attempt(run, "x", 1, None)
        stash.runs.fail_attempt(attempt, f"KeyError: {SECRETS['acme']}")
        stash.runs.fail_run(run, f"{SECRETS['acme']} broke it")
        stash.admin.purge(tenant="acme", shred=True)
    table = url.split("index=dynamodb://")[1].split("&")[0]
    client = boto3.client(
        "dynamodb", endpoint_url=options["index_endpoint_url"], region_name="us-east-1"
    )
    items = client.scan(TableName=table)["Items"]
    assert items and not any(SECRETS["acme"] in repr(item) for item in items)
    assert any("KeyError (" in repr(item) for item in items)
