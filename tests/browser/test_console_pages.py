"""The console in a real browser: sign in, pause a schedule and see it in its history,
Run now once, what another workspace's member sees, keyboard use, a 360 px wide screen,
and axe-core's accessibility check on every page."""

from __future__ import annotations

import re
import uuid
from typing import Any

import pytest
import requests

from tests.api.conftest import enrol

WIDTH_PHONE = 360


def _api(server: Any, user: str, workspace: uuid.UUID | str) -> dict[str, str]:
    return {"Authorization": f"Bearer dev:{user}:{workspace}:schedules:read,schedules:write,schedules:run"}


@pytest.fixture(scope="module")
def berlin(server) -> dict[str, Any]:
    """The Berlin admin and a schedule of theirs, created through the API."""
    sample = server.stack.platform
    admin, workspace = sample.users["admin"], sample.first_workspace
    reply = requests.post(f"{server.base_url}/schedules", headers=_api(server, admin, workspace), timeout=30, json={
        "owner": "accounting", "work_kind": "reconciliation.sweep", "name": "Nightly <sweep>",
        "recurrence": {"cron": "30 2 * * *", "timezone": "Europe/Berlin"}})
    assert reply.status_code == 201, reply.text
    return {"admin": admin, "workspace": workspace, "schedule": reply.json()}


@pytest.fixture
def page(browser):
    context = browser.new_context()
    tab = context.new_page()
    yield tab
    context.close()


def _sign_in_as(page: Any, server: Any, label: str) -> None:
    page.goto(f"{server.base_url}/")
    page.get_by_role("button", name=label).click()
    page.wait_for_url("**/console/schedules")


def test_sign_in_pause_and_see_it_in_the_history(page, server, berlin):
    _sign_in_as(page, server, "Berlin admin")
    # The list shows the schedule, its name as text
    link = page.get_by_role("link", name="Nightly <sweep>")
    assert link.is_visible()
    link.click()
    assert page.get_by_role("heading", level=1).inner_text() == "Nightly <sweep>"
    # Pause asks first; accepting it pauses the schedule
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Pause").click()
    page.wait_for_url("**?done=pause")
    assert page.get_by_role("status").inner_text() == "The schedule was paused."
    # The person by name and address, the user id in the name's title
    event = page.locator(".events li").first
    assert "Paused by Ada Admin <" in event.inner_text() and event.inner_text().endswith("> (Paused by its owner)")
    assert event.locator(f"[title*='{berlin['admin']}']").count() == 1
    # Declining the confirmation of Resume leaves it paused
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.get_by_role("button", name="Resume").click()
    assert "Paused" in page.locator(".facts").inner_text()
    # Resume from the keyboard: focus the button, press Enter, accept
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Resume").focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**?done=resume")
    assert page.get_by_role("status").inner_text() == "The schedule was resumed."


def test_run_now_from_the_page_starts_one_run(page, server, berlin):
    _sign_in_as(page, server, "Berlin admin")
    page.goto(f"{server.base_url}/console/schedules/{berlin['schedule']['id']}")
    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Run now").click()
    page.wait_for_url("**?done=run")
    detail = requests.get(f"{server.base_url}/schedules/{berlin['schedule']['id']}",
                          headers=_api(server, berlin["admin"], berlin["workspace"]), timeout=30).json()
    assert [run["trigger"] for run in detail["history"]["runs"]].count("manual") == 1


def test_another_workspace_s_member_sees_none_of_it(page, server, berlin):
    _sign_in_as(page, server, "Sydney admin")
    assert page.get_by_role("link", name="Nightly <sweep>").count() == 0
    response = page.goto(f"{server.base_url}/console/schedules/{berlin['schedule']['id']}")
    assert response.status == 404
    assert page.get_by_role("heading", level=1).inner_text() == "Not found"


def test_pages_fit_a_360_px_screen(browser, server, berlin):
    context = browser.new_context(viewport={"width": WIDTH_PHONE, "height": 740})
    tab = context.new_page()
    try:
        _sign_in_as(tab, server, "Berlin admin")
        # (the Berlin admin is staff: the snapshots page has the workspace field and the request form)
        for path in ("/console/schedules", f"/console/schedules/{berlin['schedule']['id']}", "/console/snapshots",
                     "/console/operations", "/console/operations/claim-weights"):
            tab.goto(f"{server.base_url}{path}")
            assert tab.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE, path
    finally:
        context.close()


