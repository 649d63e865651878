"""Server time of each console page in a large workspace.

One workspace with ``--schedules`` schedules (default 10,000) and ``--runs`` finished runs
(default 100,000) spread over them (the first schedule gets ``--hot-runs`` of them, so its
page reads a long history), then each page rendered ``--repeats`` times through the real
console resolver, which calls the real API resolver on the API's walled login (what the
API function does per request; no HTTP in between). Prints the median and 95th percentile
of each page in milliseconds::

    PYTHONPATH=shared:benchmarks:. python3 benchmarks/console_pages.py

Target: each page under 200 ms at the median on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from datetime import UTC, datetime

import _bench as b

from tests.api.conftest import enrol, proxy_event
from timekeeper import clock
from timekeeper.api import ApiAdapters, create_app
from timekeeper.api.db import API_ROLE, connect_api
from timekeeper.console.app import ConsoleSettings, create_console
from timekeeper.console.sessions import SESSION_COOKIE, Session, Sessions
from timekeeper.db.connection import connect, login_url
from timekeeper.edge import registries
from timekeeper.local.lambdas import LambdaContext

NOW = datetime(2027, 3, 29, 9, 0, tzinfo=UTC)
KEY = "bench-console-session-key-0123456789abcdef"


def load(url: str, *, workspace: uuid.UUID, schedules: int, runs: int, hot_runs: int) -> uuid.UUID:
    """Insert the workspace's schedules and finished runs; return the first schedule's id."""
    with connect(url) as conn:
        conn.execute("""
            INSERT INTO schedules (id, workspace_id, owner, work_kind, name, recurrence, timezone, status,
                                   next_due_at, created_at, updated_at, last_outcome, last_run_at)
            SELECT gen_random_uuid(), %(ws)s, 'accounting', 'reconciliation.sweep', 'sweep ' || g,
                   '{"cron": "30 2 * * *", "timezone": "Europe/Berlin"}', 'Europe/Berlin', 'active',
                   %(now)s + (g %% 1440) * interval '1 minute', %(now)s - interval '30 days' + g * interval '1 second',
                   %(now)s, 'reconciled', %(now)s - interval '1 hour'
              FROM generate_series(1, %(n)s) AS g""", {"ws": workspace, "now": NOW, "n": schedules})
        ids = [row["id"] for row in conn.execute(
            "SELECT id FROM schedules WHERE workspace_id = %s ORDER BY created_at, id", (workspace,)).fetchall()]
        conn.execute("""
            INSERT INTO schedule_runs (schedule_id, workspace_id, owner, work_kind, occurrence_key, occurrence_at,
                                       occurrence_local, trigger, definition_version, state, queued_at, attempts,
                                       started_at, finished_at, outcome_code)
            SELECT s.id, %(ws)s, 'accounting', 'reconciliation.sweep', (%(now)s - g * interval '1 day')::text,
                   %(now)s - g * interval '1 day', (%(now)s - g * interval '1 day')::timestamp, 'scheduled', 1,
                   'succeeded', %(now)s - g * interval '1 day', 1, %(now)s - g * interval '1 day',
                   %(now)s - g * interval '1 day' + interval '2 seconds', 'reconciled'
              FROM generate_series(1, %(per)s) AS g CROSS JOIN unnest(%(ids)s::uuid[]) AS s(id)""",
                     {"ws": workspace, "now": NOW, "per": max(1, (runs - hot_runs) // schedules), "ids": ids[1:]})
        conn.execute("""
            INSERT INTO schedule_runs (schedule_id, workspace_id, owner, work_kind, occurrence_key, occurrence_at,
                                       occurrence_local, trigger, definition_version, state, queued_at, attempts,
                                       started_at, finished_at, outcome_code)
            SELECT %(id)s, %(ws)s, 'accounting', 'reconciliation.sweep', (%(now)s - g * interval '1 hour')::text,
                   %(now)s - g * interval '1 hour', (%(now)s - g * interval '1 hour')::timestamp, 'scheduled', 1,
                   'succeeded', %(now)s - g * interval '1 hour', 1, %(now)s - g * interval '1 hour',
                   %(now)s - g * interval '1 hour' + interval '2 seconds', 'reconciled'
              FROM generate_series(1, %(hot)s) AS g""", {"id": ids[0], "ws": workspace, "now": NOW, "hot": hot_runs})
        # Every 20th schedule paused after failures and every 20th (offset) failing: the
        # operations page's rows (it reads every workspace's through the partial index).
        conn.execute("""UPDATE schedules SET status = 'paused', pause_reason = 'consecutive_failures',
                               next_due_at = NULL, consecutive_failures = 5
                         WHERE workspace_id = %(ws)s AND id = ANY(%(paused)s)""",
                     {"ws": workspace, "paused": ids[::20]})
        conn.execute("UPDATE schedules SET consecutive_failures = 2 WHERE id = ANY(%(failing)s)",
                     {"failing": ids[10::20]})
        conn.execute("ANALYZE schedules")
        conn.execute("ANALYZE schedule_runs")
        return ids[0]


def load_snapshots(url: str, *, workspace: uuid.UUID, months: int, versions: int) -> uuid.UUID:
    """Give the workspace ``months`` months of history (created that long before NOW), each
    month of the two Platform types published (``2 * months`` periods, every one in one
    range request), and January 2027's receivable aging ``versions`` more versions (failed
    re-runs with their reasons); return the range's group id."""
    group = uuid.uuid4()
    with connect(url) as conn:
        conn.execute("UPDATE workspaces SET created_at = %s - make_interval(months => %s), name = 'Bench club' "
                     "WHERE id = %s", (NOW, months + 1, workspace))
        conn.execute("""
            INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, reason,
                                       requested_by, state, attempts, chunks_committed, is_current, published_at,
                                       basis, request_group, created_at, updated_at)
            SELECT 'platform', t, %(ws)s, (date_trunc('month', %(now)s) - g * interval '1 month')::date, 1,
                   'backfill', 'history', 'staff', 'published', 1, 1, true, %(now)s, '{"rows": 3}', %(group)s,
                   %(now)s, %(now)s
              FROM generate_series(1, %(months)s) AS g CROSS JOIN unnest(ARRAY['ar_aging', 'membership_counts']) t""",
                     {"ws": workspace, "now": NOW, "months": months, "group": group})
        conn.execute("""
            INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, reason,
                                       requested_by, state, attempts, failure_code, failure_message, created_at,
                                       updated_at)
            SELECT 'platform', 'ar_aging', %(ws)s, '2027-01-01', 1 + g, 'manual', 'totals corrected ' || g, 'staff',
                   'failed', 4, 'retries_exhausted', 'the source timed out', %(now)s, %(now)s
              FROM generate_series(1, %(versions)s) AS g""", {"ws": workspace, "now": NOW, "versions": versions})
        conn.execute("ANALYZE snapshot_runs")
    return group


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--hot-runs", type=int, default=5_000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--snapshot-months", type=int, default=120)
    parser.add_argument("--period-versions", type=int, default=50)
    args = parser.parse_args()

    url = b.open_database("bench_console")
    workspace = uuid.uuid4()
    started = time.perf_counter()
    hot = load(url, workspace=workspace, schedules=args.schedules, runs=args.runs, hot_runs=args.hot_runs)
    print(f"loaded {args.schedules:,} schedules and about {args.runs:,} runs in {time.perf_counter() - started:.1f} s")
    clock.install(lambda: NOW)
    api_conn = connect_api(login_url(url, API_ROLE))
    api = create_app(ApiAdapters(connection=lambda: api_conn, publisher_for=lambda _: None,
                                 registry=registries.work_kinds, now=clock.now,
                                 snapshot_registry=registries.snapshot_types))
    console = create_console(api.resolve, ConsoleSettings(session_key=KEY))
    staff_workspace = uuid.uuid4()
    enrol(url, "bench", workspace)  # the API lets in members of the token's workspace only
    enrol(url, "staff", staff_workspace)
    session = Session(user_id="bench", workspace_id=str(workspace), roles="schedules:read")
    cookie = f"{SESSION_COOKIE}={Sessions(KEY).issue(session)}"
    first_page = console.resolve(proxy_event("GET", "/console/schedules", claims=None, headers={"Cookie": cookie}),
                                 LambdaContext(function_name="bench"))
    cursor = first_page["body"].split('rel="next"')[0].rsplit("cursor=", 1)[-1].split('"')[0]
    pages = {"schedules list (first page of 50)": "/console/schedules",
             "schedules list (a later page)": f"/console/schedules?cursor={cursor}",
             "schedules list (status filter)": "/console/schedules?status=active",
             f"a schedule with {args.hot_runs:,} runs": f"/console/schedules/{hot}"}
    writer_session = Session(user_id="bench", workspace_id=str(workspace), roles="schedules:read,schedules:write")
    writer = f"{SESSION_COOKIE}={Sessions(KEY).issue(writer_session)}"
    pages["new schedule form (the kinds and their subjects)"] = ("/console/schedules/new", writer)
    pages[f"a schedule with {args.hot_runs:,} runs, as a writer (name and subject form)"] = (
        f"/console/schedules/{hot}", writer)
    pages["a schedule's delete confirmation"] = (f"/console/schedules/{hot}/delete", writer)
    staff_session = Session(user_id="staff", workspace_id=str(staff_workspace), roles="platform:staff")
    staff = f"{SESSION_COOKIE}={Sessions(KEY).issue(staff_session)}"
    pages["operations overview, staff (every workspace: 500 paused, 500 failing)"] = ("/console/operations", staff)
    group = load_snapshots(url, workspace=workspace, months=args.snapshot_months, versions=args.period_versions)
    periods = f"{2 * args.snapshot_months:,} periods"
    pages[f"periods page, staff ({periods}: first page of 100, row actions)"] = (
        f"/console/snapshots?workspace={workspace}", staff)
    pages[f"periods page, staff, a workspace by name ({periods})"] = ("/console/snapshots?name=Bench", staff)
    pages[f"a period's page, staff ({args.period_versions + 1} versions, actions)"] = (
        f"/console/snapshots/periods/platform/ar_aging/2027-01?workspace={workspace}", staff)
    pages["range form, staff (workspaces by name)"] = ("/console/snapshots/ranges?search=Bench", staff)
    pages[f"a range's progress, staff ({periods})"] = (f"/console/snapshots/ranges/{group}", staff)
    pages[f"every workspace's periods, staff ({periods} and the rest, first page of 100)"] = (
        "/console/snapshots/staff", staff)
    print(f"| page | median ms | p95 ms | (n = {args.repeats}) |\n|---|---:|---:|---|")
    for label, target in pages.items():
        path, who = target if isinstance(target, tuple) else (target, cookie)
        times = []
        for _ in range(args.repeats):
            event = proxy_event("GET", path, claims=None, headers={"Cookie": who})
            begun = time.perf_counter()
            response = console.resolve(event, LambdaContext(function_name="bench"))
            times.append((time.perf_counter() - begun) * 1000)
            assert response["statusCode"] == 200, (path, response["statusCode"])
        times.sort()
        p95 = times[min(len(times) - 1, int(len(times) * 0.95))]
        print(f"| {label} | {statistics.median(times):.1f} | {p95:.1f} | |")
    api_conn.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
