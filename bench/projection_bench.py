"""The queryable archive's cost: a projection against pyarrow writing the same rows.

Writes `--logs` transcripts of `--messages` messages each to a stash (a local folder by
default; `--s3` for SeaweedFS on 127.0.0.1), then measures, in one run:

- **baseline**: pyarrow building the same rows (as `projection.rows_of` does, from the
  entries already in memory) and writing them to one Parquet file in memory;
- **full**: `projection.project` on the stash, from nothing (reads every log, writes one
  file per log through the write engine);
- **rerun**: `project` again after 1% more messages (one more turn on 1% of the logs);
- **query**: `select tenant, day, count(*) ... group by all` through `projection.query`,
  and (local folder) DuckDB's `read_parquet` over the files themselves;
- with `--iceberg`: `iceberg.publish` after the full run and after the rerun, and the
  same count through the Iceberg table (pyiceberg plans the files, DuckDB counts).

    .venv/bin/python -m bench.projection_bench [--logs 1000] [--messages 100] [--s3] [--iceberg]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any


def _fill(stash: Any, logs: int, messages: int) -> dict[str, Any]:
    heads = {}
    for n in range(logs):
        log_id = f"tenant{n % 20}.t{n}"
        head = None
        for turn in range(messages // 2):
            head = stash.logs.append(
                log_id,
                [{"role": "user", "content": f"question {turn} of {log_id} " + "words " * 20},
                 {"role": "assistant", "content": f"answer {turn} " + "more words " * 30}],
                after=head,
            )  # fmt: skip
        heads[log_id] = head
    return heads


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--logs", type=int, default=1000)
    parser.add_argument("--messages", type=int, default=100)
    parser.add_argument("--s3", action="store_true")
    parser.add_argument("--iceberg", action="store_true")
    parser.add_argument("--compact", action="store_true", help="with --iceberg")
    args = parser.parse_args()
    published: dict[str, float] = {}

    import pyarrow
    import pyarrow.parquet

    import stashpoint
    from stashpoint import projection

    with tempfile.TemporaryDirectory() as folder, contextlib.ExitStack() as servers:
        if args.s3:
            from bench.common import started_servers

            s3, _ = servers.enter_context(started_servers())
            url = s3.url(f"p-{uuid.uuid4().hex}")
        else:
            url = f"local://{Path(folder) / 'stash'}"
        with stashpoint.open(url) as stash:
            heads = _fill(stash, args.logs, args.messages)
            entries = {log_id: stash.logs.entries(log_id) for log_id in heads}

            started = time.perf_counter()
            columns: dict[str, list[Any]] = {}
            for log_id, log_entries in entries.items():
                for name, values in projection.rows_of("logs", log_id, log_entries).items():
                    columns.setdefault(name, []).extend(values)
            table = pyarrow.table(columns)
            pyarrow.parquet.write_table(table, io.BytesIO(), compression="zstd")
            baseline = time.perf_counter() - started
            rows = table.num_rows
            del entries, columns, table

            started = time.perf_counter()
            report = projection.project(stash, namespaces=["logs"])
            full = time.perf_counter() - started
            assert report.rows == rows, (report.rows, rows)
            catalog = {"uri": f"sqlite:///{Path(folder) / 'catalog.db'}"} if args.s3 else None
            if args.iceberg:
                from stashpoint import iceberg

                started = time.perf_counter()
                iceberg.publish(stash, catalog=catalog, namespaces=["logs"])
                published["full"] = time.perf_counter() - started

            grown = list(heads)[: max(1, args.logs // 100)]
            for log_id in grown:
                more = [{"role": "user", "content": "one more"}] * args.messages
                stash.logs.append(log_id, more, after=heads[log_id])
            started = time.perf_counter()
            again = projection.project(stash, namespaces=["logs"])
            rerun = time.perf_counter() - started
            if args.iceberg:
                started = time.perf_counter()
                iceberg.publish(stash, catalog=catalog, namespaces=["logs"])
                published["rerun"] = time.perf_counter() - started
                from pyiceberg.catalog import load_catalog

                properties = iceberg.catalog_properties(stash, stash.engine_files(), catalog)
                started = time.perf_counter()
                table = load_catalog(iceberg.CATALOG_NAME, **properties).load_table(
                    iceberg.DEFAULT_TABLE
                )
                connection = table.scan(selected_fields=("tenant", "day")).to_duckdb("records")
                counted_rows = connection.sql(
                    "select tenant, day, count(*) as n from records group by all"
                ).fetchall()
                published["query"] = time.perf_counter() - started
                assert sum(n for _, _, n in counted_rows) == rows + again.rows
                if args.compact:
                    started = time.perf_counter()
                    done = iceberg.publish(
                        stash, catalog=catalog, namespaces=["logs"], compact=True
                    )
                    published["compact"] = time.perf_counter() - started
                    published["compact_files"] = done.files
                    started = time.perf_counter()
                    table = load_catalog(iceberg.CATALOG_NAME, **properties).load_table(
                        iceberg.DEFAULT_TABLE
                    )
                    scan = table.scan(selected_fields=("tenant", "day"))
                    connection = scan.to_duckdb("records")
                    counted_rows = connection.sql(
                        "select tenant, day, count(*) as n from records group by all"
                    ).fetchall()
                    published["compact_query"] = time.perf_counter() - started
                    assert sum(n for _, _, n in counted_rows) == rows + again.rows

            started = time.perf_counter()
            answer = projection.query(
                stash, "select tenant, day, count(*) as n from records group by all"
            )
            query = time.perf_counter() - started
            assert sum(answer.column("n").to_pylist()) == rows + again.rows
            direct = None
            if not args.s3:  # what DuckDB (or Athena) reading the files themselves costs
                import duckdb

                files = Path(folder) / "stash" / "projection" / "logs" / "*" / "*.parquet"
                started = time.perf_counter()
                counted = duckdb.sql(
                    f"select tenant, day, count(*) as n from read_parquet('{files}') group by all"
                ).fetchall()
                direct = time.perf_counter() - started
                assert sum(n for _, _, n in counted) == rows + again.rows
    print(f"{rows} messages in {args.logs} logs ({'SeaweedFS' if args.s3 else 'local folder'})")
    print(f"baseline, pyarrow from memory: {baseline:.2f} s ({rows / baseline:,.0f} msg/s)")
    print(f"projection, full: {full:.2f} s ({rows / full:,.0f} msg/s): "
          f"{baseline / full:.2f}x the baseline's throughput")  # fmt: skip
    print(f"rerun after {again.rows} new messages ({again.rows / rows:.1%}): {rerun:.2f} s "
          f"({rerun / full:.1%} of the full run)")  # fmt: skip
    print(f"query, count by tenant and day: {query:.2f} s (projection.query)")
    if direct is not None:
        print(f"the same with DuckDB over the files: {direct:.2f} s")
    if published:
        print(f"iceberg.publish, full: {published['full']:.2f} s ({published['full'] / full:.1%} "
              f"of the full projection); after the rerun: {published['rerun']:.2f} s")  # fmt: skip
        print(f"the count through the Iceberg table (pyiceberg scan -> DuckDB): "
              f"{published['query']:.2f} s")  # fmt: skip
    if "compact" in published:
        print(f"publish with compaction: {published['compact']:.2f} s, the table then holds "
              f"{published['compact_files']:.0f} files; the count through it: "
              f"{published['compact_query']:.2f} s")  # fmt: skip


if __name__ == "__main__":
    main()
