"""Format v1 is frozen: the committed corpus of every object kind reads as it did, forever."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from tests import golden_v1

CORPUS = Path(__file__).parent.parent / "moto_fixtures" / "golden" / "v1"
KINDS = {
    "checkpoints": "a job checkpoint (envelope) and, in .versions, its history",
    "logs": "an application log's entries",
    "run-logs": "a run's entries (its head and attempt records)",
    "sealed": "a sealed segment (a run's versions 0-63)",
    "blobs": "a content-addressed blob (a large attempt output)",
    "conversations": "a durable conversation's entries",
    "langgraph": "a LangGraph thread's records",
    "langgraph-values": "a LangGraph thread's large value",
}


def test_the_corpus_holds_an_object_of_every_kind() -> None:
    store = CORPUS / "store"
    for folder in KINDS:
        assert any(p.is_file() for p in (store / folder).rglob("*")), folder
        assert any(p.is_file() for p in (store / ".versions" / folder).rglob("*")), folder


def test_every_reader_reads_the_v1_corpus_as_it_did(tmp_path: Path) -> None:
    pytest.importorskip("langgraph")
    shutil.copytree(CORPUS / "store", tmp_path / "store")
    expected = json.loads((CORPUS / "expected.json").read_text())
    assert golden_v1.read(tmp_path / "store") == expected


def test_what_this_version_writes_reads_as_the_v1_corpus(tmp_path: Path) -> None:
    """Today's writers still write format v1: the same calls read back the same."""
    pytest.importorskip("langgraph")
    golden_v1.make(tmp_path / "store")
    expected = json.loads((CORPUS / "expected.json").read_text())
    assert golden_v1.read(tmp_path / "store") == expected


def test_the_run_reads_from_its_sealed_segment_alone(tmp_path: Path) -> None:
    """Versions 0-63 of the run are in its segment: readers need no entry below it."""
    pytest.importorskip("langgraph")
    shutil.copytree(CORPUS / "store", tmp_path / "store")
    entries = tmp_path / "store" / "run-logs" / golden_v1.RUN_ID
    for version in range(64):
        (entries / f"{version:020d}").unlink()
    expected = json.loads((CORPUS / "expected.json").read_text())
    assert golden_v1.read(tmp_path / "store") == expected
