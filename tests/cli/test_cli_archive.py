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


def test_project_with_iceberg_publishes_the_table_and_drops_a_purged_log(tmp_path: Any) -> None:
    pytest.importorskip("pyiceberg")
    from pyiceberg.catalog import load_catalog

    from stashpoint import iceberg

    url = f"local://{tmp_path / 'stash'}"
    with stashpoint.open(url) as stash:
        for log_id in ("acme.t1", "acme.t2"):
            stash.logs.append(log_id, [{"role": "user", "content": "hello"}], after=None)
    done = json.loads(cli("project", "--iceberg", "--json", url=url).stdout)
    assert (done["iceberg"]["files"], len(done["iceberg"]["added"])) == (2, 2)
    said = cli("project", "--iceberg", url=url).stdout
    assert "iceberg table stashpoint.records: 2 files (0 added, 0 removed" in said
    cli("purge", "--log", "acme.t1", url=url)
    after = json.loads(cli("project", "--iceberg", "--json", url=url).stdout)
    assert (after["iceberg"]["files"], len(after["iceberg"]["removed"])) == (1, 1)
    with stashpoint.open(url) as stash:
        properties = iceberg.catalog_properties(stash, stash.engine_files(), None)
    table = load_catalog(iceberg.CATALOG_NAME, **properties).load_table("stashpoint.records")
    assert table.scan().to_arrow().column("log_id").to_pylist() == ["acme.t2"]
    refused = cli("project", "--iceberg", "--catalog", "no-equals", url=url, check=False)
    assert refused.returncode != 0 and "KEY=VALUE" in refused.stderr
    alone = cli("project", "--compact", url=url, check=False)
    assert alone.returncode != 0 and "--iceberg" in alone.stderr
    with stashpoint.open(url) as stash:
        for n in range(8):
            stash.logs.append(f"acme.c{n}", [{"role": "user", "content": "hi"}], after=None)
    compacted = json.loads(cli("project", "--iceberg", "--compact", "--json", url=url).stdout)
    assert compacted["iceberg"]["compaction"]["covered"] == 9  # acme.t2 and the eight
    assert compacted["iceberg"]["files"] == 1
