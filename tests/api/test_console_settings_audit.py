"""The console's settings and audit log pages, against the real API resolver and database:
an admin previews a zone change, saves the zone and the locale (a refusal keeps what was
typed and shows the API's reason on its field), changes a member's notice e-mails, and
reads the changes in the audit log with filters and Older/Newer links. Only admins are
offered the pages; others get the API's refusal."""

from __future__ import annotations

import html
import re
import uuid

import pytest

from tests.api.conftest import NOW, seed_member
from tests.api.test_console import KEY, Browser, _header
from timekeeper.console.app import ConsoleSettings, create_console
from timekeeper.db.connection import connect
from timekeeper.platform import audit
from timekeeper.schedules import service

ADMIN = ("workspace:admin", "schedules:admin")


@pytest.fixture
def console(app, db_url):
    resolver = create_console(lambda event, context: app.resolve(event, context),
                              ConsoleSettings(session_key=KEY, dev_sign_in=True, secure_cookies=True))
    resolver.db_url = db_url
    return resolver


def admin_browser(console, db_url):
    admin = seed_member(db_url, roles=ADMIN, token_roles=",".join(ADMIN))
    browser = Browser(console)
    assert browser.sign_in(admin, ADMIN)["statusCode"] == 303
    return admin, browser


def csrf(page):
    return re.search(r'name="csrf" value="([^"]+)"', page).group(1)


def test_an_admin_previews_and_saves_a_zone_change_and_reads_it_in_the_audit_log(db_url, console, call):
    admin, browser = admin_browser(console, db_url)
    assert call("POST", "/schedules", {"owner": "accounting", "work_kind": "reconciliation.sweep", "name": "Sweep",
                                       "recurrence": {"cron": "0 9 * * *", "timezone": "Europe/Berlin"}},
                as_=admin).status == 201
    page = browser.request("GET", "/console/settings")
    assert page["statusCode"] == 200
    body = page["body"]
    assert 'href="/console/settings" aria-current="page"' in body and 'href="/console/audit"' in body
    # The admin's navigation keeps short labels so that it fits one row at 1280 px
    assert '>Ownerless</a>' in body and '>Posting jobs</a>' in body and "Failed posting jobs</a>" not in body
    assert 'value="Europe/Berlin"' in body and 'value="en_US"' in body
    # Zone and locale are lists: the API's zones less deprecated aliases, the shipped locales
    assert '<select id="s-timezone" name="timezone"' in body and '<option value="Europe/Berlin" selected>' in body
    assert '<option value="Asia/Kolkata">' in body and 'value="Asia/Calcutta"' not in body
    assert 'value="US/Eastern"' not in body
    assert '<select id="s-locale" name="locale"' in body and ">German (Germany) · de_DE</option>" in body
    # Moving the schedules is asked for, never ticked by default
    assert re.search(r'<input type="checkbox" name="move_schedules"\s*>', body)
    # Nobody has notice e-mails off: the members table has no times to explain
    assert "<caption>Members by name</caption>" in body
    token = csrf(body)
    # The preview shows the schedule's next runs now and once moved, and saves nothing
    preview = browser.request("POST", "/console/settings", {"csrf": token, "timezone": "America/New_York",
                                                            "locale": "en_US", "move_schedules": "on",
                                                            "action": "preview"})
    assert preview["statusCode"] == 200
    text = html.unescape(preview["body"])
    assert "1 schedule has a rule in" in text and "Sweep" in text
    assert "2027-03-02 09:00 CET" in text and "2027-03-01 09:00 EST" in text and "(2027-03-01 14:00 UTC)" in text
    assert 'value="America/New_York"' in preview["body"]
    # Saving moves it; the audit log shows who changed what, local and UTC
    saved = browser.request("POST", "/console/settings", {"csrf": token, "timezone": "America/New_York",
                                                          "locale": "de_DE", "move_schedules": "on",
                                                          "action": "save"})
    assert saved["statusCode"] == 303 and _header(saved, "Location").endswith("/console/settings?done=saved")
    log = html.unescape(browser.request("GET", "/console/audit")["body"])
    assert "settings.updated" in log and "schedule.updated" in log
    assert "Europe/Berlin" in log and "America/New_York" in log and "de_DE" in log
    assert "2027-03-01 07:00 EST" in log and "(2027-03-01 12:00 UTC)" in log
    assert NOW.hour == 12
    filtered = html.unescape(browser.request("GET", "/console/audit?kind=schedule")["body"])
    assert "schedule.updated" in filtered and "settings.updated" not in filtered


