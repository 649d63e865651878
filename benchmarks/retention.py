"""History retention benchmark: does a pruning batch cost the same at any table size and at
any point of the pruning?

Loads N finished runs (and one ``settled`` event per run) of S schedules, finished evenly
over 100 days before ``NOW`` (each schedule's latest run is its ``last_run_id``), then
prunes with the product's statements (``timekeeper.db.retention``: ``prune_runs`` and
``prune_events``, run under EXPLAIN (ANALYZE, BUFFERS) and committed, as the maintenance
task commits each batch) with a cutoff that makes 98 % of the table prunable, and
measures batches of ``--batch`` rows when 10 %, 50 % and 90 % of the table has been
pruned: execution time (median of ``--repeats`` batches) and shared buffers touched. The
batches in between are run as fast as they go (autovacuum as the server has it).

    PYTHONPATH=shared python benchmarks/retention.py                       # N = 500k and 2M (~10 min)
    PYTHONPATH=shared python benchmarks/retention.py --sizes 200000 --quick # smoke

The database ``bench_retention`` on the benchmark server (``_bench.open_database``) is
created afresh for each size. Loading is server-side ``INSERT ... SELECT`` over
``generate_series`` (faster here than COPY from the client, which would have to build
each row in Python).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import timedelta

import _bench as b

from timekeeper.db.retention import SQL

NOW = b.NOW
SPAN_DAYS = 100


def load(conn, *, n: int, schedules: int) -> float:
    """Load ``schedules`` schedules and ``n`` finished runs with one event each; seconds taken."""
    started = time.perf_counter()
    conn.execute("""
        INSERT INTO schedules (id, workspace_id, owner, work_kind, recurrence, timezone, status, next_due_at,
                               created_at, updated_at)
        SELECT md5('s' || i)::uuid, md5('w' || (i %% 1000))::uuid, %(owner)s, %(kind)s,
               '{"cron": "*/5 * * * *"}'::jsonb, 'UTC', 'active', %(now)s + interval '1 hour',
               %(now)s - interval '200 days', %(now)s
          FROM generate_series(0, %(s)s - 1) AS i""", {"owner": b.OWNER, "kind": b.WORK_KIND, "now": NOW,
                                                        "s": schedules})
    step = 200_000
    for low in range(0, n, step):
        high = min(n, low + step)
        # run i finishes at NOW - SPAN * (1 - i/n): oldest first, all schedules interleaved
        conn.execute("""
            INSERT INTO schedule_runs (id, schedule_id, workspace_id, owner, work_kind, occurrence_key,
                                       occurrence_at, occurrence_local, trigger, definition_version, state,
                                       queued_at, started_at, finished_at, outcome_code, attempts, offered_at,
                                       published_at)
            SELECT md5('r' || i)::uuid, md5('s' || (i %% %(s)s))::uuid, md5('w' || ((i %% %(s)s) %% 1000))::uuid,
                   %(owner)s, %(kind)s, 'k' || i, t, t::timestamp, 'scheduled', 1, 'succeeded', t, t, t,
                   'ok', 1, t, t
              FROM generate_series(%(low)s, %(high)s - 1) AS i,
                   LATERAL (SELECT %(now)s - %(span)s * (1 - i::float8 / %(n)s) AS t) AS at""",
                     {"s": schedules, "owner": b.OWNER, "kind": b.WORK_KIND, "low": low, "high": high, "n": n,
                      "now": NOW, "span": timedelta(days=SPAN_DAYS)})
        conn.execute("""
            INSERT INTO schedule_events (schedule_id, workspace_id, run_id, kind, actor, at)
            SELECT md5('s' || (i %% %(s)s))::uuid, md5('w' || ((i %% %(s)s) %% 1000))::uuid, md5('r' || i)::uuid,
                   'settled', 'consumer', %(now)s - %(span)s * (1 - i::float8 / %(n)s)
              FROM generate_series(%(low)s, %(high)s - 1) AS i""",
                     {"s": schedules, "low": low, "high": high, "n": n, "now": NOW,
                      "span": timedelta(days=SPAN_DAYS)})
    # each schedule's latest run: the highest i with i % S = its index
    conn.execute("""UPDATE schedules AS s SET last_run_id = md5('r' || (%(n)s - %(s)s + j))::uuid
                      FROM generate_series(0, %(s)s - 1) AS j
                     WHERE s.id = md5('s' || ((%(n)s - %(s)s + j) %% %(s)s))::uuid""", {"n": n, "s": schedules})
    conn.execute("VACUUM (ANALYZE) schedules, schedule_runs, schedule_events")
    return time.perf_counter() - started


def batch(conn, name: str, params: dict, index_order: bool = True) -> tuple[float, int, int]:
    """One committed batch under EXPLAIN ANALYZE: (execution ms, shared buffers, rows deleted)."""
    with conn.transaction():
        if index_order:
            conn.execute(SQL["plan_in_index_order"])  # as timekeeper.db.retention runs each batch
        plan = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + SQL[name], params).fetchone()
    top = plan["QUERY PLAN"][0]
    node = top["Plan"]
    buffers = node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0)
    rows = _deleted(node)
    return top["Execution Time"], buffers, rows


def _deleted(node: dict) -> int:
    """Rows deleted from the statement's main table (the ModifyTable node of its own kind)."""
    if node.get("Node Type") == "ModifyTable" and node.get("Relation Name") in ("schedule_runs", "schedule_events"):
        return int(node.get("Actual Rows", 0)) or int(node.get("Actual Loops", 0) and node.get("Plan Rows", 0))
    return max([_deleted(child) for child in node.get("Plans", [])] or [0])


