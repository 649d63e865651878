"""The schedule page says which failures its owner is told of, and a writer changes it
there (``PATCH /schedules/{id}`` with ``notify_on``)."""

from __future__ import annotations

from tests.api.conftest import new_schedule
from tests.api.test_console import Browser, _header


def test_the_schedule_page_shows_and_changes_which_failures_the_owner_hears_of(console, call, caller):
    # Given a schedule with the default choice, and its writer signed in
    schedule = call("POST", "/schedules", new_schedule()).body
    browser = Browser(console)
    browser.sign_in(caller)
    path = f"/console/schedules/{schedule['id']}"
    # Then its page says so in words, with the other choices offered
    html = browser.request("GET", path)["body"]
    assert "Failure notices" in html and "The first failure of a streak, and the pause" in html
    assert 'value="every_failure"' in html and 'value="pause_only"' in html
    # When the writer chooses to hear of the pause only
    response = browser.request("POST", f"{path}/notices", {"csrf": browser.csrf(path), "notify_on": "pause_only"})
    # Then the schedule keeps it and the page says it was updated
    assert response["statusCode"] == 303
    assert call("GET", f"/schedules/{schedule['id']}").body["schedule"]["notify_on"] == "pause_only"
    page = browser.request("GET", _header(response, "Location"))["body"]
    assert "The schedule was updated." in page and "Only the pause" in page


def test_an_unknown_choice_is_refused_with_words_and_changes_nothing(console, call, caller):
    schedule = call("POST", "/schedules", new_schedule()).body
    browser = Browser(console)
    browser.sign_in(caller)
    path = f"/console/schedules/{schedule['id']}"
    response = browser.request("POST", f"{path}/notices", {"csrf": browser.csrf(path), "notify_on": "never"})
    assert response["statusCode"] == 422 and "no such choice" in response["body"].lower()
    assert call("GET", f"/schedules/{schedule['id']}").body["schedule"]["notify_on"] == "first_failure"