def test_axe_finds_no_serious_or_critical_violation_on_any_page(page, server, berlin):
    from axe_playwright_python.sync_playwright import Axe

    axe = Axe()
    paths = ["/console/sign-in", "/console/schedules", f"/console/schedules/{berlin['schedule']['id']}",
             "/console/notices", "/console/ownerless", "/console/posting-jobs", "/console/deliveries",
             "/console/snapshots", "/console/snapshots/reports?owner=platform&snapshot_type=ar_aging&month=2027-01",
             "/console/closures", "/console/mail-suppressions", "/console/operations/claim-weights",
             "/console/no-such-page"]
    found = {}
    for index, path in enumerate(paths):
        if index == 1:
            _sign_in_as(page, server, "Berlin admin")
        response = page.goto(f"{server.base_url}{path}")
        assert response.status == (404 if "no-such" in path else 200), path  # the page itself, not a refusal
        results = axe.run(page)
        bad = [v["id"] for v in results.response["violations"] if v.get("impact") in ("serious", "critical")]
        if bad:
            found[path] = bad
    assert found == {}


def test_the_accessibility_check_catches_a_violation(page):
    # (the check above could not fail if axe found nothing anywhere: show it finds one)
    from axe_playwright_python.sync_playwright import Axe

    page.set_content('<html lang="en"><title>t</title><body><main><img src="a.png"></main></body></html>')
    violations = Axe().run(page).response["violations"]
    assert "image-alt" in {v["id"] for v in violations if v.get("impact") == "critical"}


@pytest.fixture(scope="module")
def delivery(server) -> dict[str, Any]:
    """A saved query of the Berlin analyst and a query schedule delivering it to the
    analyst and the admin, created through the API."""
    sample = server.stack.platform
    analyst, workspace = sample.users["analyst"], sample.first_workspace
    auth = {"Authorization": f"Bearer dev:{analyst}:{workspace}:queries:read,queries:write,schedules:run"}
    query = requests.post(f"{server.base_url}/queries", headers=auth, timeout=30, json={
        "name": "Open invoices", "definition": {"entity": "invoices", "columns": ["number", "amount_minor"]}})
    assert query.status_code == 201, query.text
    schedule = requests.post(f"{server.base_url}/query-schedules", headers=auth, timeout=30, json={
        "name": "Invoices for the team", "recurrence": {"cron": "0 7 * * *", "timezone": "Europe/Berlin"},
        "source": {"kind": "query", "query_id": query.json()["query"]["id"]}, "format": "csv",
        "recipients": [analyst, sample.users["admin"]], "subject_template": "{{ schedule_name }}",
        "body_template": "<p>Hello {{ recipient_name }}: <a href='{{ link }}'>the file</a></p>"})
    assert schedule.status_code == 201, schedule.text
    return {"schedule": schedule.json(), "analyst": analyst, "admin": sample.users["admin"]}


def test_run_now_a_delivery_and_read_its_per_recipient_ledger(page, server, delivery):
    _sign_in_as(page, server, "Berlin analyst")
    page.get_by_role("link", name="Deliveries").click()
    page.get_by_role("link", name="Invoices for the team").click()
    page.on("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Run now").click()
    page.wait_for_url("**?done=run")
    # The local worker polls the queue every fraction of a second: reload until the run has
    # an outcome for each recipient
    ledger = page.locator("section.run table tbody tr")
    for _ in range(60):
        if ledger.count() == 2 and "Sent" in ledger.first.inner_text():
            break
        page.wait_for_timeout(500)
        page.reload()
    # (each recipient by name and address, the user id in the title)
    rows = {row.locator("td").first.locator("span[title]").get_attribute("title"): row.locator("td").nth(1).inner_text()
            for row in ledger.all()}
    assert rows == {delivery["analyst"]: "Sent", delivery["admin"]: "Sent"}