def count(conn, table: str) -> int:
    return conn.execute(f"SELECT count(*) AS n FROM {table}").fetchone()["n"]


def sizes(conn) -> dict[str, int]:
    return {t: conn.execute("SELECT pg_total_relation_size(%s) AS n", (t,)).fetchone()["n"]
            for t in ("schedule_runs", "schedule_events")}


def run_size(n: int, *, schedules: int, batch_rows: int, repeats: int, points: list[int]) -> list[dict]:
    url = b.open_database("bench_retention")
    conn = b.bench_connect(url)
    load_s = load(conn, n=n, schedules=schedules)
    print(f"loaded {n:,} runs and events of {schedules:,} schedules in {load_s:.0f} s; {sizes(conn)}", flush=True)
    cutoff = NOW - timedelta(days=SPAN_DAYS * 0.02)
    results = []
    for kind, name, table, params in (
            ("runs", "prune_runs", "schedule_runs", {"owner": b.OWNER, "now": NOW, "cutoff": cutoff}),
            ("events", "prune_events", "schedule_events", {"owner": b.OWNER, "cutoff": cutoff})):
        total, done = count(conn, table), 0
        for point in points:
            target = total * point // 100
            between: list[float] = []
            while done + batch_rows <= target:
                ms, _, rows = batch(conn, name, {**params, "limit": batch_rows})
                between.append(ms)
                done += rows or batch_rows
            measured = [batch(conn, name, {**params, "limit": batch_rows}) for _ in range(repeats)]
            done += sum(r for _, _, r in measured)
            row = {"n": n, "kind": kind, "pruned_pct": point, "batch": batch_rows,
                   "ms": round(statistics.median(m for m, _, _ in measured), 1),
                   "buffers": int(statistics.median(bu for _, bu, _ in measured)),
                   "between_ms_median": round(statistics.median(between), 1) if between else None,
                   "rows_per_s": round(batch_rows / (statistics.median(m for m, _, _ in measured) / 1000)),
                   "load": round(b.load_average(), 1)}
            results.append(row)
            print(json.dumps(row), flush=True)
    print(f"after: {sizes(conn)}", flush=True)
    conn.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="500000,2000000")
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=10_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="one repeat, batches of 2,000")
    args = parser.parse_args()
    batch_rows, repeats = (2_000, 1) if args.quick else (args.batch, args.repeats)
    with b.bench_connect(b.open_database("bench_retention")) as probe:
        print(b.machine(probe), "revision", b.git_revision(), flush=True)
    rows = []
    for n in (int(s) for s in args.sizes.split(",")):
        rows += run_size(n, schedules=args.schedules, batch_rows=batch_rows, repeats=repeats, points=[10, 50, 90])
    print(b.table(["N", "kind", "pruned", "batch", "ms (median)", "buffers", "ms between", "rows/s", "load"],
                  [[f"{r['n']:,}", r["kind"], f"{r['pruned_pct']} %", f"{r['batch']:,}", r["ms"], f"{r['buffers']:,}",
                    r["between_ms_median"], f"{r['rows_per_s']:,}", r["load"]] for r in rows]))


if __name__ == "__main__":
    main()
