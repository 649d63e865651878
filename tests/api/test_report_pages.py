"""The console's report pages as an analyst and a viewer meet them: the list, composing a
report (sections added, moved and removed on the server, no JavaScript), a refusal shown
on the field the API names with what was typed kept, a new version, the versions and the
deliveries that send the report, the preview render, and another workspace's report not
found. Against the real API resolver and database."""

from __future__ import annotations

import re
from html import unescape
from uuid import UUID

import pytest

from tests.api.conftest import Caller
from tests.api.test_console import Browser, _header
from tests.integration.report_helpers import NOW, make_tenant
from timekeeper.db.connection import connect

WRITER = ("reports:read", "reports:write", "queries:read")


@pytest.fixture
def tenants(db_url):
    with connect(db_url) as c:
        return make_tenant(c, f"pages-a-{id(c) % 10_000}"), make_tenant(c, f"pages-b-{id(c) % 10_000}")


def _browser(console, tenant, user, roles=WRITER) -> Browser:
    browser = Browser(console)
    browser.sign_in(Caller(user_id=user, workspace_id=tenant.workspace_id), roles)
    return browser


def _form(html: str) -> dict[str, str]:
    """The compose form's fields as the browser would send them (selected options, typed values)."""
    form = html[html.index('action="/console/reports/compose"'):]
    fields = {m.group(1): unescape(m.group(2))
              for m in re.finditer(r'<input[^>]* name="([^"]+)" value="([^"]*)"', form)}
    for select in re.finditer(r'<select[^>]* name="([^"]+)"[^>]*>(.*?)</select>', form, re.S):
        chosen = re.search(r'<option value="([^"]*)" selected>', select.group(2))
        fields[select.group(1)] = unescape(chosen.group(1)) if chosen else ""
    return fields


def _post(browser: Browser, form: dict[str, str], **changes: str) -> dict:
    return browser.request("POST", "/console/reports/compose", {**form, **changes})


def test_an_analyst_composes_reorders_and_saves_a_report_then_a_second_version(console, tenants):
    a, _ = tenants
    browser = _browser(console, a, a.author)
    listing = browser.request("GET", "/console/reports")["body"]
    assert 'href="/console/reports" aria-current="page">Reports</a>' in listing
    assert '<a href="/console/reports/new">New report</a>' in listing
    page = browser.request("GET", "/console/reports/new")
    assert page["statusCode"] == 200 and "Invoices: version 1" in page["body"]
    # Typing the first section (a table) and adding a second (a chart) keeps what was typed
    form = {**_form(page["body"]), "name": "Board pack", "title": "Monthly board",
            "heading_0": "All invoices", "query_0": f"{a.invoices_query}:1", "display_0": "table"}
    added = _post(browser, form, action="add")
    assert added["statusCode"] == 200 and 'name="count" value="2"' in added["body"]
    form = {**_form(added["body"]), "heading_1": "Amounts", "query_1": f"{a.invoices_query}:",
            "display_1": "bar_chart", "label_1": "number", "value_1": "amount_minor"}
    assert form["heading_0"] == "All invoices" and form["name"] == "Board pack"
    # Moving the chart up puts it first
    up = _post(browser, form, action="up:1")
    form = _form(up["body"])
    assert (form["heading_0"], form["display_0"], form["heading_1"]) == ("Amounts", "bar_chart", "All invoices")
    # Saving creates the report and leads to its page
    saved = _post(browser, form, action="save")
    assert saved["statusCode"] == 303, saved["body"]
    location = _header(saved, "Location")
    report_id = re.search(r"/console/reports/([0-9a-f-]{36})\?saved=1$", location).group(1)
    # The same form sent again (a double click): the same report, by the form's Idempotency-Key
    assert _header(_post(browser, form, action="save"), "Location") == location
    shown = browser.request("GET", f"/console/reports/{report_id}")["body"]
    assert "<bdi>Board pack</bdi>" in shown and "<bdi>Monthly board</bdi>" in shown
    assert shown.index("<bdi>Amounts</bdi>") < shown.index("<bdi>All invoices</bdi>")
    assert "<bdi>Invoices</bdi>,\n      version 1" in shown and "its current version" in shown
    assert "(2027-03-01 12:00 UTC)" in shown and "13:00 CET" in shown  # Berlin, UTC beside
    # A new version: the form holds the current one; removing a section and saving makes version 2
    edit = browser.request("GET", f"/console/reports/{report_id}/edit")["body"]
    assert "Save version 2" in edit
    removed = _post(browser, _form(edit), action="remove:0")
    form = _form(removed["body"])
    assert form["count"] == "1" and form["heading_0"] == "All invoices"
    second = _post(browser, form, action="save")
    assert second["statusCode"] == 303
    shown = browser.get_decoded(_header(second, "Location"))["body"]
    assert "Saved: version 2 is the current one." in shown
    versions = shown[shown.index("<h2>Versions</h2>"):]
    assert versions.index("<td>2 <span class=\"mark\">current</span></td>") < versions.index("<td>1</td>")
    listing = browser.request("GET", "/console/reports")["body"]
    assert "<bdi>Board pack</bdi></a></td>\n    <td>2</td>\n    <td>1</td>" in listing


