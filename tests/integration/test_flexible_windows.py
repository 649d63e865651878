"""A schedule's flexible window in the real claim, against the real database: each run is
due at a stable instant inside the window (the same across re-claims and dispatchers),
schedules sharing a rule are spread over it, a run is not claimed before its instant and
is claimed after it, and the occurrence (its key, the backlog count) stays the intended one."""

from __future__ import annotations

import json
import uuid
from collections import Counter
from datetime import timedelta

import pytest

from tests.support import ListPublisher, dispatch_settings
from timekeeper.db import connect
from timekeeper.schedules import service
from timekeeper.schedules.dispatcher import dispatch
from timekeeper.schedules.recurrence import given_instant, parse_rule
from timekeeper.schedules.work import Succeeded, WorkKindRegistry

OWNER = "accounting"
HOUR = timedelta(hours=1)
MIDNIGHT_UTC = {"cron": "0 0 * * *", "timezone": "UTC", "window_minutes": 60}


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


def next_due(conn, schedule_id):
    return conn.execute("SELECT next_due_at FROM schedules WHERE id = %s", (schedule_id,)).fetchone()["next_due_at"]


def test_the_given_instant_is_inside_the_window_and_stable(utc):
    occurrence = utc(2027, 1, 1)
    for _ in range(200):
        schedule_id = uuid.uuid4()
        given = given_instant(schedule_id, occurrence, HOUR, utc(2027, 1, 2))
        assert occurrence <= given < occurrence + HOUR
        assert given_instant(schedule_id, occurrence, HOUR, utc(2027, 1, 2)) == given
    # A window longer than the gap to the next occurrence is cut to the gap
    schedule_id = uuid.uuid4()
    assert occurrence <= given_instant(schedule_id, occurrence, HOUR, occurrence + timedelta(minutes=5)) < (
        occurrence + timedelta(minutes=5))


def test_a_run_waits_for_its_instant_then_runs_once_with_its_occurrence(fresh, utc):
    schedule = make(fresh, utc(2026, 12, 31, 12), MIDNIGHT_UTC)
    occurrence = utc(2027, 1, 1)
    given = given_instant(schedule.id, occurrence, HOUR, utc(2027, 1, 2))
    publisher = ListPublisher()
    # When a pass runs at the occurrence: no run yet, the schedule now waits for its given instant
    report = dispatch(fresh, dispatch_settings(OWNER), now=occurrence, publisher=publisher)
    assert report.runs_created == 0 and runs_of(fresh, schedule.id) == []
    assert next_due(fresh, schedule.id) == given
    # And a pass just before it claims nothing
    if given > occurrence:
        report = dispatch(fresh, dispatch_settings(OWNER), now=given - timedelta(seconds=1), publisher=publisher)
        assert report.claimed == 0 and runs_of(fresh, schedule.id) == []
    # When a pass runs at the given instant (and again, as a second dispatcher would)
    dispatch(fresh, dispatch_settings(OWNER), now=given, publisher=publisher)
    dispatch(fresh, dispatch_settings(OWNER), now=given + timedelta(seconds=30), publisher=publisher)
    # Then one run, keyed by the intended occurrence, with the instant it was given beside it
    (run,) = runs_of(fresh, schedule.id)
    assert (run["occurrence_at"], run["occurrence_key"], run["due_at"]) == (occurrence, occurrence.isoformat(), given)
    assert len(publisher.sent) == 1
    # And the schedule now waits for the next day's given instant, inside its window
    following = given_instant(schedule.id, utc(2027, 1, 2), HOUR, utc(2027, 1, 3))
    assert next_due(fresh, schedule.id) == following and utc(2027, 1, 2) <= following < utc(2027, 1, 2, 1)


def test_a_reclaim_gives_the_same_instant_and_adds_no_run(fresh, utc):
    schedule = make(fresh, utc(2026, 12, 31, 12), MIDNIGHT_UTC)
    given = given_instant(schedule.id, utc(2027, 1, 1), HOUR, utc(2027, 1, 2))
    publisher = ListPublisher()
    dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 1, 1), publisher=publisher)
    # When the timing is put back to the occurrence (a lost advance, a restart) and claimed again
    fresh.execute("UPDATE schedules SET next_due_at = %s WHERE id = %s", (utc(2027, 1, 1), schedule.id))
    report = dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 1, 1, 30), publisher=publisher)
    # Then no second run, and the one run keeps its instant
    assert report.runs_created == 0
    assert [(r["occurrence_at"], r["due_at"]) for r in runs_of(fresh, schedule.id)] == [(utc(2027, 1, 1), given)]


