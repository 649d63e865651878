"""The schedule page's rule in words, its next ten occurrences, and the "Edit rule" form
without JavaScript: Preview re-renders the page with the typed rule's words and next
occurrences (the preview route), Save changes the rule through the update route (real API
resolver and database)."""

from __future__ import annotations

import json
import re

from tests.api.conftest import new_schedule
from tests.api.test_console import Browser

NEW_YORK_MARCH_SUNDAYS = {"cron": "30 2 * 3 0", "timezone": "America/New_York"}


def _browser(console_resolver):
    return Browser(console_resolver)


def test_the_page_says_the_rule_in_words_with_ten_occurrences(console, call, caller):  # noqa: F811
    schedule = call("POST", "/schedules", new_schedule()).body  # 02:30 New York, daily
    browser = _browser(console)
    browser.sign_in(caller)
    html = browser.request("GET", f"/console/schedules/{schedule['id']}")["body"]
    assert "At 02:30, every day, America/New_York" in html
    table = html.split("The next occurrences", 1)[1].split("</table>", 1)[0]
    assert table.count("<tr><td>") == 10
    assert "2027-03-02 02:30 EST" in table and "2027-03-02 07:30 UTC" in table


def test_preview_then_save_a_rule_without_javascript(console, call, caller):  # noqa: F811
    schedule = call("POST", "/schedules", new_schedule()).body
    browser = _browser(console)
    browser.sign_in(caller)
    path = f"/console/schedules/{schedule['id']}"
    token = browser.csrf(path)
    # When a rule across New York's spring-forward day is previewed
    text = json.dumps(NEW_YORK_MARCH_SUNDAYS)
    reply = browser.request("POST", f"{path}/rule", {"csrf": token, "recurrence": text, "intent": "preview"})
    # Then the page shows the typed rule, its words and its occurrences, 14 March shifted
    assert reply["statusCode"] == 200
    html = reply["body"]
    preview = html.split('id="preview-heading"', 1)[1]
    assert "At 02:30, only on Sunday, only in March, America/New_York" in preview
    assert re.search(r"2027-03-14 03:30 EDT</time> <small>\(intended 2027-03-14 02:30\)</small></td>\s*"
                     r"<td>2027-03-14 07:30 UTC</td>\s*<td><span class=\"mark\"[^>]*>DST shift</span>", preview)
    assert json.loads(re.search(r'<textarea[^>]*>([^<]*)</textarea>', html).group(1).replace("&#34;", '"')) == \
        NEW_YORK_MARCH_SUNDAYS
    # And nothing was saved
    assert call("GET", f"/schedules/{schedule['id']}").body["schedule"]["definition_version"] == 1
    # When it is saved, the schedule has the rule (version 2) and the page says so
    saved = browser.request("POST", f"{path}/rule", {"csrf": token, "recurrence": text, "intent": "save"})
    assert saved["statusCode"] == 303
    detail = call("GET", f"/schedules/{schedule['id']}").body
    assert detail["schedule"]["recurrence"] == NEW_YORK_MARCH_SUNDAYS
    assert detail["schedule"]["definition_version"] == 2
    assert "The schedule was updated." in browser.request("GET", f"{path}?done=update")["body"]


def test_an_invalid_rule_shows_the_field_and_keeps_the_text(console, call, caller):  # noqa: F811
    schedule = call("POST", "/schedules", new_schedule()).body
    browser = _browser(console)
    browser.sign_in(caller)
    path = f"/console/schedules/{schedule['id']}"
    token = browser.csrf(path)
    bad = json.dumps({"calendar": {"frequency": "monthly", "business_day": 24, "times": ["09:00"]},
                      "timezone": "Europe/Berlin"})
    for intent in ("preview", "save"):
        reply = browser.request("POST", f"{path}/rule", {"csrf": token, "recurrence": bad, "intent": intent})
        assert reply["statusCode"] == 422
        assert "recurrence.calendar.business_day: must be 1 to 23" in reply["body"]
        assert "business_day&#34;: 24" in reply["body"]
    not_json = browser.request("POST", f"{path}/rule", {"csrf": token, "recurrence": "{", "intent": "preview"})
    assert not_json["statusCode"] == 422 and "recurrence: is not valid JSON" in not_json["body"]
    assert browser.request("POST", f"{path}/rule", {"recurrence": "{}", "intent": "save"})["statusCode"] == 403
    assert call("GET", f"/schedules/{schedule['id']}").body["schedule"]["definition_version"] == 1


def test_a_reader_sees_no_editor(console, call, caller):  # noqa: F811
    schedule = call("POST", "/schedules", new_schedule()).body
    browser = _browser(console)
    browser.sign_in(caller, roles=("schedules:read",))
    html = browser.request("GET", f"/console/schedules/{schedule['id']}")["body"]
    assert "Edit rule" not in html and "At 02:30, every day" in html
