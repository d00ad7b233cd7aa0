"""Small things a new user hit (issue 48, item 7): the URL option's spelling, a cursor that
wraps, a memory:// stash that forgets between commands."""

from __future__ import annotations

from pathlib import Path

import stashpoint
from stashpoint import Envelope
from tests.cli.test_cli import cli


def test_table_in_a_url_is_refused_naming_the_index_option_and_every_accepted_one() -> None:
    result = cli("list", url="s3://bucket/prefix?table=T", check=False)
    said = result.stderr
    assert result.returncode == 6
    assert "index=dynamodb://TABLE" in said and "accepted:" in said and "endpoint_url" in said


def test_every_command_s_url_help_shows_the_accepted_index_form() -> None:
    help_text = cli("list", "--help", columns=200).stdout
    assert "?index=dynamodb://TABLE" in help_text and "table=T" not in help_text


def test_a_long_cursor_is_printed_on_one_line_on_a_narrow_terminal(tmp_path: Path) -> None:
    url = f"local://{tmp_path / 's'}"
    long_id = "agent-" + "x" * 90
    with stashpoint.open(url) as stash:
        for name in (long_id, long_id + "y"):
            stash.checkpoints.compare_and_swap(Envelope.initial(name, None, "k", 1, {}), None)
    table = cli("list", "--limit", "1", url=url, columns=60).stdout
    assert f"more: --cursor {long_id}" in table.splitlines()


def test_memory_urls_warn_that_each_command_starts_empty() -> None:
    result = cli("list", url="memory://cli-seams", check=False)
    assert "each command starts with an empty stash" in result.stderr
