"""The console's pages for notices and the owner hand-off, against the real API resolver
and database: a person's notices and marking them read, an admin's ownerless schedules
and their reassignment (the access rule asked by the API, its refusal shown), failed
posting jobs and their retry, a delivery's changes, the navigation per role, and the
tenant rule seen through these pages."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest

from tests.api.conftest import NOW, seed_member
from tests.api.test_console import KEY, Browser, _header
from tests.api.test_people_routes import ADMIN_TOKEN, workspace_with_schedule
from timekeeper.console.app import ConsoleSettings, create_console
from timekeeper.db.connection import connect
from timekeeper.platform import directory, notices
from timekeeper.reporting import opt_outs
from timekeeper.schedules.notifications import Notice, enqueue_notifications

ADMIN_ROLES = ("workspace:admin", "queries:read", "queries:write")
OWNER_ROLES = ("queries:read", "queries:write")


@pytest.fixture
def console(app, db_url):
    resolver = create_console(lambda event, context: app.resolve(event, context),
                              ConsoleSettings(session_key=KEY, dev_sign_in=True, secure_cookies=True))
    resolver.db_url = db_url  # where Browser.sign_in enrols the people it signs in
    return resolver


def _browser(console, caller, roles):
    browser = Browser(console)
    assert browser.sign_in(caller, roles)["statusCode"] == 303
    return browser


def _paused_notices(db_url, workspace_id, schedule_id, count=2, reason="consecutive_failures"):
    with connect(db_url) as conn:
        with conn.transaction():
            enqueue_notifications(conn, [Notice(schedule_id, workspace_id, "queries", "schedule_paused",
                                                f"paused:{schedule_id}:{n}", {"reason": reason, "failures": 5})
                                         for n in range(count)], now=NOW)
        notices.tell_people(conn, now=NOW)


def _failed_job(db_url, workspace_id):
    with connect(db_url) as conn, conn.transaction():
        batch = conn.execute("INSERT INTO batches (workspace_id, name, status, close_at, opened_at, closed_at) "
                             "VALUES (%s, 'Week 7', 'closed', %s, %s, %s) RETURNING id",
                             (workspace_id, NOW, NOW, NOW)).fetchone()["id"]
        return conn.execute("INSERT INTO posting_jobs (workspace_id, batch_id, status, error, attempts, created_at, "
                            "finished_at) VALUES (%s, %s, 'failed', 'does not <balance>', 1, %s, %s) RETURNING id",
                            (workspace_id, batch, NOW, NOW)).fetchone()["id"]


def _csrf(html):
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def test_the_notices_page_shows_what_happened_and_marking_one_read_changes_what_the_api_says(db_url, call,
                                                                                             console):
    admin, owner, _, _, schedule_id = workspace_with_schedule(db_url)
    _paused_notices(db_url, admin.workspace_id, schedule_id, reason="<consecutive_failures>")
    browser = _browser(console, owner, OWNER_ROLES)
    page = browser.request("GET", "/console/notices")
    html = page["body"]
    assert page["statusCode"] == 200
    assert html.count("A schedule was paused") == 2 and "2 unread" in html
    assert "&lt;consecutive_failures&gt;" in html and "<consecutive_failures>" not in html
    assert "2027-03-01" in html and "UTC" in html
    assert f'href="/console/open/{schedule_id}"' in html
    assert "(2 unread)" in html  # the navigation's count
    # The link opens the delivery page of a query schedule
    opened = browser.request("GET", f"/console/open/{schedule_id}")
    assert opened["statusCode"] == 303
    assert _header(opened, "Location") == f"/console/deliveries/{schedule_id}"
    # Mark one read: the API says one is unread
    first_id = call("GET", "/notices", as_=owner).body["items"][0]["id"]
    done = browser.request("POST", "/console/notices/read", {"csrf": _csrf(html), "id": str(first_id)})
    assert done["statusCode"] == 303
    assert call("GET", "/notices", as_=owner).body["unread"] == 1
    after = browser.request("GET", "/console/notices?done=read")["body"]
    assert "Marked as read." in after and "1 unread" in after and "(1 unread)" in after
    assert "unread only" in after
    assert browser.request("GET", "/console/notices?show=unread")["body"].count("A schedule was paused") == 1
    # Without the session's token nothing is marked; a malformed id is refused, not a 500
    forged = browser.request("POST", "/console/notices/read", {"csrf": "forged"})
    assert forged["statusCode"] == 403 and call("GET", "/notices", as_=owner).body["unread"] == 1
    assert browser.request("POST", "/console/notices/read", {"csrf": _csrf(html), "id": "x"})["statusCode"] == 422
    # Mark all
    browser.request("POST", "/console/notices/read", {"csrf": _csrf(html)})
    assert call("GET", "/notices", as_=owner).body["unread"] == 0
    assert "(0 unread)" not in browser.request("GET", "/console/notices")["body"]


def test_another_workspace_s_member_sees_none_of_it(db_url, console):
    admin, owner, _, _, schedule_id = workspace_with_schedule(db_url)
    _paused_notices(db_url, admin.workspace_id, schedule_id)
    with connect(db_url) as conn, conn.transaction():
        directory.leave_workspace(conn, workspace_id=admin.workspace_id, user_id=owner.user_id, now=NOW)
    job = _failed_job(db_url, admin.workspace_id)
    stranger = seed_member(db_url, roles=("workspace:admin",), token_roles=ADMIN_TOKEN)
    browser = _browser(console, stranger, ADMIN_ROLES)
    assert "No notices." in browser.request("GET", "/console/notices")["body"]
    ownerless = browser.request("GET", "/console/ownerless")["body"]
    assert "No ownerless schedules." in ownerless and str(schedule_id) not in ownerless
    jobs = browser.request("GET", "/console/posting-jobs")["body"]
    assert "No failed posting jobs." in jobs and str(job) not in jobs
    csrf = _csrf(jobs)
    assert browser.request("POST", "/console/posting-jobs/retry", {"csrf": csrf, "job_id": str(job)})[
        "statusCode"] == 404
    reassign = browser.request("POST", "/console/ownerless/reassign",
                               {"csrf": csrf, "schedule_id": str(schedule_id), "owner_user_id": stranger.user_id})
    assert reassign["statusCode"] == 404
    assert browser.request("GET", f"/console/deliveries/{schedule_id}")["statusCode"] == 404


def test_an_admin_reassigns_an_ownerless_schedule_and_a_refusal_shows_the_reason(db_url, call, console):
    admin, owner, reader, viewer, schedule_id = workspace_with_schedule(db_url)
    with connect(db_url) as conn, conn.transaction():
        directory.leave_workspace(conn, workspace_id=admin.workspace_id, user_id=owner.user_id, now=NOW)
    browser = _browser(console, admin, ADMIN_ROLES)
    html = browser.request("GET", "/console/ownerless")["body"]
    assert "Daily" in html and owner.user_id in html and 'data-confirm="Give Daily to the new owner?"' in html
    form = {"csrf": _csrf(html), "schedule_id": str(schedule_id)}
    # A new owner without read access to the source: the API's reason, nothing changes
    refused = browser.request("POST", "/console/ownerless/reassign", {**form, "owner_user_id": viewer.user_id})
    assert refused["statusCode"] == 422
    assert "Refused: The new owner may not read the source: their roles in this workspace" in refused["body"]
    assert [s["id"] for s in call("GET", "/ownerless-schedules", as_=admin).body["items"]] == [str(schedule_id)]
    # An empty owner is the API's 422 too, never a 500
    assert browser.request("POST", "/console/ownerless/reassign", {**form, "owner_user_id": ""})[
        "statusCode"] == 422
    # A reader may own it
    done = browser.request("POST", "/console/ownerless/reassign", {**form, "owner_user_id": reader.user_id})
    assert done["statusCode"] == 303
    assert call("GET", f"/query-schedules/{schedule_id}", as_=admin).body["owner_user_id"] == reader.user_id
    after = browser.request("GET", _header(done, "Location"))["body"]
    assert f"Reassigned to {reader.user_id}" in after and "No ownerless schedules." in after


def test_an_admin_retries_a_failed_posting_job(db_url, call, console):
    admin, *_ = workspace_with_schedule(db_url)
    job = _failed_job(db_url, admin.workspace_id)
    browser = _browser(console, admin, ADMIN_ROLES)
    html = browser.request("GET", "/console/posting-jobs")["body"]
    assert "does not &lt;balance&gt;" in html and "data-confirm=" in html and str(job) in html
    done = browser.request("POST", "/console/posting-jobs/retry", {"csrf": _csrf(html), "job_id": str(job)})
    assert done["statusCode"] == 303
    assert call("GET", "/posting-jobs/failed", as_=admin).body["items"] == []
    assert "pending again" in browser.request("GET", _header(done, "Location"))["body"]
    again = browser.request("POST", "/console/posting-jobs/retry", {"csrf": _csrf(html), "job_id": "nope"})
    assert again["statusCode"] == 404


def test_the_navigation_offers_the_admin_pages_only_to_admins_and_the_api_still_decides(db_url, console):
    admin, owner, reader, _, _ = workspace_with_schedule(db_url)
    admin_nav = _browser(console, admin, ADMIN_ROLES).request("GET", "/console/notices")["body"]
    assert 'href="/console/ownerless"' in admin_nav and 'href="/console/posting-jobs"' in admin_nav
    reader_browser = _browser(console, reader, ("queries:read",))
    nav = reader_browser.request("GET", "/console/notices")["body"]
    assert 'href="/console/notices"' in nav
    assert 'href="/console/ownerless"' not in nav and 'href="/console/posting-jobs"' not in nav
    for path in ("/console/ownerless", "/console/posting-jobs"):
        assert reader_browser.request("GET", path)["statusCode"] == 403
    # A token that claims admin without the membership: offered, but the API refuses
    claims_admin = _browser(console, owner, ADMIN_ROLES)
    refused = claims_admin.request("GET", "/console/ownerless")
    assert refused["statusCode"] == 403 and "Not allowed" in refused["body"]


def test_the_delivery_page_lists_its_changes_with_actor_and_time(db_url, call, clock_now, console):
    admin, owner, reader, _, schedule_id = workspace_with_schedule(db_url)
    clock_now["now"] = NOW + timedelta(hours=2)
    assert call("PATCH", f"/query-schedules/{schedule_id}", {"skip_when_empty": True}, as_=admin).status == 200
    html = _browser(console, reader, ("queries:read",)).request("GET", f"/console/deliveries/{schedule_id}")["body"]
    assert "<h2>Changes</h2>" in html
    changes = html[html.index("<h2>Changes</h2>"):]
    assert "2027-03-01 14:00 UTC" in changes and f"by <bdi>{admin.user_id}</bdi>" in changes
    assert "settings_changed" in changes and "skip_when_empty: False → True" in changes
    assert "created" in changes and f"by <bdi>{owner.user_id}</bdi>" in changes  # a reader lists no members: ids
    assert str(uuid.UUID(str(schedule_id))) in html


def test_a_person_who_stopped_notice_e_mails_turns_them_back_on_from_the_notices_page(db_url, call, console):
    admin, owner, _, _, schedule_id = workspace_with_schedule(db_url)
    _paused_notices(db_url, admin.workspace_id, schedule_id, count=1)
    browser = _browser(console, owner, OWNER_ROLES)
    # While the person gets notice e-mails the page says so and offers nothing to turn on
    html = browser.request("GET", "/console/notices")["body"]
    assert "You also get these notices by e-mail" in html and "Turn notice e-mails back on" not in html
    # Given they followed a notice e-mail's one-click link (the link's opt-out, recorded)
    with connect(db_url) as conn, conn.transaction():
        assert opt_outs.record_notice_opt_out(conn, opt_outs.NoticeOptOutLink(admin.workspace_id, owner.user_id),
                                              now=NOW + timedelta(hours=1))
    assert call("GET", "/notices/mail", as_=owner).body["mail"] is False
    # Then the page says when they turned them off, in the workspace's zone, and the notice is still listed
    html = browser.request("GET", "/console/notices")["body"]
    assert "You turned notice e-mails off on" in html and "2027-03-01" in html
    assert "A schedule was paused" in html
    # A forged post changes nothing
    assert browser.request("POST", "/console/notices/mail", {"csrf": "forged"})["statusCode"] == 403
    assert call("GET", "/notices/mail", as_=owner).body["mail"] is False
    # When they turn them back on, the API says they get them again
    done = browser.request("POST", "/console/notices/mail", {"csrf": _csrf(html)})
    assert done["statusCode"] == 303 and _header(done, "Location") == "/console/notices?done=mail"
    assert call("GET", "/notices/mail", as_=owner).body == {"mail": True, "opted_out_at": None}
    after = browser.request("GET", "/console/notices?done=mail")["body"]
    assert "Notice e-mails are on again." in after and "Turn notice e-mails back on" not in after
