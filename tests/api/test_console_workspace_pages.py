"""The console's pages over a workspace's mail and calendar, against the real API resolver
and database: a delivery's opt-outs and the owner's invitation back, the workspace's
suppression list, and its closures (an admin adds and removes closed dates; a refusal
shows the API's reason). Each is offered by the navigation only to who may use it, and a
member of another workspace sees none of it (a direct address is the API's refusal)."""

from __future__ import annotations

import re
import uuid

import pytest

from tests.api.conftest import NOW, Caller, new_schedule, seed_member
from tests.api.test_console import KEY, Browser, _header
from tests.api.test_people_routes import workspace_with_schedule
from timekeeper.console.app import ConsoleSettings, create_console
from timekeeper.db.connection import connect

OWNER_ROLES = ("queries:read", "queries:write")
CLOSURE_ADMIN = ("schedules:read", "schedules:admin")


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
    _opted_out(db_url, admin.workspace_id, schedule_id, "ann@x.test")
    browser = _browser(console, owner, OWNER_ROLES)
    # The delivery's page links to its opt-outs
    delivery = browser.request("GET", f"/console/deliveries/{schedule_id}")["body"]
    assert f'href="/console/deliveries/{schedule_id}/opt-outs"' in delivery
    page = browser.request("GET", f"/console/deliveries/{schedule_id}/opt-outs")
    html = page["body"]
    assert page["statusCode"] == 200
    assert reader.user_id in html and "&lt;vic&gt;" in html and "<vic>" not in html
    assert "2027-03-01 12:00 UTC" in html and html.count(">Invite back</button>") == 3
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
    assert after.count(">Invite back</button>") == 2
    # A user id with characters a path escapes is invited as it is
    assert browser.request("POST", f"/console/deliveries/{schedule_id}/opt-outs/invite",
                           {"csrf": _csrf(html), "user_id": "ann@x.test"})["statusCode"] == 303
    assert browser.request("POST", f"/console/deliveries/{schedule_id}/opt-outs/invite",
                           {"csrf": _csrf(html), "user_id": "a/b"})["statusCode"] == 422
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


THIRD_BUSINESS_DAY = {"calendar": {"frequency": "monthly", "business_day": 3, "times": ["09:00"],
                                   "holidays": "DE-BE"}, "timezone": "Europe/Berlin"}


def test_an_admin_closes_a_date_and_reopens_it_and_a_refusal_shows_the_api_s_reason(call, caller, console):
    # Given a third-business-day schedule (the API's clock: 2027-03-01 12:00Z; March's is Wednesday the 3rd)
    schedule = call("POST", "/schedules", new_schedule(recurrence=THIRD_BUSINESS_DAY)).body
    admin = Caller(user_id="admin-1", workspace_id=caller.workspace_id, roles="schedules:read,schedules:admin")
    browser = _browser(console, admin, CLOSURE_ADMIN)
    html = browser.request("GET", "/console/closures")["body"]
    assert 'href="/console/closures"' in html and "No closed dates." in html
    assert 'data-confirm="Close this date?' in html
    # When the admin closes Tuesday 2 March with a reason
    done = browser.request("POST", "/console/closures/add",
                           {"csrf": _csrf(html), "date": "2027-03-02", "reason": "office <move>"})
    assert done["statusCode"] == 303
    # Then the API has it and the schedule moved to Thursday; the page lists it, escaped
    assert [c["date"] for c in call("GET", "/closures").body["items"]] == ["2027-03-02"]
    assert call("GET", f"/schedules/{schedule['id']}").body["schedule"]["next_due_at"] == "2027-03-04T08:00:00Z"
    after = browser.request("GET", _header(done, "Location"))["body"]
    assert "2027-03-02 is closed; 1 business-day schedule recomputed." in after
    assert "office &lt;move&gt;" in after and "<move>" not in after and "by admin-1" in after
    assert 'data-confirm="Open 2027-03-02 again?' in after
    # A date the calendar lacks, and a reason too long: the API's field and reason, the text kept
    for form, reason in (({"date": "2027-02-30", "reason": "x"}, "must be a real calendar date YYYY-MM-DD (date)"),
                         ({"date": "2027-03-05", "reason": "y" * 201}, "(reason)")):
        refused = browser.request("POST", "/console/closures/add", {"csrf": _csrf(after), **form})
        assert refused["statusCode"] == 422 and "Refused: " in refused["body"] and reason in refused["body"]
        assert f'value="{form["date"]}"' in refused["body"]
    assert len(call("GET", "/closures").body["items"]) == 1
    # When it is reopened the schedule is back on the 3rd; reopening again is the API's 404 and reason
    reopened = browser.request("POST", "/console/closures/remove", {"csrf": _csrf(after), "date": "2027-03-02"})
    assert reopened["statusCode"] == 303
    assert "2027-03-02 is open again" in browser.request("GET", _header(reopened, "Location"))["body"]
    assert call("GET", f"/schedules/{schedule['id']}").body["schedule"]["next_due_at"] == "2027-03-03T08:00:00Z"
    again = browser.request("POST", "/console/closures/remove", {"csrf": _csrf(after), "date": "2027-03-02"})
    assert again["statusCode"] == 404 and "Refused: this date is not closed in this workspace" in again["body"]
    for bad in ("../schedules", ""):
        assert browser.request("POST", "/console/closures/remove", {"csrf": _csrf(after), "date": bad})[
            "statusCode"] in (404, 422)


