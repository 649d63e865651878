"""An RRULE rule through the schedule routes: saved, its next occurrences listed, a refused part a 422 naming it."""

from __future__ import annotations

from tests.api.conftest import new_schedule

LAST_BUSINESS_DAY = {"rrule": "FREQ=MONTHLY;BYDAY=MO,TU,WE,TH,FR;BYSETPOS=-1;BYHOUR=18;BYMINUTE=0",
                     "timezone": "Europe/Berlin", "start": "2027-01-01"}


def test_an_rrule_schedule_is_saved_and_lists_its_next_occurrences(call):
    created = call("POST", "/schedules", new_schedule(recurrence=LAST_BUSINESS_DAY))
    assert created.status == 201, created.body
    detail = call("GET", f"/schedules/{created.body['id']}").body
    upcoming = detail["next_occurrences"]
    assert len(upcoming) == 5
    for occurrence in upcoming:
        assert occurrence["local"][11:16] == "18:00" and occurrence["timezone"] == "Europe/Berlin"


def test_a_refused_rrule_part_is_a_422_naming_it(call):
    for rrule, field in (("FREQ=DAILY;BYSECOND=5", "recurrence.rrule.BYSECOND"),
                         ("FREQ=SECONDLY", "recurrence.rrule.FREQ")):
        reply = call("POST", "/schedules", new_schedule(recurrence={**LAST_BUSINESS_DAY, "rrule": rrule}))
        assert reply.status == 422, reply.body
        assert reply.body["code"] == "invalid_recurrence" and reply.body["field"] == field
    reply = call("POST", "/schedules", new_schedule(recurrence={k: v for k, v in LAST_BUSINESS_DAY.items()
                                                                  if k != "start"}))
    assert reply.status == 422 and reply.body["field"] == "recurrence.start"
