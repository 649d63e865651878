"""The console's Claim weights page (staff) against the real API resolver and database:
staff find a workspace by name and change its weight with a reason; a refused value is
shown on its field with what was typed kept; a member without the staff role gets the
API's refusal and no link to it."""

from __future__ import annotations

import re
import uuid

from tests.api.conftest import NOW, Caller
from tests.api.test_console import Browser, _header
from timekeeper.platform.directory import create_workspace

STAFF = Caller(user_id="staff-1", roles="platform:staff")


def weight_of(conn, workspace_id) -> int:
    return conn.execute("SELECT claim_weight FROM workspaces WHERE id = %s", (workspace_id,)).fetchone()["claim_weight"]


def test_staff_change_a_workspaces_weight_with_a_reason(console, conn):
    name = f"<b>Acme</b> {uuid.uuid4().hex[:6]}"
    made = create_workspace(conn, name=name, timezone="Europe/Berlin", now=NOW)
    conn.commit()
    staff = Browser(console)
    staff.sign_in(STAFF, roles=("platform:staff",))
    assert 'href="/console/operations/claim-weights"' in staff.request("GET", "/console/operations")["body"]

    page = staff.request("GET", f"/console/operations/claim-weights?search={name[-6:]}")
    assert page["statusCode"] == 200
    html = page["body"]
    assert f"<bdi>&lt;b&gt;Acme&lt;/b&gt; {name[-6:]}</bdi>" in html and "Europe/Berlin" in html
    csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
    form = {"csrf": csrf, "workspace_id": str(made.id), "search": name[-6:]}

    # A weight outside 1-10 is refused on the weight field, what was typed kept, nothing changed
    refused = staff.request("POST", "/console/operations/claim-weights",
                            {**form, "claim_weight": "11", "reason": "enterprise tier"})
    assert refused["statusCode"] == 422
    assert 'value="11" aria-invalid="true"' in refused["body"] and 'value="enterprise tier"' in refused["body"]
    assert "Refused:" in refused["body"]
    assert weight_of(conn, made.id) == 1
    # A weight that is not ASCII digits is sent as typed: the API's 422 on the field, never a 502
    for typed in ("\u00b2", "9" * 5000, "\u0663"):
        odd = staff.request("POST", "/console/operations/claim-weights",
                            {**form, "claim_weight": typed, "reason": "enterprise tier"})
        assert odd["statusCode"] == 422, typed[:10]
        assert f'value="{typed}" aria-invalid="true"' in odd["body"] and "Refused:" in odd["body"]
    assert weight_of(conn, made.id) == 1
    # A workspace id that is no id, or one the directory does not hold, is a refusal above the list
    for workspace in ("{\"a\": [1]}", str(uuid.UUID(int=7))):
        unknown = staff.request("POST", "/console/operations/claim-weights",
                                {**form, "workspace_id": workspace, "claim_weight": "4", "reason": "enterprise tier"})
        assert unknown["statusCode"] == 404, workspace
        assert '<p class="problem" role="alert">Refused: ' in unknown["body"]
    # A valid one is saved and recorded
    done = staff.request("POST", "/console/operations/claim-weights",
                         {**form, "claim_weight": "4", "reason": "enterprise tier"})
    assert done["statusCode"] == 303
    after = staff.request("GET", _header(done, "Location"))["body"]
    shown = "<bdi>&lt;b&gt;Acme&lt;/b&gt; " + name[-6:] + "</bdi>&#8217;s weight"
    assert f'<p class="done" role="status">{shown} was changed and recorded in its audit log.</p>' in after
    # The workspace's id is not printed under its name (it is the name's title only)
    assert f"<code>{made.id}</code>" not in after and f'title="{made.id}"' in after
    assert re.search(r"<td>4</td>", after)
    assert weight_of(conn, made.id) == 4
    event = conn.execute("SELECT actor, reason FROM audit_events WHERE workspace_id = %s "
                         "AND kind = 'staff.claim_weight_changed'", (made.id,)).fetchone()
    assert (event["actor"], event["reason"]) == ("staff-1", "enterprise tier")
    # The weight it already has: the page says so, and nothing more is recorded
    same = staff.request("POST", "/console/operations/claim-weights",
                         {**form, "claim_weight": "4", "reason": "enterprise tier again"})
    assert same["statusCode"] == 303
    said = staff.request("GET", _header(same, "Location"))["body"]
    assert f'<p class="done" role="status">{shown} was already 4: nothing was changed or recorded.</p>' in said
    assert "changed and recorded" not in said
    assert conn.execute("SELECT count(*) AS n FROM audit_events WHERE workspace_id = %s "
                        "AND kind = 'staff.claim_weight_changed'", (made.id,)).fetchone()["n"] == 1


def test_a_member_without_the_staff_role_gets_the_refusal(console, conn, caller):
    member = Browser(console)
    member.sign_in(caller)
    assert "/console/operations/claim-weights" not in member.request("GET", "/console/schedules")["body"]
    page = member.request("GET", "/console/operations/claim-weights")
    assert page["statusCode"] == 403
    assert "Claim weights</h1>" not in page["body"]
