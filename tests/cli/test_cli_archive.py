"""`stashpoint project` and `stashpoint query`: the queryable archive from the shell."""

from __future__ import annotations

import json
from typing import Any

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("duckdb")

import stashpoint
from tests.cli.test_cli import cli


def test_project_then_query_as_json_and_as_a_table(tmp_path: Any) -> None:
    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        stash.logs.append(
            "acme.t1",
            [{"role": "user", "content": "hello"}, {"role": "assistant", "content": "hi"}],
            after=None,
        )
    done = json.loads(cli("project", "--json", url=url).stdout)
    assert (done["logs"], done["rows"], len(done["files"])) == (1, 2, 1)
    sql = "select role, count(*) as n from messages group by role order by role"
    asked = json.loads(cli("query", sql, "--json", url=url).stdout)
    assert asked == {
        "columns": ["role", "n"],
        "rows": [{"role": "assistant", "n": 1}, {"role": "user", "n": 1}],
    }
    table = cli("query", "select content from messages order by content", url=url).stdout
    assert table.splitlines() == ["content", "hello", "hi"]  # a pipe: TSV


def test_sql_duckdb_refuses_is_a_usage_error_naming_the_column(tmp_path: Any) -> None:
    url = f"local://{tmp_path / 'stash'}"
    cli("project", url=url)
    refused = cli("query", "select nope from messages", url=url, check=False)
    assert refused.returncode != 0
    assert "invalid_argument" in refused.stderr and "nope" in refused.stderr
