"""The harness that runs a framework's own tests: a failure is confirmed by a second run."""

from __future__ import annotations

from pathlib import Path

from tests.sdk_suites import outcomes

SUITE = """
from pathlib import Path

def test_fails_once():
    marker = Path(__file__).with_name("ran")
    first = not marker.exists()
    marker.touch()
    assert not first, "a busy machine missed a timeout"

def test_always_fails():
    assert False

def test_passes():
    pass
"""


def test_a_failure_is_run_again_and_only_a_repeated_one_stands(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_suite.py").write_text(SUITE)
    found = outcomes(tmp_path, ["tests/test_suite.py"], plugin=None)
    assert found == {
        "tests/test_suite.py::test_fails_once": "PASSED",
        "tests/test_suite.py::test_always_fails": "FAILED",
        "tests/test_suite.py::test_passes": "PASSED",
    }
