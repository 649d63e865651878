"""The schedule page's structured rule editor without JavaScript (real API resolver and
database): each frequency's fields compose the rule the API takes, Preview shows its words
and next occurrences from the preview route, Save changes it through the update route
(checked through the API); a saved calendar rule fills the form, one the form cannot show
is said so; the API's 422 is shown naming its field; the CSRF check and escaping hold."""

from __future__ import annotations

import html as html_lib
import re
from typing import Any

import pytest

from tests.api.conftest import new_schedule
from tests.api.test_console import Browser
from timekeeper.console.display import offered_zones, zone_enum
from timekeeper.console.rule_form import compose, control_for, form_of, read_form
from timekeeper.schedules.zones import canonical_zones

BERLIN_WEEKLY = {"calendar": {"frequency": "weekly", "weekdays": ["MO", "WE"], "times": ["09:00", "18:00"]},
                 "timezone": "Europe/Berlin"}


@pytest.fixture
def browser(console, caller):
    person = Browser(console)
    person.sign_in(caller)
    return person


@pytest.fixture
def schedule(call) -> dict[str, Any]:
    return call("POST", "/schedules", new_schedule()).body  # cron 30 2 * * *, America/New_York


def _form(token: str, intent: str = "preview", **fields: str) -> dict[str, str]:
    return {"csrf": token, "editor": "form", "intent": intent, **fields}


def _preview_section(html: str) -> str:
    return html.split('id="preview-heading"', 1)[1].split("</section>", 1)[0]


def _selected(html: str, select_id: str) -> str:
    select = html.split(f'id="{select_id}"', 1)[1].split("</select>", 1)[0]
    match = re.search(r'<option(?: value="([^"]*)")? selected>([^<]*)</option>', select)
    return match.group(1) if match.group(1) is not None else match.group(2)


def _value(html: str, input_id: str) -> str:
    return html_lib.unescape(re.search(rf'id="{input_id}"[^>]*value="([^"]*)"', html).group(1))


def _saved(call, schedule_id: str) -> dict[str, Any]:
    return call("GET", f"/schedules/{schedule_id}").body


def test_a_daily_form_previews_then_saves_the_rule(browser, call, schedule):
    path = f"/console/schedules/{schedule['id']}"
    token = browser.csrf(path)
    fields = {"frequency": "daily", "times": "07:15, 19:45", "timezone": "Asia/Tokyo"}
    # Preview: the API's words and occurrences, the typed values kept, nothing saved
    reply = browser.request("POST", f"{path}/rule", _form(token, **fields))
    assert reply["statusCode"] == 200
    preview = _preview_section(reply["body"])
    assert "At 07:15 and 19:45 every day, Asia/Tokyo" in html_lib.unescape(preview)
    assert preview.count("<tr><td>") == 10 and "JST" in preview
    assert _value(reply["body"], "rf-times") == "07:15, 19:45"
    assert _selected(reply["body"], "rf-timezone") == "Asia/Tokyo"
    assert _saved(call, schedule["id"])["schedule"]["definition_version"] == 1
    # Save: the API holds the calendar rule the form composed
    saved = browser.request("POST", f"{path}/rule", _form(token, "save", **fields))
    assert saved["statusCode"] == 303
    detail = _saved(call, schedule["id"])
    assert detail["schedule"]["recurrence"] == {
        "calendar": {"frequency": "daily", "times": ["07:15", "19:45"]}, "timezone": "Asia/Tokyo"}
    assert detail["schedule"]["definition_version"] == 2
    assert "The schedule was updated." in browser.request("GET", f"{path}?done=update")["body"]


def test_weekly_on_chosen_weekdays(browser, call, schedule):
    path = f"/console/schedules/{schedule['id']}"
    token = browser.csrf(path)
    fields = {"frequency": "weekly", "weekday:TU": "on", "weekday:TH": "on", "times": "08:00",
              "timezone": "Europe/Berlin", "month_day": "12"}  # another frequency's field is ignored
    preview = _preview_section(browser.request("POST", f"{path}/rule", _form(token, **fields))["body"])
    assert "Tuesday and Thursday" in preview and "Europe/Berlin" in preview
    days = re.findall(r"<time datetime=\"[^\"]+\">(\d{4}-\d{2}-\d{2}) 08:00 CES?T</time>", preview)
    assert days[:4] == ["2027-03-02", "2027-03-04", "2027-03-09", "2027-03-11"] and len(days) == 10
    assert browser.request("POST", f"{path}/rule", _form(token, "save", **fields))["statusCode"] == 303
    assert _saved(call, schedule["id"])["schedule"]["recurrence"] == {
        "calendar": {"frequency": "weekly", "weekdays": ["TU", "TH"], "times": ["08:00"]},
        "timezone": "Europe/Berlin"}


