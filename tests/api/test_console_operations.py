"""The console's Operations page (staff) against the real API resolver and database: the
navigation shows it to staff only, it lists a paused schedule of another workspace, its
resume form needs a reason and records it, and a member without the staff role gets the
API's refusal."""

from __future__ import annotations

import re
import uuid

from tests.api.conftest import NOW, Caller
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
    assert "resume of <code>" in staff.request("GET", "/console/operations")["body"]


def test_a_member_without_the_staff_role_has_no_operations(console, conn, caller):
    paused_schedule(conn)
    member = Browser(console)
    member.sign_in(caller)
    schedules = member.request("GET", "/console/schedules")["body"]
    assert "/console/operations" not in schedules
    page = member.request("GET", "/console/operations")
    assert page["statusCode"] == 403
    assert "ledger sweep" not in page["body"]
