"""A deleted schedule's console pages: ``/console/schedules/{id}`` and
``/console/deliveries/{id}`` say when (local, UTC beside) and by whom the schedule was
deleted (410), with a link to the audit log for admins only; another workspace's deleted
schedule stays the generic 404 page."""

from __future__ import annotations

from datetime import timedelta

from tests.api.conftest import NOW, Caller, new_schedule
from tests.api.test_console import Browser
from tests.api.test_own_route_kinds import DELIVERY
from timekeeper.db.connection import connect

ADMIN = ("schedules:read", "schedules:write", "workspace:admin")


def _deleted_schedule(call, caller, clock_now, db_url) -> str:
    """A schedule of ``caller``'s workspace (zone Europe/Berlin) deleted at 13:00 UTC by Ada Lovelace."""
    schedule = call("POST", "/schedules", new_schedule(name="Nightly sweep")).body
    with connect(db_url) as conn, conn.transaction():
        conn.execute("UPDATE users SET display_name = 'Ada Lovelace' WHERE id = %s", (caller.user_id,))
        conn.execute("UPDATE workspaces SET timezone = 'Europe/Berlin' WHERE id = %s", (caller.workspace_id,))
    clock_now["now"] = NOW + timedelta(hours=1)
    assert call("DELETE", f"/schedules/{schedule['id']}").status == 204
    return schedule["id"]


def test_a_deleted_schedule_s_page_says_when_and_by_whom(console, call, caller, clock_now, db_url):
    schedule_id = _deleted_schedule(call, caller, clock_now, db_url)
    browser = Browser(console)
    browser.sign_in(caller)
    page = browser.request("GET", f"/console/schedules/{schedule_id}")
    assert page["statusCode"] == 410
    assert ('This schedule was deleted on <time datetime="2027-03-01T13:00:00+00:00">2027-03-01 14:00 CET</time> '
            "<small>(2027-03-01 13:00 UTC)</small> by <bdi>Ada Lovelace</bdi>.") in page["body"]
    # A person who is not an admin is offered no audit log
    assert "/console/audit" not in page["body"]
    assert "Not found" not in page["body"]


def test_an_admin_is_led_to_the_deleter_s_changes_in_the_audit_log(console, call, caller, clock_now, db_url):
    schedule_id = _deleted_schedule(call, caller, clock_now, db_url)
    browser = Browser(console)
    browser.sign_in(caller, roles=ADMIN)
    page = browser.request("GET", f"/console/schedules/{schedule_id}")
    assert page["statusCode"] == 410
    assert (f'<a href="/console/audit?actor={caller.user_id}">See <bdi>Ada Lovelace</bdi>'
            "'s changes in the audit log</a>") in page["body"]


def test_another_workspace_s_deleted_schedule_is_the_generic_not_found(console, call, caller, clock_now, db_url):
    schedule_id = _deleted_schedule(call, caller, clock_now, db_url)
    browser = Browser(console)
    browser.sign_in(Caller(user_id="stranger"), roles=ADMIN)  # another workspace
    page = browser.request("GET", f"/console/schedules/{schedule_id}")
    assert page["statusCode"] == 404
    assert "deleted" not in page["body"] and "Ada Lovelace" not in page["body"]


def test_a_deleted_delivery_s_page_says_when_and_by_whom(console, call, analyst, publisher):
    who, query_id = analyst
    created = call("POST", "/query-schedules", {**DELIVERY, "source": {"kind": "query", "query_id": str(query_id)},
                                                "recipients": [who.user_id]}, as_=who)
    assert call("DELETE", f"/query-schedules/{created.body['id']}", as_=who).status == 204
    browser = Browser(console)
    browser.sign_in(who, roles=("queries:read", "queries:write"))
    page = browser.request("GET", f"/console/deliveries/{created.body['id']}")
    assert page["statusCode"] == 410
    assert ('This schedule was deleted on <time datetime="2027-03-01T12:00:00+00:00">2027-03-01 13:00 CET</time> '
            "<small>(2027-03-01 12:00 UTC)</small> by <bdi>Member</bdi>.") in page["body"]