def test_closures_are_offered_to_admins_only_and_stay_in_their_workspace(call, caller, console):
    admin = Caller(user_id="admin-1", workspace_id=caller.workspace_id, roles="schedules:read,schedules:admin")
    assert call("POST", "/closures", {"date": "2027-03-02", "reason": "move"}, as_=admin).status == 201
    # A writer: no navigation link, the list without forms, and the API's refusal of a change
    writer = _browser(console, caller, ("schedules:read", "schedules:write"))
    html = writer.request("GET", "/console/schedules")["body"]
    assert 'href="/console/closures"' not in html
    listed = writer.request("GET", "/console/closures")["body"]
    assert "2027-03-02" in listed and "Close the date" not in listed and "Reopen</button>" not in listed
    refused = writer.request("POST", "/console/closures/remove", {"csrf": _csrf(listed), "date": "2027-03-02"})
    assert refused["statusCode"] == 403 and "schedules:admin" in refused["body"]
    # Another workspace's admin sees none of it and cannot reopen it
    stranger = Caller(user_id="admin-2", roles="schedules:read,schedules:admin")
    other = _browser(console, stranger, CLOSURE_ADMIN)
    theirs = other.request("GET", "/console/closures")["body"]
    assert "No closed dates." in theirs and "move" not in theirs
    assert other.request("POST", "/console/closures/remove", {"csrf": _csrf(theirs), "date": "2027-03-02"})[
        "statusCode"] == 404
    assert [c["date"] for c in call("GET", "/closures").body["items"]] == ["2027-03-02"]


def test_notices_and_ownerless_schedules_show_the_workspace_s_zone_beside_utc(db_url, call, console):
    from timekeeper.platform import directory, notices
    from timekeeper.schedules.notifications import Notice, enqueue_notifications

    admin, owner, _, _, schedule_id = workspace_with_schedule(db_url)  # a Europe/Berlin workspace
    with connect(db_url) as conn:
        with conn.transaction():
            enqueue_notifications(conn, [Notice(schedule_id, admin.workspace_id, "queries", "schedule_paused",
                                                f"paused:{schedule_id}", {"reason": "consecutive_failures"})],
                                  now=NOW)
        notices.tell_people(conn, now=NOW)
    assert call("GET", "/notices", as_=owner).body["timezone"] == "Europe/Berlin"
    html = _browser(console, owner, OWNER_ROLES).request("GET", "/console/notices")["body"]
    assert "2027-03-01 13:00 CET" in html and "(2027-03-01 12:00 UTC)" in html and "(Europe/Berlin)" in html
    with connect(db_url) as conn, conn.transaction():
        directory.leave_workspace(conn, workspace_id=admin.workspace_id, user_id=owner.user_id, now=NOW)
    assert call("GET", "/ownerless-schedules", as_=admin).body["timezone"] == "Europe/Berlin"
    ownerless = _browser(console, admin, ("workspace:admin", "queries:read", "queries:write")).request(
        "GET", "/console/ownerless")["body"]
    assert "paused" in ownerless and " CET</time>" in ownerless and "UTC)" in ownerless


def test_a_page_without_a_known_zone_shows_utc():
    from timekeeper.console.display import zone_of

    assert [zone_of(b) for b in ({"timezone": "Europe/Berlin"}, {}, {"timezone": "Mars/Olympus"},
                                 {"timezone": 3}, None)] == ["Europe/Berlin", "UTC", "UTC", "UTC", "UTC"]


