"""The console's period picker, against the real API resolver, the embedded database and
moto S3: a published month on the Snapshots page leads to the reports reading that
snapshot, a render over that month (checked through the API: its month and basis), the
render's page with its basis and download link, and refusals shown with the API's
reason (a forged form, another workspace's member, a key naming another month)."""

from __future__ import annotations

import re
from datetime import date
from urllib.parse import quote
from uuid import UUID, uuid4

import pytest

from tests.api.conftest import Caller
from tests.api.test_console import KEY, Browser, _header
from tests.api.test_report_routes import BUCKET, author, reader, renderer, s3, send  # noqa: F401 - fixtures
from tests.integration.report_helpers import NOW, make_tenant
from tests.integration.snapshot_helpers import backdate, publish
from timekeeper.api import ApiAdapters, create_app
from timekeeper.console.app import ConsoleSettings, create_console
from timekeeper.db.connection import connect
from timekeeper.edge import registries
from timekeeper.reporting import store
from timekeeper.reporting.rendering import render

ROLES = ("reports:read", "snapshots:read")


@pytest.fixture(scope="module")
def tenants(db_url):
    with connect(db_url) as c:
        a = make_tenant(c, "picker-a")
        backdate(c, a.workspace_id)
        january = publish(c, a.workspace_id, date(2027, 1, 1))
        publish(c, a.workspace_id, date(2027, 2, 1))
        query, _ = store.create_query(c, workspace_id=a.workspace_id, name="Aging", actor=a.author, now=NOW,
                                      definition={"entity": "snapshot.platform.ar_aging",
                                                  "columns": ["bucket", "outstanding_minor"]})
        b = make_tenant(c, "picker-b")
    return a, b, january, query.id


@pytest.fixture
def console(api_conn, s3, renderer):  # noqa: F811 - fixtures
    app = create_app(ApiAdapters(connection=lambda: api_conn, publisher_for=lambda _: None,
                                 registry=registries.work_kinds, now=lambda: NOW, renderer=lambda: renderer,
                                 files=lambda: (s3, BUCKET), snapshot_registry=registries.snapshot_types))
    return create_console(lambda event, context: app.resolve(event, context),
                          ConsoleSettings(session_key=KEY, dev_sign_in=True, secure_cookies=True))


def _browser(console, user_id, workspace_id, roles=ROLES):
    browser = Browser(console)
    assert browser.sign_in(Caller(user_id=user_id, workspace_id=workspace_id), roles)["statusCode"] == 303
    return browser


def _report(send, a, name, definition) -> str:  # noqa: F811 - the fixture passed on
    status, created = send("POST", "/reports", author(a), {"name": name, "definition": definition})
    assert status == 201, created
    return created["id"]


def _reports(send, a, query_id):  # noqa: F811
    aging = _report(send, a, "Aging <monthly>", {"title": "Aging", "sections": [
        {"heading": "Aging", "query_id": str(query_id)}]})
    invoices = _report(send, a, f"Invoices {uuid4()}", {"title": "Invoices", "sections": [
        {"heading": "Invoices", "query_id": str(a.invoices_query)}]})
    return aging, invoices


def _picker_form(html: str, report_id: str) -> dict[str, str]:
    for chunk in re.findall(r'<form method="post" action="/console/snapshots/renders">(.*?)</form>', html, re.S):
        fields = dict(re.findall(r'name="([^"]+)" value="([^"]*)"', chunk))
        if fields.get("report_id") == report_id:
            return fields
    raise AssertionError(f"no render form for {report_id}")