def test_monthly_on_a_day_of_the_month_and_the_last(browser, call, schedule):
    path = f"/console/schedules/{schedule['id']}"
    token = browser.csrf(path)
    fields = {"frequency": "monthly_day", "month_day": "31", "times": "18:00", "timezone": "America/New_York"}
    preview = _preview_section(browser.request("POST", f"{path}/rule", _form(token, **fields))["body"])
    assert "2027-04-30 18:00 EDT" in preview  # 31 clamps to April's last day
    assert browser.request("POST", f"{path}/rule", _form(token, "save", **fields))["statusCode"] == 303
    assert _saved(call, schedule["id"])["schedule"]["recurrence"]["calendar"] == {
        "frequency": "monthly", "month_day": 31, "times": ["18:00"]}
    last = {**fields, "month_day": "last"}
    assert browser.request("POST", f"{path}/rule", _form(token, "save", **last))["statusCode"] == 303
    assert _saved(call, schedule["id"])["schedule"]["recurrence"]["calendar"]["month_day"] == "last"


def test_monthly_on_the_nth_weekday(browser, call, schedule):
    path = f"/console/schedules/{schedule['id']}"
    token = browser.csrf(path)
    fields = {"frequency": "monthly_nth", "nth": "2", "nth_day": "SU", "times": "02:30",
              "timezone": "America/New_York"}
    # The second Sunday of March 2027 is New York's spring-forward day: shifted, marked
    preview = _preview_section(browser.request("POST", f"{path}/rule", _form(token, **fields))["body"])
    assert "second Sunday" in preview
    assert re.search(r"2027-03-14 03:30 EDT</time> <small>\(intended 2027-03-14 02:30\)</small></td>\s*"
                     r"<td>2027-03-14 07:30 UTC</td>\s*<td><span class=\"mark\"[^>]*>DST shift</span>", preview)
    assert browser.request("POST", f"{path}/rule", _form(token, "save", **fields))["statusCode"] == 303
    assert _saved(call, schedule["id"])["schedule"]["recurrence"] == {
        "calendar": {"frequency": "monthly", "nth_weekday": [2, "SU"], "times": ["02:30"]},
        "timezone": "America/New_York"}
    last = {**fields, "nth": "-1", "nth_day": "FR"}
    assert browser.request("POST", f"{path}/rule", _form(token, "save", **last))["statusCode"] == 303
    assert _saved(call, schedule["id"])["schedule"]["recurrence"]["calendar"]["nth_weekday"] == [-1, "FR"]


def test_monthly_on_the_nth_business_day_with_holidays(browser, call, schedule):
    path = f"/console/schedules/{schedule['id']}"
    token = browser.csrf(path)
    fields = {"frequency": "monthly_business", "business_day": "3", "holidays": "DE-BE", "times": "09:00",
              "timezone": "Europe/Berlin"}
    preview = _preview_section(browser.request("POST", f"{path}/rule", _form(token, **fields))["body"])
    assert "third business day" in preview and "Germany (Berlin)" in preview
    assert browser.request("POST", f"{path}/rule", _form(token, "save", **fields))["statusCode"] == 303
    assert _saved(call, schedule["id"])["schedule"]["recurrence"]["calendar"] == {
        "frequency": "monthly", "business_day": 3, "holidays": "DE-BE", "times": ["09:00"]}


def test_every_n_minutes_or_hours_from_a_local_start(browser, call, schedule):
    path = f"/console/schedules/{schedule['id']}"
    token = browser.csrf(path)
    fields = {"frequency": "interval", "interval_amount": "90", "interval_unit": "minutes",
              "start": "2027-03-01T08:00", "timezone": "Europe/Berlin", "times": "not read"}
    preview = _preview_section(browser.request("POST", f"{path}/rule", _form(token, **fields))["body"])
    assert "Every 90 minutes from 2027-03-01 07:00 UTC" in preview
    assert "2027-03-01 14:00 CET" in preview  # 08:00 + 4 x 90 min, the first after the API's clock (12:00 UTC)
    assert browser.request("POST", f"{path}/rule", _form(token, "save", **fields))["statusCode"] == 303
    assert _saved(call, schedule["id"])["schedule"]["recurrence"] == {
        "interval": {"minutes": 90}, "anchor": "2027-03-01T07:00:00Z", "timezone": "Europe/Berlin"}
    # Hours, and the saved interval fills the form back with its local start
    hours = {**fields, "interval_amount": "6", "interval_unit": "hours"}
    assert browser.request("POST", f"{path}/rule", _form(token, "save", **hours))["statusCode"] == 303
    assert _saved(call, schedule["id"])["schedule"]["recurrence"]["interval"] == {"hours": 6}
    page = browser.request("GET", path)["body"]
    assert _selected(page, "rf-frequency") == "interval" and _selected(page, "rf-interval-unit") == "hours"
    assert _value(page, "rf-interval-amount") == "6" and _value(page, "rf-start") == "2027-03-01T08:00"