def test_a_refused_setting_keeps_what_was_typed_and_names_the_field(db_url, console):
    _, browser = admin_browser(console, db_url)
    token = csrf(browser.request("GET", "/console/settings")["body"])
    refused = browser.request("POST", "/console/settings", {"csrf": token, "timezone": "Europe/Berlin",
                                                            "locale": "xx_YY", "action": "save"})
    assert refused["statusCode"] == 422
    assert 'id="err-locale"' in refused["body"] and 'aria-invalid="true"' in refused["body"]
    assert 'value="xx_YY"' in refused["body"]
    # Without the session's token nothing is saved
    assert browser.request("POST", "/console/settings", {"timezone": "Asia/Tokyo", "locale": "en_US"}
                           )["statusCode"] == 403


def test_the_zone_preview_marks_a_schedule_that_would_not_run_and_the_refusal_names_it(db_url, console, call):
    from tests.api.test_settings_routes import ENDS_TONIGHT

    admin, browser = admin_browser(console, db_url)
    made = call("POST", "/schedules", {"owner": "accounting", "work_kind": "reconciliation.sweep",
                                       "name": "Ends <tonight>", "recurrence": ENDS_TONIGHT}, as_=admin)
    assert made.status == 201, made.body
    token = csrf(browser.request("GET", "/console/settings")["body"])
    typed = {"csrf": token, "timezone": "Pacific/Kiritimati", "locale": "en_US", "move_schedules": "on"}
    # The preview lists it with why it would not run there and says the move will be refused
    preview = browser.request("POST", "/console/settings", {**typed, "action": "preview"})
    assert preview["statusCode"] == 200
    text = html.unescape(preview["body"])
    assert ("Moving the schedules to <bdi>Pacific/Kiritimati</bdi> will be refused: 1 schedule would not run "
            "there.") in text
    assert (f"Ends <tonight></bdi></a> <small>(<bdi>{made.body['id']}</bdi>)</small>: would not run in "
            "<bdi>Pacific/Kiritimati</bdi>: rrule: the rule has no occurrence in the next 10 years") in text
    assert f'href="/console/schedules/{made.body["id"]}"' in preview["body"]
    assert "Ends &lt;tonight&gt;" in preview["body"] and "Ends <tonight>" not in preview["body"]
    assert "Would not run in <bdi>Pacific/Kiritimati</bdi>: rrule:" in text
    # Saving with the move is refused naming the schedule on the zone's field, what was typed kept
    refused = browser.request("POST", "/console/settings", {**typed, "action": "save"})
    assert refused["statusCode"] == 422
    text = html.unescape(refused["body"])
    assert f"the schedule 'Ends <tonight>' ({made.body['id']}) would not run in Pacific/Kiritimati" in text
    assert 'id="err-timezone"' in refused["body"] and '<option value="Pacific/Kiritimati" selected>' in refused["body"]


def test_an_admin_turns_a_members_notice_mail_off_and_on(db_url, console):
    admin, browser = admin_browser(console, db_url)
    person = seed_member(db_url, workspace_id=admin.workspace_id, roles=("queries:read",))
    token = csrf(browser.request("GET", "/console/settings")["body"])
    off = browser.request("POST", "/console/settings/notice-mail", {"csrf": token, "user_id": person.user_id})
    assert off["statusCode"] == 303
    page = browser.request("GET", "/console/settings?done=mail")["body"]
    assert "Off since" in page and "(by an admin)" in page and "Notice e-mails changed." in page
    on = browser.request("POST", "/console/settings/notice-mail", {"csrf": token, "user_id": person.user_id,
                                                                   "mail": "on"})
    assert on["statusCode"] == 303
    log = browser.request("GET", "/console/audit")["body"]
    assert "settings.notice_mail" in log
    # The person by their name (not their id), the e-mails as on and off (not true and false)
    start = log.index('data-code="settings.notice_mail"')
    first = log[start:log.index("</li>", start)]
    assert "<bdi>Member</bdi>" in first and f"<bdi>{person.user_id}</bdi>" not in first
    assert "<del>off</del>" in first and "<ins>on</ins>" in first
    assert "true" not in first and "false" not in first