def test_a_published_month_leads_to_its_reports_and_renders_one_over_that_month(send, console, tenants, conn,  # noqa: F811
                                                                                 s3):  # noqa: F811
    a, _, january, query_id = tenants
    aging, invoices = _reports(send, a, query_id)
    browser = _browser(console, a.reader, a.workspace_id)
    # The Snapshots page offers the published January to open a report over
    snapshots = browser.request("GET", "/console/snapshots")
    assert snapshots["statusCode"] == 200
    assert 'name="month" value="2027-01"' in snapshots["body"] and "Open a report over this month" in snapshots["body"]
    # The picker lists the report reading ar_aging, not the one over invoices; names are escaped
    picker = browser.request("GET", "/console/snapshots/reports?owner=platform&snapshot_type=ar_aging&month=2027-01")
    html = picker["body"]
    assert picker["statusCode"] == 200, html
    assert aging in html and invoices not in html
    assert "Aging &lt;monthly&gt;" in html and "Aging <monthly>" not in html
    # Rendering it over January redirects to the render's page
    fields = _picker_form(html, aging)
    assert fields["month"] == "2027-01"
    done = browser.request("POST", "/console/snapshots/renders", fields)
    assert done["statusCode"] == 303, done["body"]
    location = _header(done, "Location")
    render_id = location.rsplit("/", 1)[1]
    assert location == f"/console/reports/{aging}/renders/{render_id}"
    # The API says the render is over January; once rendered its basis is January's version
    status, got = send("GET", f"/reports/{aging}/renders/{render_id}", reader(a))
    assert status == 200 and got["month"] == "2027-01"
    # A second click of the same form is the same render
    again = browser.request("POST", "/console/snapshots/renders", fields)
    assert _header(again, "Location") == location
    waiting = browser.request("GET", location)["body"]
    assert "requested" in waiting and "Refresh the status" in waiting and "data-live=" in waiting
    render(conn, s3, BUCKET, workspace_id=a.workspace_id, render_id=UUID(render_id), now=NOW)
    status, got = send("GET", f"/reports/{aging}/renders/{render_id}", reader(a))
    assert [(b["period"], b["version"], b["choice"]) for b in got["snapshot_basis"]] == [("2027-01-01", 1, "month")]
    # The render's page shows its basis, in the workspace's zone with UTC beside, and the download
    page = browser.request("GET", location)
    body = page["body"]
    assert page["statusCode"] == 200, body
    assert "succeeded" in body and "over 2027-01" in body and "Aging &lt;monthly&gt;" in body
    published = january.published_at
    assert published.strftime("%Y-%m-%d %H:%M UTC") in body and "Europe/Berlin" in body
    assert re.search(r"2027-01</td>\s*<td>1</td>", body) and "<td>month</td>" in body
    assert 'href="https://' in body and "Download the PDF" in body
    # and ways back: to the snapshots, and to the reports over that month
    assert '<a href="/console/snapshots">' in body
    assert ('href="/console/snapshots/reports?owner=platform&amp;month=2027-01&amp;snapshot_type=ar_aging"'
            in body)


def test_a_forged_render_form_changes_nothing(send, console, tenants):  # noqa: F811
    a, _, _, query_id = tenants
    aging, _ = _reports(send, a, query_id)
    browser = _browser(console, a.reader, a.workspace_id)
    html = browser.request("GET", "/console/snapshots/reports?owner=platform&snapshot_type=ar_aging&month=2027-01")
    fields = {**_picker_form(html["body"], aging), "csrf": "forged"}
    refused = browser.request("POST", "/console/snapshots/renders", fields)
    assert refused["statusCode"] == 403
    # The key was never used: with it the API now starts a render of another month, not a 409
    status, created = send("POST", f"/reports/{aging}/renders", reader(a), {"month": "2027-02"},
                           headers={"Idempotency-Key": fields["key"]})
    assert status == 202 and created["month"] == "2027-02", created


def test_another_workspaces_member_gets_404_and_sees_no_report(send, console, tenants):  # noqa: F811
    a, b, _, query_id = tenants
    aging, _ = _reports(send, a, query_id)
    _, first = send("POST", f"/reports/{aging}/renders", reader(a), {"month": "2027-01"},
                    headers={"Idempotency-Key": f"a-{uuid4()}"})
    stranger = _browser(console, b.reader, b.workspace_id)
    assert stranger.request("GET", f"/console/reports/{aging}/renders/{first['id']}")["statusCode"] == 404
    picker = stranger.request("GET", "/console/snapshots/reports?owner=platform&snapshot_type=ar_aging&month=2027-01")
    assert picker["statusCode"] == 200 and aging not in picker["body"]
    fields = {"csrf": stranger.csrf("/console/snapshots"), "key": f"b-{uuid4()}", "report_id": aging,
              "month": "2027-01", "owner": "platform", "snapshot_type": "ar_aging"}
    refused = stranger.request("POST", "/console/snapshots/renders", fields)
    assert refused["statusCode"] == 404 and "no such report" in refused["body"]


