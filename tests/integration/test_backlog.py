"""Misfire backlogs and staleness in the real claim, against the real database.

A claim collapses a backlog to one run for the latest due occurrence and a count of the
skipped ones, whatever the backlog's length; a delivery is stale when its latest due
occurrence is older than min(the kind's staleness, half the real gap to the next
occurrence, 12 hours).
"""

from __future__ import annotations

import uuid
from datetime import timedelta
from itertools import takewhile

import pytest

from tests.support import ListPublisher, dispatch_settings
from timekeeper.schedules import service
from timekeeper.schedules.dispatcher import dispatch
from timekeeper.schedules.recurrence import COUNT_HORIZON, parse_rule
from timekeeper.schedules.work import Succeeded, WorkKindRegistry

OWNER = "accounting"
ZONES = ["America/New_York", "Europe/London", "Australia/Lord_Howe", "America/Santiago", "Pacific/Chatham",
         "Asia/Kolkata"]


@pytest.fixture
def fresh(conn):
    """An empty schedules world for each test."""
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications CASCADE")
    return conn


def make(conn, now, rule, kind="batch.roll"):
    return service.create_schedule(conn, workspace_id=uuid.uuid4(), owner=OWNER, work_kind=kind,
                                   recurrence=rule, actor="tester", now=now)


def run_of(conn, schedule_id):
    return conn.execute("SELECT * FROM schedule_runs WHERE schedule_id = %s", (schedule_id,)).fetchone()


def backlog_event(conn, schedule_id):
    return conn.execute("SELECT detail FROM schedule_events WHERE schedule_id = %s AND kind = 'backlog_skipped'",
                        (schedule_id,)).fetchone()["detail"]


def test_a_year_behind_every_minute_schedules_in_dst_zones_get_exact_counts(fresh, utc):
    # Given every-minute schedules in zones with 60-, 30- and 45-minute-offset changes,
    # created at 2026-01-01 00:00:30 (first due 00:01) and never dispatched since
    schedules = [make(fresh, utc(2026, 1, 1, 0, 0, 30), {"cron": "* * * * *", "timezone": zone}) for zone in ZONES]
    # When the dispatcher comes back a year later
    report = dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 1, 0, 0, 30), publisher=ListPublisher())
    # Then each gets one run for 00:00 with every other real minute of the year skipped
    # (gap minutes coincide with their shifted twins; the repeated hour runs twice)
    skipped = (utc(2027, 1, 1) - utc(2026, 1, 1, 0, 1)) // timedelta(minutes=1)
    assert report.runs_created == len(ZONES) and report.backlog_skipped == skipped * len(ZONES)
    for schedule in schedules:
        run = run_of(fresh, schedule.id)
        assert run["occurrence_at"] == utc(2027, 1, 1)
        assert (run["skipped_backlog"], run["first_skipped_at"]) == (skipped, utc(2026, 1, 1, 0, 1))
        detail = backlog_event(fresh, schedule.id)
        assert detail["count"] == skipped and "count_is_lower_bound" not in detail


@pytest.mark.parametrize(("rule", "zone"), [
    ({"cron": "30 2 * * *"}, "America/New_York"),      # the spring day's 02:30 runs at 03:30
    ({"cron": "30 1 * * *"}, "Europe/London"),         # the autumn day's 01:30 runs once
    ({"cron": "0 * * * *"}, "Australia/Lord_Howe"),    # hourly wall time across 30-minute changes
    ({"calendar": {"frequency": "monthly", "month_day": "last", "times": ["00:30"]}}, "America/Santiago"),
])
def test_three_years_behind_wall_time_rules_count_what_the_iterator_yields(fresh, utc, rule, zone):
    # Given a wall-time schedule three years behind
    rule = {**rule, "timezone": zone}
    schedule = make(fresh, utc(2024, 1, 1), rule)
    now = utc(2027, 1, 1, 12)
    dispatch(fresh, dispatch_settings(OWNER), now=now, publisher=ListPublisher())
    # Then the run and the count are those of walking every occurrence one by one
    walked = list(takewhile(lambda o: o.at <= now, parse_rule(rule).occurrences_after(schedule.next_due_at
                                                                                     - timedelta(microseconds=1))))
    run = run_of(fresh, schedule.id)
    assert run["occurrence_at"] == walked[-1].at and run["dst_shifted"] == walked[-1].shifted
    assert run["skipped_backlog"] == len(walked) - 1 and run["first_skipped_at"] == walked[0].at