def test_a_saved_calendar_rule_fills_the_form(browser, call):
    created = call("POST", "/schedules", new_schedule(recurrence=BERLIN_WEEKLY)).body
    page = browser.request("GET", f"/console/schedules/{created['id']}")["body"]
    assert _selected(page, "rf-frequency") == "weekly"
    checked = re.findall(r'id="rf-weekday-(\w\w)" name="weekday:\w\w" value="on" checked', page)
    assert checked == ["MO", "WE"]
    assert _value(page, "rf-times") == "09:00, 18:00"
    assert _selected(page, "rf-timezone") == "Europe/Berlin"
    assert "The form cannot show" not in page
    assert '<details class="advanced" id="json-rule">' in page  # the JSON editor stays folded
    # A monthly Nth weekday and a business-day rule fill their own fields
    nth = {"calendar": {"frequency": "monthly", "nth_weekday": [-1, "FR"], "times": ["17:30"]},
           "timezone": "Asia/Kolkata"}
    call("PATCH", f"/schedules/{created['id']}", {"recurrence": nth})
    page = browser.request("GET", f"/console/schedules/{created['id']}")["body"]
    assert (_selected(page, "rf-frequency"), _selected(page, "rf-nth"), _selected(page, "rf-nth-day"),
            _selected(page, "rf-timezone")) == ("monthly_nth", "-1", "FR", "Asia/Kolkata")


def test_a_rule_the_form_cannot_show_is_said_so_and_the_form_starts_at_a_default(browser, schedule):
    page = browser.request("GET", f"/console/schedules/{schedule['id']}")["body"]  # a cron rule
    assert "The form cannot show this schedule's rule (a cron rule)" in page
    assert _selected(page, "rf-frequency") == "daily" and _value(page, "rf-times") == "09:00"
    assert _selected(page, "rf-timezone") == "America/New_York"  # the schedule's zone
    assert '<details class="advanced" id="json-rule" open>' in page
    assert "Advanced (JSON: cron, rrule, ...)" in page


def test_the_api_s_422_is_shown_naming_its_field_and_the_typed_values_stay(browser, call, schedule):
    path = f"/console/schedules/{schedule['id']}"
    token = browser.csrf(path)
    cases = [
        ({"frequency": "monthly_business", "business_day": "24", "times": "09:00", "timezone": "Europe/Berlin"},
         "recurrence.calendar.business_day: must be 1 to 23", "rf-business-day"),
        ({"frequency": "daily", "times": "09:00, 25:00", "timezone": "Europe/Berlin"},
         "recurrence.calendar.times[1]: must be a 24-hour time", "rf-times"),
        ({"frequency": "weekly", "times": "09:00", "timezone": "Europe/Berlin"},
         "recurrence.calendar.weekdays:", "rf-weekday-MO"),
        ({"frequency": "daily", "times": "09:00", "timezone": "Mars/Olympus"},
         "recurrence.timezone:", "rf-timezone"),
        ({"frequency": "interval", "interval_amount": "ten", "interval_unit": "minutes",
          "start": "2027-03-01T08:00", "timezone": "UTC"}, "recurrence.interval.minutes:", "rf-interval-amount"),
        ({"frequency": "interval", "interval_amount": "10", "interval_unit": "minutes", "start": "",
          "timezone": "UTC"}, "recurrence.anchor:", "rf-start"),
    ]
    for fields, reason, control in cases:
        for intent in ("preview", "save"):
            reply = browser.request("POST", f"{path}/rule", _form(token, intent, **fields))
            assert reply["statusCode"] == 422, (fields, reply["body"][:300])
            alert = re.search(r'<p class="problem" id="rf-problem" role="alert">([^<]*)</p>', reply["body"])
            assert alert and html_lib.unescape(alert.group(1)).startswith(reason), (fields, alert)
            assert re.search(rf'id="{control}"[^>]*aria-invalid="true" aria-describedby="rf-problem', reply["body"])
            assert 'id="preview-heading"' not in reply["body"]
    # The typed values are kept, the JSON editor shows the saved rule, nothing was saved
    reply = browser.request("POST", f"{path}/rule", _form(token, **cases[1][0]))
    assert _value(reply["body"], "rf-times") == "09:00, 25:00"
    assert 'id="rule-problem"' not in reply["body"] and "30 2 * * *" in reply["body"]
    assert _saved(call, schedule["id"])["schedule"]["definition_version"] == 1


