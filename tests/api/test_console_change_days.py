"""The console's rule editor previews the zone's DST change days: what the chosen DST
choice makes of each (a skipped gap time, both instants of a repeated one), and a windowed
rule's occurrences there with the instant each run is given."""

from __future__ import annotations

import html as html_lib
import re

from tests.api.test_console_rule_form import _form, _preview_section, browser, schedule  # noqa: F401


def test_the_rule_editor_preview_lists_the_change_days_and_the_given_instants(browser, schedule):  # noqa: F811
    path = f"/console/schedules/{schedule['id']}"
    token = browser.csrf(path)
    fields = {"frequency": "daily", "times": "02:30, 01:30", "timezone": "America/New_York",
              "dst_gap": "skip", "dst_overlap": "both", "window_minutes": "20"}
    reply = browser.request("POST", f"{path}/rule", _form(token, **fields))
    assert reply["statusCode"] == 200, reply["body"][:500]
    section = _preview_section(reply["body"])
    text = html_lib.unescape(re.sub(r"<[^>]+>", " ", section))
    # The spring day: 02:30 skipped with its reason; the fall day: 01:30 at both instants
    assert "2027-03-14: the clock springs forward from 02:00 to 03:00" in text
    assert "02:30 is skipped (the time does not exist that day; recorded as a skipped run)" in text
    assert "2027-11-07: the clock falls back, 01:00 to 02:00 happens twice" in text
    assert "01:30 runs at both instants (05:30 UTC, 06:30 UTC)" in text
    # Each change day's occurrences are listed with the instant its run is given in the window
    days = section.split('id="change-days-heading"', 1)[1]
    assert "The previewed rule on 2027-03-14" in days and "The previewed rule on 2027-11-07" in days
    assert "DST skip" in days and days.count("repeated hour") == 2
    given = re.findall(r'runs at <time datetime="2027-11-07T0([56]):', days)
    assert given == ["5", "6"]


def test_the_schedule_page_lists_its_change_days(browser, call, schedule):  # noqa: F811
    rule = {"cron": "30 1 * * *", "timezone": "America/New_York", "dst": {"overlap": "second"}}
    assert call("PATCH", f"/schedules/{schedule['id']}", {"recurrence": rule}).status == 200
    page = browser.request("GET", f"/console/schedules/{schedule['id']}")["body"]
    saved = page.split('id="saved-change-days-heading"', 1)[1].split("</ul>", 1)[0]
    text = html_lib.unescape(re.sub(r"<[^>]+>", " ", saved))
    assert "2027-11-07: the clock falls back" in text and "01:30 runs once, at its second instant (06:30 UTC)" in text
    assert "2027-03-14: the clock springs forward" in text and "does not affect it" in text
    assert "The schedule on 2027-11-07" in saved