def test_a_backlog_beyond_the_count_horizon_records_a_lower_bound(fresh, utc):
    # Given an hourly schedule behind by 26 years
    schedule = make(fresh, utc(2001, 1, 1), {"cron": "0 * * * *", "timezone": "Europe/London"})
    dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 1, 0, 30), publisher=ListPublisher())
    # Then it runs once for the latest hour, and the event says the count is a lower bound
    run = run_of(fresh, schedule.id)
    assert run["occurrence_at"] == utc(2027, 1, 1)
    detail = backlog_event(fresh, schedule.id)
    assert detail["count_is_lower_bound"] is True
    assert COUNT_HORIZON.days * 24 - 1 <= detail["count"] == run["skipped_backlog"] < 26 * 366 * 24
    assert detail["first_skipped_at"] == "2001-01-01T01:00:00+00:00"


# ------------------------------------------------------------------------------ staleness


@pytest.fixture
def registry():
    """A kind that tolerates a day of lateness, so the rule's own gaps decide staleness."""
    kinds = WorkKindRegistry()
    kinds.register(OWNER, "report.send", lambda ctx: Succeeded(), staleness=timedelta(hours=24))
    return kinds


TWICE_A_MORNING = {"cron": "0 9,10 * * *", "timezone": "UTC"}  # gaps of 1 hour and 23 hours


def test_an_occurrence_older_than_half_the_short_gap_to_the_next_is_stale(fresh, utc, registry):
    # Given the 09:00 occurrence, whose next is 10:00 (a 1-hour gap: stale after 30 minutes)
    schedule = make(fresh, utc(2027, 1, 4, 8), TWICE_A_MORNING, kind="report.send")
    # When the claim comes at 09:45
    report = dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 9, 45),
                      publisher=ListPublisher(), registry=registry)
    # Then the 09:00 delivery is skipped as stale (the average 12-hour period would have run it)
    run = run_of(fresh, schedule.id)
    assert (run["occurrence_at"], run["state"]) == (utc(2027, 1, 4, 9), "skipped")
    assert report.stale_skipped == 1


def test_an_occurrence_within_half_the_long_gap_to_the_next_still_runs(fresh, utc, registry):
    # Given the 10:00 occurrence, whose next is 09:00 the next day (23 hours: stale after 11.5)
    schedule = make(fresh, utc(2027, 1, 4, 9, 30), TWICE_A_MORNING, kind="report.send")
    # When the claim comes 7 hours late
    publisher = ListPublisher()
    dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 17), publisher=publisher, registry=registry)
    # Then it still runs (the average period's 6-hour bound would have skipped it)
    run = run_of(fresh, schedule.id)
    assert (run["occurrence_at"], run["state"]) == (utc(2027, 1, 4, 10), "queued")
    assert [m.run_id for m in publisher.sent] == [run["id"]]


def test_staleness_never_exceeds_twelve_hours(fresh, utc, registry):
    # Given a weekly rule (a 7-day gap), claimed 13 hours after its occurrence
    schedule = make(fresh, utc(2027, 1, 3), {"cron": "0 9 * * 1", "timezone": "UTC"}, kind="report.send")
    dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 22), publisher=ListPublisher(), registry=registry)
    # Then it is stale: the bound is min(24 h, 3.5 days, 12 h)
    assert run_of(fresh, schedule.id)["state"] == "skipped"
