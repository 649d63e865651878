"""The console's snapshots pages as a person meets them: later pages of periods, the status
filter (an unknown one refused naming it), "Open a report over this month" only where a
report reads that snapshot, snapshot types and queues named in words (the code kept in a
title), and the staff request form choosing among the enabled types. Against the real API
resolver and database."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from html import unescape

from tests.api.conftest import NOW, Caller, seed_member
from tests.api.test_console import Browser, _header
from timekeeper import topology
from timekeeper.console import glossary
from timekeeper.edge import registries
from timekeeper.platform.directory import create_workspace

#: A Berlin workspace since January 2024: at NOW (2027-03-01) 38 completed months per type,
#: more than one page of 100 periods.
SINCE = datetime(2024, 1, 15, tzinfo=UTC)


def _old_workspace(conn, caller: Caller, *, published: tuple[str, date] | None = None) -> None:
    create_workspace(conn, name="Old club", timezone="Europe/Berlin", currency="EUR", now=SINCE,
                     workspace_id=caller.workspace_id)
    if published:
        conn.execute("""
            INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, state, attempts,
                                       is_current, published_at, basis, created_at, updated_at)
            VALUES ('platform', %(t)s, %(w)s, %(p)s, 1, 'planned', 'published', 1, true, %(now)s, '{"rows": 3}',
                    %(now)s, %(now)s)""", {"t": published[0], "w": caller.workspace_id, "p": published[1], "now": NOW})


def _reader(console, caller: Caller, roles=("snapshots:read",)) -> Browser:
    browser = Browser(console)
    browser.sign_in(caller, roles)
    return browser


def _next_link(html: str) -> str | None:
    found = re.search(r'<a href="([^"]+)" rel="next">More periods</a>', html)
    return unescape(found.group(1)) if found else None


def _rows(html: str) -> int:
    return html.count("<tr><td>")


def test_a_later_page_shows_the_next_periods_and_more_is_offered_only_when_there_is_more(console, conn):
    # Given a workspace with more periods than one page holds
    caller = Caller(roles="snapshots:read")
    _old_workspace(conn, caller)
    browser = _reader(console, caller)
    # When its reader opens the snapshots and follows "More periods"
    first = browser.request("GET", "/console/snapshots")["body"]
    assert _rows(first) == 100
    later = browser.get_decoded(_next_link(first))
    # Then the next periods are listed (the rest of the 114) and no further "More" is offered
    assert later["statusCode"] == 200
    assert _rows(later["body"]) == 14 and _next_link(later["body"]) is None
    # And a page past the last one says so and leads back to the first page
    past = browser.get_decoded("/console/snapshots?cursor=platform%3Aar_aging%3A2024-01")
    assert past["statusCode"] == 200
    assert "No more periods." in past["body"]
    assert '<a href="/console/snapshots">Back to the first page</a>' in past["body"]
    assert _next_link(past["body"]) is None and "No periods to show." not in past["body"]


def test_an_unknown_status_filter_is_refused_naming_it(console, conn):
    caller = Caller(roles="snapshots:read")
    _old_workspace(conn, caller)
    browser = _reader(console, caller)
    refused = browser.get_decoded("/console/snapshots?status=bogus")
    assert refused["statusCode"] == 422
    assert "there is no status “bogus” to show (status)" in refused["body"]
    assert _next_link(refused["body"]) is None and "<table>" not in refused["body"]


def test_a_status_filter_reads_on_to_the_periods_it_shows(console, conn):
    # Given a workspace whose only published period is far down the listing (its second page)
    caller = Caller(roles="snapshots:read")
    _old_workspace(conn, caller, published=("ar_aging", date(2024, 3, 1)))
    browser = _reader(console, caller)
    # When its reader shows only the published periods
    page = browser.get_decoded("/console/snapshots?status=published")
    # Then that period is listed on the first page, with no "More" (nothing further is published)
    assert page["statusCode"] == 200
    assert _rows(page["body"]) == 1 and ">2024-03</a>" in page["body"]
    assert "No periods to show." not in page["body"] and _next_link(page["body"]) is None


def test_open_a_report_is_offered_only_where_a_report_reads_the_snapshot(console, conn, db_url):
    # Given a published self-test month, no report in the workspace, and a member who reads reports
    caller = Caller(roles="snapshots:read,reports:read")
    _old_workspace(conn, caller, published=("selftest", date(2027, 2, 1)))
    seed_member(db_url, workspace_id=caller.workspace_id, user_id=caller.user_id, roles=("reports:read",))
    browser = _reader(console, caller, ("snapshots:read", "reports:read"))
    html = browser.request("GET", "/console/snapshots")["body"]
    # Then the month is listed without the action (no dead end), saying why
    assert ">2027-02</a>" in html
    assert "Open a report over this month" not in html and "No report reads it" in html


def test_snapshot_types_read_as_words_with_the_code_kept(console, conn):
    caller = Caller(roles="snapshots:read")
    _old_workspace(conn, caller, published=("ar_aging", date(2027, 2, 1)))
    browser = _reader(console, caller)
    listing = browser.request("GET", "/console/snapshots")["body"]
    assert '<span class="term" data-code="ar_aging">Receivables aging</span>' in listing
    assert ('<span class="term" data-code="membership_counts">Membership counts</span>'
            in listing)
    assert '<span class="term" data-code="platform">Platform</span>' in listing
    assert "<td>ar_aging<br>" not in listing
    period = browser.request("GET", "/console/snapshots/periods/platform/ar_aging/2027-02")["body"]
    assert "<title>Receivables aging 2027-02" in period and ">Receivables aging</span>, 2027-02</h1>" in period
    assert '<span class="term" data-code="published">Published</span>' in period


def test_every_snapshot_type_and_queue_a_page_names_has_words():
    codes = {t.name for t in registries.snapshot_types().all()} | {t.owner for t in registries.snapshot_types().all()}
    codes |= set(topology.PIPELINES) | {topology.EXPORTS.name, "snapshots", topology.MESSAGE_EVENTS_NAME}
    assert sorted(code for code in codes if code not in glossary.WORDS) == []


def test_staff_choose_the_snapshot_type_of_a_request_from_the_enabled_types(console, conn):
    # Given a staff member and a workspace with a month never planned
    target = Caller(roles="snapshots:read")
    _old_workspace(conn, target)
    staff = _reader(console, Caller(user_id="staff-1", roles="platform:staff"), ("platform:staff",))
    html = staff.request("GET", f"/console/snapshots?workspace={target.workspace_id}")["body"]
    # Then the request form offers the enabled types in words, no free text
    choice = re.search(r'<select id="r-type" name="type" required>(.*?)</select>', html, re.S).group(1)
    assert '<option value="platform:ar_aging">Receivables aging (Platform)</option>' in choice
    assert 'name="snapshot_type"' not in html and 'name="owner"' not in html
    assert len(re.findall("<option", choice)) == len(registries.snapshot_types().enabled())
    # And a backfill of the chosen type is recorded
    csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
    done = staff.request("POST", "/console/snapshots/requests", {
        "csrf": csrf, "workspace_id": str(target.workspace_id), "type": "platform:ar_aging", "period": "2024-02",
        "mode": "backfill", "reason": "filling the gap"})
    assert done["statusCode"] == 303, done["body"]
    assert "waits for admission" in staff.request("GET", _header(done, "Location"))["body"]
    run = conn.execute("SELECT owner, snapshot_type, mode FROM snapshot_runs WHERE workspace_id = %s",
                       (target.workspace_id,)).fetchone()
    assert (run["owner"], run["snapshot_type"], run["mode"]) == ("platform", "ar_aging", "backfill")


def test_every_work_kind_a_schedule_runs_has_words():
    kinds = registries.work_kinds().kinds()
    assert kinds
    assert sorted(k.name for k in kinds if k.name not in glossary.WORDS) == []


def test_staff_naming_a_workspace_that_is_no_workspace_id_are_told_which_field(console):
    staff = _reader(console, Caller(user_id="staff-1", roles="platform:staff"), ("platform:staff",))
    refused = staff.get_decoded("/console/snapshots?workspace=nope")
    assert refused["statusCode"] == 422
    assert "The workspace must be a workspace id, a UUID (workspace)." in refused["body"]


def test_a_reader_whose_membership_grants_no_reports_is_offered_no_report_action(console, conn):
    # Given a token claiming reports:read for a member whose membership grants no role
    caller = Caller(roles="snapshots:read,reports:read")
    _old_workspace(conn, caller, published=("ar_aging", date(2027, 2, 1)))
    browser = _reader(console, caller, ("snapshots:read", "reports:read"))
    html = browser.request("GET", "/console/snapshots")["body"]
    # Then the month is listed without a Reports column (the API refuses them the reports)
    assert ">2027-02</a>" in html
    assert "Open a report over this month" not in html and "No report reads it" not in html
    assert '<th scope="col">Reports</th>' not in html