def test_a_forged_frequency_is_refused_and_the_csrf_token_is_checked(browser, call, schedule):
    path = f"/console/schedules/{schedule['id']}"
    token = browser.csrf(path)
    reply = browser.request("POST", f"{path}/rule", _form(token, frequency="yearly", times="09:00", timezone="UTC"))
    assert reply["statusCode"] == 422 and "frequency: choose how often" in reply["body"]
    daily = {"frequency": "daily", "times": "09:00", "timezone": "UTC"}
    for forged in ({}, {"csrf": "forged"}):
        fields = {**_form(token, "save", **daily), **forged}
        if not forged:
            del fields["csrf"]
        assert browser.request("POST", f"{path}/rule", fields)["statusCode"] == 403
    other = Browser(browser.console)
    other.cookie = None
    assert other.request("POST", f"{path}/rule", _form(token, "save", **daily))["statusCode"] == 303  # to sign in
    assert _saved(call, schedule["id"])["schedule"]["definition_version"] == 1


def test_a_schedule_named_script_is_still_escaped(browser, call):
    created = call("POST", "/schedules", new_schedule(name='<script>alert("x")</script>',
                                                      recurrence=BERLIN_WEEKLY)).body
    path = f"/console/schedules/{created['id']}"
    token = browser.csrf(path)
    for reply in (browser.request("GET", path),
                  browser.request("POST", f"{path}/rule", _form(token, frequency="daily", times="09:00",
                                                                timezone="Europe/Berlin")),
                  browser.request("POST", f"{path}/rule", _form(token, frequency="daily", times="<b>9</b>",
                                                                timezone="Europe/Berlin"))):
        assert "<script>alert" not in reply["body"] and "<b>9" not in reply["body"]
        assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;" in reply["body"]


def test_a_reader_is_offered_no_form(console, call, caller, schedule):
    reader = Browser(console)
    reader.sign_in(caller, roles=("schedules:read",))
    page = reader.request("GET", f"/console/schedules/{schedule['id']}")["body"]
    assert 'id="rule-form"' not in page and "Advanced (JSON" not in page


def test_the_zone_choices_are_the_zones_the_api_accepts(browser, call, schedule):
    page = browser.request("GET", f"/console/schedules/{schedule['id']}")["body"]
    select = page.split('id="rf-timezone"', 1)[1].split("</select>", 1)[0]
    offered = re.findall(r"<option(?: selected)?>([^<]*)</option>", select)
    # the API's zones less their aliases (the places' own names; the rule's own zone is offered too)
    api_zones = zone_enum(call("GET", "/openapi.json", claims=None).body)
    assert api_zones == sorted(canonical_zones())
    assert offered == sorted({*offered_zones(api_zones), schedule["recurrence"]["timezone"]})
    assert set(offered) <= canonical_zones() and "Asia/Calcutta" not in offered and "Asia/Kolkata" in offered
    assert zone_enum({}) == [] and zone_enum(None) == []


def test_composing_and_filling_agree_for_every_form_the_form_offers():
    cases = [
        {"calendar": {"frequency": "daily", "times": ["09:00"]}, "timezone": "UTC"},
        BERLIN_WEEKLY,
        {"calendar": {"frequency": "monthly", "month_day": "last", "times": ["18:00"]}, "timezone": "Asia/Kolkata"},
        {"calendar": {"frequency": "monthly", "nth_weekday": [3, "TU"], "times": ["06:00"]}, "timezone": "UTC"},
        {"calendar": {"frequency": "monthly", "business_day": -1, "times": ["17:00"]}, "timezone": "Europe/Berlin"},
        {"interval": {"hours": 6}, "anchor": "2027-01-01T00:00:00Z", "timezone": "America/New_York"},
        {"calendar": {"frequency": "daily", "times": ["02:30"]}, "timezone": "America/New_York",
         "dst": {"gap": "end", "overlap": "second"}},
        {"calendar": {"frequency": "daily", "times": ["02:30"]}, "timezone": "UTC", "dst": {"gap": "skip"}},
    ]
    for rule in cases:
        form = form_of(rule, "UTC")
        assert form.unsupported is None, rule
        assert compose(form) == rule
    for rule, why in [({"cron": "0 9 * * *", "timezone": "UTC"}, "a cron rule"),
                      ({"rrule": "FREQ=DAILY", "timezone": "UTC", "start": "2027-01-01"}, "an RRULE"),
                      ({"calendar": {"frequency": "yearly", "month": 1, "month_day": 1, "times": ["09:00"]},
                        "timezone": "UTC"}, "a yearly rule"),
                      ({"calendar": {"frequency": "daily", "interval": 2, "times": ["09:00"]}, "timezone": "UTC"},
                       "every 2 days"),
                      ({"calendar": {"frequency": "monthly", "business_day": 1, "weekdays": ["MO", "TU"],
                                     "times": ["09:00"]}, "timezone": "UTC"}, "its own business week")]:
        form = form_of(rule, "UTC")
        assert why in (form.unsupported or ""), rule
        assert (form.frequency, form.times, form.timezone) == ("daily", "09:00", "UTC")
    assert read_form({"weekday:SU": "on", "weekday:MO": "on", "times": " 09:00 "}).weekdays == ("MO", "SU")
    assert control_for("recurrence.calendar.times[0]") == "rf-times" and control_for("recurrence.cron") is None


