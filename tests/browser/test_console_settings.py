"""The workspace's settings and its audit log in a real browser: the Berlin admin previews
a zone change, saves a new zone and locale from the keyboard, and finds the change (who,
what before and after) in the audit log; both pages fit a 360 px screen and pass
axe-core's check."""

from __future__ import annotations

from typing import Any

from tests.browser.test_console_pages import WIDTH_PHONE, _sign_in_as, page  # noqa: F401


def _axe_violations(tab: Any) -> list[str]:
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(tab)
    return [v["id"] for v in results.response["violations"] if v.get("impact") in ("serious", "critical")]


def test_an_admin_changes_the_zone_and_locale_and_sees_it_in_the_audit_log(page, server):  # noqa: F811
    _sign_in_as(page, server, "Berlin admin")
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Settings").click()
    assert page.get_by_role("heading", level=1).inner_text() == "Settings"
    assert _axe_violations(page) == []
    zone = page.get_by_label("Time zone")
    before = zone.input_value()
    # Moving the schedules is asked for, never ticked already
    assert not page.get_by_role("checkbox", name="Also move the schedules").is_checked()
    # A preview first: what the change would do, nothing saved
    zone.select_option("America/New_York")
    page.get_by_role("button", name="Preview the zone change").click()
    assert "What changing the zone to America/New_York would do" in page.get_by_role(
        "heading", level=2).first.inner_text()
    assert page.get_by_label("Time zone").input_value() == "America/New_York"
    assert _axe_violations(page) == []
    # Saved from the keyboard, the locale chosen from its list
    page.get_by_label("Locale of files and messages").select_option("fr_CH")
    page.get_by_role("button", name="Save").focus()
    page.keyboard.press("Enter")
    page.wait_for_url("**/console/settings?done=saved")
    assert page.get_by_role("status").inner_text() == "Settings saved."
    page.set_viewport_size({"width": WIDTH_PHONE, "height": 740})
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE
    # The audit log shows who changed what, before and after
    page.set_viewport_size({"width": 1280, "height": 800})
    page.get_by_role("navigation", name="Main").get_by_role("link", name="Audit log").click()
    page.get_by_label("Kind").select_option("settings")
    page.get_by_role("button", name="Show").click()
    first = page.locator("ol.audit > li").first
    text = first.inner_text()
    assert "Settings changed" in text and "fr_CH" in text and "America/New_York" in text and before in text
    assert server.stack.platform.users["admin"] in text
    assert _axe_violations(page) == []
    page.set_viewport_size({"width": WIDTH_PHONE, "height": 740})
    assert page.evaluate("document.documentElement.scrollWidth") <= WIDTH_PHONE
