"""Archives are read for years: newer minor versions and the seeds' own JSON stay readable."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import stashpoint
from stashpoint import AttemptStatus, RunStatus
from stashpoint.agent import AgentCheckpoint, AgentRunner
from stashpoint.codec import Codec
from stashpoint.stores.objects import GetObject, PutObject

GOLDEN = Path(__file__).resolve().parents[2] / "moto_fixtures" / "golden"


def _plant(stash: stashpoint.Stash, namespace: str, object_id: str, name: str) -> None:
    key = stash.checkpoints.steps.layout.key(namespace, object_id)
    stash.driver(PutObject(key, (GOLDEN / name).read_bytes(), None))


def test_unknown_fields_of_a_newer_minor_version_are_read_and_kept(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path / 's'}") as stash:
        _plant(stash, "checkpoints", "agent-newer", "newer-minor.v1.json")
        envelope, state = AgentCheckpoint.existing("agent-newer", stash.checkpoints).load()
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


def test_seed_000_kind_reads_as_an_agent_checkpoint(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path / 's'}") as stash:
        _plant(stash, "checkpoints", "agent-seed", "seed-runifold-agent.v1.json")
        runner = AgentRunner(AgentCheckpoint.existing("agent-seed", stash.checkpoints))
        _, state = runner.resume()
        assert state.outcome() is not None


def test_seed_004_enum_spellings_read_as_ours(tmp_path: Path) -> None:
    with stashpoint.open(f"local://{tmp_path / 's'}") as stash:
        _plant(stash, "runs", "run-seed", "seed-run-enums.v1.json")
        state = stash.runs.load_run("run-seed")
        assert state is not None and state.status is RunStatus.RUNNING
        assert state.attempts[0].status is AttemptStatus.COMPLETED
        stash.runs.complete_run("run-seed")  # continued: migrated to a log, in our spelling
        assert stash.runs.load_run("run-seed").status is RunStatus.COMPLETED  # type: ignore[union-attr]
        codec = stash.checkpoints.steps.codec

        def raw(key: str) -> Any:
            return json.loads(codec.unwrap(stash.driver(GetObject(key)).body))

        entry = raw("run-logs/run-seed/" + "0" * 20)
        assert entry["state"]["status"] == "completed"
        assert entry["records"][0]["status"] == "completed"
        assert raw("runs/run-seed")["payload"]["status"] == "Running"  # left as history
