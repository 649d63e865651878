"""History retention soak: a sustained rate of runs with retention running; do the table
and index sizes level off?

Each step is one simulated minute: ``--rate`` runs of ``--schedules`` schedules finish in
that minute (inserted finished, one ``settled`` event each, each schedule's newest run its
``last_run_id``, as settlement leaves it), then the owner's retention pass runs
(:func:`timekeeper.db.retention.prune_owner_history`, the maintenance task's function) with
a retention of ``--retention-minutes`` and the topology's batch bounds. Every
``--sample-every`` steps it samples the heap and index sizes of ``schedule_runs`` and
``schedule_events`` (``pg_relation_size``, ``pg_indexes_size``), their live and dead
tuples, the WAL written, and the pass's time. A step takes ``--step-seconds`` of real
time (default 1), so the rate is real: 2,000 runs a second, and autovacuum (which wakes
every ``autovacuum_naptime``, 60 real seconds) sees the dead rows at the pace production
would. The figure to read: whether the sizes stop growing once the retention window is
full.

    PYTHONPATH=shared python benchmarks/retention_soak.py --steps 240        # 4 min
    PYTHONPATH=shared python benchmarks/retention_soak.py --steps 60 --rate 500 --step-seconds 0   # smoke

The database ``bench_retention_soak`` on the benchmark server is created afresh.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import timedelta

import _bench as b

from timekeeper.db.retention import prune_owner_history
from timekeeper.topology import HISTORY


def sizes(conn) -> dict[str, int]:
    row = conn.execute("""
        SELECT pg_relation_size('schedule_runs') AS runs_heap, pg_indexes_size('schedule_runs') AS runs_indexes,
               pg_relation_size('schedule_events') AS events_heap,
               pg_indexes_size('schedule_events') AS events_indexes""").fetchone()
    stats = {r["relname"]: r for r in conn.execute(
        """SELECT relname, n_live_tup, n_dead_tup, autovacuum_count FROM pg_stat_user_tables
            WHERE relname IN ('schedule_runs', 'schedule_events')""")}
    return {**row, "runs_live": stats["schedule_runs"]["n_live_tup"], "runs_dead": stats["schedule_runs"]["n_dead_tup"],
            "runs_autovacuums": stats["schedule_runs"]["autovacuum_count"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=360, help="simulated minutes")
    parser.add_argument("--rate", type=int, default=2000, help="runs finished per simulated minute")
    parser.add_argument("--schedules", type=int, default=2000)
    parser.add_argument("--retention-minutes", type=int, default=60)
    parser.add_argument("--sample-every", type=int, default=20)
    parser.add_argument("--step-seconds", type=float, default=1.0,
                        help="real seconds per simulated minute (a step waits out the rest): 1 s with --rate 2000 "
                             "is 2,000 runs a real second; 0 runs as fast as it goes, faster than autovacuum wakes")
    args = parser.parse_args()
    url = b.open_database("bench_retention_soak")
    conn = b.bench_connect(url)
    print(b.machine(conn), "revision", b.git_revision(), flush=True)
    now = b.NOW
    conn.execute("""
        INSERT INTO schedules (id, workspace_id, owner, work_kind, recurrence, timezone, status, next_due_at,
                               created_at, updated_at)
        SELECT md5('s' || i)::uuid, md5('w' || (i %% 100))::uuid, %(owner)s, %(kind)s, '{"cron": "* * * * *"}'::jsonb,
               'UTC', 'active', %(now)s, %(now)s - interval '1 day', %(now)s
          FROM generate_series(0, %(s)s - 1) AS i""", {"owner": b.OWNER, "kind": b.WORK_KIND, "now": now,
                                                        "s": args.schedules})
    conn.execute("VACUUM ANALYZE schedules")
    lsn, started, seq, samples, pass_ms = b.wal_lsn(conn), time.perf_counter(), 0, [], []
    for step in range(1, args.steps + 1):
        step_started = time.perf_counter()
        now += timedelta(minutes=1)
        with conn.transaction():
            conn.execute("""
                INSERT INTO schedule_runs (id, schedule_id, workspace_id, owner, work_kind, occurrence_key,
                                           occurrence_at, occurrence_local, trigger, definition_version, state,
                                           queued_at, started_at, finished_at, outcome_code, attempts)
                SELECT md5('r' || i)::uuid, md5('s' || (i %% %(s)s))::uuid, md5('w' || ((i %% %(s)s) %% 100))::uuid,
                       %(owner)s, %(kind)s, 'k' || i, %(now)s, %(now)s::timestamp, 'scheduled', 1, 'succeeded',
                       %(now)s, %(now)s, %(now)s, 'ok', 1
                  FROM generate_series(%(low)s, %(high)s - 1) AS i""",
                         {"s": args.schedules, "owner": b.OWNER, "kind": b.WORK_KIND, "now": now, "low": seq,
                          "high": seq + args.rate})
            conn.execute("""
                INSERT INTO schedule_events (schedule_id, workspace_id, run_id, kind, actor, at)
                SELECT md5('s' || (i %% %(s)s))::uuid, md5('w' || ((i %% %(s)s) %% 100))::uuid,
                       md5('r' || i)::uuid, 'settled', 'consumer', %(now)s
                  FROM generate_series(%(low)s, %(high)s - 1) AS i""",
                         {"s": args.schedules, "now": now, "low": seq, "high": seq + args.rate})
            conn.execute("""UPDATE schedules AS s SET last_run_id = md5('r' || i)::uuid, last_run_at = %(now)s
                              FROM generate_series(greatest(%(low)s, %(high)s - %(s)s), %(high)s - 1) AS i
                             WHERE s.id = md5('s' || (i %% %(s)s))::uuid""",
                         {"s": args.schedules, "now": now, "low": seq, "high": seq + args.rate})
        seq += args.rate
        t0 = time.perf_counter()
        pruned = prune_owner_history(conn, owner=b.OWNER, now=now,
                                     runs_retention=timedelta(minutes=args.retention_minutes),
                                     events_retention=timedelta(minutes=args.retention_minutes),
                                     batch_rows=HISTORY.batch_rows, max_batches=HISTORY.max_batches_per_pass,
                                     time_budget_s=HISTORY.time_budget_s)
        pass_ms.append((time.perf_counter() - t0) * 1000)
        if step % args.sample_every == 0:
            sample = {"step": step, "real_s": round(time.perf_counter() - started), **sizes(conn),
                      "pruned_last_pass": pruned.total, "pass_ms_median": round(sorted(pass_ms)[len(pass_ms) // 2]),
                      "wal_mb": round(b.wal_bytes_since(conn, lsn) / 2**20), "load": round(b.load_average(), 1)}
            pass_ms = []
            samples.append(sample)
            print(json.dumps(sample), flush=True)
        time.sleep(max(0.0, args.step_seconds - (time.perf_counter() - step_started)))
    mib = 2**20
    print(b.table(["sim min", "real s", "runs heap MiB", "runs idx MiB", "events heap MiB", "events idx MiB",
                   "live runs", "dead runs", "autovacuums", "pass ms", "WAL MiB"],
                  [[s["step"], s["real_s"], round(s["runs_heap"] / mib, 1), round(s["runs_indexes"] / mib, 1),
                    round(s["events_heap"] / mib, 1), round(s["events_indexes"] / mib, 1), f"{s['runs_live']:,}",
                    f"{s['runs_dead']:,}", s["runs_autovacuums"], s["pass_ms_median"], s["wal_mb"]]
                   for s in samples]))
    conn.close()


if __name__ == "__main__":
    main()
