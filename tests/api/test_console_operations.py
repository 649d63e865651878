"""The console's Operations page (staff) against the real API resolver and database: the
navigation shows it to staff only, it lists a paused schedule of another workspace, its
resume form needs a reason and records it, and a member without the staff role gets the
API's refusal."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, date, datetime

from psycopg.types.json import Jsonb

from tests.api.conftest import FAILED_NAME, MISSING_NAME, NOW, PUBLISHED_NAME, Caller, seed_overdue_workspaces
from tests.api.test_console import Browser, _header
from timekeeper.schedules import service

STAFF = Caller(user_id="staff-1", roles="platform:staff")


def paused_schedule(conn, name: str = "ledger sweep"):
    workspace = uuid.uuid4()
    made = service.create_schedule(conn, workspace_id=workspace, owner="accounting", work_kind="reconciliation.sweep",
                                   actor="owner-1", now=NOW, recurrence={"cron": "0 * * * *", "timezone": "UTC"},
                                   name=name)
    service.pause_schedule(conn, workspace_id=workspace, schedule_id=made.id, actor="system", now=NOW,
                           reason="consecutive_failures")
    conn.commit()
    return made


def test_staff_see_the_page_and_resume_a_paused_schedule_with_a_reason(console, conn):
    made = paused_schedule(conn, name="<b>ledger</b> sweep")
    staff = Browser(console)
    staff.sign_in(STAFF, roles=("platform:staff",))

    page = staff.request("GET", "/console/operations")
    assert page["statusCode"] == 200
    html = page["body"]
    assert 'href="/console/operations" aria-current="page">Operations</a>' in html
    assert "&lt;b&gt;ledger&lt;/b&gt; sweep" in html and "consecutive_failures" in html
    assert "This deployment lists no dead-letter queue." in html

    csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
    form = {"csrf": csrf, "workspace_id": str(made.workspace_id), "schedule_id": str(made.id)}
    # Without a reason the API refuses and nothing changes
    refused = staff.request("POST", "/console/operations/resume", {**form, "reason": "  "})
    assert refused["statusCode"] == 422 and "Refused" in refused["body"]
    status = "SELECT status FROM schedules WHERE id = %s"
    assert conn.execute(status, (made.id,)).fetchone()["status"] == "paused"
    # With one it resumes, and the history records who and why
    done = staff.request("POST", "/console/operations/resume", {**form, "reason": "ledger API is back"})
    assert done["statusCode"] == 303
    assert "The schedule was resumed from now." in staff.request("GET", _header(done, "Location"))["body"]
    assert conn.execute(status, (made.id,)).fetchone()["status"] == "active"
    event = conn.execute("SELECT actor, reason FROM schedule_events WHERE schedule_id = %s AND kind = 'resumed'",
                         (made.id,)).fetchone()
    assert (event["actor"], event["reason"]) == ("staff-1", "ledger API is back")
    # And the page lists the action
    after = staff.request("GET", "/console/operations")["body"]
    assert (">Resume</span> of the schedule <bdi>&lt;b&gt;ledger&lt;/b&gt; sweep</bdi> by <span title=\"staff-1\">"
            "<bdi>staff-1</bdi></span>") in after
    # Run actions are not staff-wide actions: the page says where they are
    assert "is listed on that run's page under \"Operators' actions\"" in html.replace("&#34;", '"')


def test_a_member_without_the_staff_role_has_no_operations(console, conn, caller):
    paused_schedule(conn)
    member = Browser(console)
    member.sign_in(caller)
    schedules = member.request("GET", "/console/schedules")["body"]
    assert "/console/operations" not in schedules
    page = member.request("GET", "/console/operations")
    assert page["statusCode"] == 403
    assert "ledger sweep" not in page["body"]
    # The refusal names the staff role and leads home, not back to the same refusal
    assert "Operations is for platform staff: it needs a staff role (e.g. platform:staff)." in page["body"]
    assert "snapshot staff role" not in page["body"]
    assert '<a href="/console/schedules">Back to the schedules</a>' in page["body"]
    assert 'href="/console/operations">Back to operations' not in page["body"]


def test_staff_see_every_workspaces_overdue_periods_linked_to_its_snapshots(console, conn):
    # Given a workspace never planned, one whose January failed and one whose January is published
    conn.execute("TRUNCATE snapshot_runs, snapshot_planner_watermarks, workspace_memberships, workspaces CASCADE")
    made = seed_overdue_workspaces(conn, created=datetime(2027, 1, 10, tzinfo=UTC), periods=[date(2027, 1, 1)])
    conn.commit()
    staff = Browser(console)
    staff.sign_in(STAFF, roles=("platform:staff",))

    html = staff.request("GET", "/console/operations")["body"]

    # Then the section lists the first two, each linking to that period's page in its
    # workspace, names escaped, the instant in the workspace's zone with UTC beside; not the
    # published one
    section = html[html.index("<h2>Overdue periods</h2>"):html.index("<h2>Recent actions</h2>")]
    assert "/console/snapshots?workspace=" not in section
    for name in (MISSING_NAME, FAILED_NAME):
        escaped = name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        assert re.search(r'<a href="/console/snapshots/periods/[\w.%-]+/[\w.%-]+/2027-01\?workspace='
                         + str(made[name]) + '"><bdi>' + re.escape(escaped) + "</bdi>: its 2027-01 period</a>",
                         section)
    assert "<GmbH>" not in html
    assert str(made[PUBLISHED_NAME]) not in section
    assert "missing" in section and "failed" in section and "generator_failed" in section
    assert "2027-02-02 00:00 CET" in section and "2027-02-01 23:00 UTC" in section and "2027-01" in section


def test_the_overview_filters_keep_their_values_and_a_bad_one_is_shown_on_its_field(console, conn):
    paused_schedule(conn, name="ledger sweep")
    paused_schedule(conn, name="cash sweep")
    staff = Browser(console)
    staff.sign_in(STAFF, roles=("platform:staff",))
    page = staff.get_decoded("/console/operations?schedule=ledger&status=paused")
    assert page["statusCode"] == 200
    html = page["body"]
    assert 'id="filter-schedule" name="schedule" value="ledger"' in html
    assert '<option value="paused" selected>' in html
    assert "ledger sweep" in html and "cash sweep" not in html
    bad = staff.get_decoded("/console/operations?state=done&schedule=ledger")
    assert bad["statusCode"] == 422
    assert re.search(r'<select id="filter-state" name="state" aria-invalid="true"', bad["body"])
    assert 'value="ledger"' in bad["body"] and 'id="filter-problem" role="alert"' in bad["body"]


def test_staff_read_workspaces_and_schedules_by_name_with_their_runs_linked(console, conn):
    # Given a workspace with a failing, paused schedule whose last run failed, and a run
    # of another schedule that waits too long
    from timekeeper.platform.directory import create_workspace

    workspace = create_workspace(conn, name="Acme <Berlin>", timezone="Europe/Berlin", currency="EUR",
                                 now=NOW).id
    made = []
    for name in ("Bank feed sweep", "Ledger close"):
        made.append(service.create_schedule(conn, workspace_id=workspace, owner="accounting",
                                            work_kind="reconciliation.sweep", actor="owner-1", now=NOW, name=name,
                                            recurrence={"cron": "0 * * * *", "timezone": "UTC"}))
    service.pause_schedule(conn, workspace_id=workspace, schedule_id=made[0].id, actor="system", now=NOW,
                           reason="consecutive_failures")
    insert = """INSERT INTO schedule_runs (schedule_id, workspace_id, owner, work_kind, occurrence_key, occurrence_at,
                       occurrence_local, trigger, definition_version, queued_at, state, finished_at)
                VALUES (%s, %s, 'accounting', 'reconciliation.sweep', %s, %s, %s, 'scheduled', 1, %s, %s, %s)
                RETURNING id"""
    old = datetime(2027, 2, 1, 9, 0, tzinfo=UTC)
    failed = conn.execute(insert, (made[0].id, workspace, "f", old, old.replace(tzinfo=None), old,
                                   "failed", old)).fetchone()["id"]
    waiting = conn.execute(insert, (made[1].id, workspace, "w", old, old.replace(tzinfo=None), old,
                                    "queued", None)).fetchone()["id"]
    retried = conn.execute(insert, (made[1].id, workspace, "r", old, old.replace(tzinfo=None), old,
                                    "failed", old)).fetchone()["id"]
    # (the waiting run was made by an operator's Retry now of an earlier run)
    conn.execute("INSERT INTO schedule_run_actions (run_id, schedule_id, workspace_id, action, actor, reason, detail, "
                 "at) VALUES (%s, %s, %s, 'retry', 'ops-1', 'again', %s, %s)",
                 (retried, made[1].id, workspace, Jsonb({"run_id": str(waiting)}), old))
    conn.commit()
    staff = Browser(console)
    staff.sign_in(STAFF, roles=("platform:staff",))

    html = staff.request("GET", "/console/operations")["body"]

    # Then workspaces and schedules are named, no raw id beside, and each links to a run
    section = html[html.index("<h2>Paused and failing schedules</h2>"):html.index("<h2>Runs that wait too long</h2>")]
    [row] = [r for r in section.split("<tr>") if "Bank feed sweep" in r]
    paused = row.split("<form")[0]
    assert "<bdi>Acme &lt;Berlin&gt;</bdi>" in paused and str(workspace) not in paused
    assert "<bdi>Bank feed sweep</bdi>" in paused and str(made[0].id) not in paused
    assert f'<a href="/console/runs/{failed}">its latest failed run</a>' in paused
    waits = html[html.index("<h2>Runs that wait too long</h2>"):html.index("<h2>Overdue periods</h2>")]
    [row] = [r for r in waits.split("<tr>") if str(waiting) in r]
    assert f'<a href="/console/runs/{waiting}"><bdi>Ledger close</bdi>, occurrence 2027-02-01 09:00 UTC</a>' in row
    assert "<bdi>Acme &lt;Berlin&gt;</bdi>" in row and str(made[1].id) not in row
    assert f'retry of <a href="/console/runs/{retried}">an earlier run</a>' in row
