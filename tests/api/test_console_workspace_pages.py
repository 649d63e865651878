"""The console's pages over a workspace's mail and calendar, against the real API resolver
and database: a delivery's opt-outs and the owner's invitation back, the workspace's
suppression list, and its closures (an admin adds and removes closed dates; a refusal
shows the API's reason). Each is offered by the navigation only to who may use it, and a
member of another workspace sees none of it (a direct address is the API's refusal)."""

from __future__ import annotations

import re
import uuid

import pytest

from tests.api.conftest import NOW, seed_member
from tests.api.test_console import KEY, Browser, _header
from tests.api.test_people_routes import workspace_with_schedule
from timekeeper.console.app import ConsoleSettings, create_console
from timekeeper.db.connection import connect

OWNER_ROLES = ("queries:read", "queries:write")
CLOSURE_ADMIN = ("schedules:read", "schedules:admin")


@pytest.fixture
def console(app):
    return create_console(lambda event, context: app.resolve(event, context),
                          ConsoleSettings(session_key=KEY, dev_sign_in=True, secure_cookies=True))


def _browser(console, caller, roles):
    browser = Browser(console)
    assert browser.sign_in(caller, roles)["statusCode"] == 303
    return browser


def _csrf(html):
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def _opted_out(db_url, workspace_id, schedule_id, user_id):
    """``user_id`` opted out of the schedule at the tests' NOW (as the public route records it)."""
    with connect(db_url) as conn, conn.transaction():
        conn.execute("INSERT INTO mail_opt_outs (workspace_id, schedule_id, user_id, run_id, opted_out_at) "
                     "VALUES (%s, %s, %s, %s, %s)", (workspace_id, schedule_id, user_id, uuid.uuid4(), NOW))


def _suppressed(db_url, workspace_id, address, reason):
    with connect(db_url) as conn, conn.transaction():
        conn.execute("INSERT INTO mail_suppressions (workspace_id, address, reason, provider_message_id, "
                     "suppressed_at) VALUES (%s, %s, %s, 'ses-1', %s)", (workspace_id, address, reason, NOW))


def test_the_owner_reads_a_delivery_s_opt_outs_and_invites_one_back(db_url, call, console):
    admin, owner, reader, _, schedule_id = workspace_with_schedule(db_url)
    _opted_out(db_url, admin.workspace_id, schedule_id, reader.user_id)
    _opted_out(db_url, admin.workspace_id, schedule_id, "<vic>")
    browser = _browser(console, owner, OWNER_ROLES)
    # The delivery's page links to its opt-outs
    delivery = browser.request("GET", f"/console/deliveries/{schedule_id}")["body"]
    assert f'href="/console/deliveries/{schedule_id}/opt-outs"' in delivery
    page = browser.request("GET", f"/console/deliveries/{schedule_id}/opt-outs")
    html = page["body"]
    assert page["statusCode"] == 200
    assert reader.user_id in html and "&lt;vic&gt;" in html and "<vic>" not in html
    assert "2027-03-01 12:00 UTC" in html and html.count(">Invite back</button>") == 2
    assert f'data-confirm="Invite {reader.user_id} back to Daily?' in html
    # Invite one back: the API records the invitation, the page says so and offers no second one
    done = browser.request("POST", f"/console/deliveries/{schedule_id}/opt-outs/invite",
                           {"csrf": _csrf(html), "user_id": reader.user_id})
    assert done["statusCode"] == 303
    items = {o["user_id"]: o for o in call("GET", f"/query-schedules/{schedule_id}/opt-outs", as_=owner).body["items"]}
    assert items[reader.user_id]["resubscribe_invited_by"] == owner.user_id
    assert items["<vic>"]["resubscribe_invited_at"] is None
    after = browser.request("GET", _header(done, "Location"))["body"]
    assert f"{reader.user_id} is invited back" in after and f"by {owner.user_id}" in after
    assert after.count(">Invite back</button>") == 1
    # A recipient who has not opted out: the API's reason, shown on the page
    refused = browser.request("POST", f"/console/deliveries/{schedule_id}/opt-outs/invite",
                              {"csrf": _csrf(html), "user_id": "nobody"})
    assert refused["statusCode"] == 404 and "Refused: this recipient has not opted out" in refused["body"]
    # Without the session's token nothing happens
    forged = browser.request("POST", f"/console/deliveries/{schedule_id}/opt-outs/invite",
                             {"csrf": "forged", "user_id": "<vic>"})
    assert forged["statusCode"] == 403
    items = {o["user_id"]: o for o in call("GET", f"/query-schedules/{schedule_id}/opt-outs", as_=owner).body["items"]}
    assert items["<vic>"]["resubscribe_invited_at"] is None


