"""The console in a real browser: sign in, pause a schedule and see it in its history,
Run now once, what another workspace's member sees, keyboard use, a 360 px wide screen,
and axe-core's accessibility check on every page."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import requests

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
    assert page.locator(".events li").first.inner_text().endswith(f"paused by {berlin['admin']} (paused_by_owner)")
    # Declining the confirmation of Resume leaves it paused
    page.once("dialog", lambda dialog: dialog.dismiss())
    page.get_by_role("button", name="Resume").click()
    assert "paused" in page.locator(".facts").inner_text()
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
        for path in ("/console/schedules", f"/console/schedules/{berlin['schedule']['id']}"):
            tab.goto(f"{server.base_url}{path}")
            assert tab.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE, path
    finally:
        context.close()


def test_axe_finds_no_serious_or_critical_violation_on_any_page(page, server, berlin):
    from axe_playwright_python.sync_playwright import Axe

    axe = Axe()
    paths = ["/console/sign-in", "/console/schedules", f"/console/schedules/{berlin['schedule']['id']}",
             "/console/no-such-page"]
    found = {}
    for index, path in enumerate(paths):
        if index == 1:
            _sign_in_as(page, server, "Berlin admin")
        page.goto(f"{server.base_url}{path}")
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