def test_a_backlog_counts_the_intended_occurrences(fresh, utc):
    schedule = make(fresh, utc(2026, 12, 31, 12), MIDNIGHT_UTC)
    # When the dispatcher comes back after three days (the 4th's window still open)
    report = dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 3, 12), publisher=ListPublisher())
    # Then the latest due occurrence runs and the two older ones are counted skipped
    (run,) = runs_of(fresh, schedule.id)
    assert run["occurrence_at"] == utc(2027, 1, 3) and run["skipped_backlog"] == 2 and report.backlog_skipped == 2
    assert run["due_at"] == given_instant(schedule.id, utc(2027, 1, 3), HOUR, utc(2027, 1, 4))
    # A backlog longer than the walk is counted too (arithmetic path)
    fresh.execute("UPDATE schedules SET next_due_at = %s WHERE id = %s", (utc(2027, 1, 4), schedule.id))
    report = dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 6, 1, 0, 0, 0), publisher=ListPublisher())
    latest = runs_of(fresh, schedule.id)[-1]
    given = given_instant(schedule.id, utc(2027, 6, 1), HOUR, utc(2027, 6, 2))
    expected_latest = utc(2027, 6, 1) if given == utc(2027, 6, 1) else utc(2027, 5, 31)
    assert latest["occurrence_at"] == expected_latest
    assert latest["skipped_backlog"] == (expected_latest - utc(2027, 1, 4)).days


def test_a_thousand_schedules_at_midnight_are_spread_over_the_window(fresh, utc):
    rule = parse_rule(MIDNIGHT_UTC)
    ids = [uuid.uuid4() for _ in range(1000)]
    minutes = Counter((given_instant(i, utc(2027, 1, 1), rule.window, utc(2027, 1, 2)) - utc(2027, 1, 1))
                      // timedelta(minutes=1) for i in ids)
    # Then every minute of the hour is used and none holds more than twice its share (~17)
    assert set(minutes) == set(range(60)) and max(minutes.values()) <= 35
    # And in the real claim: schedules with the same rule get different instants
    schedules = [make(fresh, utc(2026, 12, 31, 12), MIDNIGHT_UTC) for _ in range(30)]
    dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 1), publisher=ListPublisher())
    dues = {next_due(fresh, s.id) for s in schedules}
    assert len(dues) >= 25
    assert all(next_due(fresh, s.id) in (given_instant(s.id, utc(2027, 1, 1), HOUR, utc(2027, 1, 2)),
                                         given_instant(s.id, utc(2027, 1, 2), HOUR, utc(2027, 1, 3)))
               for s in schedules)


def test_no_window_runs_at_the_occurrence_with_no_given_instant(fresh, utc):
    schedule = make(fresh, utc(2026, 12, 31, 12), {"cron": "0 0 * * *", "timezone": "UTC"})
    dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 1), publisher=ListPublisher())
    (run,) = runs_of(fresh, schedule.id)
    assert (run["occurrence_at"], run["due_at"]) == (utc(2027, 1, 1), None)
    assert next_due(fresh, schedule.id) == utc(2027, 1, 2)


@pytest.fixture
def second(db_url):
    """A second connection, opened when the dispatcher's second claim worker asks."""
    opened: list = []

    def open_second():
        opened.append(connect(db_url))
        return opened[-1]

    yield open_second
    for c in opened:
        c.close()


def test_two_claim_workers_and_a_second_dispatcher_give_each_run_its_instant_once(fresh, second, utc):
    # Given 400 schedules due at midnight with a 60-minute window (their timing at the occurrence, as after a save)
    fresh.execute("""
        INSERT INTO schedules (id, workspace_id, owner, work_kind, recurrence, timezone, status, next_due_at,
                               created_at, updated_at)
        SELECT gen_random_uuid(), gen_random_uuid(), %(owner)s, 'batch.roll', %(rule)s::jsonb, 'UTC', 'active',
               %(due)s, %(due)s, %(due)s
          FROM generate_series(1, 400)""", {"owner": OWNER, "rule": json.dumps(MIDNIGHT_UTC), "due": utc(2027, 1, 1)})
    ids = [r["id"] for r in fresh.execute("SELECT id FROM schedules")]
    given = {i: given_instant(i, utc(2027, 1, 1), HOUR, utc(2027, 1, 2)) for i in ids}
    settings = dispatch_settings(OWNER, claim_limit=50)
    # When passes with two claim workers run across the window, then another dispatcher passes again
    for now in (utc(2027, 1, 1, 0, 20), utc(2027, 1, 1, 0, 40), utc(2027, 1, 1, 1)):
        dispatch(fresh, settings, now=now, publisher=ListPublisher(), second=second)
    report = dispatch(second(), settings, now=utc(2027, 1, 1, 1, 0, 30), publisher=ListPublisher())
    assert report.runs_created == 0
    # Then each schedule has exactly one run, at the instant its schedule and occurrence give
    runs = fresh.execute("SELECT schedule_id, occurrence_at, due_at FROM schedule_runs").fetchall()
    assert Counter(r["schedule_id"] for r in runs) == Counter(ids)
    assert all(r["occurrence_at"] == utc(2027, 1, 1) and r["due_at"] == given[r["schedule_id"]] for r in runs)