def test_the_audit_log_pages_older_and_newer_and_filters_by_person(db_url, console):
    admin, browser = admin_browser(console, db_url)
    with connect(db_url) as conn, conn.transaction():
        for n in range(55):
            audit.record_event(conn, workspace_id=admin.workspace_id, actor=admin.user_id if n % 5 else "staff-9",
                               kind="settings.updated", subject_type="workspace", subject_id=None,
                               before={"n": n}, after={"n": n + 1, "note": "<b>x</b>"}, now=NOW)
    first = browser.request("GET", "/console/audit")["body"]
    assert first.count("<li>") == 50 and "Older</a>" in first and "Newer</a>" not in first
    assert "&lt;b&gt;x&lt;/b&gt;" in first and "<b>x</b>" not in first
    older = html.unescape(re.search(r'href="([^"]+)">Older', first).group(1))
    second = browser.request("GET", older)["body"]
    assert second.count("<li>") == 5 and "Newer</a>" in second and "Older</a>" not in second
    staff = browser.request("GET", "/console/audit?actor=staff-9")["body"]
    assert staff.count("<li>") == 11
    assert 'option value="staff-9" selected' in staff


def test_only_admins_are_offered_settings_and_the_audit_log(db_url, console):
    member = seed_member(db_url, roles=("schedules:admin",), token_roles="schedules:admin")
    browser = Browser(console)
    assert browser.sign_in(member, ("schedules:admin",))["statusCode"] == 303
    schedules = browser.request("GET", "/console/schedules")["body"]
    assert "/console/settings" not in schedules and "/console/audit" not in schedules
    assert browser.request("GET", "/console/settings")["statusCode"] == 403
    assert browser.request("GET", "/console/audit")["statusCode"] == 403


def test_the_audit_log_speaks_words_links_its_objects_and_shows_long_values_whole(db_url, console):
    admin, browser = admin_browser(console, db_url)
    delivery, query = "34983528-710c-4f7e-9d1e-0b6c2d7c2a11", "5f0c2b7e-1111-4a4b-8c8c-2d2d2d2d2d2d"
    definition = {"columns": ["number", "amount_minor"], "entity": "invoices", "limit": None,
                  "filters": [{"column": "issue_date", "op": "gte", "value": "2026-10-01"},
                              {"column": "amount_minor", "op": "gte", "value": 10000}],
                  "sort": [{"column": "amount_minor", "direction": "descending"}]}
    with connect(db_url) as conn, conn.transaction():
        audit.record_event(conn, workspace_id=admin.workspace_id, actor=admin.user_id, kind="delivery.run_requested",
                           subject_type="delivery", subject_id=delivery, before={},
                           after={"name": "Weekly <big> invoices"}, now=NOW)
        audit.record_event(conn, workspace_id=admin.workspace_id, actor=admin.user_id, kind="query.updated",
                           subject_type="query", subject_id=query, before={"definition": {"entity": "invoices"}},
                           after={"definition": definition, "name": "Big invoices"}, now=NOW)
        audit.record_event(conn, workspace_id=admin.workspace_id, actor=admin.user_id, kind="settings.updated",
                           subject_type="workspace", subject_id=str(admin.workspace_id), before={"locale": "de_DE"},
                           after={"locale": "en_US"}, now=NOW)

    page = browser.request("GET", "/console/audit")["body"]

    # Kinds in words (the code kept as a tooltip), no workspace id, objects named and linked
    assert '<span title="settings.updated" data-code="settings.updated">Settings changed</span>' in page
    assert str(admin.workspace_id) not in page.split("<ol")[1]
    assert (f'Delivery: Run now requested</span></strong>:\n      <a href="/console/deliveries/{delivery}">'
            "<bdi>Weekly &lt;big&gt; invoices</bdi></a>") in page
    # A run request is no name change
    start = page.index("Delivery: Run now requested")
    run_request = page[start:page.index("</li>", start)]
    assert "by <bdi>" in run_request and "<table" not in run_request and "Name</th>" not in run_request
    # A definition in one line (entity, columns), its JSON whole, pretty, in a disclosure
    assert f'<a href="/console/queries/{query}"><bdi>Big invoices</bdi></a>' in page
    assert "<summary>Show all</summary>" in page and '\n  &#34;entity&#34;: &#34;invoices&#34;' in page
    assert "<ins>Invoices, 2 columns</ins>" in page and "<del>Invoices, 0 columns</del>" in page
    assert "&#34;columns&#34;: [&#34;number&#34;" not in page.split("<details>")[0]