def test_a_refusal_is_shown_on_the_field_the_api_names_and_keeps_what_was_typed(console, tenants):
    a, _ = tenants
    browser = _browser(console, a, a.author)
    form = {**_form(browser.request("GET", "/console/reports/new")["body"]), "name": "Charts",
            "title": "Charts <b>", "heading_0": "Status chart", "query_0": f"{a.statuses_query}:1",
            "display_0": "bar_chart", "label_0": "number", "value_0": "status"}
    refused = _post(browser, form, action="save")
    assert refused["statusCode"] == 422
    html = refused["body"]
    assert 'id="f-value_0" name="value_0" aria-invalid="true"' in html
    assert '<option value="status" selected>Status</option>' in html
    assert 'id="problem-value_0" role="alert">' in html and "(definition.sections[0].value_column)" in html
    assert 'value="Charts &lt;b&gt;"' in html and f'<option value="{a.statuses_query}:1" selected>' in html
    # A section without a query: the API's reason on that section's query
    missing = _post(browser, {**form, "display_0": "table", "query_0": ""}, action="save")
    assert missing["statusCode"] == 422 and 'id="f-query_0" name="query_0" aria-invalid="true"' in missing["body"]


def test_the_report_page_lists_the_deliveries_and_previews_the_pdf(console, tenants, db_url):
    from timekeeper.reporting import reports
    from timekeeper.reporting.query_schedules import NewQuerySchedule, Source, create_query_schedule

    a, _ = tenants
    with connect(db_url) as conn, conn.transaction():
        report, _ = reports.create_report(conn, workspace_id=a.workspace_id, name="Sent", actor=a.author, now=NOW,
                                          definition={"title": "Sent", "sections": [
                                              {"heading": "All", "query_id": str(a.invoices_query)}]})
        schedule, _ = create_query_schedule(
            conn, workspace_id=a.workspace_id, actor=a.author, now=NOW,
            new=NewQuerySchedule(name="Weekly to the board", recurrence={"cron": "0 8 * * 1", "timezone": "UTC"},
                                 source=Source(kind="report", report_id=report.id), format="pdf",
                                 recipients=[a.author], subject_template="Report", body_template="{{ link }}"))
    browser = _browser(console, a, a.author)
    html = browser.request("GET", f"/console/reports/{report.id}")["body"]
    assert f'<a href="/console/deliveries/{schedule.id}"><bdi>Weekly to the board</bdi></a>' in html
    key = re.search(r'name="key" value="([^"]+)"', html).group(1)
    csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
    asked = browser.request("POST", f"/console/reports/{report.id}/renders", {"csrf": csrf, "key": key})
    assert asked["statusCode"] == 303
    render_page = _header(asked, "Location")
    assert re.fullmatch(rf"/console/reports/{report.id}/renders/[0-9a-f-]{{36}}", render_page)
    rendered = browser.request("GET", render_page)
    assert rendered["statusCode"] == 200 and "Render of <bdi>Sent</bdi>" in rendered["body"]
    # Back leads to the report, not to the snapshots
    assert f'<a href="/console/reports/{report.id}">← <bdi>Sent</bdi></a>' in rendered["body"]
    assert "← Snapshots" not in rendered["body"]
    # Under way: the status block is fetched again from its live address; a refresh link without JavaScript
    live = f"{render_page}/live"
    assert f'<div id="render-status" data-live="{live}" data-live-every="2">' in rendered["body"]
    assert f'<a href="{render_page}">Refresh the status</a>' in rendered["body"]
    fragment = browser.request("GET", live)
    assert fragment["statusCode"] == 200 and fragment["body"].lstrip().startswith('<div id="render-status" data-live=')
    assert "<html" not in fragment["body"] and "Requested" in fragment["body"]
    assert "script-src 'self'" in _header(fragment, "Content-Security-Policy")
    # Finished: the block carries no live address any more, so the polling stops
    with connect(db_url) as conn:
        conn.execute("UPDATE report_renders SET state = 'failed', error_code = 'render_failed', finished_at = now() "
                     "WHERE id = %s", (render_page.rsplit("/", 1)[1],))
    done = browser.request("GET", live)["body"]
    assert '<div id="render-status">' in done and "data-live" not in done and "Refresh the status" not in done
    # Another workspace's person, and one signed out, get no fragment
    b = _browser(console, tenants[1], tenants[1].author)
    assert b.request("GET", live)["statusCode"] == 404
    assert Browser(console).request("GET", live)["statusCode"] in (302, 303, 401)
    missing = browser.request("GET", f"/console/reports/{report.id}/renders/{UUID(int=1)}")
    assert missing["statusCode"] == 404 and '<a href="/console/reports">Back to the reports</a>' in missing["body"]


