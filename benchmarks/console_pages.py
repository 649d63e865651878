"""Server time of each console page in a large workspace.

One workspace with ``--schedules`` schedules (default 10,000) and ``--runs`` finished runs
(default 100,000) spread over them (the first schedule gets ``--hot-runs`` of them, so its
page reads a long history) and ``--audit-events`` audit events (default 1,000,000: the
settings and audit log pages, as a workspace admin), then each page rendered ``--repeats`` times through the real
console resolver, which calls the real API resolver on the API's walled login (what the
API function does per request; no HTTP in between). Prints the median and 95th percentile
of each page in milliseconds::

    PYTHONPATH=shared:benchmarks:. python3 benchmarks/console_pages.py

The authoring pages (new schedule form, saved queries' list, new query, a query with its
diff, new version, new delivery form, reports list and compose, a delivery page whose
ledger has 1,000 runs to 10 recipients) are read in the same workspace by a member who
may write queries and reports, with 50 saved queries and a report (:func:`load_authoring`).
The run page is read as the workspace's reader and as staff of another workspace; the
dead-letter page reads 20 messages of a queue on moto (in process), each made visible again,
each naming a run of the workspace (so staff of another workspace record 20 staff reads).
Then ``--workspaces`` more workspaces (default 10,000) and ``--ranges`` range requests
(default 1,000, twelve months each) are added and the staff's claim weights page (the first
200 workspaces by name, and a search) and the range page with its list of recent range
requests are read. ``--only TEXT`` (repeatable) measures only the pages whose label
contains one of them (the data is loaded all the same).

Target: each page under 200 ms at the median on this machine.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from datetime import UTC, datetime

import _bench as b
import boto3
from moto import mock_aws

from tests.api.conftest import enrol, proxy_event
from timekeeper import clock
from timekeeper.api import ApiAdapters, create_app
from timekeeper.api.db import API_ROLE, connect_api
from timekeeper.aws.dead_letters import DeadLetterQueue, ReceivingDeadLetterQueues
from timekeeper.console.app import ConsoleSettings, create_console
from timekeeper.console.sessions import SESSION_COOKIE, Session, Sessions
from timekeeper.db.connection import connect, login_url
from timekeeper.edge import registries
from timekeeper.local.aws import create_pipeline_queues
from timekeeper.local.lambdas import LambdaContext
from timekeeper.topology import PIPELINES

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


#: The authoring pages' data: saved queries in the workspace, the delivery's recipients and
#: its runs (each with every recipient's outcome).
QUERIES = 50
RECIPIENTS = 10
DELIVERY_RUNS = 1_000


def load_authoring(url: str, *, workspace: uuid.UUID, user: str) -> dict[str, uuid.UUID]:
    """The workspace (directory row), ``user`` a member who may write queries and reports,
    :data:`RECIPIENTS` members, :data:`QUERIES` saved queries (the first with two versions),
    a report of three sections over it, and a weekly delivery of it to the recipients with
    :data:`DELIVERY_RUNS` finished runs, each sent to every recipient. Returns the ids."""
    from timekeeper.platform import directory
    from timekeeper.reporting import reports, store
    from timekeeper.reporting.query_schedules import NewQuerySchedule, Source, create_query_schedule

    definition = {"entity": "invoices", "columns": ["number", "amount_minor", "due_date"],
                  "filters": [{"column": "status", "op": "eq", "value": "open"}],
                  "sort": [{"column": "amount_minor", "direction": "desc"}], "limit": 100}
    people = [f"reader-{i}" for i in range(RECIPIENTS)]
    with connect(url) as conn, conn.transaction():
        directory.create_workspace(conn, workspace_id=workspace, name="Bench", timezone="Europe/Berlin", now=NOW)
        for person, roles in ((user, ("queries:admin",)), *((p, ("queries:read",)) for p in people)):
            directory.upsert_user(conn, user_id=person, display_name=person.title(), email=f"{person}@x.test",
                                  now=NOW)
            directory.add_member(conn, workspace_id=workspace, user_id=person, roles=roles, now=NOW)
        queries = [store.create_query(conn, workspace_id=workspace, name=f"Open invoices {i:02d}", actor=user,
                                      now=NOW, definition=definition)[0].id for i in range(QUERIES)]
        store.add_version(conn, workspace_id=workspace, query_id=queries[0], actor=user, now=NOW,
                          definition={**definition, "limit": 500})
        report, _ = reports.create_report(conn, workspace_id=workspace, name="Board pack", actor=user, now=NOW,
                                          definition={"title": "Board pack", "sections": [
                                              {"heading": f"Part {i}", "query_id": str(queries[0])}
                                              for i in range(3)]})
        _, delivery = create_query_schedule(
            conn, workspace_id=workspace, actor=user, now=NOW,
            new=NewQuerySchedule(name="Weekly open invoices", recurrence={"cron": "0 9 * * 1",
                                                                         "timezone": "Europe/Berlin"},
                                 source=Source(kind="query", query_id=queries[0]), format="xlsx",
                                 recipients=people, subject_template="{{ schedule_name }}",
                                 body_template="<p>{{ recipient_name }}: <a href='{{ link }}'>file</a></p>"))
        conn.execute("""
            WITH runs AS (
                INSERT INTO schedule_runs (schedule_id, workspace_id, owner, work_kind, occurrence_key,
                                           occurrence_at, occurrence_local, trigger, definition_version, state,
                                           queued_at, attempts, started_at, finished_at, outcome_code)
                SELECT %(id)s, %(ws)s, 'queries', 'queries.deliver', (%(now)s - g * interval '1 week')::text,
                       %(now)s - g * interval '1 week', (%(now)s - g * interval '1 week')::timestamp, 'scheduled',
                       1, 'succeeded', %(now)s - g * interval '1 week', 1, %(now)s - g * interval '1 week',
                       %(now)s - g * interval '1 week' + interval '5 seconds', 'succeeded'
                  FROM generate_series(1, %(n)s) AS g
                RETURNING id, occurrence_at)
            INSERT INTO query_deliveries (run_id, user_id, workspace_id, schedule_id, status, address,
                                          provider_message_id, link_expires_at, attempt, updated_at)
            SELECT runs.id, p, %(ws)s, %(id)s, 'sent', p || '@x.test', 'm-' || runs.id || p,
                   runs.occurrence_at + interval '7 days', 1, runs.occurrence_at
              FROM runs CROSS JOIN unnest(%(people)s::text[]) AS p""",
                     {"id": delivery.schedule_id, "ws": workspace, "now": NOW, "n": DELIVERY_RUNS,
                      "people": people})
        conn.execute("ANALYZE query_deliveries")
    return {"query": queries[0], "report": report.id, "delivery": delivery.schedule_id}


def load_audit(url: str, *, workspace: uuid.UUID, events: int) -> None:
    """Insert the workspace's audit events: every area, ten people (one a tenth of them is
    ``admin``), a small before/after each, one a second up to ``NOW``."""
    with connect(url) as conn:
        conn.execute("""
            INSERT INTO audit_events (workspace_id, actor, kind, subject_type, subject_id, before, after, at)
            SELECT %(ws)s, CASE WHEN g %% 10 = 0 THEN 'admin' ELSE 'person-' || (g %% 10) END,
                   (ARRAY['settings.updated', 'schedule.updated', 'delivery.updated', 'query.updated',
                          'report.updated', 'closure.added', 'opt_out.added', 'staff.read'])[1 + g %% 8],
                   'schedule', gen_random_uuid()::text, jsonb_build_object('name', 'sweep ' || g),
                   jsonb_build_object('name', 'sweep ' || (g + 1)), %(now)s - (%(n)s - g) * interval '1 second'
              FROM generate_series(1, %(n)s) AS g""", {"ws": workspace, "now": NOW, "n": events})
        conn.execute("UPDATE workspace_memberships SET roles = '{workspace:admin}' WHERE workspace_id = %s "
                     "AND user_id = 'admin'", (workspace,))
        conn.execute("ANALYZE audit_events")


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


def load_workspaces(url: str, *, count: int) -> None:
    """Add ``count`` active workspaces to the directory (names ``Club 00001`` ...), as many
    as the claim weights page lists from."""
    with connect(url) as conn:
        conn.execute("""INSERT INTO workspaces (name, timezone, claim_weight, created_at)
                        SELECT 'Club ' || lpad(g::text, 5, '0'), 'Europe/Berlin', 1 + g %% 10, %(now)s
                          FROM generate_series(1, %(n)s) AS g""", {"n": count, "now": NOW})
        conn.execute("ANALYZE workspaces")


def load_ranges(url: str, *, count: int) -> None:
    """Give a workspace of its own ``count`` staff range requests, each a re-run of twelve
    months of one Platform type (a version of each month, failed: ``12 * count`` runs), one
    a minute up to ``NOW``: the range page lists the latest 20."""
    workspace = uuid.uuid4()
    with connect(url) as conn:
        conn.execute("INSERT INTO workspaces (id, name, timezone, created_at) VALUES (%s, 'Range club', "
                     "'Europe/Berlin', %s - interval '20 years')", (workspace, NOW))
        conn.execute("""
            INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, reason,
                                       requested_by, state, attempts, failure_code, failure_message, request_group,
                                       created_at, updated_at)
            SELECT 'platform', CASE WHEN g %% 2 = 0 THEN 'ar_aging' ELSE 'membership_counts' END, %(ws)s,
                   (date_trunc('month', %(now)s) - (1 + (g %% 10) * 12 + m) * interval '1 month')::date, 1 + g,
                   'manual', 'totals corrected ' || g, 'staff', 'failed', 4, 'retries_exhausted', 'timed out',
                   (lpad(to_hex(g), 8, '0') || '-0000-4000-8000-000000000000')::uuid,
                   %(now)s - (%(n)s - g) * interval '1 minute', %(now)s
              FROM generate_series(1, %(n)s) AS g CROSS JOIN generate_series(0, 11) AS m""",
                     {"ws": workspace, "now": NOW, "n": count})
        conn.execute("ANALYZE snapshot_runs")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--hot-runs", type=int, default=5_000)
    parser.add_argument("--audit-events", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--snapshot-months", type=int, default=120)
    parser.add_argument("--period-versions", type=int, default=50)
    parser.add_argument("--workspaces", type=int, default=10_000)
    parser.add_argument("--ranges", type=int, default=1_000)
    parser.add_argument("--only", action="append", default=[], help="measure only pages whose label contains this")
    args = parser.parse_args()

    url = b.open_database("bench_console")
    workspace = uuid.uuid4()
    started = time.perf_counter()
    hot = load(url, workspace=workspace, schedules=args.schedules, runs=args.runs, hot_runs=args.hot_runs)
    print(f"loaded {args.schedules:,} schedules and about {args.runs:,} runs in {time.perf_counter() - started:.1f} s")
    clock.install(lambda: NOW)
    api_conn = connect_api(login_url(url, API_ROLE))
    with connect(url) as conn:
        dead_runs = [row["id"] for row in conn.execute(
            "SELECT id FROM schedule_runs WHERE schedule_id = %s ORDER BY queued_at LIMIT 20", (hot,)).fetchall()]
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        queues = {name: create_pipeline_queues(sqs, pipeline) for name, pipeline in PIPELINES.items()}
        for n, run_id in enumerate(dead_runs):  # each names a run of the workspace, as a consumer's message does
            sqs.send_message(QueueUrl=queues["accounting"].dlq_url, MessageBody=f'{{"run_id": "{run_id}", '
                             f'"workspace_id": "{workspace}", "n": {n}}}')
        dead = ReceivingDeadLetterQueues(sqs, {name: DeadLetterQueue(name=name, arn=pair.dlq_arn, source_arn=pair.arn)
                                               for name, pair in queues.items()})
        return _measure(args, url, api_conn, dead, workspace, hot)


def _measure(args, url, api_conn, dead, workspace, hot) -> int:
    """Render each page ``args.repeats`` times and print the table."""
    api = create_app(ApiAdapters(connection=lambda: api_conn, publisher_for=lambda _: None,
                                 registry=registries.work_kinds, now=clock.now,
                                 snapshot_registry=registries.snapshot_types, dead_letters=lambda: dead))
    console = create_console(api.resolve, ConsoleSettings(session_key=KEY))
    staff_workspace = uuid.uuid4()
    made = load_authoring(url, workspace=workspace, user="bench")
    enrol(url, "bench", workspace)  # the API lets in members of the token's workspace only
    enrol(url, "staff", staff_workspace)
    enrol(url, "admin", workspace)
    started = time.perf_counter()
    load_audit(url, workspace=workspace, events=args.audit_events)
    print(f"loaded {args.audit_events:,} audit events in {time.perf_counter() - started:.1f} s")
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
    author_session = Session(user_id="bench", workspace_id=str(workspace),
                             roles="schedules:read,queries:read,queries:write,reports:read,reports:write")
    author = f"{SESSION_COOKIE}={Sessions(KEY).issue(author_session)}"
    pages.update({
        f"queries list ({QUERIES} saved queries)": ("/console/queries", author),
        "new query form": ("/console/queries/new", author),
        "a query page (versions, the diff of 1 and 2, pinning deliveries)": (f"/console/queries/{made['query']}",
                                                                            author),
        "a query's new version form": (f"/console/queries/{made['query']}/versions/new", author),
        f"new delivery form ({QUERIES} queries and a report to pick, {RECIPIENTS + 1} members)":
            ("/console/deliveries/new", author),
        "reports list": ("/console/reports", author),
        "report compose form (new)": ("/console/reports/new", author),
        "report compose form (3 sections)": (f"/console/reports/{made['report']}/edit", author),
        f"a delivery with {DELIVERY_RUNS:,} runs to {RECIPIENTS} recipients (its ledger's first page)":
            (f"/console/deliveries/{made['delivery']}", author),
    })
    staff_session = Session(user_id="staff", workspace_id=str(staff_workspace), roles="platform:staff")
    staff = f"{SESSION_COOKIE}={Sessions(KEY).issue(staff_session)}"
    pages["operations overview, staff (every workspace: 500 paused, 500 failing)"] = ("/console/operations", staff)
    admin_session = Session(user_id="admin", workspace_id=str(workspace), roles="workspace:admin")
    admin = f"{SESSION_COOKIE}={Sessions(KEY).issue(admin_session)}"
    pages["settings (zone, locale, members' notice e-mails)"] = ("/console/settings", admin)
    events = f"{args.audit_events:,} audit events"
    pages[f"audit log, newest 50 of {events}"] = ("/console/audit", admin)
    pages[f"audit log, 50 from the middle of {events} (cursor)"] = (
        f"/console/audit?cursor=o{args.audit_events // 2}", admin)
    pages[f"audit log, one kind (an eighth of {events})"] = ("/console/audit?kind=report", admin)
    pages[f"audit log, one person (a tenth of {events}), older half"] = (
        f"/console/audit?actor=admin&cursor=o{args.audit_events // 2}", admin)
    pages[f"audit log, a kind and a person that never meet (an empty page over {events})"] = (
        "/console/audit?kind=settings&actor=person-1", admin)
    with connect(url) as conn:
        run_id = conn.execute("SELECT id FROM schedule_runs WHERE schedule_id = %s ORDER BY queued_at DESC LIMIT 1",
                              (hot,)).fetchone()["id"]
    pages["a run's page (of the schedule with the long history)"] = f"/console/runs/{run_id}"
    pages["a run's page, staff of another workspace"] = (f"/console/runs/{run_id}", staff)
    pages["a dead-letter queue's page, staff (20 messages read, each made visible again, each naming a run of "
          "another workspace: 20 staff reads)"] = (
        "/console/dead-letters/accounting", staff)


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
    _time_pages(console, pages, args, cookie)
    # Then the directory and the range requests grow (after the pages above, which read every
    # workspace's work and periods, so their figures stay comparable with earlier runs)
    load_workspaces(url, count=args.workspaces)
    load_ranges(url, count=args.ranges)
    ranges = f"{args.ranges:,} range requests"
    _time_pages(console, {
        f"claim weights, staff (first 200 of {args.workspaces + 3:,} workspaces by name)":
            ("/console/operations/claim-weights", staff),
        f"claim weights, staff, a search (a tenth of {args.workspaces + 3:,} workspaces)":
            ("/console/operations/claim-weights?search=Club%2000", staff),
        f"range page, staff (its list: the latest 20 of {ranges})": ("/console/snapshots/ranges", staff),
    }, args, cookie)
    api_conn.close()
    return 0


def _time_pages(console, pages: dict, args, cookie: str) -> None:
    """Render each of ``pages`` (label -> path, or (path, cookie)) ``args.repeats`` times and
    print its row (median and 95th percentile in ms); ``args.only`` narrows them."""
    for label, target in pages.items():
        if args.only and not any(part in label for part in args.only):
            continue
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
        print(f"| {label} | {statistics.median(times):.1f} | {p95:.1f} | |", flush=True)


if __name__ == "__main__":
    raise SystemExit(main())
