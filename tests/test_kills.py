"""The kill harness counts a line as printed only once its newline is (a cut line is not)."""

from __future__ import annotations

from tests.kills import kill_after_lines

# One write puts two whole lines and the start of a third in the pipe before the parent
# reads the first (as an unbuffered `print` writes its parts one by one); the child then
# sleeps inside the third line, where the kill lands.
CUT_CHILD = """
import sys, time
sys.stdout.write("0 whole\\n1 whole\\n2 ")
sys.stdout.flush()
time.sleep(60)
"""


def test_a_line_the_kill_cut_is_not_counted_as_printed() -> None:
    before, after = kill_after_lines(CUT_CHILD, [], 1)
    assert before == ["0 whole"]
    assert after == ["1 whole"]  # "2 " was written, its newline never was


def test_a_child_that_ends_first_yields_what_it_printed() -> None:
    before, after = kill_after_lines("print('0 a'); print('1 b')", [], 5)
    assert (before, after) == (["0 a", "1 b"], [])