def test_the_dst_choice_previews_saves_and_fills_the_form(browser, call, schedule):
    path = f"/console/schedules/{schedule['id']}"
    token = browser.csrf(path)
    fields = {"frequency": "daily", "times": "02:30", "timezone": "America/New_York", "dst_gap": "skip",
              "dst_overlap": "both"}
    # The form offers both choices, the defaults selected for a rule without one
    page = browser.request("GET", path)["body"]
    assert (_selected(page, "rf-dst-gap"), _selected(page, "rf-dst-overlap")) == ("shift", "first")
    # Preview: the words say the choice, and the choices stay as chosen
    reply = browser.request("POST", f"{path}/rule", _form(token, **fields))
    assert reply["statusCode"] == 200
    words = html_lib.unescape(_preview_section(reply["body"]))
    assert ("At 02:30 every day, America/New_York; on DST gap days a time the clock skips does not run "
            "(recorded as skipped); when the clock falls back, a repeated time runs at both instants") in words
    assert (_selected(reply["body"], "rf-dst-gap"), _selected(reply["body"], "rf-dst-overlap")) == ("skip", "both")
    # Save: the API holds the choice; the page fills the form with it
    assert browser.request("POST", f"{path}/rule", _form(token, "save", **fields))["statusCode"] == 303
    assert _saved(call, schedule["id"])["schedule"]["recurrence"]["dst"] == {"gap": "skip", "overlap": "both"}
    page = browser.request("GET", path)["body"]
    assert (_selected(page, "rf-dst-gap"), _selected(page, "rf-dst-overlap")) == ("skip", "both")
    # A choice the form does not offer is the API's 422 on its control, the rest kept
    forged = browser.request("POST", f"{path}/rule", _form(token, **{**fields, "dst_gap": "later"}))
    assert forged["statusCode"] == 422
    assert re.search(r'id="rf-dst-gap"[^>]*aria-invalid="true" aria-describedby="rf-problem', forged["body"])
    assert "recurrence.dst.gap:" in html_lib.unescape(forged["body"])
    assert _value(forged["body"], "rf-times") == "02:30"


def test_a_skipped_gap_time_shows_in_the_schedule_s_runs_with_its_reason(browser, call, conn, schedule):
    from datetime import UTC, datetime

    from tests.support import ListPublisher, dispatch_settings
    from timekeeper.schedules.dispatcher import dispatch

    # Given 02:30 New York that skips a time the clock skips, and the dispatcher after 14 March's
    call("PATCH", f"/schedules/{schedule['id']}", {"recurrence": {"cron": "30 2 * * *", "timezone": "America/New_York",
                                                                  "dst": {"gap": "skip"}}})
    conn.execute("UPDATE schedules SET next_due_at = %s WHERE id = %s",
                 (datetime(2027, 3, 14, 7, 30, tzinfo=UTC), schedule["id"]))
    dispatch(conn, dispatch_settings("accounting"), now=datetime(2027, 3, 14, 7, 31, tzinfo=UTC),
             publisher=ListPublisher())
    # Then the schedule's page lists the run as skipped, its reason in words with the code kept
    page = browser.request("GET", f"/console/schedules/{schedule['id']}")["body"]
    assert ('title="skipped_dst_gap" data-code="skipped_dst_gap">Skipped: the clock skipped this time '
            "(daylight saving), as the schedule&#39;s rule chooses</span>") in page