def test_a_delivery_s_message_preview_shows_both_parts_framed_under_a_policy_of_its_own(db_url, call, console):
    admin, owner, reader, _, schedule_id = workspace_with_schedule(db_url)
    with connect(db_url) as conn, conn.transaction():
        conn.execute("UPDATE workspaces SET timezone = 'Europe/Berlin', name = '<A & B>' WHERE id = %s",
                     (admin.workspace_id,))
    browser = _browser(console, owner, OWNER_ROLES)
    # The delivery's page links to the preview
    delivery = browser.request("GET", f"/console/deliveries/{schedule_id}")["body"]
    assert f'href="/console/deliveries/{schedule_id}/preview"' in delivery
    # And its times are in the workspace's zone, with UTC beside them
    assert " CET" in delivery or " CEST" in delivery
    page = browser.request("GET", f"/console/deliveries/{schedule_id}/preview")
    html = page["body"]
    assert page["statusCode"] == 200
    api_preview = call("GET", f"/query-schedules/{schedule_id}/message-preview", as_=owner).body
    # The page shows the subject, the plain-text part (escaped) and frames the HTML part, sandboxed
    assert api_preview["subject"] in html and "&lt;A &amp; B&gt;" in html and "<A & B>" not in html
    frame = f"/console/deliveries/{schedule_id}/preview/message?user_id={reader.user_id}"
    assert f'<iframe class="message" sandbox src="{frame}"' in html
    assert "frame-src 'self'" in _header(page, "Content-Security-Policy")
    # The framed part is the API's HTML part, under a policy that runs nothing and admits the
    # message's own styles by hash only
    framed = browser.request("GET", frame)
    assert framed["statusCode"] == 200 and framed["body"] == api_preview["html"]
    policy = _header(framed, "Content-Security-Policy")
    assert "unsafe-inline" not in policy and "script-src" not in policy and "sandbox" in policy
    assert "frame-ancestors 'self'" in policy and "'unsafe-hashes' 'sha256-" in policy
    assert _header(framed, "X-Frame-Options") == "SAMEORIGIN"
    # A member of another workspace gets the API's refusal on both addresses
    stranger = _browser(console, seed_member(db_url, roles=("queries:write",)), OWNER_ROLES)
    assert stranger.request("GET", f"/console/deliveries/{schedule_id}/preview")["statusCode"] == 404
    assert stranger.request("GET", frame)["statusCode"] == 404


def test_the_deliveries_list_shows_each_next_delivery_in_the_workspace_s_zone_with_utc_beside(db_url, console):
    admin, owner, _, _, schedule_id = workspace_with_schedule(db_url)
    with connect(db_url) as conn, conn.transaction():
        conn.execute("UPDATE workspaces SET timezone = 'Europe/Berlin' WHERE id = %s", (admin.workspace_id,))
        conn.execute("UPDATE schedules SET next_due_at = '2027-03-02 06:00+00' WHERE id = %s", (schedule_id,))
    html = _browser(console, owner, OWNER_ROLES).request("GET", "/console/deliveries")["body"]
    # Berlin is an hour ahead of UTC in March before its change
    assert "2027-03-02 07:00 CET" in html and "(2027-03-02 06:00 UTC)" in html


def test_an_error_page_leads_back_to_the_list_it_belongs_to(db_url, console):
    admin, owner, _, _, schedule_id = workspace_with_schedule(db_url)
    browser = _browser(console, owner, OWNER_ROLES)
    missing = uuid.uuid4()
    for path, back in ((f"/console/deliveries/{missing}", '<a href="/console/deliveries">Back to the deliveries</a>'),
                       (f"/console/deliveries/{missing}/opt-outs",
                        '<a href="/console/deliveries">Back to the deliveries</a>'),
                       (f"/console/deliveries/{missing}/preview",
                        '<a href="/console/deliveries">Back to the deliveries</a>'),
                       ("/console/deliveries/x/y/z/w", '<a href="/console/deliveries">Back to the deliveries</a>'),
                       (f"/console/schedules/{missing}", '<a href="/console/schedules">Back to the schedules</a>'),
                       (f"/console/queries/{missing}", '<a href="/console/queries">Back to the queries</a>'),
                       (f"/console/exports/{missing}", '<a href="/console/queries">Back to the queries</a>'),
                       # the owner may not read reports: a back link to the reports would be refused too
                       (f"/console/reports/{missing}", '<a href="/console/schedules">Back to the schedules</a>')):
        page = browser.request("GET", path)
        assert page["statusCode"] in (403, 404, 422) and back in page["body"], (path, page["statusCode"])
        if "deliveries" in path:
            assert "Back to the schedules" not in page["body"]