def test_staff_request_a_backfill_with_a_reason_and_see_a_refusal_s_reason(page, server):
    workspace = str(server.stack.platform.first_workspace)
    enrol(server.database_url, "staff-1", workspace)  # staff are members of the workspace they sign in to
    page.goto(f"{server.base_url}/console/sign-in")
    page.get_by_label("User id").fill("staff-1")
    page.get_by_label("Workspace (UUID)").fill(workspace)
    for role in ("schedules:read", "schedules:write", "schedules:run", "schedules:admin", "queries:read",
                 "queries:write", "reports:read", "workspace:admin"):
        page.get_by_label(role, exact=True).uncheck()
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("link", name="Snapshots").click()
    # the navigation offers what the roles allow
    assert page.get_by_role("link", name="Schedules", exact=True).count() == 0
    periods = page.locator("table tbody tr")
    assert periods.count() > 0
    if page.locator("details.folded summary").count():  # the older months never planned, folded
        page.locator("details.folded summary").click()
    missing = [row for row in periods.all() if "Missing" in row.inner_text()]
    assert missing, "the sample workspace has never-planned months"
    row = missing[0]
    # (the type in words, its code kept on the element)
    kind = row.locator("td").nth(0).locator("[data-code]").first.get_attribute("data-code")
    month = row.locator("td").nth(1).inner_text()

    def request(mode: str) -> None:
        page.get_by_label("Snapshot type").select_option(f"platform:{kind}")
        page.get_by_label("Month (YYYY-MM)").fill(month)
        page.get_by_label("Kind").select_option(mode)
        page.get_by_label("Reason (recorded with the run)").fill("the auditors asked for it")
        page.get_by_role("button", name="Request").click()

    # A re-run of a month that has no runs is refused with the API's reason
    request("manual")
    assert "Refused:" in page.get_by_role("alert").inner_text()
    # A backfill of a month the listing shows as missing is recorded and leaves "missing"
    request("backfill")
    assert "recorded" in page.get_by_role("status").inner_text()
    after = [r.locator("td").nth(2).inner_text() for r in page.locator("table tbody tr").all()
             if r.locator("td").nth(0).locator("[data-code]").first.get_attribute("data-code") == kind
             and r.locator("td").nth(1).inner_text() == month]
    assert after and not after[0].startswith("Missing"), after


