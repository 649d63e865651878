"""A rule explains itself: its description in words and next occurrences with DST markers,
on a saved schedule (``GET /schedules/{id}``, the list) and for an unsaved rule
(``POST /rules/preview``), against the real database."""

from __future__ import annotations

import pytest

from tests.api.conftest import Caller, new_schedule

THIRD_BUSINESS_DAY = {"calendar": {"frequency": "monthly", "business_day": 3, "times": ["09:00"],
                                   "holidays": "DE-BE"}, "timezone": "Europe/Berlin"}
NEW_YORK_0230 = {"cron": "30 2 * * *", "timezone": "America/New_York"}
LONDON_FALL_BACK = {"calendar": {"frequency": "yearly", "month": 10, "nth_weekday": [-1, "SU"], "times": ["01:30"]},
                    "timezone": "Europe/London"}


def test_a_saved_schedule_says_its_rule_in_words_with_its_next_occurrences(call):
    # Given a schedule on the third business day of the month in Berlin (the API's clock: 2027-03-01 12:00Z)
    created = call("POST", "/schedules", new_schedule(recurrence=THIRD_BUSINESS_DAY))
    assert created.status == 201, created.body
    words = ("At 09:00 on the third business day of every month, Europe/Berlin, "
             "public holidays of Germany (Berlin)")
    assert created.body["description"] == words
    # When it is read with ten upcoming occurrences
    detail = call("GET", f"/schedules/{created.body['id']}?upcoming=10").body
    # Then the words come with them, and April's third business day skips Easter Monday (29 March is March's)
    assert detail["description"] == words
    upcoming = detail["next_occurrences"]
    assert len(upcoming) == 10
    assert [o["local_date"] for o in upcoming[:2]] == ["2027-03-03", "2027-04-05"]
    assert upcoming[0]["at"] == "2027-03-03T08:00:00Z" and upcoming[1]["at"] == "2027-04-05T07:00:00Z"
    assert all(o["local_time"] == "09:00" and not o["shifted"] and not o["repeated"] for o in upcoming)
    # And the list says the same words
    listed = call("GET", "/schedules").body["items"]
    assert [s["description"] for s in listed] == [words]


def test_the_detail_marks_a_gap_shifted_occurrence(call):
    created = call("POST", "/schedules", new_schedule(recurrence=NEW_YORK_0230)).body
    upcoming = call("GET", f"/schedules/{created['id']}?upcoming=20").body["next_occurrences"]
    gap_day = [o for o in upcoming if o["local_date"] == "2027-03-14"]
    assert gap_day == [{"at": "2027-03-14T07:30:00Z", "local": "2027-03-14T03:30:00-04:00", "local_date": "2027-03-14",
                        "local_time": "02:30", "timezone": "America/New_York", "shifted": True, "repeated": False,
                        "skipped": False, "window_end": None, "due_at": None}]
    assert call("GET", f"/schedules/{created['id']}").body["description"] == "At 02:30, every day, America/New_York"


def test_preview_of_an_unsaved_rule_shows_words_and_occurrences_with_dst_markers(call):
    # When a rule that runs in London's repeated hour is previewed
    reply = call("POST", "/rules/preview", {"recurrence": LONDON_FALL_BACK, "count": 2})
    # Then it is in words, and its occurrence on the fall-back day is marked repeated (first instant: 00:30Z)
    assert reply.status == 200, reply.body
    assert reply.body["description"] == "At 01:30 on the last Sunday of October every year, Europe/London"
    assert reply.body["timezone"] == "Europe/London"
    first = reply.body["next_occurrences"][0]
    assert first["at"] == "2027-10-31T00:30:00Z" and first["local"] == "2027-10-31T01:30:00+01:00"
    assert first["repeated"] is True and first["shifted"] is False
    assert reply.body["recurrence"]["calendar"]["interval"] == 1  # normalised
    # And a gap rule previews ten by default, the 14 March one shifted
    gap = call("POST", "/rules/preview", {"recurrence": NEW_YORK_0230}).body["next_occurrences"]
    assert len(gap) == 10
    assert [o["shifted"] for o in gap].count(False) == 10  # 2 .. 11 March
    later = call("POST", "/rules/preview", {"recurrence": {"cron": "30 2 14 3 *", "timezone": "America/New_York"},
                                            "count": 1}).body["next_occurrences"][0]
    assert later["shifted"] is True and later["at"] == "2027-03-14T07:30:00Z"