def test_a_person_is_offered_only_the_actions_their_roles_allow(db_url, call, caller, console):
    # A schedule: a viewer sees neither Pause nor Run now; a runner only Run now; a writer both
    schedule = call("POST", "/schedules", new_schedule()).body
    path = f"/console/schedules/{schedule['id']}"
    for roles, pause, run in ((("schedules:read",), False, False), (("schedules:read", "schedules:run"), False, True),
                              (("schedules:read", "schedules:write", "schedules:run"), True, True),
                              (("schedules:admin",), True, True)):
        html = _browser(console, caller, roles).request("GET", path)["body"]
        assert ('action="' + path + '/pause"' in html) is pause, roles
        assert ('action="' + path + '/run"' in html) is run, roles
        assert ('<div class="actions">' in html) is (pause or run), roles
    # A delivery: a reader of queries sees neither; its owner (queries:write) both
    _, owner, reader, _, schedule_id = workspace_with_schedule(db_url)
    path = f"/console/deliveries/{schedule_id}"
    html = _browser(console, reader, ("queries:read",)).request("GET", path)["body"]
    assert "/pause" not in html and "/run" not in html and "Run now" not in html
    html = _browser(console, owner, OWNER_ROLES).request("GET", path)["body"]
    assert f'action="{path}/pause"' in html and f'action="{path}/run"' in html


def test_every_instant_is_in_the_workspace_s_zone_with_utc_beside(db_url, call, console):
    # Given a Berlin workspace with a New York schedule (the API's clock: 2027-03-01 12:00Z = 13:00 CET)
    roles = ("schedules:read", "schedules:write", "schedules:run", "schedules:admin", "platform:staff")
    member = seed_member(db_url, roles=("workspace:admin",), token_roles=",".join(roles))
    schedule = call("POST", "/schedules", new_schedule(), as_=member).body  # 02:30 America/New_York
    browser = _browser(console, member, roles)
    # The list: the next occurrence (02:30 EST = 07:30Z) in Berlin's time with UTC beside
    listed = browser.request("GET", "/console/schedules")["body"]
    assert "2027-03-02 08:30 CET" in listed and "2027-03-02 07:30 UTC" in listed
    assert "2027-03-02 02:30 EST" not in listed
    assert call("GET", "/schedules", as_=member).body["timezone"] == "Europe/Berlin"
    # A schedule's history and runs: in Berlin's time with UTC beside (the occurrence in the rule's zone)
    assert call("POST", f"/schedules/{schedule['id']}/run", headers={"Idempotency-Key": "k1"}, as_=member).status == 202
    assert call("POST", f"/schedules/{schedule['id']}/pause", as_=member).status == 200
    assert call("GET", f"/schedules/{schedule['id']}", as_=member).body["timezone"] == "Europe/Berlin"
    page = browser.request("GET", f"/console/schedules/{schedule['id']}")["body"]
    assert "Times are Europe/Berlin time, UTC beside." in page
    events = page[page.index("<h2>History</h2>"):]
    assert '2027-03-01 13:00 CET</time> <small>(2027-03-01 12:00 UTC)</small>' in events and " EST" not in events
    runs = page[page.index("<h2>Runs</h2>"):page.index("<h2>History</h2>")]
    assert "2027-03-01 07:00" in runs and "2027-03-01 12:00 UTC" in runs  # the run-now occurrence, local and UTC
    # Operations (staff): in the staff member's workspace's zone with UTC beside
    operations = browser.request("GET", "/console/operations")["body"]
    assert "as of <time" in operations
    assert "2027-03-01 13:00 CET</time> <small>(2027-03-01 12:00 UTC)</small>" in operations
    # Closures: when each was added
    assert call("POST", "/closures", {"date": "2027-03-05"}, as_=member).status == 201
    closures = browser.request("GET", "/console/closures")["body"]
    assert "2027-03-01 13:00 CET</time> <small>(2027-03-01 12:00 UTC)</small>" in closures