def test_the_audit_log_puts_a_report_s_definition_and_a_snapshot_query_in_one_line(db_url, console):
    admin, browser = admin_browser(console, db_url)
    query, one, three = (str(uuid.uuid4()) for _ in range(3))
    section = {"heading": "Outstanding invoices, latest published month", "query_id": query, "display": "table",
               "period": {"choice": "latest"}}
    with connect(db_url) as conn, conn.transaction():
        audit.record_event(conn, workspace_id=admin.workspace_id, actor=admin.user_id, kind="query.created",
                           subject_type="query", subject_id=query, before={}, now=NOW, after={
                               "name": "Aging rows", "definition": {
                                   "entity": "snapshot.platform.ar_aging",
                                   "columns": ["period", "version", "bucket", "due_date", "days_past_due",
                                               "outstanding_minor"]}})
        audit.record_event(conn, workspace_id=admin.workspace_id, actor=admin.user_id, kind="report.created",
                           subject_type="report", subject_id=one, before={}, now=NOW, after={
                               "name": "Receivables aging", "definition": {"title": "Aging", "sections": [section]}})
        audit.record_event(conn, workspace_id=admin.workspace_id, actor=admin.user_id, kind="report.created",
                           subject_type="report", subject_id=three, before={}, now=NOW, after={
                               "name": "Board pack", "definition": {"title": "Board", "sections": [section] * 3}})

    page = browser.request("GET", "/console/audit")["body"]

    # A report's definition in one line (its one section's heading, or how many), the JSON under Show all
    assert "1 section: Outstanding invoices, latest published month" in page
    assert "3 sections" in page
    start = page.index("Board pack")
    board = page[start:page.index("</li>", start)]
    assert "<summary>Show all</summary>" in board and "&#34;sections&#34;" in board.split("<details>")[1]
    assert "&#34;sections&#34;" not in board.split("<details>")[0]
    # And a query over a snapshot entity names it as the query editor does, not by its code
    assert "Receivables aging (snapshot), 6 columns" in page
    assert "Snapshot.platform" not in page