def test_a_viewer_is_offered_no_compose_action(console, tenants, db_url):
    from timekeeper.reporting import reports

    a, _ = tenants
    with connect(db_url) as conn, conn.transaction():
        report, _ = reports.create_report(conn, workspace_id=a.workspace_id, name="Read only", actor=a.author,
                                          now=NOW, definition={"title": "T", "sections": [
                                              {"heading": "All", "query_id": str(a.invoices_query)}]})
    browser = _browser(console, a, a.reader, roles=("reports:read",))
    listing = browser.request("GET", "/console/reports")["body"]
    assert "<bdi>Read only</bdi>" in listing and "New report" not in listing
    page = browser.request("GET", f"/console/reports/{report.id}")["body"]
    assert "Preview the PDF" in page and "Compose a new version" not in page
    assert browser.request("GET", "/console/reports/new")["statusCode"] == 403
    assert browser.request("GET", f"/console/reports/{report.id}/edit")["statusCode"] == 403
    # The API refuses the writes the console did not offer
    form = {"csrf": re.search(r'name="csrf" value="([^"]+)"', page).group(1), "report_id": str(report.id),
            "name": "x", "title": "x", "count": "1", "heading_0": "x", "query_0": f"{a.invoices_query}:",
            "display_0": "table", "action": "save"}
    assert browser.request("POST", "/console/reports/compose", form)["statusCode"] == 403


def test_another_workspaces_report_is_not_found(console, tenants, db_url):
    from timekeeper.reporting import reports

    a, b = tenants
    with connect(db_url) as conn, conn.transaction():
        report, _ = reports.create_report(conn, workspace_id=a.workspace_id, name="A's", actor=a.author, now=NOW,
                                          definition={"title": "T", "sections": [
                                              {"heading": "All", "query_id": str(a.invoices_query)}]})
    browser = _browser(console, b, b.author)
    assert browser.request("GET", f"/console/reports/{report.id}")["statusCode"] == 404
    assert browser.request("GET", f"/console/reports/{report.id}/edit")["statusCode"] == 404
    csrf = browser.csrf("/console/reports")
    assert browser.request("POST", f"/console/reports/{report.id}/renders",
                           {"csrf": csrf, "key": "k-1"})["statusCode"] == 404
    form = {"csrf": csrf, "report_id": str(report.id), "name": "x", "title": "x", "count": "0", "action": "save"}
    assert browser.request("POST", "/console/reports/compose", form)["statusCode"] == 404
    assert UUID(str(report.id)).hex not in browser.request("GET", "/console/reports")["body"]


