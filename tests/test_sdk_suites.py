"""The harness that runs a framework's own tests: a failure that counts is confirmed by a second run."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sdk_suites import outcomes, passed

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


def test_a_failure_is_run_again_and_only_a_repeated_one_stands(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_suite.py").write_text(SUITE)
    found = outcomes(tmp_path, ["tests/test_suite.py"], plugin=None)
    assert found == {
        "tests/test_suite.py::test_fails_once": "PASSED",
        "tests/test_suite.py::test_always_fails": "FAILED",
        "tests/test_suite.py::test_passes": "PASSED",
    }
    # The run again shows why a failure stands (the first run prints no tracebacks).
    shown = capsys.readouterr().out
    assert "_ test_always_fails _" in shown and "assert False" in shown
    assert "a busy machine missed a timeout" not in shown


def test_a_failure_that_decides_nothing_is_not_run_again(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_suite.py").write_text(SUITE)
    found = outcomes(
        tmp_path, ["tests/test_suite.py"], plugin=None, counts=lambda test: "always" in test
    )
    assert found["tests/test_suite.py::test_fails_once"] == "FAILED"  # not run again
    assert found["tests/test_suite.py::test_always_fails"] == "FAILED"
    assert passed(found) == {"tests/test_suite.py::test_passes"}