@pytest.mark.parametrize(("body", "field"), [
    ({"recurrence": {**THIRD_BUSINESS_DAY, "calendar": {**THIRD_BUSINESS_DAY["calendar"], "business_day": 24}}},
     "recurrence.calendar.business_day"),
    ({"recurrence": {**THIRD_BUSINESS_DAY, "calendar": {**THIRD_BUSINESS_DAY["calendar"], "holidays": "XX"}}},
     "recurrence.calendar.holidays"),
    ({"recurrence": {"cron": "30 2 * *", "timezone": "America/New_York"}}, "recurrence.cron"),
    ({"recurrence": {"cron": "30 2 * * *", "timezone": "Mars/Olympus"}}, "recurrence.timezone"),
    ({"recurrence": {**NEW_YORK_0230, "calendar": None}}, "recurrence.calendar"),
    ({"recurrence": {"calendar": {"frequency": "daily", "times": ["09:00"], "start_date": "2099-01-01"},
                     "timezone": "UTC"}}, "recurrence.calendar.start_date"),
    ({"recurrence": NEW_YORK_0230, "count": 0}, "count"),
    ({"recurrence": NEW_YORK_0230, "count": 51}, "count"),
    ({"recurrence": NEW_YORK_0230, "extra": 1}, "extra"),
    ({}, "recurrence"),
    ({"recurrence": {**NEW_YORK_0230, "dst": {"gap": "later"}}}, "recurrence.dst.gap"),
    ({"recurrence": {**NEW_YORK_0230, "dst": {"overlap": 2}}}, "recurrence.dst.overlap"),
    ({"recurrence": {**NEW_YORK_0230, "dst": {"fold": 1}}}, "recurrence.dst.fold"),
    ({"recurrence": {**NEW_YORK_0230, "dst": "skip"}}, "recurrence.dst"),
    ({"recurrence": {"interval": {"hours": 6}, "anchor": "2027-01-01T00:00:00Z", "dst": {"gap": "end"}}},
     "recurrence.dst"),
])
def test_preview_of_an_invalid_rule_is_a_422_naming_the_field(call, body, field):
    reply = call("POST", "/rules/preview", body)
    assert reply.status == 422, reply.body
    assert reply.body["field"] == field


def test_preview_takes_the_read_role(call):
    reply = call("POST", "/rules/preview", {"recurrence": NEW_YORK_0230}, as_=Caller(roles="queries:read"))
    assert reply.status == 403


def test_preview_shows_the_dst_choice_in_words_and_occurrences(call):
    # When 02:30 New York with gap "skip" and 01:30 with gap "end" and overlap "both" are previewed
    skip = call("POST", "/rules/preview", {"recurrence": {"cron": "30 2 14 3 *", "timezone": "America/New_York",
                                                          "dst": {"gap": "skip"}}, "count": 1}).body
    end = call("POST", "/rules/preview", {"recurrence": {**NEW_YORK_0230, "dst": {"gap": "end", "overlap": "both"}},
                                          "count": 20}).body
    # Then the words say what the rule does on the change days
    assert skip["description"] == ("At 02:30, on day 14 of the month, only in March, America/New_York; on DST gap "
                                   "days a time the clock skips does not run (recorded as skipped)")
    assert end["description"] == ("At 02:30, every day, America/New_York; on DST gap days at 03:00 (the gap's end); "
                                  "when the clock falls back, a repeated time runs at both instants")
    assert skip["recurrence"]["dst"] == {"gap": "skip", "overlap": "first"}  # normalised
    # And the occurrences: the skipped one marked, the gap's end at 03:00 EDT
    (skipped,) = skip["next_occurrences"]
    assert (skipped["at"], skipped["shifted"], skipped["skipped"]) == ("2027-03-14T07:30:00Z", True, True)
    gap_day = [o for o in end["next_occurrences"] if o["local_date"] == "2027-03-14"]
    assert [(o["at"], o["local"], o["shifted"], o["skipped"]) for o in gap_day] == [
        ("2027-03-14T07:00:00Z", "2027-03-14T03:00:00-04:00", True, False)]


def test_a_schedule_keeps_its_dst_choice_and_an_update_refuses_a_bad_one(call):
    # Given a schedule at 01:30 New York that runs both instants of the repeated hour
    rule = {"cron": "30 1 * * *", "timezone": "America/New_York", "dst": {"overlap": "both"}}
    created = call("POST", "/schedules", new_schedule(recurrence=rule))
    assert created.status == 201, created.body
    assert created.body["recurrence"]["dst"] == {"overlap": "both"}  # kept as written
    # And the same choice on 7 November alone previews both instants of the repeated 01:30
    both = call("POST", "/rules/preview", {"recurrence": {**rule, "cron": "30 1 7 11 *"}, "count": 2}).body
    assert [(o["at"], o["local_time"], o["repeated"]) for o in both["next_occurrences"]] == [
        ("2027-11-07T05:30:00Z", "01:30", True), ("2027-11-07T06:30:00Z", "01:30", True)]
    # And an update with an unknown choice is a 422 naming the field, the rule unchanged
    reply = call("PATCH", f"/schedules/{created.body['id']}",
                 {"recurrence": {**rule, "dst": {"overlap": "last"}}})
    assert reply.status == 422 and reply.body["field"] == "recurrence.dst.overlap", reply.body
    assert call("GET", f"/schedules/{created.body['id']}").body["schedule"]["recurrence"]["dst"] == {"overlap": "both"}
