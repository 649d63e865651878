"""Owner actions as service functions."""

from __future__ import annotations

import dataclasses
import uuid
from datetime import timedelta

import pytest
from psycopg.rows import dict_row, tuple_row

from tests.support import ListPublisher, dispatch_settings
from timekeeper.schedules import service
from timekeeper.schedules.consumer import ConsumerSettings, process_run
from timekeeper.schedules.dispatcher import dispatch
from timekeeper.schedules.models import Schedule, ScheduleEvent, ScheduleRun, UpcomingOccurrence
from timekeeper.schedules.recurrence import InvalidRecurrence
from timekeeper.schedules.work import Succeeded, WorkKindRegistry

OWNER = "accounting"
DAILY_NY = {"calendar": {"frequency": "daily", "times": ["09:00"]}, "timezone": "America/New_York"}


@pytest.fixture
def fresh(conn):
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications CASCADE")
    return conn


def create(conn, now, rule=DAILY_NY, workspace=None):
    return service.create_schedule(conn, workspace_id=workspace or uuid.uuid4(), owner=OWNER,
                                   work_kind="batch.roll", recurrence=rule, actor="owner-1", now=now)


def test_create_validates_the_rule_and_sets_the_first_due_instant(fresh, utc):
    row = create(fresh, utc(2027, 3, 1, 12, 0))
    assert (row.status, row.timezone, row.next_due_at) == ("active", "America/New_York",
                                                                    utc(2027, 3, 1, 14, 0))
    with pytest.raises(InvalidRecurrence) as error:
        create(fresh, utc(2027, 3, 1, 12, 0), rule={"calendar": {"frequency": "daily", "times": ["25:00"]},
                                                     "timezone": "America/New_York"})
    assert error.value.field.startswith("calendar.times")


def test_owner_actions_return_frozen_dataclasses_whatever_the_connections_row_factory(fresh, utc):
    # Given a connection whose rows are tuples
    fresh.row_factory = tuple_row
    try:
        # When the owner creates, updates, pauses, resumes, runs, lists and reads a schedule
        now = utc(2027, 3, 1, 12, 0)
        row = create(fresh, now)
        actions = [
            service.update_schedule(fresh, workspace_id=row.workspace_id, schedule_id=row.id, actor="owner-1",
                                    now=now, name="renamed"),
            service.pause_schedule(fresh, workspace_id=row.workspace_id, schedule_id=row.id, actor="owner-1",
                                   now=now),
            service.resume_schedule(fresh, workspace_id=row.workspace_id, schedule_id=row.id, actor="owner-1",
                                    now=now),
        ]
        service.run_now(fresh, workspace_id=row.workspace_id, schedule_id=row.id, actor="owner-1", now=now,
                        publisher=ListPublisher())
        page = service.list_schedules(fresh, workspace_id=row.workspace_id)
        details = service.get_details(fresh, workspace_id=row.workspace_id, schedule_id=row.id, now=now)
    finally:
        fresh.row_factory = dict_row
    # Then every row is a frozen dataclass with typed, UTC-aware fields
    assert all(isinstance(r, Schedule) for r in [row, *actions, *page.rows, details.schedule])
    assert [r.name for r in actions] == ["renamed"] * 3 and actions[-1].status == "active"
    assert isinstance(row.id, uuid.UUID) and row.created_at.utcoffset() == timedelta(0)
    assert isinstance(row.recurrence, dict)
    assert [type(r) for r in details.runs] == [ScheduleRun]
    assert details.runs[0].trigger == "manual" and details.runs[0].occurrence_local.tzinfo is None
    assert {type(e) for e in details.events} == {ScheduleEvent}
    assert {type(o) for o in details.next_occurrences} == {UpcomingOccurrence}
    with pytest.raises(dataclasses.FrozenInstanceError):
        row.name = "changed"  # type: ignore[misc]


def test_update_bumps_the_version_and_recomputes_the_next_due_instant(fresh, utc):
    row = create(fresh, utc(2027, 3, 1, 12, 0))
    updated = service.update_schedule(fresh, workspace_id=row.workspace_id, schedule_id=row.id,
                                      actor="owner-1", now=utc(2027, 3, 1, 15, 0),
                                      recurrence={"cron": "30 18 * * *", "timezone": "Europe/London"})
    assert updated.definition_version == 2
    assert (updated.timezone, updated.next_due_at) == ("Europe/London", utc(2027, 3, 1, 18, 30))