def test_a_refusal_shows_the_apis_reason(send, console, tenants):  # noqa: F811
    a, _, _, query_id = tenants
    aging, _ = _reports(send, a, query_id)
    browser = _browser(console, a.reader, a.workspace_id)
    html = browser.request("GET", "/console/snapshots/reports?owner=platform&snapshot_type=ar_aging&month=2027-01")
    fields = _picker_form(html["body"], aging)
    assert browser.request("POST", "/console/snapshots/renders", fields)["statusCode"] == 303
    # The same key over another month: 409 with the API's reason, on the picker
    other = browser.request("POST", "/console/snapshots/renders", {**fields, "month": "2027-02"})
    assert other["statusCode"] == 409
    assert "already names a render of another report or month" in other["body"] and "Idempotency-Key" in other["body"]
    # A month that is no month: 422 naming the field, escaped
    bad = browser.request("POST", "/console/snapshots/renders", {**fields, "key": f"k-{uuid4()}",
                                                                 "month": "<b>2027</b>"})
    assert bad["statusCode"] == 422 and "(month)" in bad["body"]
    assert "<b>2027</b>" not in bad["body"] and "&lt;b&gt;2027&lt;/b&gt;" in bad["body"]
    # A render id that is not one: the API's 404 or 422, never a 500
    missing = browser.request("GET", f"/console/reports/{aging}/renders/{uuid4()}")
    assert missing["statusCode"] == 404
    assert browser.request("GET", f"/console/reports/{aging}/renders/nope")["statusCode"] == 422


def test_the_render_action_is_offered_only_to_report_readers(send, console, tenants):  # noqa: F811
    a, _, _, _ = tenants
    snapshots_only = _browser(console, a.reader, a.workspace_id, roles=("snapshots:read",))
    html = snapshots_only.request("GET", "/console/snapshots")["body"]
    assert "2027-01" in html and "Open a report over this month" not in html


def test_staff_viewing_their_own_workspace_by_its_id_keep_the_render_action(send, console, tenants):  # noqa: F811
    a, b, _, _ = tenants
    staff = _browser(console, a.reader, a.workspace_id, roles=(*ROLES, "platform:staff"))
    own = staff.request("GET", f"/console/snapshots?workspace={a.workspace_id}")
    assert own["statusCode"] == 200
    assert "2027-01" in own["body"] and "Open a report over this month" in own["body"]
    # Another workspace's periods: its reports are not the person's to render
    other = staff.request("GET", f"/console/snapshots?workspace={b.workspace_id}")
    assert other["statusCode"] == 200 and "Open a report over this month" not in other["body"]


@pytest.mark.parametrize("month", ["9999-99", "2027-13", "2027-00", "0000-01", "2027-1", "", "<b>2027-01</b>"])
def test_a_month_that_is_no_month_is_refused_by_the_picker(send, console, tenants, month):  # noqa: F811
    a, _, _, _ = tenants
    browser = _browser(console, a.reader, a.workspace_id)
    picker = browser.request("GET", "/console/snapshots/reports?owner=platform&snapshot_type=ar_aging&month="
                             + quote(month))
    assert picker["statusCode"] == 422 and "must be a month YYYY-MM (month)" in picker["body"]
    assert "Render over" not in picker["body"] and "<b>2027" not in picker["body"]
    assert '<a href="/console/snapshots">Back to the snapshots</a>' in picker["body"]


def test_a_period_s_basis_reads_as_a_person_reads_it(send, console, conn):  # noqa: F811
    # Given a German-speaking workspace (de_DE, EUR: its files and messages) whose January aging is published
    tenant = make_tenant(conn, "basis-de")
    with conn.transaction():
        conn.execute("UPDATE workspaces SET locale = 'de_DE' WHERE id = %s", (tenant.workspace_id,))
    backdate(conn, tenant.workspace_id)
    january = publish(conn, tenant.workspace_id, date(2027, 1, 1))
    basis = january.basis
    assert basis["currency"] == "EUR" and basis["outstanding_minor"] > 0
    browser = _browser(console, tenant.reader, tenant.workspace_id, roles=("snapshots:read",))
    html = browser.request("GET", "/console/snapshots")["body"]
    cell = re.search(r'<ul class="basis">(.*?)</ul>', html, re.S).group(1)
    lines = [re.sub(r"<[^>]+>", "", li) for li in re.findall(r"<li>(.*?)</li>", cell)]
    # Then the English console writes euros, counts and the date as its interface does, no raw keys
    euros = f"€{basis['outstanding_minor'] // 100:,}.{basis['outstanding_minor'] % 100:02d}"
    assert f"Outstanding: {euros}" in lines
    assert "As of: January 31, 2027" in lines and f"Invoices: {basis['invoices']}" in lines
    assert any(line.startswith("By age, 0 to 30 days: Invoices: ") and "€" in line for line in lines)
    assert "outstanding_minor" not in cell and "{" not in cell and "currency" not in cell
