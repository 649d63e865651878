"""The console's Operations page (staff) against the real API resolver and database: the
navigation shows it to staff only, it lists a paused schedule of another workspace, its
resume form needs a reason and records it, and a member without the staff role gets the
API's refusal."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, date, datetime

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
    assert ">Resume</span> of <code>" in staff.request("GET", "/console/operations")["body"]


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

    # Then the section lists the first two, each linking to its workspace's snapshots, names
    # escaped, the instant in the workspace's zone with UTC beside; not the published one
    section = html[html.index("<h2>Overdue periods</h2>"):html.index("<h2>Recent actions</h2>")]
    for name in (MISSING_NAME, FAILED_NAME):
        link = f'<a href="/console/snapshots?workspace={made[name]}">'
        assert link + name.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") + "</a>" in section
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
