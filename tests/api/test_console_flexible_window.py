"""The console's rule editor and a flexible window: the structured form's field previews
("each run at some time within 30 minutes after its scheduled time", each occurrence with
the instant its run is given), saves, fills from the saved rule; the API's 422 lands on
the field with what was typed kept; the Advanced JSON editor takes ``window_minutes`` too;
the schedule's page shows each upcoming occurrence with the instant its run is given."""

from __future__ import annotations

import html as html_lib
import json
import re
from datetime import UTC, datetime

from tests.api.conftest import new_schedule
from tests.api.test_console_rule_form import _form, _preview_section, _saved, _value, browser, schedule  # noqa: F401
from tests.support import ListPublisher, dispatch_settings
from timekeeper.schedules.dispatcher import dispatch

FIELDS = {"frequency": "daily", "times": "00:00", "timezone": "Europe/Berlin", "window_minutes": "30"}


def test_the_window_field_previews_saves_and_fills_the_form(browser, call, schedule):  # noqa: F811
    path = f"/console/schedules/{schedule['id']}"
    token = browser.csrf(path)
    page = browser.request("GET", path)["body"]
    assert _value(page, "rf-window") == ""  # a rule without a window
    # Preview: the words say the window, and each occurrence shows the moment its run is due by
    reply = browser.request("POST", f"{path}/rule", _form(token, **FIELDS))
    assert reply["statusCode"] == 200, reply["body"][:500]
    preview = html_lib.unescape(_preview_section(reply["body"]))
    assert ("At 00:00 every day, Europe/Berlin, each run at some time within 30 minutes after its scheduled time"
            in preview)
    # the schedule's own editor: each occurrence with the instant the dispatcher would give it
    previewed = re.search(r'runs at <time datetime="([^"]+)"', _preview_section(reply["body"]))
    assert previewed is not None and "runs by" not in preview and _value(reply["body"], "rf-window") == "30"
    # Save: the API holds it; the page fills the form with it and shows each occurrence's given instant
    assert browser.request("POST", f"{path}/rule", _form(token, "save", **FIELDS))["statusCode"] == 303
    saved = _saved(call, schedule["id"])
    assert saved["schedule"]["recurrence"]["window_minutes"] == 30
    page = browser.request("GET", path)["body"]
    assert _value(page, "rf-window") == "30"
    given = saved["next_occurrences"][0]["due_at"]
    assert given is not None and re.search(rf'runs at <time datetime="{re.escape(given[:19])}', page)
    assert previewed.group(1)[:19] == given[:19]  # the preview showed the instant the saved schedule has


def test_a_window_the_api_refuses_is_shown_on_the_field_with_what_was_typed(browser, schedule):  # noqa: F811
    path = f"/console/schedules/{schedule['id']}"
    token = browser.csrf(path)
    reply = browser.request("POST", f"{path}/rule", _form(token, **{**FIELDS, "window_minutes": "300"}))
    assert reply["statusCode"] == 422
    assert re.search(r'id="rf-window"[^>]*aria-invalid="true" aria-describedby="rf-problem', reply["body"])
    assert "recurrence.window_minutes:" in html_lib.unescape(reply["body"])
    assert _value(reply["body"], "rf-window") == "300" and _value(reply["body"], "rf-times") == "00:00"


def test_the_json_editor_takes_a_window(browser, call, schedule):  # noqa: F811
    path = f"/console/schedules/{schedule['id']}"
    token = browser.csrf(path)
    rule = {"cron": "0 0 L * *", "timezone": "UTC", "window_minutes": 120}
    reply = browser.request("POST", f"{path}/rule", {"csrf": token, "recurrence": json.dumps(rule),
                                                     "intent": "save"})
    assert reply["statusCode"] == 303, reply["body"][:500]
    assert _saved(call, schedule["id"])["schedule"]["recurrence"]["window_minutes"] == 120
    assert "each run at some time within 120 minutes" in html_lib.unescape(browser.request("GET", path)["body"])


def test_a_windowed_run_shows_its_occurrence_and_the_instant_it_was_given(browser, call, conn):  # noqa: F811
    created = call("POST", "/schedules", new_schedule(recurrence={"cron": "0 0 * * *", "timezone": "Europe/Berlin",
                                                                  "window_minutes": 30})).body
    given = call("GET", f"/schedules/{created['id']}").body["next_occurrences"][0]["due_at"]
    # When the dispatcher passes at the occurrence (Berlin midnight, 23:00Z) and again after the window
    for now in (datetime(2027, 3, 1, 23, tzinfo=UTC), datetime(2027, 3, 1, 23, 31, tzinfo=UTC)):
        dispatch(conn, dispatch_settings(created["owner"]), now=now, publisher=ListPublisher())
    conn.commit()
    # Then the run keeps its occurrence and carries the given instant, in the history and on its page
    (run,) = call("GET", f"/schedules/{created['id']}").body["history"]["runs"]
    assert (run["occurrence_at"], run["due_at"]) == ("2027-03-01T23:00:00Z", given)
    assert call("GET", f"/runs/{run['id']}").body["due_at"] == given
    page = browser.request("GET", f"/console/runs/{run['id']}")["body"]
    assert "Given instant" in page and f'datetime="{given[:19]}' in page
    schedule_page = browser.request("GET", f"/console/schedules/{created['id']}")["body"]
    assert "given <time" in schedule_page