def test_the_audit_log_names_a_snapshot_version_and_a_rule_in_words(db_url, console):
    admin, browser = admin_browser(console, db_url)
    run = "0c3b8b1e-2222-4a4b-8c8c-2d2d2d2d2d2d"
    with connect(db_url) as conn, conn.transaction():
        audit.record_event(conn, workspace_id=admin.workspace_id, actor=admin.user_id,
                           kind="staff.snapshot_finalized", subject_type="snapshot_run", subject_id=run,
                           before={"state": "published"}, after={"state": "published", "version": 2,
                                                                 "snapshot_type": "platform/selftest",
                                                                 "period": "2026-09"}, reason="books closed", now=NOW)
        audit.record_event(conn, workspace_id=admin.workspace_id, actor=admin.user_id, kind="schedule.created",
                           subject_type="schedule", subject_id="34983528-710c-4f7e-9d1e-0b6c2d7c2a12", before={},
                           after={"name": "Sweep", "recurrence": {"calendar": {
                               "frequency": "monthly", "month_day": 28, "times": ["03:00"]},
                               "timezone": "Europe/Berlin"}}, now=NOW)
        audit.record_event(conn, workspace_id=admin.workspace_id, actor=admin.user_id, kind="schedule.updated",
                           subject_type="schedule", subject_id="34983528-710c-4f7e-9d1e-0b6c2d7c2a13",
                           before={"recurrence": {"cron": "0 7 * * *", "timezone": "Europe/Berlin"}},
                           after={"recurrence": {"cron": "0 9 * * 1", "timezone": "Europe/Berlin"}}, now=NOW)
        audit.record_event(conn, workspace_id=admin.workspace_id, actor="serve-sample", kind="schedule.paused",
                           subject_type="schedule", subject_id="34983528-710c-4f7e-9d1e-0b6c2d7c2a13", before={},
                           after={"status": "paused"}, reason="paused_by_owner", now=NOW)
        sweep = service.create_schedule(conn, workspace_id=admin.workspace_id, owner="accounting",
                                        work_kind="reconciliation.sweep", actor=admin.user_id, now=NOW,
                                        name="Bank sweep", recurrence={"cron": "0 3 * * *", "timezone": "UTC"})
        audit.record_event(conn, workspace_id=admin.workspace_id, actor=admin.user_id, kind="dead_letter.redriven",
                           subject_type="run", subject_id="0c3b8b1e-3333-4a4b-8c8c-2d2d2d2d2d2d", before={},
                           after={"queue": "accounting", "message_id": "m-1", "schedule_id": str(sweep.id),
                                  "state_before": "failed"}, reason="consumer fixed", now=NOW)
        # A retry: its run's record and its schedule's Run now request naming the retried run,
        # and a plain Run now by the same person at the same instant
        retried = "0c3b8b1e-4444-4a4b-8c8c-2d2d2d2d2d2d"
        audit.record_event(conn, workspace_id=admin.workspace_id, actor=admin.user_id, kind="run.retried",
                           subject_type="run", subject_id=retried, before={},
                           after={"run_id": "0c3b8b1e-5555-4a4b-8c8c-2d2d2d2d2d2d", "schedule_id": str(sweep.id)},
                           reason="feed back", now=NOW)
        for after in ({"name": "Bank sweep", "retry_of": retried}, {"name": "Bank sweep"}):
            audit.record_event(conn, workspace_id=admin.workspace_id, actor=admin.user_id,
                               kind="schedule.run_requested", subject_type="schedule", subject_id=str(sweep.id),
                               before={}, after=after, now=NOW)
    page = html.unescape(browser.request("GET", "/console/audit")["body"])
    # Both records of a retry are kept, the schedule's said to be part of the retry (by the
    # run it names, linked), the plain Run now at the same instant by the same person not
    assert "Run retried" in page and page.count("Schedule: Run now requested (a retry)") == 1
    assert page.count("Schedule: Run now requested") == 2
    assert f'<dt>Retry of</dt><dd class="wrap"><a href="/console/runs/{retried}"><bdi>an earlier run</bdi></a>' \
        in page
    # The version by the type's name, month and number, linked to its period; the finalization as a change
    start = page.index("Self-test 2026-09 version 2")
    finalized = page[start:page.index("</li>", start)]
    assert '<a href="/console/snapshots/periods/platform/selftest/2026-09"><bdi>Self-test 2026-09 version 2' in page
    text = re.sub(r"<[^>]+>", " ", page)
    assert run not in page and "platform/selftest" not in text and "Published" not in finalized
    assert re.search(r"Finalized</th><td [^>]+><bdi><del>no</del></bdi></td><td [^>]+><bdi><ins>yes</ins>",
                     finalized), finalized
    # The schedule's rule in words with its zone, not JSON, a cron rule too (the API's words)
    assert "At 03:00 on day 28 of every month, Europe/Berlin" in page and '"calendar"' not in page
    assert "At 09:00, only on Monday, Europe/Berlin" in page and "cron 0 9" not in page
    # A pause's reason code in words
    assert re.search(r"Reason:\s+Paused by its owner", text) and "paused_by_owner" not in text
    # The sample data's author in words
    assert 'by <span title="serve-sample">sample data</span>' in page and "by <bdi>serve-sample" not in page
    # A dead letter's queue and schedule by their names, the schedule linked
    start = page.index("Dead letter redriven")
    redriven = page[start:page.index("</li>", start)]
    assert "<dd class=\"wrap\"><bdi>Accounting</bdi>" in redriven and "accounting" not in redriven
    assert f'<dt>Schedule</dt><dd class="wrap"><a href="/console/schedules/{sweep.id}"><bdi>Bank sweep</bdi></a>' \
        in redriven and str(sweep.id) not in re.sub(r"<[^>]+>", " ", redriven)
    assert "Failed" in redriven and "failed<" not in redriven
    # The run it named by its schedule's name, linked; no raw message id
    assert '<a href="/console/runs/0c3b8b1e-3333-4a4b-8c8c-2d2d2d2d2d2d"><bdi>Bank sweep</bdi></a>' in redriven
    assert "m-1" not in re.sub(r"<[^>]+>", " ", redriven) and "Message id" not in redriven
    # A retry names the schedule, links the retried run and the new one, with no raw run id
    start = page.index('data-code="run.retried"')
    retry = page[start:page.index("</li>", start)]
    assert (f'<a href="/console/runs/{retried}"><bdi>Bank sweep</bdi></a>, retried as '
            '<a href="/console/runs/0c3b8b1e-5555-4a4b-8c8c-2d2d2d2d2d2d">a new run</a>') in retry, retry
    assert "this run" not in retry and "Run id" not in retry
    assert "0c3b8b1e-5555" not in re.sub(r"<[^>]+>", " ", retry)


