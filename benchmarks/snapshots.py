"""Monthly-snapshot benchmark: the real planner, admission and run job on a real PostgreSQL.

Measures (see benchmarks/README.md for the targets and results):

* planner: one pass over W workspaces x the enabled types (3 in development) planning
  their completed months (1, then 24 months of history), then passes with nothing new to
  plan at the deployed horizon (they must cost the same after 1 and after 24 months of
  history: a pass reads an index, not the history);
* admission under load: P planned runs and B backfills drained by admission passes while
  "workers" finish one job per step; the most runs in flight and the most backfills in
  flight are checked on every pass;
* generation: the accounts-receivable aging of one month over I invoices (chunked,
  resumable), rows per second, and the time from admission to publication.

    cd /work/main && PYTHONPATH=shared python benchmarks/snapshots.py            # full
    cd /work/main && PYTHONPATH=shared python benchmarks/snapshots.py --quick    # smoke (< 1 min)
"""

from __future__ import annotations

import argparse
import collections
import random
import time
from datetime import UTC, date, datetime, timedelta
from uuid import UUID

import _bench as b
import psycopg

from timekeeper.platform import snapshots as platform_snapshots
from timekeeper.snapshots.jobs import JobMessage, run_job
from timekeeper.snapshots.ledger import DEFAULT_HORIZON_MONTHS, OVERDUE_GRACE, admit, overdue_periods, plan, request_run
from timekeeper.snapshots.ledger import SQL as LEDGER_SQL
from timekeeper.snapshots.registry import SnapshotRegistry

NOW = datetime(2027, 3, 1, 12, tzinfo=UTC)


def registry(aging_chunk: int = 50_000) -> SnapshotRegistry:
    reg = SnapshotRegistry(environment="development")
    platform_snapshots.register(reg, aging_chunk_size=aging_chunk,
                                selftest=platform_snapshots.SelfTest(total=1, chunk_size=1))
    return reg


def reset(conn: psycopg.Connection) -> None:
    conn.execute("TRUNCATE snapshot_runs, snapshot_membership_counts, snapshot_ar_aging, snapshot_selftest_rows, "
                 "payments, invoices, memberships, members, membership_types, workspace_memberships, workspaces "
                 "CASCADE")


def load_workspaces(conn: psycopg.Connection, count: int, *, created: datetime) -> list[UUID]:
    zones = ["Europe/Berlin", "America/New_York", "Asia/Tokyo", "Pacific/Kiritimati", "Pacific/Pago_Pago",
             "Australia/Sydney", "America/Los_Angeles", "Asia/Kolkata"]
    with conn.cursor() as cur, cur.copy("COPY workspaces (name, timezone, currency, created_at) FROM STDIN") as copy:
        for i in range(count):
            copy.write_row((f"Workspace {i}", zones[i % len(zones)], "EUR", created))
    return [r["id"] for r in conn.execute("SELECT id FROM workspaces ORDER BY id")]


def planner(conn: psycopg.Connection, workspaces: int) -> list[list[object]]:
    rows = []
    reg = registry()
    for history_months in (1, 24):
        reset(conn)
        load_workspaces(conn, workspaces, created=NOW - timedelta(days=31 * history_months + 5))
        started = time.perf_counter()
        with conn.transaction():
            # every month since the workspaces were created (a horizon reaching their creation)
            first = plan(conn, reg, now=NOW, horizon_months=history_months + 1)
        first_s = time.perf_counter() - started
        planned = first.planned + first.skipped
        # The history is published (the steady state): every planned month gets its current version
        conn.execute("UPDATE snapshot_runs SET state = 'published', is_current = true, published_at = %s "
                     "WHERE state = 'planned'", (NOW,))
        conn.execute("VACUUM ANALYZE snapshot_runs")
        idle, overdue = [], []
        for _ in range(5):
            started = time.perf_counter()
            with conn.transaction():
                again = plan(conn, reg, now=NOW)  # the deployed horizon
            idle.append(time.perf_counter() - started)
            assert again.planned + again.skipped == 0
            started = time.perf_counter()
            with conn.transaction():
                overdue_periods(conn, reg, now=NOW)
            overdue.append(time.perf_counter() - started)
        buffers = {name: statement_buffers(conn, name, reg) for name in ("plan_months", "overdue_periods")}
        rows.append([f"{workspaces:,} x {len(reg.enabled())}", history_months, f"{planned:,}", f"{first_s:.2f}",
                     f"{b.median(idle):.3f}", f"{b.median(overdue):.3f}", f"{buffers['plan_months']:,}",
                     f"{buffers['overdue_periods']:,}", f"{b.load_average():.1f}"])
    return rows


