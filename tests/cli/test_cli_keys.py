"""`stashpoint keys list|rotate`, `decrypt` and `purge --tenant T --shred`, as a user runs them.

Each in a subprocess on an encrypted local stash (`?encryption=FILE`, a keyring), with
`--json` checked against its schema in `docs/cli/schemas/`.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import stashpoint
from stashpoint import Envelope
from tests.cli.test_cli import cli
from tests.cli.test_cli_schemas import _valid


@pytest.fixture
def encrypted_url(tmp_path: Path) -> str:
    settings = tmp_path / "encryption.json"
    settings.write_text(
        json.dumps(
            {
                "rules": [
                    {"tenant": "acme", "prefix": "acme-", "key": "keyring:acme"},
                    {"tenant": "globex", "prefix": "globex-", "key": "keyring:globex"},
                    {"tenant": "default", "key": "keyring:default"},
                ],
                "keyring": "keyring.json",
            }
        )
    )
    url = f"local://{tmp_path / 'stash'}?encryption={settings}"
    with stashpoint.open(url) as stash:
        for tenant in ("acme", "globex"):
            env = Envelope.initial(f"{tenant}-1", None, "demo", 1, {"secret": f"{tenant}-s3"})
            stash.checkpoints.compare_and_swap(env, None)
    return url


def test_keys_list_and_rotate_print_the_tenants_and_what_was_done(encrypted_url: str) -> None:
    listed = _valid("keys-list", cli("keys", "list", "--json", url=encrypted_url).stdout)
    assert [t["tenant"] for t in listed["tenants"]] == ["acme", "globex", "default"]
    assert listed["tenants"][0] == {
        "tenant": "acme", "prefix": "acme-", "namespaces": [], "key": "keyring:acme",
    }  # fmt: skip
    rotated = _valid(
        "keys-rotate", cli("keys", "rotate", "--tenant", "acme", "--json", url=encrypted_url).stdout
    )
    assert rotated["rotated"] == [
        {"tenant": "acme", "master": "keyring key 'acme': version 2 made", "rewrapped": 1}
    ]
    table = cli("keys", "list", url=encrypted_url).stdout
    assert "acme" in table and "keyring:globex" in table


def test_decrypt_prints_the_json_of_a_stored_or_copied_object(
    encrypted_url: str, tmp_path: Path
) -> None:
    shown = json.loads(cli("decrypt", "checkpoints/acme-1", url=encrypted_url).stdout)
    assert shown["payload"] == {"secret": "acme-s3"}
    copied = tmp_path / "copy.bin"
    copied.write_bytes((tmp_path / "stash" / "checkpoints" / "acme-1").read_bytes())
    assert b"acme-s3" not in copied.read_bytes()
    from_file = json.loads(cli("decrypt", "--file", str(copied), url=encrypted_url).stdout)
    assert from_file == shown
    frame = tmp_path / "frame.zst"
    cli("decrypt", "checkpoints/globex-1", "--out", str(frame), url=encrypted_url)
    assert frame.read_bytes()[:4] == b"\x28\xb5\x2f\xfd"  # zstd -d | jq reads it
    plain = encrypted_url.partition("?")[0]
    refused = cli("decrypt", "checkpoints/acme-1", url=plain, check=False)
    assert refused.returncode == 6 and "error (configuration)" in refused.stderr
    unencrypted_read = cli("show", "acme-1", "--json", url=plain, check=False)
    assert json.loads(unencrypted_read.stdout)["error"]["kind"] == "undecryptable"


def test_purge_shred_erases_a_tenant_by_its_keys(encrypted_url: str) -> None:
    plan = _valid(
        "purge",
        cli(
            "purge", "--tenant", "acme", "--shred", "--dry-run", "--json", url=encrypted_url
        ).stdout,
    )
    assert plan["status"] == "dry_run" and plan["objects"] >= 1 and plan["shredded"] == []
    done = _valid(
        "purge", cli("purge", "--tenant", "acme", "--shred", "--json", url=encrypted_url).stdout
    )
    assert done["status"] == "complete" and done["verified"]
    assert done["shredded"] == ["keyring key 'acme': 1 version(s) removed from keyring.json"]
    said = cli("purge", "--tenant", "globex", "--shred", url=encrypted_url).stdout
    assert said.startswith("shredded: keyring key 'globex'")
    gone = cli("show", "acme-1", "--json", url=encrypted_url, check=False)
    assert gone.returncode == 3
    assert json.loads(gone.stdout)["error"]["kind"] == "shredded"
    receipts = _valid("receipts-list", cli("receipts", "list", "--json", url=encrypted_url).stdout)
    assert [r["shredded"] != [] for r in receipts["items"]] == [True, True]
    alone = cli("purge", "--tenant", "acme", "--json", url=encrypted_url, check=False)
    assert alone.returncode == 1 and "shred" in json.loads(alone.stdout)["error"]["message"]