def test_staleness_counts_from_the_given_instant(fresh, utc):
    # Given a kind stale after ten minutes and two daily schedules with a 60-minute window
    kinds = WorkKindRegistry()
    kinds.register(OWNER, "report.send", lambda ctx: Succeeded(), staleness=timedelta(minutes=10))
    made = [service.create_schedule(fresh, workspace_id=uuid.uuid4(), owner=OWNER, work_kind="report.send",
                                    recurrence=MIDNIGHT_UTC, actor="tester", now=utc(2026, 12, 31, 12))
            for _ in range(40)]
    instants = {s.id: given_instant(s.id, utc(2027, 1, 1), HOUR, utc(2027, 1, 2)) for s in made}
    # (the first given more than 15 minutes into its window: measured from the occurrence it would be stale)
    on_time = next(s for s in made if instants[s.id] - utc(2027, 1, 1) > timedelta(minutes=15))
    late = next(s for s in made if s is not on_time)
    # When one is claimed a second after its given instant (however far into the window) and one 11 minutes after
    for schedule, delay in ((on_time, timedelta(seconds=1)), (late, timedelta(minutes=11))):
        fresh.execute("UPDATE schedules SET next_due_at = %s WHERE id = %s", (instants[schedule.id], schedule.id))
        fresh.execute("UPDATE schedules SET next_due_at = NULL WHERE id <> %s", (schedule.id,))
        dispatch(fresh, dispatch_settings(OWNER), now=instants[schedule.id] + delay, publisher=ListPublisher(),
                 registry=kinds)
    # Then the first runs and the second is skipped stale: lateness counts from the instant the run was given
    assert [r["state"] for r in runs_of(fresh, on_time.id)] == ["queued"]
    assert [(r["state"], r["outcome_code"]) for r in runs_of(fresh, late.id)] == [("skipped", "skipped_stale")]


#: New York's six-hourly sweep with a 45-minute window: its occurrences cross the spring gap
#: of 2027-03-14 (00:15 EST, then 06:15 EDT five hours later).
NY_SWEEP = {"cron": "15 */6 * * *", "timezone": "America/New_York", "window_minutes": 45}
SWEEP_ID = uuid.UUID("6d1f3c2e-8a4b-4c5d-9e6f-7a8b9c0d1e2f")


def _timeline(conn, created, passes):
    """Create the sweep (always the same id) at ``created``, pass the dispatcher at each
    instant of ``passes``; its runs' ``(occurrence_at, due_at)`` and its final timing."""
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications CASCADE")
    service.create_schedule(conn, workspace_id=uuid.UUID(int=1), owner=OWNER, work_kind="batch.roll",
                            recurrence=NY_SWEEP, actor="tester", now=created, schedule_id=SWEEP_ID)
    for now in passes:
        dispatch(conn, dispatch_settings(OWNER), now=now, publisher=ListPublisher())
    runs = [(r["occurrence_at"], r["due_at"]) for r in runs_of(conn, SWEEP_ID)]
    return runs, next_due(conn, SWEEP_ID)