def statement_buffers(conn: psycopg.Connection, name: str, reg: SnapshotRegistry) -> int:
    """Shared buffers (hit + read) one idle run of the planner's statement ``name`` touches:
    a measure of its work that the machine's load does not move (rolled back)."""
    params = {"owners": [t.owner for t in reg.enabled()], "types": [t.name for t in reg.enabled()], "now": NOW,
              "horizon": DEFAULT_HORIZON_MONTHS, "grace": OVERDUE_GRACE}
    conn.execute("BEGIN")
    try:
        plan_json = conn.execute("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + LEDGER_SQL[name], params).fetchone()
    finally:
        conn.execute("ROLLBACK")
    top = next(iter(plan_json.values()))[0]["Plan"]
    return top["Shared Hit Blocks"] + top["Shared Read Blocks"]


def admission(conn: psycopg.Connection, planned: int, backfills: int) -> list[object]:
    reset(conn)
    # Created long ago: the planned runs below are invented months from 1800 on, and staff
    # backfills are refused for months before a workspace existed.
    ws = load_workspaces(conn, 10, created=datetime(1799, 1, 1, tzinfo=UTC))
    reg = registry()
    selftest = reg.get("platform", "selftest")
    per = planned // len(ws)
    conn.execute("""INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, state,
                                               created_at, updated_at)
                    SELECT 'platform', 'selftest', w, (date '1800-01-01' + make_interval(months => m))::date, 1,
                           'planned', 'planned', %s + make_interval(secs => m), %s
                      FROM unnest(%s::uuid[]) w, generate_series(0, %s - 1) m""", (NOW, NOW, ws, per))
    for i in range(backfills):
        request_run(conn, snapshot_type=selftest, workspace_id=ws[i % len(ws)],
                    period=date(1990 + i // 12, i % 12 + 1, 1), mode="backfill", reason="benchmark",
                    requested_by="staff", now=NOW + timedelta(minutes=1))
    backfill_ids = {r["id"] for r in conn.execute("SELECT id FROM snapshot_runs WHERE mode = 'backfill'")}
    sent: collections.deque = collections.deque()
    max_flight = max_backfill = passes = 0
    last_backfill_step = 0
    started = time.perf_counter()
    for step in range(10 * (planned + backfills)):
        with conn.transaction():
            sent.extend(admit(conn, owner="platform", now=NOW))
        passes += 1
        flight = conn.execute("SELECT count(*) AS n, count(*) FILTER (WHERE mode = 'backfill') AS b "
                              "FROM snapshot_runs WHERE state IN ('queued', 'running')").fetchone()
        max_flight, max_backfill = max(max_flight, flight["n"]), max(max_backfill, flight["b"])
        if not sent:
            break
        job = sent.popleft()
        result = run_job(conn, reg, JobMessage(run_id=job.run_id, workspace_id=job.workspace_id, job_id=job.job_id),
                         now=lambda: NOW, receive_count=1, max_receives=3)
        assert result.status == "published", result
        if job.run_id in backfill_ids:
            last_backfill_step = step
    elapsed = time.perf_counter() - started
    published = conn.execute("SELECT count(*) AS n FROM snapshot_runs WHERE state = 'published'").fetchone()["n"]
    return [f"{planned:,} + {backfills}", passes, f"{published:,}", max_flight, max_backfill, last_backfill_step,
            f"{elapsed:.1f}", f"{b.load_average():.1f}"]


def load_invoices(conn: psycopg.Connection, workspace: UUID, invoices: int, seed: int = 11) -> None:
    """Members and ``invoices`` invoices with payments (COPY), dated over the 13 months
    before the benchmark's month end, so every aging bucket is populated."""
    rng = random.Random(seed)
    members = max(1, invoices // 20)
    with conn.cursor() as cur, cur.copy(
            "COPY members (workspace_id, member_number, display_name, joined_on) FROM STDIN") as copy:
        for i in range(members):
            copy.write_row((workspace, f"M{i:07d}", f"Member {i}", date(2025, 1, 1)))
    member_ids = [r["id"] for r in conn.execute("SELECT id FROM members WHERE workspace_id = %s", (workspace,))]
    end = date(2027, 2, 28)
    with conn.cursor() as cur, cur.copy(
            "COPY invoices (workspace_id, member_id, number, issue_date, due_date, amount_minor, currency, status, "
            "voided_on) FROM STDIN") as copy:
        for i in range(invoices):
            issued = end - timedelta(days=rng.randrange(0, 400))
            status = rng.choices(["open", "paid", "void", "draft"], [50, 40, 5, 5])[0]
            copy.write_row((workspace, member_ids[i % members], f"INV-{i:08d}", issued, issued + timedelta(days=30),
                            rng.randrange(500, 50_000), "EUR", status,
                            issued + timedelta(days=3) if status == "void" else None))
    conn.execute("""INSERT INTO payments (workspace_id, invoice_id, received_on, amount_minor, currency, method)
                    SELECT workspace_id, id, issue_date + 10, CASE WHEN status = 'paid' THEN amount_minor
                                                                   ELSE amount_minor / 3 END, 'EUR', 'card'
                      FROM invoices WHERE workspace_id = %s AND status IN ('paid', 'open') AND amount_minor > 2""",
                 (workspace,))
    conn.execute("ANALYZE invoices; ANALYZE payments")


def generation(conn: psycopg.Connection, invoices: int, chunk: int) -> list[object]:
    reset(conn)
    (ws,) = load_workspaces(conn, 1, created=NOW - timedelta(days=400))
    load_invoices(conn, ws, invoices)
    reg = registry(aging_chunk=chunk)
    aging = reg.get("platform", "ar_aging")
    request_run(conn, snapshot_type=aging, workspace_id=ws, period=date(2027, 2, 1), mode="backfill",
                reason="benchmark", requested_by="staff", now=NOW)
    started = time.perf_counter()
    with conn.transaction():
        (job,) = admit(conn, owner="platform", now=NOW)
    result = run_job(conn, reg, JobMessage(run_id=job.run_id, workspace_id=job.workspace_id, job_id=job.job_id),
                     now=lambda: NOW, receive_count=1, max_receives=3)
    elapsed = time.perf_counter() - started
    assert result.status == "published", result
    run = result.run
    return [f"{invoices:,}", f"{chunk:,}", run.generation_mode, run.chunks_committed, f"{run.rows_written:,}",
            f"{elapsed:.1f}", f"{invoices / elapsed:,.0f}", f"{b.load_average():.1f}"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke run)")
    parser.add_argument("--workspaces", type=int, default=10_000)
    parser.add_argument("--planned", type=int, default=1_000)
    parser.add_argument("--backfills", type=int, default=50)
    parser.add_argument("--invoices", type=int, nargs="+", default=[100_000, 1_000_000])
    parser.add_argument("--chunk", type=int, default=50_000)
    parser.add_argument("--only", choices=["planner"], help="only the planner passes")
    args = parser.parse_args()
    if args.quick:
        args.workspaces, args.planned, args.backfills, args.invoices = 500, 100, 10, [20_000]
    url = b.open_database("bench_snapshots")
    with b.bench_connect(url) as conn:
        print(f"machine: {b.machine(conn)}; revision {b.git_revision()}")
        print("\nplanner pass (first pass plans every completed month; idle = a pass with nothing new)")
        print(b.table(["workspaces x types", "months of history", "rows planned", "first pass s",
                       "idle pass s (median of 5)", "overdue_periods alone s", "plan_months buffers",
                       "overdue_periods buffers", "load avg"],
                      planner(conn, args.workspaces)))
        if args.only == "planner":
            return
        print("admission under load (one job finished per step, in the order sent)")
        print(b.table(["planned + backfills", "admission passes", "published", "max in flight",
                       "max backfills in flight", "step of the last backfill", "s", "load avg"],
                      [admission(conn, args.planned, args.backfills)]))
        print("generation: accounts-receivable aging of one month (admission to publication)")
        print(b.table(["invoices", "chunk", "mode", "chunks", "rows aged", "s", "invoices/s", "load avg"],
                      [generation(conn, n, args.chunk) for n in args.invoices]))


if __name__ == "__main__":
    main()
