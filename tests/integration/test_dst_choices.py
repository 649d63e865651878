"""A schedule's DST choice in the real claim, against the real database: ``both`` runs a
repeated time once at each instant (two occurrences, one run each, and a re-claim adds
none); ``skip`` records a gap time as a skipped run with its reason, publishes nothing
and moves on; the default choice stays what it was."""

from __future__ import annotations

import uuid
from datetime import datetime

import pytest

from tests.support import ListPublisher, dispatch_settings
from timekeeper.schedules import service
from timekeeper.schedules.dispatcher import dispatch

OWNER = "accounting"
NEW_YORK = "America/New_York"


@pytest.fixture
def fresh(conn):
    """An empty schedules world for each test."""
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications CASCADE")
    return conn


def make(conn, now, rule):
    return service.create_schedule(conn, workspace_id=uuid.uuid4(), owner=OWNER, work_kind="batch.roll",
                                   recurrence=rule, actor="tester", now=now)


def runs_of(conn, schedule_id):
    return conn.execute("SELECT * FROM schedule_runs WHERE schedule_id = %s ORDER BY occurrence_at",
                        (schedule_id,)).fetchall()


def test_both_runs_a_repeated_time_at_each_instant_once_and_a_reclaim_adds_none(fresh, utc):
    # Given 01:30 New York with overlap "both": 2027-11-07 01:30 happens at 05:30Z (EDT) and 06:30Z (EST)
    schedule = make(fresh, utc(2027, 11, 6, 12), {"cron": "30 1 * * *", "timezone": NEW_YORK,
                                                  "dst": {"overlap": "both"}})
    assert schedule.next_due_at == utc(2027, 11, 7, 5, 30)
    publisher = ListPublisher()
    # When the dispatcher passes after each instant, twice each
    for now in (utc(2027, 11, 7, 5, 30, 30), utc(2027, 11, 7, 5, 31), utc(2027, 11, 7, 6, 30, 30),
                utc(2027, 11, 7, 6, 31)):
        dispatch(fresh, dispatch_settings(OWNER), now=now, publisher=publisher)
    # Then each instant has exactly one run, both for the local 01:30, and the schedule moved to the next day
    runs = runs_of(fresh, schedule.id)
    assert [r["occurrence_at"] for r in runs] == [utc(2027, 11, 7, 5, 30), utc(2027, 11, 7, 6, 30)]
    assert {r["occurrence_local"] for r in runs} == {datetime(2027, 11, 7, 1, 30)}
    assert len({r["occurrence_key"] for r in runs}) == 2
    assert {m.run_id for m in publisher.sent} == {r["id"] for r in runs}  # (the first is offered again: unstarted)
    # When a pass claims the schedule again from the first instant (as after a lost advance)
    fresh.execute("UPDATE schedules SET next_due_at = %s WHERE id = %s", (utc(2027, 11, 7, 5, 30), schedule.id))
    report = dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 11, 7, 6, 31), publisher=publisher)
    # Then no run is added: the latest occurrence already has its run
    assert report.runs_created == 0 and len(runs_of(fresh, schedule.id)) == 2
    assert {m.run_id for m in publisher.sent} == {r["id"] for r in runs}


def test_the_default_runs_a_repeated_time_once(fresh, utc):
    # Given 01:30 New York with the default choice
    schedule = make(fresh, utc(2027, 11, 6, 12), {"cron": "30 1 * * *", "timezone": NEW_YORK})
    for now in (utc(2027, 11, 7, 5, 30, 30), utc(2027, 11, 7, 6, 30, 30)):
        dispatch(fresh, dispatch_settings(OWNER), now=now, publisher=ListPublisher())
    # Then only the first instant runs, and the next is the day after
    assert [r["occurrence_at"] for r in runs_of(fresh, schedule.id)] == [utc(2027, 11, 7, 5, 30)]
    assert fresh.execute("SELECT next_due_at FROM schedules WHERE id = %s",
                         (schedule.id,)).fetchone()["next_due_at"] == utc(2027, 11, 8, 6, 30)


def test_skip_records_the_gap_time_as_a_skipped_run_with_its_reason(fresh, utc):
    # Given 02:30 New York with gap "skip": 2027-03-14 02:30 does not exist (02:00 -> 03:00)
    schedule = make(fresh, utc(2027, 3, 13, 12), {"cron": "30 2 * * *", "timezone": NEW_YORK,
                                                  "dst": {"gap": "skip"}})
    publisher = ListPublisher()
    # When the dispatcher passes after the instant it would have run shifted (03:30 EDT, 07:30Z)
    report = dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 3, 14, 7, 30, 30), publisher=publisher)
    # Then the occurrence is recorded skipped, with its reason, and nothing is offered to a consumer
    (run,) = runs_of(fresh, schedule.id)
    assert (run["state"], run["outcome_code"], run["dst_shifted"]) == ("skipped", "skipped_dst_gap", True)
    assert run["occurrence_local"] == datetime(2027, 3, 14, 2, 30) and run["finished_at"] is not None
    assert publisher.sent == [] and report.dst_gap_skipped == 1 and report.stale_skipped == 0
    # And the schedule's history shows it; the next day runs as usual
    details = service.get_details(fresh, workspace_id=schedule.workspace_id, schedule_id=schedule.id,
                                  now=utc(2027, 3, 14, 8))
    assert [(r.state, r.outcome_code) for r in details.runs] == [("skipped", "skipped_dst_gap")]
    dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 3, 15, 6, 30, 30), publisher=publisher)
    assert [(r["occurrence_at"], r["state"]) for r in runs_of(fresh, schedule.id)][1:] == [
        (utc(2027, 3, 15, 6, 30), "queued")]
    assert len(publisher.sent) == 1


def test_end_runs_a_gap_time_when_the_clock_resumes(fresh, utc):
    # Given 02:30 New York with gap "end"
    schedule = make(fresh, utc(2027, 3, 13, 12), {"cron": "30 2 * * *", "timezone": NEW_YORK,
                                                  "dst": {"gap": "end"}})
    # Then it is due at 03:00 EDT (07:00Z), the first instant after the gap, and runs there
    assert schedule.next_due_at == utc(2027, 3, 14, 7)
    dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 3, 14, 7, 0, 30), publisher=ListPublisher())
    (run,) = runs_of(fresh, schedule.id)
    assert (run["occurrence_at"], run["state"], run["dst_shifted"]) == (utc(2027, 3, 14, 7), "queued", True)
