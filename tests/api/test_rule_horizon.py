"""Rules that would never run are refused by the routes: no occurrence within ten years
of now is a 422 naming the field on create and PATCH and the documented 409 on resume; a
calendar interval too large to evaluate is a 422 naming the field, never a 500."""

from __future__ import annotations

import pytest

from tests.api.conftest import new_schedule
from timekeeper.db.connection import connect

NEVER_IN_TEN_YEARS = [
    ({"calendar": {"frequency": "yearly", "interval": 10_000, "month": 1, "month_day": 1, "times": ["09:00"]},
      "timezone": "UTC"}, "recurrence.calendar.interval"),
    ({"calendar": {"frequency": "daily", "interval": 10_000_000, "times": ["09:00"]}, "timezone": "UTC"},
     "recurrence.calendar.interval"),
    ({"calendar": {"frequency": "daily", "start_date": "9999-12-31", "times": ["09:00"]}, "timezone": "UTC"},
     "recurrence.calendar.start_date"),
    ({"calendar": {"frequency": "weekly", "interval": 1_000_000_000, "times": ["09:00"]}, "timezone": "UTC"},
     "recurrence.calendar.interval"),
    ({"calendar": {"frequency": "yearly", "interval": 1_000_000_000, "month": 1, "month_day": 1,
                   "times": ["09:00"]}, "timezone": "UTC"}, "recurrence.calendar.interval"),
]


@pytest.mark.parametrize(("recurrence", "field"), NEVER_IN_TEN_YEARS)
def test_create_of_a_rule_that_never_runs_is_422_naming_the_field(call, recurrence, field):
    for active in (True, False):
        reply = call("POST", "/schedules", new_schedule(recurrence=recurrence, active=active))
        assert reply.status == 422, reply.body
        assert reply.body["code"] == "invalid_recurrence" and reply.body["field"] == field
    assert call("GET", "/schedules").body["items"] == []


@pytest.mark.parametrize(("recurrence", "field"), NEVER_IN_TEN_YEARS)
def test_patch_to_a_rule_that_never_runs_is_422_and_changes_nothing(call, recurrence, field):
    schedule = call("POST", "/schedules", new_schedule()).body
    reply = call("PATCH", f"/schedules/{schedule['id']}", {"recurrence": recurrence})
    assert reply.status == 422, reply.body
    assert reply.body["code"] == "invalid_recurrence" and reply.body["field"] == field
    assert call("GET", f"/schedules/{schedule['id']}").body["schedule"] == schedule


def test_resume_of_a_saved_rule_that_never_runs_is_409(call, db_url):
    # Given a paused schedule whose saved rule starts in the year 9999
    schedule = call("POST", "/schedules", new_schedule(active=False)).body
    with connect(db_url) as owner:
        owner.execute("""UPDATE schedules SET recurrence = '{"calendar": {"frequency": "daily",
                         "start_date": "9999-12-31", "times": ["09:00"]}, "timezone": "UTC"}' WHERE id = %s""",
                      (schedule["id"],))
    # When it is resumed
    reply = call("POST", f"/schedules/{schedule['id']}/resume")
    # Then the documented conflict, and it stays paused
    assert reply.status == 409
    assert reply.body["code"] == "definition_invalid" and reply.body["field"] == "recurrence"
    assert "10 years" in reply.body["message"]
    assert call("GET", f"/schedules/{schedule['id']}").body["schedule"]["status"] == "paused"