def test_an_occurrences_given_instant_is_the_same_however_the_schedule_got_there(fresh, utc):
    start, end = utc(2027, 3, 14, 4), utc(2027, 3, 14, 17)
    minutes = [start + timedelta(minutes=m) for m in range(int((end - start) / timedelta(minutes=1)) + 1)]
    # Given the sweep advanced by a pass every minute across the gap day
    every_runs, every_next = _timeline(fresh, start, minutes)
    assert [at for at, _ in every_runs] == [utc(2027, 3, 14, 5, 15), utc(2027, 3, 14, 10, 15),
                                            utc(2027, 3, 14, 16, 15)]
    # When it is fast-forwarded instead: a pass only at the minute its timing names, then at the end
    passes, now = [], start
    _timeline(fresh, start, [])
    while now is not None:
        dispatch(fresh, dispatch_settings(OWNER), now=now, publisher=ListPublisher())
        passes.append(now)
        due = next_due(fresh, SWEEP_ID)
        now = (start + -(-(due - start) // timedelta(minutes=1)) * timedelta(minutes=1) if due <= end
               else end if now < end else None)
    fast_runs = [(r["occurrence_at"], r["due_at"]) for r in runs_of(fresh, SWEEP_ID)]
    assert len(passes) < 20 and (fast_runs, next_due(fresh, SWEEP_ID)) == (every_runs, every_next)
    # And re-claimed: every pass puts the timing back to the occurrence first (a lost advance)
    _timeline(fresh, start, [])
    for now in minutes[::7]:
        fresh.execute("""UPDATE schedules SET next_due_at = (SELECT coalesce(max(occurrence_at), %s) FROM schedule_runs)
                          WHERE id = %s""", (start, SWEEP_ID))
        dispatch(fresh, dispatch_settings(OWNER), now=now, publisher=ListPublisher())
    dispatch(fresh, dispatch_settings(OWNER), now=end, publisher=ListPublisher())
    reclaimed_runs = [(r["occurrence_at"], r["due_at"]) for r in runs_of(fresh, SWEEP_ID)]
    assert (reclaimed_runs, next_due(fresh, SWEEP_ID)) == (every_runs, every_next)
    # And created fresh inside an occurrence's window: the same instants, in its preview (from its
    # timing, as the schedule's page lists them) and in its runs
    created = utc(2027, 3, 14, 10, 16)
    _timeline(fresh, created, [])
    after = next_due(fresh, SWEEP_ID) - timedelta(microseconds=1)
    preview = service.upcoming_occurrences(parse_rule(NY_SWEEP), after, 2, SWEEP_ID)
    assert [(o.at, o.due_at) for o in preview] == [*every_runs[-1:], (utc(2027, 3, 14, 22, 15), every_next)]
    runs, final = _timeline(fresh, created, [m for m in minutes if m >= created])
    assert (runs, final) == (every_runs[-1:], every_next)
    # Then each run's instant is the one its schedule and occurrence give, inside its window
    for at, due_at in every_runs:
        following = parse_rule(NY_SWEEP).next_after(at).at
        assert due_at == given_instant(SWEEP_ID, at, timedelta(minutes=45), following)
        assert at <= due_at < at + timedelta(minutes=45)


def _waiting_at_its_instant(conn, utc):
    """A daily schedule with a 60-minute window that the pass at its occurrence moved to the
    occurrence's given instant (at least a minute later: the edits below happen in between)."""
    occurrence = utc(2027, 1, 1)
    while True:
        schedule = make(conn, utc(2026, 12, 31, 12), MIDNIGHT_UTC)
        given = given_instant(schedule.id, occurrence, HOUR, utc(2027, 1, 2))
        if given >= occurrence + timedelta(minutes=2):
            break
    dispatch(conn, dispatch_settings(OWNER), now=occurrence, publisher=ListPublisher())
    assert next_due(conn, schedule.id) == given
    return schedule, occurrence, given


def test_a_rename_inside_an_open_window_keeps_the_occurrence_owed(fresh, utc):
    schedule, occurrence, given = _waiting_at_its_instant(fresh, utc)
    # When the schedule is renamed inside the window, before its given instant
    service.update_schedule(fresh, workspace_id=schedule.workspace_id, schedule_id=schedule.id, actor="tester",
                            now=occurrence + timedelta(minutes=1), name="renamed")
    # Then the timing is unchanged and the pass at the given instant runs the occurrence
    assert next_due(fresh, schedule.id) == given
    dispatch(fresh, dispatch_settings(OWNER), now=given, publisher=ListPublisher())
    (run,) = runs_of(fresh, schedule.id)
    assert (run["occurrence_at"], run["due_at"]) == (occurrence, given)


def test_a_window_change_inside_an_open_window_keeps_the_occurrence_owed(fresh, utc):
    schedule, occurrence, _ = _waiting_at_its_instant(fresh, utc)
    narrower = {**MIDNIGHT_UTC, "window_minutes": 30}
    new_given = given_instant(schedule.id, occurrence, timedelta(minutes=30), utc(2027, 1, 2))
    # When the window is narrowed inside the open window
    edited_at = occurrence + timedelta(minutes=1)
    service.update_schedule(fresh, workspace_id=schedule.workspace_id, schedule_id=schedule.id, actor="tester",
                            now=edited_at, recurrence=narrower)
    # Then the occurrence stays owed and runs once at its new given instant (at once if that passed)
    assert next_due(fresh, schedule.id) == occurrence
    run_at = max(new_given, edited_at)
    dispatch(fresh, dispatch_settings(OWNER), now=run_at, publisher=ListPublisher())
    dispatch(fresh, dispatch_settings(OWNER), now=run_at + timedelta(minutes=1), publisher=ListPublisher())
    (run,) = runs_of(fresh, schedule.id)
    assert (run["occurrence_at"], run["due_at"]) == (occurrence, new_given)
    assert next_due(fresh, schedule.id) == given_instant(schedule.id, utc(2027, 1, 2), timedelta(minutes=30),
                                                         utc(2027, 1, 3))


def test_a_window_change_after_the_new_window_closed_owes_the_next_occurrence(fresh, utc):
    schedule, occurrence, given = _waiting_at_its_instant(fresh, utc)
    # When the window is cut to one minute, which ended before the edit
    service.update_schedule(fresh, workspace_id=schedule.workspace_id, schedule_id=schedule.id, actor="tester",
                            now=occurrence + timedelta(minutes=1, seconds=30),
                            recurrence={**MIDNIGHT_UTC, "window_minutes": 1})
    # Then, as for any edit of the timing, there is no backlog: the next occurrence is owed
    assert next_due(fresh, schedule.id) == utc(2027, 1, 2)
    dispatch(fresh, dispatch_settings(OWNER), now=given, publisher=ListPublisher())
    assert runs_of(fresh, schedule.id) == []


def test_a_rule_change_does_not_bring_back_an_occurrence_already_run(fresh, utc):
    schedule, occurrence, given = _waiting_at_its_instant(fresh, utc)
    dispatch(fresh, dispatch_settings(OWNER), now=given, publisher=ListPublisher())
    assert len(runs_of(fresh, schedule.id)) == 1
    # When the window is widened while the occurrence's window is still open
    service.update_schedule(fresh, workspace_id=schedule.workspace_id, schedule_id=schedule.id, actor="tester",
                            now=given + timedelta(seconds=1), recurrence={**MIDNIGHT_UTC, "window_minutes": 90})
    # Then the next occurrence is owed, not the one that ran
    assert next_due(fresh, schedule.id) == utc(2027, 1, 2)


@pytest.mark.parametrize("cron", ["*/10 * * * *", "0 * * * *"])
def test_upcoming_occurrences_are_complete_when_the_window_spans_many_periods(fresh, utc, cron):
    now = utc(2026, 12, 6, 16, 50)
    schedule = make(fresh, now, {"cron": cron, "timezone": "Australia/Sydney", "window_minutes": 240})
    details = service.get_details(fresh, workspace_id=schedule.workspace_id, schedule_id=schedule.id, now=now)
    upcoming = details.next_occurrences
    assert len(upcoming) == 5
    assert [o.at for o in upcoming] == sorted(o.at for o in upcoming)
    assert upcoming[0].at == schedule.next_due_at and all(o.due_at > now for o in upcoming)


def test_a_workspace_zone_move_inside_an_open_window_keeps_the_occurrence_owed(fresh, utc):
    from timekeeper.platform.workspace_settings import update_settings

    workspace_id, occurrence, ten = uuid.uuid4(), utc(2026, 12, 6, 17), timedelta(minutes=10)
    fresh.execute("INSERT INTO workspaces (id, name, timezone) VALUES (%s, 'w', 'UTC')", (workspace_id,))
    rule = {"cron": "*/10 * * * *", "timezone": "UTC", "window_minutes": 240}
    while True:
        schedule = service.create_schedule(fresh, workspace_id=workspace_id, owner=OWNER, work_kind="batch.roll",
                                           recurrence=rule, actor="tester", now=utc(2026, 12, 6, 16, 55))
        given = given_instant(schedule.id, occurrence, ten, occurrence + ten)
        if given >= occurrence + timedelta(minutes=1):
            break
        service.delete_schedule(fresh, workspace_id=workspace_id, schedule_id=schedule.id, actor="tester",
                                now=utc(2026, 12, 6, 16, 55))
    dispatch(fresh, dispatch_settings(OWNER), now=occurrence, publisher=ListPublisher())
    assert next_due(fresh, schedule.id) == given
    # When the workspace moves its schedules to London (the same instants in December) inside the window
    _, moved = update_settings(fresh, workspace_id=workspace_id, actor="tester", now=occurrence + timedelta(seconds=30),
                               timezone="Europe/London", move_schedules=True)
    assert moved >= 1
    # Then the occurrence is still owed and runs once at its given instant
    dispatch(fresh, dispatch_settings(OWNER), now=given, publisher=ListPublisher())
    (run,) = runs_of(fresh, schedule.id)
    assert (run["occurrence_at"], run["due_at"]) == (occurrence, given)