def test_a_snapshot_sections_month_is_written_as_people_write_it(console, tenants, db_url):
    from timekeeper.reporting import store

    a, _ = tenants
    with connect(db_url) as conn, conn.transaction():
        aging, _ = store.create_query(conn, workspace_id=a.workspace_id, name="Aging", actor=a.author, now=NOW,
                                      definition={"entity": "snapshot.platform.ar_aging",
                                                  "columns": ["bucket", "outstanding_minor"]})
    browser = _browser(console, a, a.author)
    form = {**_form(browser.request("GET", "/console/reports/new")["body"]), "name": "Aging pack", "title": "Aging",
            "heading_0": "Aging", "query_0": f"{aging.id}:1", "display_0": "table", "period_0": "2027-02 v9"}
    # A pinned version that was never published: refused on the section's month, as typed
    refused = _post(browser, form, action="save")
    assert refused["statusCode"] == 422
    assert ('id="f-period_0" name="period_0" value="2027-02 v9" maxlength="20" aria-invalid="true"'
            in refused["body"]), refused["body"]
    assert "(definition.sections[0].period.version)" in refused["body"]
    # A month that is no month: refused on the same field
    bad = _post(browser, {**form, "period_0": "Feb"}, action="save")
    assert bad["statusCode"] == 422 and 'name="period_0" value="Feb" maxlength="20" aria-invalid="true"' in bad["body"]
    # Corrected to a named month, the form (with the key the refusal's page made) saves
    assert _form(bad["body"])["key"] != form["key"]
    saved = _post(browser, {**_form(bad["body"]), "period_0": "2027-02"}, action="save")
    assert saved["statusCode"] == 303
    shown = browser.get_decoded(_header(saved, "Location"))["body"]
    assert "<td>2027-02</td>" in shown


def test_a_charts_columns_are_offered_by_the_catalogues_labels_of_the_querys_columns(console, tenants):
    a, _ = tenants
    browser = _browser(console, a, a.author)
    form = {**_form(browser.request("GET", "/console/reports/new")["body"]), "heading_0": "Amounts",
            "query_0": f"{a.statuses_query}:1", "display_0": "bar_chart"}
    offered = _post(browser, form, action="columns")
    assert offered["statusCode"] == 200
    label = re.search(r'<select id="f-label_0" name="label_0"[^>]*>(.*?)</select>', offered["body"], re.S).group(1)
    assert re.findall(r'<option value="([^"]*)"[^>]*>([^<]*)</option>', label) == [
        ("", "None (a table)"), ("number", "Number"), ("status", "Status")]
    assert "Offer section 1’s query columns" in offered["body"]


def test_a_render_past_the_retention_offers_a_new_render_not_a_dead_link(console, tenants, db_url):
    from datetime import timedelta

    from timekeeper.reporting import reports

    a, _ = tenants
    with connect(db_url) as conn, conn.transaction():
        report, _ = reports.create_report(conn, workspace_id=a.workspace_id, name="Old", actor=a.author, now=NOW,
                                          definition={"title": "Old", "sections": [
                                              {"heading": "All", "query_id": str(a.invoices_query)}]})
    browser = _browser(console, a, a.author)
    html = browser.request("GET", f"/console/reports/{report.id}")["body"]
    csrf = re.search(r'name="csrf" value="([^"]+)"', html).group(1)
    key = re.search(r'name="key" value="([^"]+)"', html).group(1)
    render_page = _header(browser.request("POST", f"/console/reports/{report.id}/renders",
                                          {"csrf": csrf, "key": key}), "Location")
    # Given the render succeeded 40 days ago (the files are kept 35 days)
    with connect(db_url) as conn:
        conn.execute("UPDATE report_renders SET state = 'succeeded', object_key = 'reports/old.pdf', "
                     "sha256 = repeat('0', 64), requested_at = %s, finished_at = %s, byte_size = 10, page_count = 1 "
                     "WHERE id = %s", (NOW - timedelta(days=40),) * 2 + (render_page.rsplit("/", 1)[1],))
    # When its page is opened
    page = browser.request("GET", render_page)
    # Then it says when the file expired and how long files are kept, offers a new render and no download
    assert page["statusCode"] == 200
    assert ('This file expired on <time datetime="2027-02-25T00:00:00+00:00">2027-02-25 01:00 CET</time> '
            "<small>(2027-02-25 00:00 UTC)</small> (kept 35 days); render again.") in page["body"]
    assert "Download the PDF" not in page["body"]
    again = page["body"][page["body"].index("render again."):]
    assert f'<form method="post" action="/console/reports/{report.id}/renders">' in again
    assert 'name="csrf" value="' in again and "Render again</button>" in again
    # And the button renders the report again
    token = re.search(r'name="key" value="([^"]+)"', again).group(1)
    asked = browser.request("POST", f"/console/reports/{report.id}/renders", {"csrf": csrf, "key": token})
    assert asked["statusCode"] == 303 and _header(asked, "Location") != render_page
