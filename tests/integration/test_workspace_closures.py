"""A workspace's closures against the real database: business-day schedules skip them, a
change recomputes the next due instant with a history event, and the dispatcher's claim
evaluates the rule with them."""

from __future__ import annotations

import uuid
from datetime import date

import pytest

from tests.support import ListPublisher, dispatch_settings
from timekeeper.schedules import closures, service
from timekeeper.schedules.dispatcher import dispatch

OWNER = "accounting"
THIRD_BUSINESS_DAY = {"calendar": {"frequency": "monthly", "business_day": 3, "times": ["09:00"],
                                   "holidays": "DE-BE"}, "timezone": "Europe/Berlin"}
DAILY = {"cron": "0 9 * * *", "timezone": "Europe/Berlin"}


@pytest.fixture
def fresh(conn):
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications, "
                 "schedule_pending_offers, workspace_closures CASCADE")
    return conn


def make(conn, now, workspace, rule=THIRD_BUSINESS_DAY):
    return service.create_schedule(conn, workspace_id=workspace, owner=OWNER, work_kind="reconciliation.sweep",
                                   recurrence=rule, actor="tester", now=now)


def next_due(conn, schedule):
    return conn.execute("SELECT next_due_at FROM schedules WHERE id = %s", (schedule.id,)).fetchone()["next_due_at"]


def events(conn, schedule):
    return conn.execute("SELECT kind, reason, detail, actor FROM schedule_events WHERE schedule_id = %s "
                        "AND kind = 'holidays_changed' ORDER BY id", (schedule.id,)).fetchall()


def test_a_closure_recomputes_the_business_day_schedules_of_its_workspace_only(fresh, utc):
    # Given, on 20 December 2026, a third-business-day schedule (January's: Wednesday the 6th),
    # a daily schedule in the same workspace and a business-day schedule of another workspace
    now = utc(2026, 12, 20, 12, 0)
    workspace = uuid.uuid4()
    mine, daily = make(fresh, now, workspace), make(fresh, now, workspace, DAILY)
    theirs = make(fresh, now, uuid.uuid4())
    assert next_due(fresh, mine) == utc(2027, 1, 6, 8, 0)
    # When the workspace closes Tuesday 5 January
    added, recomputed = closures.add_closure(fresh, workspace_id=workspace, closed_on=date(2027, 1, 5),
                                             reason="inventory", actor="admin-1", now=now)
    # Then its business-day schedule moves to Thursday the 7th, with the change in its history
    assert added.closed_on == date(2027, 1, 5) and recomputed == 1
    assert next_due(fresh, mine) == utc(2027, 1, 7, 8, 0)
    [event] = events(fresh, mine)
    assert event["reason"] == "closure_added" and event["actor"] == "admin-1"
    assert event["detail"]["closed_on"] == "2027-01-05" and event["detail"]["moved"] is True
    assert event["detail"]["previous_next_due_at"] == "2027-01-06T08:00:00Z"
    assert event["detail"]["next_due_at"] == "2027-01-07T08:00:00Z"
    assert event["detail"]["holiday_data"].startswith("holidays ")
    # And the daily schedule and the other workspace's are untouched
    assert events(fresh, daily) == [] and events(fresh, theirs) == []
    assert next_due(fresh, theirs) == utc(2027, 1, 6, 8, 0)
    # When it is closed again, nothing changes; when it is reopened, the 6th is back
    assert closures.add_closure(fresh, workspace_id=workspace, closed_on=date(2027, 1, 5), reason="again",
                                actor="admin-1", now=now) == (None, 0)
    removed, _ = closures.remove_closure(fresh, workspace_id=workspace, closed_on=date(2027, 1, 5),
                                         actor="admin-1", now=now)
    assert removed.reason == "inventory"
    assert next_due(fresh, mine) == utc(2027, 1, 6, 8, 0)
    assert [e["reason"] for e in events(fresh, mine)] == ["closure_added", "closure_removed"]
    assert closures.remove_closure(fresh, workspace_id=workspace, closed_on=date(2027, 1, 5), actor="admin-1",
                                   now=now) == (None, 0)


def test_create_and_the_detail_count_the_closures(fresh, utc):
    now = utc(2026, 12, 20, 12, 0)
    workspace = uuid.uuid4()
    closures.add_closure(fresh, workspace_id=workspace, closed_on=date(2027, 1, 4), reason="", actor="a", now=now)
    schedule = make(fresh, now, workspace)
    assert next_due(fresh, schedule) == utc(2027, 1, 7, 8, 0)
    detail = service.get_details(fresh, workspace_id=workspace, schedule_id=schedule.id, now=now, upcoming=2)
    assert [o.local_date for o in detail.next_occurrences] == [date(2027, 1, 7), date(2027, 2, 3)]


def test_the_claim_evaluates_the_rule_with_the_workspace_closures(fresh, utc):
    # Given a schedule due on 6 January and a closure on Tuesday 2 February added before it ran
    created = utc(2026, 12, 20, 12, 0)
    workspace = uuid.uuid4()
    schedule = make(fresh, created, workspace)
    closures.add_closure(fresh, workspace_id=workspace, closed_on=date(2027, 2, 2), reason="", actor="a",
                         now=created)
    assert next_due(fresh, schedule) == utc(2027, 1, 6, 8, 0)  # January is not affected
    # When the dispatcher claims it on the 6th
    publisher = ListPublisher()
    dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 6, 8, 0, 30), publisher=publisher)
    # Then it runs for the 6th and its next due instant skips the closed 2nd: Thursday 4 February
    assert [m.schedule_id for m in publisher.sent] == [schedule.id]
    assert next_due(fresh, schedule) == utc(2027, 2, 4, 8, 0)


def test_new_holiday_data_recomputes_every_business_day_schedule_once(fresh, utc):
    # Given a business-day schedule whose next due instant an older holiday data computed
    # (here: one day off), and a record that only an older version was seen
    now = utc(2026, 12, 20, 12, 0)
    fresh.execute("TRUNCATE holiday_data_versions")
    fresh.execute("INSERT INTO holiday_data_versions VALUES ('holidays 0.1', %s)", (now,))
    schedule = make(fresh, now, uuid.uuid4())
    daily = make(fresh, now, uuid.uuid4(), DAILY)
    fresh.execute("UPDATE schedules SET next_due_at = %s WHERE id = %s", (utc(2027, 1, 5, 8, 0), schedule.id))
    # When the deploy's migration step records this layer's holiday data
    recomputed = closures.refresh_holiday_data(fresh, now=now)
    # Then the schedule is recomputed with it, and the change is in its history
    assert recomputed == 1
    assert next_due(fresh, schedule) == utc(2027, 1, 6, 8, 0)
    [event] = events(fresh, schedule)
    assert event["reason"] == "holiday_data_changed" and event["detail"]["holiday_data"] == closures.HOLIDAY_DATA
    assert event["detail"]["closed_on"] is None and event["detail"]["moved"] is True
    assert events(fresh, daily) == []
    # And the same version again changes nothing
    assert closures.refresh_holiday_data(fresh, now=now) == 0
    assert len(events(fresh, schedule)) == 1