def test_an_admin_takes_an_address_off_the_suppression_list_with_a_reason(db_url, call, console):
    admin, _, reader, _, _ = workspace_with_schedule(db_url)
    _suppressed(db_url, admin.workspace_id, "<b>@x.test", "bounced")
    _suppressed(db_url, admin.workspace_id, "c@x.test", "complained")
    browser = _browser(console, admin, ("workspace:admin", "queries:read", "queries:write"))
    html = browser.request("GET", "/console/mail-suppressions")["body"]
    # Each address has its form: a reason, the session's token, a confirmation naming it (escaped)
    assert html.count(">Remove</button>") == 2
    assert 'data-confirm="Take &lt;b&gt;@x.test off the suppression list?' in html
    assert 'action="/console/mail-suppressions/remove"' in html and _csrf(html)
    # A blank reason is the API's refusal on the reason's field, the address's form keeps what was typed
    refused = browser.request("POST", "/console/mail-suppressions/remove",
                              {"csrf": _csrf(html), "address": "c@x.test", "reason": "   "})
    assert refused["statusCode"] == 422 and "(reason)" in refused["body"]
    assert refused["body"].count('aria-invalid="true"') == 1 and ">   </textarea>" in refused["body"]
    # Without the session's token nothing happens
    forged = browser.request("POST", "/console/mail-suppressions/remove",
                             {"csrf": "forged", "address": "c@x.test", "reason": "fixed"})
    assert forged["statusCode"] == 403
    assert len(call("GET", "/mail-suppressions", as_=admin).body["items"]) == 2
    # With a reason the address comes off the list, the removal is recorded, the page says so
    done = browser.request("POST", "/console/mail-suppressions/remove",
                           {"csrf": _csrf(html), "address": "c@x.test", "reason": "she asked for them again"})
    assert done["statusCode"] == 303 and "c@x.test" not in _header(done, "Location")
    after = browser.request("GET", _header(done, "Location"))["body"]
    listed, recent = after.split("Recently taken off the list")
    assert "off the suppression list" in listed and "c@x.test" not in listed and listed.count(">Remove</button>") == 1
    # And the admin reads who took it off, when and why
    assert "c@x.test" in recent and "she asked for them again" in recent and "complained" in recent
    assert f'title="{admin.user_id}"' in recent and "2027-03-01 13:00 CET" in recent
    [removal] = call("GET", "/mail-suppressions/removals", as_=admin).body["items"]
    assert (removal["address"], removal["removed_by"], removal["reason"]) == ("c@x.test", admin.user_id,
                                                                              "she asked for them again")
    # The removal is in the workspace's audit log: who, the address, the reason, under its own kind
    [event] = call("GET", "/audit-events?kind=suppression", as_=admin).body["items"]
    assert (event["kind"], event["actor"], event["address"], event["reason"]) == (
        "suppression.removed", admin.user_id, "c@x.test", "she asked for them again")
    logged = browser.request("GET", "/console/audit?kind=suppression")["body"]
    assert '<option value="suppression" selected>Suppressions</option>' in logged
    assert "Address taken off the suppression list" in logged and "<bdi>c@x.test</bdi>" in logged
    assert "she asked for them again" in logged and "Marked as spam" in logged
    # Removing it again is the API's 404 on the page, with the address named
    again = browser.request("POST", "/console/mail-suppressions/remove",
                            {"csrf": _csrf(html), "address": "c@x.test", "reason": "again"})
    assert again["statusCode"] == 404 and "Refused: this address is not on the suppression list" in again["body"]
    # A reader sees the list without a Remove, and the API refuses a forged removal
    reading = _browser(console, reader, ("queries:read",))
    listed = reading.request("GET", "/console/mail-suppressions")["body"]
    assert "&lt;b&gt;@x.test" in listed and "Remove</button>" not in listed and "Recently taken off" not in listed
    forged = reading.request("POST", "/console/mail-suppressions/remove",
                             {"csrf": _csrf(listed), "address": "<b>@x.test", "reason": "mine"})
    assert forged["statusCode"] == 403
    # Another workspace's admin cannot remove it
    stranger = seed_member(db_url, roles=("workspace:admin",), token_roles="workspace:admin,queries:read")
    other = _browser(console, stranger, ("workspace:admin", "queries:read"))
    theirs = other.request("GET", "/console/mail-suppressions")["body"]
    assert other.request("POST", "/console/mail-suppressions/remove",
                         {"csrf": _csrf(theirs), "address": "<b>@x.test", "reason": "x"})["statusCode"] == 404
    assert [s["address"] for s in call("GET", "/mail-suppressions", as_=admin).body["items"]] == ["<b>@x.test"]