def test_another_workspace_cannot_see_or_change_a_schedule(fresh, utc):
    row = create(fresh, utc(2027, 3, 1, 12, 0))
    stranger = uuid.uuid4()
    for action in (service.pause_schedule, service.resume_schedule, service.delete_schedule):
        with pytest.raises(service.ScheduleNotFound):
            action(fresh, workspace_id=stranger, schedule_id=row.id, actor="x", now=utc(2027, 3, 1, 12))
    with pytest.raises(service.ScheduleNotFound):
        service.get_details(fresh, workspace_id=stranger, schedule_id=row.id, now=utc(2027, 3, 1, 12))
    with pytest.raises(service.ScheduleNotFound):
        service.run_now(fresh, workspace_id=stranger, schedule_id=row.id, actor="x", now=utc(2027, 3, 1, 12),
                        publisher=ListPublisher())


def test_pause_stops_dispatch_and_details_show_the_history(fresh, utc):
    row = create(fresh, utc(2027, 3, 1, 12, 0))
    service.pause_schedule(fresh, workspace_id=row.workspace_id, schedule_id=row.id, actor="owner-1",
                           now=utc(2027, 3, 1, 13, 0))
    publisher = ListPublisher()
    dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 3, 5, 12, 0), publisher=publisher)
    assert publisher.sent == []
    details = service.get_details(fresh, workspace_id=row.workspace_id, schedule_id=row.id,
                                  now=utc(2027, 3, 5, 12, 0))
    assert details.schedule.status == "paused"
    assert [e.kind for e in details.events] == ["paused", "created"]
    # a paused schedule shows its next occurrences after now, in UTC and local time
    assert [o.at for o in details.next_occurrences[:2]] == [utc(2027, 3, 5, 14, 0), utc(2027, 3, 6, 14, 0)]
    assert details.next_occurrences[0].local.isoformat() == "2027-03-05T09:00:00"


def test_run_now_is_idempotent_by_key_and_a_refused_publish_is_released(fresh, utc):
    row = create(fresh, utc(2027, 3, 1, 12, 0))
    refusing = ListPublisher(refuse_all=True)
    now = utc(2027, 3, 1, 12, 5)
    run_id, created = service.run_now(fresh, workspace_id=row.workspace_id, schedule_id=row.id,
                                      actor="clicker", now=now, publisher=refusing, idempotency_key="k-1")
    again, created_again = service.run_now(fresh, workspace_id=row.workspace_id, schedule_id=row.id,
                                           actor="clicker", now=now, publisher=refusing, idempotency_key="k-1")
    assert (created, created_again, again) == (True, False, run_id)
    run = fresh.execute("SELECT trigger, requested_by, offered_at, released_at FROM schedule_runs WHERE id = %s",
                        (run_id,)).fetchone()
    assert (run["trigger"], run["requested_by"], run["offered_at"]) == ("manual", "clicker", None)
    # the next dispatcher pass offers the released manual run
    publisher = ListPublisher()
    dispatch(fresh, dispatch_settings(OWNER), now=now + timedelta(minutes=1), publisher=publisher)
    assert [m.run_id for m in publisher.sent] == [run_id]


def test_a_deleted_schedules_queued_run_settles_skipped(fresh, utc):
    row = create(fresh, utc(2027, 3, 1, 12, 0))
    publisher = ListPublisher()
    dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 3, 1, 14, 0), publisher=publisher)
    service.delete_schedule(fresh, workspace_id=row.workspace_id, schedule_id=row.id, actor="owner-1",
                            now=utc(2027, 3, 1, 14, 0, 5))
    registry = WorkKindRegistry()
    registry.register(OWNER, "batch.roll", lambda ctx: Succeeded())
    process_run(fresh, publisher.sent[0], receive_count=1, now=utc(2027, 3, 1, 14, 1), registry=registry,
                settings=ConsumerSettings(owner=OWNER, lease=timedelta(minutes=2), max_receive_count=5,
                                          failure_threshold=5))
    state = fresh.execute("SELECT state, outcome_code FROM schedule_runs").fetchone()
    assert (state["state"], state["outcome_code"]) == ("skipped", "schedule_deleted")
    with pytest.raises(service.ScheduleNotFound):
        service.get_details(fresh, workspace_id=row.workspace_id, schedule_id=row.id,
                            now=utc(2027, 3, 1, 15))