def test_staff_redrive_a_dead_letter_queue_from_the_operations_page(page, server):
    # Given a dead letter in serve's exports dead-letter queue
    import os

    import boto3

    from timekeeper.settings import dead_letter_queue_arn_variable

    sqs = boto3.client("sqs", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
    dlq = sqs.get_queue_url(QueueName=os.environ[dead_letter_queue_arn_variable("exports")].split(":")[-1])
    sqs.send_message(QueueUrl=dlq["QueueUrl"], MessageBody='{"export_id": "lost"}')
    # When staff (a member of the workspace they sign in to) sign in with only the staff role and open Operations
    enrol(server.database_url, "staff-1", server.stack.platform.first_workspace)
    page.goto(f"{server.base_url}/console/sign-in")
    page.get_by_label("User id").fill("staff-1")
    page.get_by_label("Workspace (UUID)").fill(str(server.stack.platform.first_workspace))
    for role in ("schedules:read", "schedules:write", "schedules:run", "schedules:admin", "queries:read",
                 "queries:write", "reports:read", "snapshots:read"):
        page.get_by_label(role, exact=True).uncheck()
    page.get_by_role("button", name="Sign in").click()
    page.get_by_role("link", name="Operations").click()
    row = page.locator("tr", has_text="exports")
    assert row.locator("td").nth(1).inner_text() == "1"
    # Then a redrive needs a reason and a confirmation, and empties the queue
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_label("Reason").fill("the bucket policy was fixed")
    row.get_by_role("button", name="Redrive").click()
    page.wait_for_url("**?done=redriven")
    assert "redrive started" in page.get_by_role("status").inner_text()
    assert page.locator("tr", has_text="exports").locator("td").nth(1).inner_text() == "0"
    # And the page passes the accessibility check and fits a phone
    from axe_playwright_python.sync_playwright import Axe

    bad = [v["id"] for v in Axe().run(page).response["violations"] if v.get("impact") in ("serious", "critical")]
    assert bad == []
    page.set_viewport_size({"width": WIDTH_PHONE, "height": 740})
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE


def test_a_report_rendered_from_the_period_picker_shows_its_basis_and_passes_the_accessibility_check(
        page, server, berlin):
    from axe_playwright_python.sync_playwright import Axe

    # Given a report of the Berlin admin's workspace that reads the monthly aging snapshot
    auth = {"Authorization": f"Bearer dev:{berlin['admin']}:{berlin['workspace']}:queries:read,queries:write,"
                             "reports:read,reports:write"}
    query = requests.post(f"{server.base_url}/queries", headers=auth, timeout=30, json={
        "name": "Aging <buckets>", "definition": {"entity": "snapshot.platform.ar_aging",
                                                  "columns": ["bucket", "outstanding_minor"]}})
    assert query.status_code == 201, query.text
    report = requests.post(f"{server.base_url}/reports", headers=auth, timeout=30, json={
        "name": "Monthly aging", "definition": {"title": "Aging", "sections": [
            {"heading": "Aging", "query_id": query.json()["query"]["id"]}]}})
    assert report.status_code == 201, report.text
    # And the admin on the snapshots page of the workspace, whose months are published
    _sign_in_as(page, server, "Berlin admin")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Snapshots").click()
    opener = page.get_by_role("button", name=re.compile(r"Open a report over .* \(Receivables aging\)")).first
    assert opener.count() == 1, "serve's sample data publishes the monthly aging snapshots its report reads"
    # When they open a published month's reports and render the first one over it
    opener.click()
    page.wait_for_url("**/console/snapshots/reports?*")
    render = page.get_by_role("button", name=re.compile("Render Monthly aging over"))
    assert render.count() == 1, page.content()
    render.click()
    page.wait_for_url("**/console/reports/*/renders/*")
    # Then the render's page names the report and the month, and axe finds nothing serious
    heading = page.get_by_role("heading", level=1).inner_text()
    assert heading.startswith("Render of ") and " over 20" in heading, heading
    bad = [v["id"] for v in Axe().run(page).response["violations"] if v.get("impact") in ("serious", "critical")]
    assert bad == []
    page.set_viewport_size({"width": WIDTH_PHONE, "height": 740})
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE


def test_the_schedules_list_does_not_scroll_sideways_at_360_px(browser, server, berlin):
    context = browser.new_context(viewport={"width": WIDTH_PHONE, "height": 740})
    tab = context.new_page()
    try:
        _sign_in_as(tab, server, "Berlin admin")
        tab.goto(f"{server.base_url}/console/schedules")
        # Nothing in the list scrolls sideways ...
        for box in tab.locator(".scroll").all():
            widths = box.evaluate("e => [e.scrollWidth, e.clientWidth]")
            assert widths[0] <= widths[1], widths
        # ... and each schedule's next occurrence is on the screen, named
        row = tab.locator("tbody tr", has=tab.get_by_role("link", name="Nightly <sweep>"))
        cell = row.locator('td[data-label="Next occurrence"]')
        box = cell.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= WIDTH_PHONE, box
        assert "UTC" in cell.inner_text()
    finally:
        context.close()


def test_the_admin_navigation_never_breaks_inside_a_link(page, server, berlin):
    _sign_in_as(page, server, "Berlin admin")
    page.set_viewport_size({"width": 1280, "height": 800})
    page.goto(f"{server.base_url}/console/audit")
    links = page.get_by_role("navigation", name="Main").get_by_role("link")
    assert links.count() >= 10
    # At 1280 px and at 360 px, each link (e.g. "Audit log") stays on one line
    for width in (1280, WIDTH_PHONE):
        page.set_viewport_size({"width": width, "height": 800})
        lines = links.evaluate_all("(els) => els.map((el) => [el.textContent, el.getClientRects().length])")
        assert [name for name, count in lines if count != 1] == []
        if width == 1280:
            # The admin's links, the person and Sign out fit one row
            tops = {round(top) for top in links.evaluate_all(
                "(els) => els.map((el) => el.getBoundingClientRect().top)")}
            sign_out = page.get_by_role("button", name="Sign out").bounding_box()
            assert len(tops) == 1 and sign_out["y"] < min(tops) + 20
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE
