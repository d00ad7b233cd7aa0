"""Client-side encryption (`stashpoint.encryption`): every object sealed, every failure typed.

A local folder with a keyring file for most (the embedded default: every file is read
from disk, so nothing is seen through the library), moto's S3 and KMS for the must-show,
and a fake clock for the data keys' age.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import logging
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import stashpoint
from stashpoint import Envelope
from stashpoint.clock import FakeClock
from stashpoint.encryption import MAGIC, Encryption, KeyRule, read_header
from stashpoint.errors import (
    ConfigurationError,
    KeyShredded,
    StashpointError,
    Undecryptable,
)
from tests.test_tracing import spans  # noqa: F401  (the fixture)

SECRETS = {"acme": "acme-confidential-7d1f", "globex": "globex-confidential-93aa"}


def _encryption(tmp_path: Path, **extra: Any) -> Encryption:
    return Encryption(
        (
            KeyRule("acme", "keyring:acme", prefix="acme-"),
            KeyRule("globex", "keyring:globex", prefix="globex-"),
            KeyRule("default", "keyring:default"),
        ),
        keyring=str(tmp_path / "keyring.json"),
        **extra,
    )


def _fill(stash: Any, tenant: str) -> None:
    """Write one of every object kind for `tenant`: heads, logs and segments, runs, blobs."""
    secret = SECRETS[tenant]
    first = Envelope.initial(f"{tenant}-1", None, "demo", 1, {"secret": secret})
    stash.checkpoints.compare_and_swap(first, None)
    stash.checkpoints.update(f"{tenant}-1", lambda e: {"secret": secret, "n": 2})
    head = None
    for i in range(70):  # past 64 versions: a sealed segment
        head = stash.logs.append(f"{tenant}-log", [{"m": f"{secret} {i}"}], after=head)
    run = stash.runs.create_run("etl", run_id=f"{tenant}-run")
    attempt = stash.runs.record_attempt(run, "x", 1, {"big": secret * 4000})  # a blob
    stash.runs.complete_attempt(attempt, {"ok": secret})
    from langgraph.checkpoint.base import empty_checkpoint

    from stashpoint.langgraph import StashpointSaver

    saver = StashpointSaver(stash)
    config = {"configurable": {"thread_id": f"{tenant}-thread", "checkpoint_ns": ""}}
    checkpoint = empty_checkpoint()
    checkpoint["channel_values"] = {"notes": [f"{secret} {i}" * 50 for i in range(40)]}
    checkpoint["channel_versions"] = {"notes": 1}
    saver.put(config, checkpoint, {"source": "input", "step": -1}, {"notes": 1})  # type: ignore[arg-type]


def _files(root: Path) -> Iterator[tuple[Path, bytes]]:
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).parts
        if not path.is_file() or relative[0] in (".locks",) or path.name.startswith("index."):
            continue
        yield path, path.read_bytes()


@pytest.fixture
def encrypted(tmp_path: Path) -> tuple[str, Encryption, Path]:
    encryption = _encryption(tmp_path)
    root = tmp_path / "stash"
    return f"local://{root}", encryption, root


def test_every_stored_object_is_ciphertext_and_reads_back(
    encrypted: tuple[str, Encryption, Path],
) -> None:
    url, encryption, root = encrypted
    with stashpoint.open(url, encryption=encryption) as stash:
        for tenant in SECRETS:
            _fill(stash, tenant)
        receipt = stash.admin.purge(log="globex-log", actor="tester")
    sealed = data_keys = 0
    for path, body in _files(root):
        for secret in SECRETS.values():
            assert secret.encode() not in body, path
        if "data-keys" in path.parts:
            data_keys += 1
            assert not body.startswith(MAGIC)  # wrapped by the master key, stored as is
            continue
        assert body.startswith(MAGIC), path
        sealed += 1
    assert sealed > 150 and data_keys >= 3  # three tenants (receipts use the default)
    assert {"checkpoints", "logs", "sealed", "run-logs", "blobs", "langgraph", "purges"} <= {
        p.name for p in root.iterdir()
    }
    blobs = sorted(p.name for p in (root / "blobs").iterdir())
    assert [b.rpartition("~")[2] for b in blobs] == ["acme", "globex"]  # never shared
    with stashpoint.open(url, encryption=encryption) as stash:
        assert stash.checkpoints.load("acme-1").payload == {"secret": SECRETS["acme"], "n": 2}
        assert [e.records[0]["m"] for e in stash.logs.entries("acme-log")][-1].endswith(" 69")
        attempts = stash.runs.load_run("acme-run").attempts
        assert attempts[0].input == {"big": SECRETS["acme"] * 4000}
        assert stash.admin.purge_receipt(receipt.purge_id).verified
        from stashpoint.langgraph import StashpointSaver

        config = {"configurable": {"thread_id": "acme-thread", "checkpoint_ns": ""}}
        got = StashpointSaver(stash).get_tuple(config)  # type: ignore[arg-type]
        assert got is not None and got.checkpoint["channel_values"]["notes"][0].startswith(
            SECRETS["acme"]
        )
        with pytest.raises(stashpoint.Purged):
            stash.logs.head("globex-log")
    with stashpoint.open(url) as plain, pytest.raises(Undecryptable) as error:
        plain.checkpoints.load("acme-1")
    assert error.value.object_name == "checkpoints/acme-1"
    assert "encryption" in error.value.message


def test_the_async_driver_seals_and_opens_the_same_objects(
    encrypted: tuple[str, Encryption, Path],
) -> None:
    url, encryption, root = encrypted

    async def main() -> Any:
        async with stashpoint.open_async(url, encryption=encryption) as stash:
            first = Envelope.initial("acme-a", None, "demo", 1, {"secret": SECRETS["acme"]})
            await stash.checkpoints.compare_and_swap(first, None)
            return (await stash.checkpoints.load("acme-a")).payload

    assert asyncio.run(main()) == {"secret": SECRETS["acme"]}
    assert (root / "checkpoints" / "acme-a").read_bytes().startswith(MAGIC)
    with stashpoint.open(url, encryption=encryption) as stash:  # and the blocking one reads it
        assert stash.checkpoints.load("acme-a").payload == {"secret": SECRETS["acme"]}


def _saved(url: str, encryption: Encryption, checkpoint_id: str) -> None:
    with stashpoint.open(url, encryption=encryption) as stash:
        tenant = checkpoint_id.partition("-")[0]
        env = Envelope.initial(checkpoint_id, None, "demo", 1, {"secret": SECRETS[tenant]})
        stash.checkpoints.compare_and_swap(env, None)


def _load_error(url: str, encryption: Encryption, checkpoint_id: str) -> StashpointError:
    with (
        stashpoint.open(url, encryption=encryption) as stash,
        pytest.raises(StashpointError) as error,
    ):
        stash.checkpoints.load(checkpoint_id)
    return error.value


def test_tampered_swapped_and_unknown_objects_are_typed_errors_naming_them(
    encrypted: tuple[str, Encryption, Path],
) -> None:
    url, encryption, root = encrypted
    for checkpoint_id in ("acme-1", "acme-2", "acme-3", "globex-1", "acme-4"):
        _saved(url, encryption, checkpoint_id)
    heads = root / "checkpoints"

    body = bytearray((heads / "acme-1").read_bytes())
    body[-20] ^= 0x01  # one bit of ciphertext
    (heads / "acme-1").write_bytes(bytes(body))
    tampered = _load_error(url, encryption, "acme-1")
    assert type(tampered) is Undecryptable and "failed authentication" in tampered.message

    (heads / "acme-2").write_bytes((heads / "acme-3").read_bytes())  # another id's object
    moved = _load_error(url, encryption, "acme-2")
    assert type(moved) is Undecryptable and "moved" in moved.message
    (heads / "acme-3").write_bytes((heads / "globex-1").read_bytes())  # another tenant's
    assert "moved" in _load_error(url, encryption, "acme-3").message

    original = (heads / "acme-4").read_bytes()
    header, _, ciphertext = read_header(original, "acme-4")
    for change, expected in (
        ({"alg": "ChaCha20-Poly1305"}, "unknown algorithm"),
        ({"format": "stashpoint.encrypted/9"}, "unknown encryption format"),
        ({"kind": "agents"}, "failed authentication"),  # the header is authenticated
    ):
        text = json.dumps({**header, **change}, sort_keys=True).encode()
        forged = MAGIC + len(text).to_bytes(4, "big") + text + ciphertext
        (heads / "acme-4").write_bytes(forged)
        error = _load_error(url, encryption, "acme-4")
        assert type(error) is Undecryptable and expected in error.message, change
        assert error.object_name == "checkpoints/acme-4"
    (heads / "acme-4").write_bytes(b"SPE1\xff\xff\xff\xff")
    assert "damaged" in _load_error(url, encryption, "acme-4").message
    for error in (tampered, moved):
        assert SECRETS["acme"] not in str(error)


def test_a_wrong_or_missing_key_is_typed(encrypted: tuple[str, Encryption, Path]) -> None:
    url, encryption, root = encrypted
    _saved(url, encryption, "acme-1")
    _saved(url, encryption, "globex-1")
    other = Path(str(encryption.keyring) + ".other")
    wrong = Encryption(encryption.rules, keyring=str(other))
    _saved(f"local://{root.parent / 'elsewhere'}", wrong, "acme-9")  # makes other keys
    error = _load_error(url, wrong, "acme-1")
    assert type(error) is Undecryptable and "does not unwrap" in error.message
    assert error.object_name == "checkpoints/acme-1"
    missing = Encryption(encryption.rules, keyring=str(root.parent / "absent.json"))
    assert isinstance(_load_error(url, missing, "acme-1"), KeyShredded)
    for key in (root / "data-keys" / "globex").iterdir():
        key.unlink()
    lost = _load_error(url, encryption, "globex-1")
    assert type(lost) is KeyShredded and lost.kind.value == "shredded"


def test_a_plain_object_is_refused_unless_plaintext_is_allowed(
    encrypted: tuple[str, Encryption, Path],
) -> None:
    url, encryption, _ = encrypted
    with stashpoint.open(url) as plain:  # written before encryption was turned on
        env = Envelope.initial("acme-old", None, "demo", 1, {"secret": "old"})
        plain.checkpoints.compare_and_swap(env, None)
    error = _load_error(url, encryption, "acme-old")
    assert type(error) is Undecryptable and "plain" in error.message
    migrating = Encryption(encryption.rules, keyring=encryption.keyring, allow_plaintext=True)
    with stashpoint.open(url, encryption=migrating) as stash:
        assert stash.checkpoints.load("acme-old").payload == {"secret": "old"}
        stash.checkpoints.update("acme-old", lambda e: {"secret": "new"})  # sealed from now
    with stashpoint.open(url, encryption=encryption) as stash:
        assert stash.checkpoints.load("acme-old").payload == {"secret": "new"}


def test_a_shredded_tenant_is_unreadable_and_the_others_load(
    encrypted: tuple[str, Encryption, Path],
) -> None:
    url, encryption, root = encrypted
    with stashpoint.open(url, encryption=encryption) as stash:
        for tenant in SECRETS:
            _fill(stash, tenant)
        plan = stash.admin.purge(tenant="acme", shred=True, dry_run=True)
        assert plan.status == "dry_run" and plan.objects >= 1 and not plan.shredded
        receipt = stash.admin.purge(tenant="acme", shred=True, actor="dpo")
        assert receipt.verified and receipt.actor == "dpo"
        assert receipt.shredded and "acme" in receipt.shredded[0]
        assert all("/data-keys/acme/" in f"/{v.key}" for v in receipt.removed)
        for read in (
            lambda: stash.checkpoints.load("acme-1"),
            lambda: stash.logs.entries("acme-log"),
            lambda: stash.runs.load_run("acme-run"),
        ):
            with pytest.raises(KeyShredded):
                read()
        with pytest.raises(KeyShredded):  # nothing more is sealed for it
            stash.checkpoints.compare_and_swap(
                Envelope.initial("acme-new", None, "demo", 1, {}), None
            )
        assert stash.checkpoints.load("globex-1").payload["secret"] == SECRETS["globex"]
        assert stash.runs.load_run("globex-run").attempts[0].output == {"ok": SECRETS["globex"]}
        assert stash.admin.purge_receipt(receipt.purge_id).shredded == receipt.shredded
    assert not list((root / "data-keys").glob("acme/*"))
    assert "acme" not in json.loads(Path(str(encryption.keyring)).read_text())["keys"]
    with stashpoint.open(url, encryption=encryption) as fresh, pytest.raises(KeyShredded):
        fresh.checkpoints.load("acme-1")  # a new process too


def test_a_shred_is_refused_when_it_would_take_another_tenant(tmp_path: Path) -> None:
    shared = Encryption(
        (KeyRule("acme", "keyring:one", prefix="acme-"), KeyRule("default", "keyring:one")),
        keyring=str(tmp_path / "k.json"),
    )
    with stashpoint.open(f"local://{tmp_path / 's'}", encryption=shared) as stash:
        with pytest.raises(ConfigurationError, match="shares its master key"):
            stash.admin.purge(tenant="acme", shred=True)
        with pytest.raises(ConfigurationError, match="no key rule names"):
            stash.admin.purge(tenant="nobody", shred=True)
    with stashpoint.open(f"local://{tmp_path / 'plain'}") as plain:
        with pytest.raises(ConfigurationError, match="not encrypted"):
            plain.admin.purge(tenant="acme", shred=True)
        for bad in ({"tenant": "acme"}, {"tenant": "Acme!", "shred": True},
                    {"tenant": "acme", "shred": True, "prefix": "x"}):  # fmt: skip
            with pytest.raises(stashpoint.InvalidArgument):
                plain.admin.purge(**bad)


def test_rotation_rewraps_data_keys_and_rewrites_no_data_object(
    encrypted: tuple[str, Encryption, Path],
) -> None:
    url, encryption, root = encrypted
    with stashpoint.open(url, encryption=encryption) as stash:
        _fill(stash, "acme")
    before = {p: b for p, b in _files(root) if "data-keys" not in p.parts}
    keyring = Path(str(encryption.keyring))
    with stashpoint.open(url, encryption=encryption) as stash:
        done = stash.admin.rotate_keys("acme")
    assert [(r.tenant, r.rewrapped) for r in done] == [("acme", 1)]
    assert "version 2" in done[0].master
    after = {p: b for p, b in _files(root) if "data-keys" not in p.parts}
    assert after == before  # no data object rewritten
    # The old key material can go: every data key is wrapped under the new version.
    ring = json.loads(keyring.read_text())
    ring["keys"]["acme"] = [v for v in ring["keys"]["acme"] if v["version"] == 2]
    keyring.write_text(json.dumps(ring))
    with stashpoint.open(url, encryption=encryption) as stash:
        assert stash.checkpoints.load("acme-1").payload["secret"] == SECRETS["acme"]
        env = Envelope.initial("acme-after", None, "demo", 1, {"n": 1})
        stash.checkpoints.compare_and_swap(env, None)
        assert stash.checkpoints.load("acme-after").payload == {"n": 1}


def test_one_data_key_serves_many_saves_until_its_age_or_uses_run_out(tmp_path: Path) -> None:
    clock = FakeClock()
    encryption = _encryption(tmp_path, max_age=timedelta(minutes=5), max_uses=300)
    root = tmp_path / "stash"
    with stashpoint.open(f"local://{root}", encryption=encryption, clock=clock) as stash:
        head = None
        for i in range(250):
            head = stash.logs.append("acme-log", [{"i": i}], after=head)
        assert len(list((root / "data-keys" / "acme").iterdir())) == 1
        clock.advance(299)
        head = stash.logs.append("acme-log", [{"i": "late"}], after=head)
        assert len(list((root / "data-keys" / "acme").iterdir())) == 1
        clock.advance(2)  # five minutes since the key was made
        head = stash.logs.append("acme-log", [{"i": "later"}], after=head)
        assert len(list((root / "data-keys" / "acme").iterdir())) == 2
        for i in range(300):  # uses run out: a third key
            head = stash.logs.append("acme-log", [{"i": i}], after=head)
        assert len(list((root / "data-keys" / "acme").iterdir())) == 3
        assert len(stash.logs.entries("acme-log")) == 552


def test_settings_are_checked_and_read_from_a_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="last key rule must cover"):
        Encryption((KeyRule("acme", "alias/a", prefix="acme-"),))
    with pytest.raises(ConfigurationError, match="tenant"):
        KeyRule("Not OK", "alias/a")
    with pytest.raises(ConfigurationError, match="unknown namespaces"):
        KeyRule("acme", "alias/a", namespaces=("nope",))
    with pytest.raises(ConfigurationError, match="keyring"):
        Encryption((KeyRule("default", "keyring:default"),))
    with pytest.raises(ConfigurationError, match="one key rule"):
        Encryption((KeyRule("a", "alias/a"), KeyRule("a", "alias/b")))
    settings = tmp_path / "enc.json"
    settings.write_text(json.dumps({
        "rules": [{"tenant": "acme", "prefix": "acme-", "key": "keyring:acme",
                   "namespaces": ["checkpoints"]},
                  {"tenant": "default", "key": "keyring:default"}],
        "keyring": "ring.json", "max_age_seconds": 60,
    }))  # fmt: skip
    read = Encryption.from_file(settings)
    assert read.keyring == str(tmp_path / "ring.json") and read.max_age == timedelta(minutes=1)
    assert read.rule_for("checkpoints", "acme-1").tenant == "acme"
    assert read.rule_for("agents", "acme-1").tenant == "default"  # namespaces narrow it
    with stashpoint.open(f"local://{tmp_path / 's'}?encryption={settings}") as stash:
        _saved_via(stash)
    assert (tmp_path / "s" / "checkpoints" / "acme-1").read_bytes().startswith(MAGIC)
    (tmp_path / "bad.json").write_text("[]")
    with pytest.raises(ConfigurationError):
        stashpoint.open(f"local://{tmp_path / 's'}?encryption={tmp_path / 'bad.json'}")
    with pytest.raises(ConfigurationError):
        stashpoint.open(f"local://{tmp_path / 's'}?encryption={tmp_path / 'missing.json'}")


def _saved_via(stash: Any) -> None:
    stash.checkpoints.compare_and_swap(Envelope.initial("acme-1", None, "demo", 1, {"a": 1}), None)
    assert stash.checkpoints.load("acme-1").payload == {"a": 1}


def test_no_plaintext_or_key_material_in_errors_logs_or_spans(
    encrypted: tuple[str, Encryption, Path],
    caplog: pytest.LogCaptureFixture,
    spans: Any,  # noqa: F811  (the fixture, from tests.test_tracing)
) -> None:
    url, encryption, root = encrypted
    caplog.set_level(logging.DEBUG)
    messages: list[str] = []
    with stashpoint.open(url, encryption=encryption) as stash:
        _fill(stash, "acme")
        _fill(stash, "globex")
    heads = root / "checkpoints"
    body = bytearray((heads / "acme-1").read_bytes())
    body[-1] ^= 0xFF
    (heads / "acme-1").write_bytes(bytes(body))
    (heads / "globex-1").write_bytes(b"SPE1junk")
    messages.append(str(_load_error(url, encryption, "acme-1")))
    messages.append(str(_load_error(url, encryption, "globex-1")))
    with stashpoint.open(url, encryption=encryption) as stash:
        stash.admin.purge(tenant="globex", shred=True)
        with pytest.raises(KeyShredded) as shredded:
            stash.runs.load_run("globex-run")
        messages.append(str(shredded.value))
    elsewhere = Encryption(encryption.rules, keyring=str(root.parent / "other.json"))
    _saved(f"local://{root.parent / 'other'}", elsewhere, "acme-2")
    messages.append(str(_load_error(url, elsewhere, "acme-1")))
    ring = json.loads(Path(str(encryption.keyring)).read_text())
    material = [v["material"] for versions in ring["keys"].values() for v in versions]
    with stashpoint.open(url) as plain:
        wrapped = [
            json.loads(plain.codec.unwrap(p.read_bytes()))["wrapped"]
            for p in (root / "data-keys").glob("*/*") if p.is_file()
        ]  # fmt: skip
    recorded: list[str] = []
    for span in spans.get_finished_spans():
        recorded += [span.name, str(span.status.description), str(dict(span.attributes or {}))]
        recorded += [str(dict(event.attributes or {})) for event in span.events]
    assert recorded and material and wrapped and len(messages) == 4
    forbidden = [*SECRETS.values(), *material, *wrapped]
    for text in [*messages, caplog.text, *recorded]:
        for secret in forbidden:
            assert secret not in text


def test_a_frame_is_readable_without_the_library_s_stash(
    encrypted: tuple[str, Encryption, Path],
) -> None:
    """The documented recipe: header JSON, data key unwrapped by its master key, AES-GCM."""
    import zstandard
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    url, encryption, root = encrypted
    _saved(url, encryption, "acme-1")
    frame = (root / "checkpoints" / "acme-1").read_bytes()
    length = int.from_bytes(frame[4:8], "big")
    header = json.loads(frame[8 : 8 + length])
    record = json.loads(
        zstandard.ZstdDecompressor().decompress(
            (root / "data-keys" / "acme" / header["data_key"]).read_bytes()
        )
    )
    ring = json.loads(Path(str(encryption.keyring)).read_text())
    wrapped = base64.b64decode(record["wrapped"])
    version = int.from_bytes(wrapped[:4], "big")
    material = next(
        base64.b64decode(v["material"]) for v in ring["keys"]["acme"] if v["version"] == version
    )
    context = json.dumps(
        {"stashpoint:data-key": header["data_key"], "stashpoint:tenant": "acme"}, sort_keys=True
    ).encode()
    data_key = AESGCM(material).decrypt(wrapped[4:16], wrapped[16:], context)
    plain = AESGCM(data_key).decrypt(
        base64.b64decode(header["nonce"]), frame[8 + length :], frame[: 8 + length]
    )
    document = json.loads(zstandard.ZstdDecompressor().decompress(plain))
    assert document["payload"] == {"secret": SECRETS["acme"]}


def _frames() -> Any:
    from hypothesis import strategies as st

    header = st.fixed_dictionaries(
        {
            "format": st.sampled_from(["stashpoint.encrypted/1", "x"]),
            "alg": st.sampled_from(["AES-256-GCM", "none"]),
            "tenant": st.sampled_from(["acme", "default", "nobody", "../x"]),
            "data_key": st.one_of(st.text(max_size=40), st.just("0" * 36)),
            "nonce": st.one_of(st.just("AAAAAAAAAAAAAAAA"), st.text(max_size=20)),
            "object": st.sampled_from(["checkpoints/acme-1", "checkpoints/other"]),
            "kind": st.just("checkpoints"),
        }
    )
    return st.builds(
        lambda h, tail, cut: (lambda text: MAGIC + len(text).to_bytes(4, "big") + text + tail)(
            json.dumps(h).encode()[: cut or None]
        ),
        header,
        st.binary(max_size=64),
        st.integers(0, 40),
    )


def test_any_bytes_planted_under_a_key_read_as_a_typed_error(tmp_path: Path) -> None:
    import uuid

    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    from stashpoint.stores.objects import PutObject

    url = f"memory://planted-{uuid.uuid4().hex}"  # a named memory stash: shared transports
    with (
        stashpoint.open(url, encryption=_encryption(tmp_path)) as stash,
        stashpoint.open(url) as hostile,
    ):
        env = Envelope.initial("acme-1", None, "demo", 1, {"secret": SECRETS["acme"]})
        stash.checkpoints.compare_and_swap(env, None)
        key = stash.checkpoints.steps.key("acme-1")

        @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
        @given(body=st.one_of(st.binary(max_size=200), _frames()))
        def planted(body: bytes) -> None:
            for read in (
                lambda: stash.admin.decrypt(body),
                lambda: stash.admin.decrypt(body, key=key),
            ):
                with pytest.raises(StashpointError) as decrypting:
                    read()
                assert decrypting.value.kind.value != "other"
            hostile.driver(PutObject(key, body, None))  # below the encryption
            with pytest.raises(StashpointError) as loading:
                stash.checkpoints.load("acme-1")
            assert loading.value.kind.value in ("undecryptable", "shredded", "invalid_payload")
            assert SECRETS["acme"] not in str(loading.value)

        planted()


def test_a_shred_cut_off_at_any_request_is_finished_by_a_confirmed_resume(tmp_path: Path) -> None:
    from tests.crashes import Crash, crash_at

    def fresh(name: str) -> tuple[str, Encryption]:
        where = tmp_path / name
        where.mkdir()
        encryption = _encryption(where)  # a keyring each: a shredded name stays refused
        url = f"local://{where / 'stash'}?fsync=false"
        _saved(url, encryption, "acme-1")
        _saved(url, encryption, "globex-1")
        return url, encryption

    url, encryption = fresh("count")
    with stashpoint.open(url, encryption=encryption) as stash:
        with crash_at(stash, 10**9, False) as calls:
            stash.admin.purge(tenant="acme", shred=True)
        total = len(calls)
    assert total >= 6
    for step in range(total):
        for after in (False, True):
            url, encryption = fresh(f"{step}-{after}")
            with (
                stashpoint.open(url, encryption=encryption) as stash,
                crash_at(stash, step, after),
                contextlib.suppress(Crash),
            ):
                stash.admin.purge(tenant="acme", shred=True)
            with stashpoint.open(url, encryption=encryption) as again:
                opened = again.logs_in("purges").list_ids()
                assert (
                    again.admin.resume_purges() == [] or not opened
                )  # a shred waits for the operator
                finished = again.admin.resume_purges(confirm_shred=True)
                if not opened:  # cut off before its receipt: nothing was done yet
                    assert again.checkpoints.load("acme-1").payload["secret"] == SECRETS["acme"]
                    finished = [again.admin.purge(tenant="acme", shred=True)]
                elif not finished:  # it had finished: the crash came after its last write
                    finished = [again.admin.purge_receipt(p) for p in opened]
                assert [r.status for r in finished] == ["complete"], (step, after)
                assert finished[0].shredded and finished[0].verified
                with pytest.raises(KeyShredded):
                    again.checkpoints.load("acme-1")
                assert again.checkpoints.load("globex-1").payload["secret"] == SECRETS["globex"]


def test_doctor_reports_the_tenants_and_probes_through_the_encryption(
    encrypted: tuple[str, Encryption, Path],
) -> None:
    url, encryption, root = encrypted
    with stashpoint.open(url, encryption=encryption) as stash:
        checks = {c.name: c for c in stash.admin.doctor()}
    assert checks["encryption"].status.value == "pass"
    assert "3 tenant(s) (acme, globex, default)" in checks["encryption"].detail
    assert all(c.status.value != "fail" for c in checks.values()), checks
    assert checks["read back (GET)"].status.value == "pass"  # the probe, sealed and opened
    assert list((root / "data-keys").glob("default/*"))  # its tenant's data key was made
    with stashpoint.open(url) as plain:
        assert "encryption" not in {c.name for c in plain.admin.doctor()}


def test_tenants_never_share_a_blob_so_erasing_one_keeps_the_other_s(
    encrypted: tuple[str, Encryption, Path],
) -> None:
    url, encryption, root = encrypted
    same = {"big": "the very same large value " * 4000}
    with stashpoint.open(url, encryption=encryption) as stash:
        for tenant in ("acme", "globex"):
            run = stash.runs.create_run("etl", run_id=f"{tenant}-run")
            stash.runs.record_attempt(run, "x", 1, same)
        blobs = sorted(p.name for p in (root / "blobs").iterdir())
        assert len(blobs) == 2 and blobs[0].partition("~")[0] == blobs[1].partition("~")[0]
        receipt = stash.admin.purge(run="acme-run", blob_min_age=timedelta(0))
        assert [b.rpartition("~")[2] for b in receipt.blobs] == ["acme"]
        assert [p.name for p in (root / "blobs").iterdir()] == [blobs[1]]
        assert stash.runs.load_run("globex-run").attempts[0].input == same
        report = stash.admin.collect_garbage(dry_run=False, min_age=timedelta(0))
        assert report.unreferenced == [] and report.deleted == 0  # globex's is referenced
        assert report.unreadable == []
        assert stash.runs.load_run("globex-run").attempts[0].input == same
