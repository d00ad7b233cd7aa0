"""Archives are read for years: newer minor versions and the seeds' own JSON stay readable."""

from __future__ import annotations

from pathlib import Path

import stashpoint
from stashpoint import AttemptStatus, RunStatus
from stashpoint.agent import parse_state
from stashpoint.codec import Codec
from stashpoint.runs.models import RunState
from stashpoint.stores.objects import PutObject

GOLDEN = Path(__file__).resolve().parents[2] / "moto_fixtures" / "golden"


def _plant(stash: stashpoint.Stash, namespace: str, object_id: str, name: str) -> None:
    key = stash.checkpoints.steps.layout.key(namespace, object_id)
    stash.driver(PutObject(key, (GOLDEN / name).read_bytes(), None))


def test_unknown_fields_of_a_newer_minor_version_are_read_and_kept(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path / 's'}") as stash:
        _plant(stash, "checkpoints", "agent-newer", "newer-minor.v1.json")
        envelope = stash.checkpoints.load("agent-newer")
        state = parse_state(envelope)
        assert state.model_extra == {"priority": "high"}
        assert envelope.extra == {"encryption": {"scheme": "none"}}
        # A read-modify-write of the same version writes them back, unchanged.
        following = envelope.next(state.model_copy(update={"turns": 2}).to_payload())
        stash.checkpoints.compare_and_swap(following, envelope.revision)
        again = stash.checkpoints.load("agent-newer")
        assert again.extra == {"encryption": {"scheme": "none"}}
        assert again.payload["priority"] == "high"
        assert again.payload["usage"]["cached_tokens"] == 12
        assert Codec().decode(Codec().encode(again)) == again


def test_seed_000_kind_reads_as_agent_state() -> None:
    envelope = Codec().decode((GOLDEN / "seed-runifold-agent.v1.json").read_bytes())
    assert envelope.kind == "runifold.agent"
    assert parse_state(envelope).outcome() is not None


def test_seed_004_enum_spellings_read_as_ours() -> None:
    envelope = Codec().decode((GOLDEN / "seed-run-enums.v1.json").read_bytes())
    assert envelope.payload["status"] == "Running"
    state = RunState.model_validate(envelope.payload)
    assert state.status is RunStatus.RUNNING
    assert state.attempts[0].status is AttemptStatus.COMPLETED
    assert state.model_dump(mode="json")["status"] == "running"  # written in our spelling