def test_a_reader_sees_the_opt_outs_without_the_invitation_and_the_api_refuses_one(db_url, console):
    admin, _, reader, _, schedule_id = workspace_with_schedule(db_url)
    _opted_out(db_url, admin.workspace_id, schedule_id, reader.user_id)
    browser = _browser(console, reader, ("queries:read",))
    html = browser.request("GET", f"/console/deliveries/{schedule_id}/opt-outs")["body"]
    assert reader.user_id in html and "Invite back</button>" not in html
    forged = browser.request("POST", f"/console/deliveries/{schedule_id}/opt-outs/invite",
                             {"csrf": _csrf(html), "user_id": reader.user_id})
    assert forged["statusCode"] == 403 and "queries:write" in forged["body"]


def test_the_suppression_list_is_reached_from_the_deliveries_and_kept_to_queries_roles(db_url, console):
    admin, owner, reader, viewer, _ = workspace_with_schedule(db_url)
    _suppressed(db_url, admin.workspace_id, "<b>@x.test", "bounced")
    _suppressed(db_url, admin.workspace_id, "c@x.test", "complained")
    browser = _browser(console, reader, ("queries:read",))
    deliveries = browser.request("GET", "/console/deliveries")["body"]
    assert 'href="/console/mail-suppressions"' in deliveries
    page = browser.request("GET", "/console/mail-suppressions")
    html = page["body"]
    assert page["statusCode"] == 200
    assert "&lt;b&gt;@x.test" in html and "<b>@x.test" not in html and "c@x.test" in html
    assert "bounced (permanently)" in html and "complained" in html and "2027-03-01 12:00 UTC" in html
    # A viewer of schedules only: no Deliveries navigation, and the API's refusal by address
    viewer_browser = _browser(console, viewer, ("schedules:read",))
    nav = viewer_browser.request("GET", "/console/schedules")["body"]
    assert 'href="/console/mail-suppressions"' not in nav and 'href="/console/deliveries"' not in nav
    refused = viewer_browser.request("GET", "/console/mail-suppressions")
    assert refused["statusCode"] == 403 and "Not allowed" in refused["body"]


def test_another_workspace_s_member_sees_none_of_the_mail_pages(db_url, console):
    admin, _, reader, _, schedule_id = workspace_with_schedule(db_url)
    _opted_out(db_url, admin.workspace_id, schedule_id, reader.user_id)
    _suppressed(db_url, admin.workspace_id, "b@x.test", "bounced")
    stranger = seed_member(db_url, roles=("queries:admin",))
    browser = _browser(console, stranger, OWNER_ROLES)
    opted = browser.request("GET", f"/console/deliveries/{schedule_id}/opt-outs")
    assert opted["statusCode"] == 404 and "Not found" in opted["body"] and reader.user_id not in opted["body"]
    suppressions = browser.request("GET", "/console/mail-suppressions")["body"]
    assert "No suppressed addresses." in suppressions and "b@x.test" not in suppressions
    invite = browser.request("POST", f"/console/deliveries/{schedule_id}/opt-outs/invite",
                             {"csrf": _csrf(suppressions), "user_id": reader.user_id})
    assert invite["statusCode"] == 404
