"""Format stability: every committed golden envelope decodes to its expected fields, forever."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest

from stashpoint.codec import Codec

GOLDEN = Path(__file__).parent.parent / "moto_fixtures" / "golden"
ENCODED = sorted(
    p for p in GOLDEN.iterdir() if p.suffix in (".zst", ".json") and ".expected" not in p.name
)


def test_golden_corpus_is_present() -> None:
    assert len(ENCODED) >= 3


@pytest.mark.parametrize("path", ENCODED, ids=lambda p: p.name)
def test_golden_envelope_decodes_to_expected_fields(path: Path) -> None:
    expected = json.loads(
        path.with_name(path.name.rsplit(".", 1)[0] + ".expected.json").read_text()
    )
    envelope = Codec().decode(path.read_bytes(), name=path.name)
    fields = envelope.fields()
    for moment in ("created_at", "updated_at"):  # the same instant, however it is spelled
        assert datetime.fromisoformat(fields.pop(moment)) == datetime.fromisoformat(
            expected.pop(moment)
        )
    assert fields == expected