def test_the_audit_log_names_staff_snapshot_requests_in_words(db_url, console):
    admin, browser = admin_browser(console, db_url)
    with connect(db_url) as conn, conn.transaction():
        audit.record_event(conn, workspace_id=admin.workspace_id, actor=admin.user_id,
                           kind="staff.snapshot_requested", subject_type="snapshot_run",
                           subject_id="0c3b8b1e-3333-4a4b-8c8c-2d2d2d2d2d2d", before=None,
                           after={"snapshot_type": "platform/selftest", "period": "2026-10", "version": 3,
                                  "mode": "manual"}, reason="drill over", now=NOW)
        audit.record_event(conn, workspace_id=admin.workspace_id, actor=admin.user_id,
                           kind="staff.snapshot_range_requested", subject_type="snapshot_range",
                           subject_id="0c3b8b1e-4444-4a4b-8c8c-2d2d2d2d2d2d", before=None,
                           after={"name": "Self-test 2026-04 to 2026-08", "snapshot_type": "platform/selftest",
                                  "months": "2026-04 to 2026-08", "planned": 5, "mode": "backfill"},
                           reason="gaps", now=NOW)
    reply = browser.request("GET", "/console/audit")
    assert reply["statusCode"] == 200
    page = html.unescape(reply["body"])
    assert "requested a snapshot re-run or backfill" in page and "Self-test 2026-10 version 3" in page
    assert "requested a range of snapshot months" in page and "Self-test 2026-04 to 2026-08" in page
    # A snapshot request's kind as the snapshot pages name it, its type by name (no codes)
    text = re.sub(r"<[^>]+>", " ", page)
    assert "Run now" not in text and re.search(r"Mode\s+Re-run", text) and re.search(r"Mode\s+Backfill", text)
    assert "platform/selftest" not in text and re.search(r"Snapshot type\s+Self-test", text), text


def test_a_suppression_removal_whose_address_was_erased_reads_without_it():
    from timekeeper.console.pages.audit import entry

    event = {"id": 1, "kind": "suppression.removed", "actor": "ada", "actor_name": "Ada",
             "subject_type": "mail_suppression", "subject_id": "7", "before": {},
             "after": {"suppression_reason": "bounced"}, "reason": "fixed", "at": NOW.isoformat(), "rules": {},
             "schedule_name": None, "address": None}
    shown = entry(event, "Europe/Berlin")
    assert (shown["kind_words"], shown["name"], shown["link"]) == (
        "Address taken off the suppression list", "an address erased since", "/console/mail-suppressions")
    assert [(f["field"], f["value"]["short"]) for f in shown["facts"]] == [("Suppression reason", "Bounced")]
    assert entry({**event, "address": "rita@x.test"}, "Europe/Berlin")["name"] == "rita@x.test"
