"""A rule's flexible window through the API: validated (1-240, refused on an interval rule;
422 naming the field), said in words, previewed with each occurrence's
window, and a saved schedule's upcoming occurrences carry the instant each run is given."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest

from tests.api.conftest import new_schedule
from timekeeper.schedules.recurrence import given_instant

MIDNIGHT_BERLIN = {"cron": "0 0 * * *", "timezone": "Europe/Berlin", "window_minutes": 30}


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@pytest.mark.parametrize(("window", "field"), [
    (0, "recurrence.window_minutes"), (241, "recurrence.window_minutes"), ("thirty", "recurrence.window_minutes"),
    (1.5, "recurrence.window_minutes"), (True, "recurrence.window_minutes"),
])
def test_a_window_outside_1_to_240_minutes_is_a_422_naming_the_field(call, window, field):
    reply = call("POST", "/rules/preview", {"recurrence": {**MIDNIGHT_BERLIN, "window_minutes": window}})
    assert reply.status == 422, reply.body
    assert reply.body["field"] == field


def test_an_interval_rule_is_refused_a_window(call):
    rule = {"interval": {"hours": 6}, "anchor": "2027-01-01T00:00:00Z", "window_minutes": 30}
    reply = call("POST", "/schedules", new_schedule(recurrence=rule))
    assert reply.status == 422 and reply.body["field"] == "recurrence.window_minutes", reply.body
    assert "interval" in reply.body["message"]


def test_the_preview_says_the_window_and_shows_each_occurrences_window(call):
    reply = call("POST", "/rules/preview", {"recurrence": MIDNIGHT_BERLIN, "count": 3})
    assert reply.status == 200, reply.body
    assert reply.body["description"] == ("At 00:00, every day, Europe/Berlin, each run at some time within 30 minutes "
                                         "after its scheduled time")
    assert reply.body["recurrence"]["window_minutes"] == 30
    for occurrence in reply.body["next_occurrences"]:
        assert _at(occurrence["window_end"]) - _at(occurrence["at"]) == timedelta(minutes=30)
        assert occurrence["due_at"] is None  # an unsaved rule has no schedule to give an instant
    plain = call("POST", "/rules/preview", {"recurrence": {"cron": "0 0 * * *", "timezone": "Europe/Berlin"},
                                            "count": 1}).body["next_occurrences"][0]
    assert plain["window_end"] is None and plain["due_at"] is None


def test_a_saved_schedule_shows_each_occurrence_and_the_instant_it_is_given(call):
    created = call("POST", "/schedules", new_schedule(recurrence=MIDNIGHT_BERLIN))
    assert created.status == 201, created.body
    schedule_id = uuid.UUID(created.body["id"])
    detail = call("GET", f"/schedules/{schedule_id}").body
    assert detail["description"].endswith(", each run at some time within 30 minutes after its scheduled time")
    upcoming = detail["next_occurrences"]
    assert len(upcoming) >= 2
    for index, occurrence in enumerate(upcoming):
        at = _at(occurrence["at"])
        following = _at(upcoming[index + 1]["at"]) if index + 1 < len(upcoming) else at + timedelta(days=1)
        expected = given_instant(schedule_id, at, timedelta(minutes=30), following)
        assert _at(occurrence["due_at"]) == expected and at <= expected < at + timedelta(minutes=30)
    # And the window's instants differ from one schedule to the next (spread), while the occurrences agree
    other = call("POST", "/schedules", new_schedule(recurrence=MIDNIGHT_BERLIN)).body
    theirs = call("GET", f"/schedules/{other['id']}").body["next_occurrences"]
    assert [o["at"] for o in theirs] == [o["at"] for o in upcoming]
    assert [o["due_at"] for o in theirs] != [o["due_at"] for o in upcoming]
