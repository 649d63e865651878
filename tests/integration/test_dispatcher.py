"""Dispatcher pass against the real database."""

from __future__ import annotations

import threading
import uuid
from datetime import timedelta

import pytest

from tests.support import ListPublisher, dispatch_settings
from timekeeper.db.connection import connect
from timekeeper.schedules import service
from timekeeper.schedules.dispatcher import claim_batch, dispatch

OWNER = "accounting"
HOURLY_UTC = {"cron": "0 * * * *", "timezone": "UTC"}


@pytest.fixture
def fresh(conn):
    """An empty schedules world for each test."""
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications, "
                 "schedule_pending_offers CASCADE")
    return conn


def make(conn, now, rule=HOURLY_UTC, workspace=None, kind="batch.roll", owner=OWNER):
    return service.create_schedule(conn, workspace_id=workspace or uuid.uuid4(), owner=owner, work_kind=kind,
                                   recurrence=rule, actor="tester", now=now)


def test_three_hours_of_silence_give_one_run_for_the_latest_occurrence(fresh, utc):
    # Given an hourly schedule created at 09:30 (first due 10:00)
    schedule = make(fresh, utc(2027, 1, 4, 9, 30))
    # When the dispatcher was silent until 12:10
    publisher = ListPublisher()
    report = dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 12, 10), publisher=publisher)
    # Then one run exists, for 12:00, recording the 10:00 and 11:00 occurrences skipped
    runs = fresh.execute("SELECT * FROM schedule_runs WHERE schedule_id = %s", (schedule.id,)).fetchall()
    assert len(runs) == 1
    assert runs[0]["occurrence_at"] == utc(2027, 1, 4, 12, 0)
    assert runs[0]["skipped_backlog"] == 2
    assert runs[0]["first_skipped_at"] == utc(2027, 1, 4, 10, 0)
    assert report.backlog_skipped == 2
    # And the next due instant is in the future
    row = fresh.execute("SELECT next_due_at FROM schedules WHERE id = %s", (schedule.id,)).fetchone()
    assert row["next_due_at"] == utc(2027, 1, 4, 13, 0)
    # And the misfire is one history event with the count and the instants
    events = fresh.execute("SELECT kind, detail FROM schedule_events WHERE schedule_id = %s AND kind = "
                           "'backlog_skipped'", (schedule.id,)).fetchall()
    assert len(events) == 1 and events[0]["detail"]["count"] == 2
    assert [m.run_id for m in publisher.sent] == [runs[0]["id"]]


def test_a_second_pass_in_the_same_minute_claims_nothing(fresh, utc):
    make(fresh, utc(2027, 1, 4, 9, 30))
    dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 10, 0), publisher=ListPublisher())
    publisher = ListPublisher()
    report = dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 10, 0, 30), publisher=publisher)
    assert report.claimed == 0 and publisher.sent == []


def test_only_the_owners_schedules_are_claimed(fresh, utc):
    make(fresh, utc(2027, 1, 4, 9, 30), owner="queries", kind="query.deliver")
    mine = make(fresh, utc(2027, 1, 4, 9, 30))
    publisher = ListPublisher()
    dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 10, 0), publisher=publisher)
    assert [m.schedule_id for m in publisher.sent] == [mine.id]


def test_450_due_schedules_are_all_claimed_in_one_invocation(fresh, utc):
    # Given 450 due schedules (the claim bound is 200 per transaction)
    created = utc(2027, 1, 4, 9, 30)
    workspace = uuid.uuid4()
    for _ in range(450):
        make(fresh, created, workspace=workspace)
    # When one dispatcher invocation runs
    publisher = ListPublisher()
    report = dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 10, 0, 5), publisher=publisher)
    # Then all 450 are claimed, in three transactions, each published once
    assert report.claimed == 450 and report.batches == 3
    assert len({m.run_id for m in publisher.sent}) == 450 == len(publisher.sent)
    due = fresh.execute("SELECT count(*) AS n FROM schedules WHERE next_due_at <= %s",
                        (utc(2027, 1, 4, 10, 0, 5),)).fetchone()
    assert due["n"] == 0
    # And every run is recorded as published once, with no batch left pending
    runs = fresh.execute("SELECT published_at, publish_count, offer_count, count(*) AS n FROM schedule_runs "
                         "GROUP BY 1, 2, 3").fetchall()
    assert [(r["published_at"], r["publish_count"], r["offer_count"], r["n"]) for r in runs] == [
        (utc(2027, 1, 4, 10, 0, 5), 1, 1, 450)]
    assert fresh.execute("SELECT count(*) AS n FROM schedule_pending_offers WHERE owner = %s",
                         (OWNER,)).fetchone()["n"] == 0


def test_two_concurrent_passes_never_claim_the_same_schedule(db_url, fresh, utc):
    # Given 300 due schedules
    for _ in range(300):
        make(fresh, utc(2027, 1, 4, 9, 30))
    now = utc(2027, 1, 4, 10, 0, 5)
    # When two claim transactions run at the same time on two connections
    results: list[set] = [set(), set()]
    barrier = threading.Barrier(2)

    def claim(slot: int) -> None:
        c = connect(db_url)
        try:
            with c.transaction():
                barrier.wait()
                messages, _ = claim_batch(c, dispatch_settings(OWNER), now=now)
                results[slot] = {m.schedule_id for m in messages}
                barrier.wait()  # both hold their locks before either commits
        finally:
            c.close()

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    # Then their claims are disjoint, cover everything, and each schedule has exactly one run
    assert results[0].isdisjoint(results[1])
    assert len(results[0]) + len(results[1]) == 300
    per_schedule = fresh.execute("SELECT count(*) AS n FROM schedule_runs GROUP BY schedule_id").fetchall()
    assert len(per_schedule) == 300 and all(r["n"] == 1 for r in per_schedule)


def test_a_refused_publish_is_released_and_published_by_the_next_pass(fresh, utc):
    # Given a due schedule and a queue that refuses every message
    schedule = make(fresh, utc(2027, 1, 4, 9, 30))
    refusing = ListPublisher(refuse_all=True)
    report = dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 10, 0), publisher=refusing)
    assert report.refused == 1 and refusing.sent == []
    run = fresh.execute("SELECT * FROM schedule_runs WHERE schedule_id = %s", (schedule.id,)).fetchone()
    assert run["offered_at"] is None and run["released_at"] is not None
    assert (run["published_at"], run["publish_count"]) == (None, 0)
    # When the next pass runs with a working queue
    working = ListPublisher()
    report = dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 10, 1), publisher=working)
    # Then the released run is offered again (no second run is created)
    assert report.reoffered == 1 and [m.run_id for m in working.sent] == [run["id"]]
    count = fresh.execute("SELECT count(*) AS n FROM schedule_runs").fetchone()["n"]
    assert count == 1


def test_a_batch_partly_refused_keeps_the_accepted_runs_published_and_releases_the_rest(fresh, utc):
    # Given three due schedules and a queue that refuses one of the three messages
    schedules = [make(fresh, utc(2027, 1, 4, 9, 30)) for _ in range(3)]
    refused_schedule = schedules[1].id

    class RefuseOne(ListPublisher):
        def publish(self, messages):
            self.refuse = {m.run_id for m in messages if m.schedule_id == refused_schedule}
            return super().publish(messages)

    first = RefuseOne()
    report = dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 10, 0), publisher=first)
    # Then two are recorded published once and the refused one is released with no accepted offer
    assert (report.published, report.refused) == (2, 1)
    runs = {r["schedule_id"]: r for r in fresh.execute("SELECT * FROM schedule_runs").fetchall()}
    for schedule in schedules:
        run = runs[schedule.id]
        if schedule.id == refused_schedule:
            assert (run["offered_at"], run["published_at"], run["publish_count"]) == (None, None, 0)
            assert run["released_at"] == utc(2027, 1, 4, 10, 0)
        else:
            assert (run["published_at"], run["publish_count"]) == (utc(2027, 1, 4, 10, 0), 1)
    assert fresh.execute("SELECT count(*) AS n FROM schedule_pending_offers WHERE owner = %s",
                         (OWNER,)).fetchone()["n"] == 0
    # When the next pass runs with a working queue
    second = ListPublisher()
    report = dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 10, 1), publisher=second)
    # Then only the released run is offered again, and now counts one accepted offer
    assert report.reoffered == 1 and [m.schedule_id for m in second.sent] == [refused_schedule]
    run = fresh.execute("SELECT * FROM schedule_runs WHERE schedule_id = %s", (refused_schedule,)).fetchone()
    assert (run["offer_count"], run["publish_count"], run["published_at"]) == (2, 1, utc(2027, 1, 4, 10, 1))


def test_a_claim_never_published_is_offered_again_by_the_next_pass(fresh, utc):
    # Given a claim that committed but whose publish never happened (the dispatcher died
    # between its commit and the send)
    schedule = make(fresh, utc(2027, 1, 4, 9, 30))
    with fresh.transaction():
        claim_batch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 10, 0))
    # (its batch's offer is still pending)
    assert fresh.execute("SELECT count(*) AS n FROM schedule_pending_offers WHERE owner = %s AND %s = ANY(run_ids)",
                         (OWNER, fresh.execute("SELECT id FROM schedule_runs").fetchone()["id"])).fetchone()["n"] == 1
    # When a pass runs within the same half minute, it leaves it alone (its sender may still be at work)
    early = ListPublisher()
    assert dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 10, 0, 20), publisher=early).reoffered == 0
    assert early.sent == []
    # When the next minute's pass runs
    publisher = ListPublisher()
    report = dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 10, 1), publisher=publisher)
    # Then it publishes the stranded run at once, and records the publication
    run = fresh.execute("SELECT * FROM schedule_runs WHERE schedule_id = %s", (schedule.id,)).fetchone()
    assert report.reoffered == 1 and [m.run_id for m in publisher.sent] == [run["id"]]
    assert (run["offer_count"], run["publish_count"]) == (2, 1)
    assert run["published_at"] == utc(2027, 1, 4, 10, 1)
    assert fresh.execute("SELECT count(*) AS n FROM schedule_pending_offers WHERE %s = ANY(run_ids)",
                         (run["id"],)).fetchone()["n"] == 0
    event = fresh.execute("SELECT reason FROM schedule_events WHERE run_id = %s AND kind = 'reoffered'",
                          (run["id"],)).fetchone()
    assert event["reason"] == "unpublished"


def test_a_published_run_that_never_started_waits_for_reoffer_after(fresh, utc):
    # Given a run whose message the queue accepted at 10:00 but which never started
    schedule = make(fresh, utc(2027, 1, 4, 9, 30))
    dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 10, 0), publisher=ListPublisher())
    # When passes run before and after reoffer_after elapsed
    early = ListPublisher()
    dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 10, 10), publisher=early)
    late = ListPublisher()
    report = dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 10, 16), publisher=late)
    # Then only the later one offers it again (the queue may still deliver the first message)
    assert early.sent == []
    run = fresh.execute("SELECT * FROM schedule_runs WHERE schedule_id = %s", (schedule.id,)).fetchone()
    assert report.reoffered == 1 and [m.run_id for m in late.sent] == [run["id"]]
    assert (run["offer_count"], run["publish_count"]) == (2, 2)


def test_a_run_offered_the_bounded_number_of_times_settles_failed_and_counts(fresh, utc):
    # Given a run whose message was accepted three times and never started (lost each time)
    schedule = make(fresh, utc(2027, 1, 4, 9, 30))
    now = utc(2027, 1, 4, 10, 0)
    for _ in range(3):
        dispatch(fresh, dispatch_settings(OWNER), now=now, publisher=ListPublisher())
        now += timedelta(minutes=16)
    # When the next pass finds it stranded again
    publisher = ListPublisher()
    report = dispatch(fresh, dispatch_settings(OWNER), now=now, publisher=publisher)
    # Then it is not offered a fourth time but settled failed, and the failure counts in the streak
    runs = fresh.execute("SELECT * FROM schedule_runs WHERE schedule_id = %s AND occurrence_at = %s",
                         (schedule.id, utc(2027, 1, 4, 10, 0))).fetchall()
    assert [(r["state"], r["outcome_code"], r["publish_count"]) for r in runs] == [
        ("failed", "offers_exhausted", 3)]
    assert report.exhausted == 1 and runs[0]["id"] not in {m.run_id for m in publisher.sent}
    assert fresh.execute("SELECT consecutive_failures FROM schedules WHERE id = %s",
                         (schedule.id,)).fetchone()["consecutive_failures"] == 1


def test_an_invalid_definition_pauses_its_schedule_and_the_rest_are_claimed(fresh, utc):
    # Given two due schedules, one whose stored definition no longer validates
    broken = make(fresh, utc(2027, 1, 4, 9, 30))
    good = make(fresh, utc(2027, 1, 4, 9, 30))
    fresh.execute("""UPDATE schedules SET recurrence = '{"cron": "61 * * * *", "timezone": "UTC"}'
                     WHERE id = %s""", (broken.id,))
    # When the dispatcher passes
    publisher = ListPublisher()
    report = dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 1, 4, 10, 0), publisher=publisher)
    # Then the broken one is paused with the reason and the good one is claimed
    row = fresh.execute("SELECT status, pause_reason, next_due_at FROM schedules WHERE id = %s",
                        (broken.id,)).fetchone()
    assert (row["status"], row["pause_reason"], row["next_due_at"]) == ("paused", "definition_invalid", None)
    assert report.paused_invalid == 1
    assert [m.schedule_id for m in publisher.sent] == [good.id]
    event = fresh.execute("SELECT detail FROM schedule_events WHERE schedule_id = %s AND kind = "
                          "'definition_invalid'", (broken.id,)).fetchone()
    assert event["detail"]["field"] == "cron"


def test_a_dst_gap_occurrence_keeps_its_local_date(fresh, utc):
    # Given a daily 02:30 New York schedule
    schedule = make(fresh, utc(2027, 3, 13, 12, 0), rule={"calendar": {"frequency": "daily", "times": ["02:30"]},
                                                        "timezone": "America/New_York"})
    assert schedule.next_due_at == utc(2027, 3, 14, 7, 30)
    # When the dispatcher passes at 07:30 UTC on the day clocks jump
    dispatch(fresh, dispatch_settings(OWNER), now=utc(2027, 3, 14, 7, 30), publisher=ListPublisher())
    run = fresh.execute("SELECT occurrence_at, occurrence_local, dst_shifted FROM schedule_runs").fetchone()
    # Then the run is at 03:30 local, intended 02:30 on 2027-03-14
    assert run["occurrence_at"] == utc(2027, 3, 14, 7, 30)
    assert run["occurrence_local"].isoformat() == "2027-03-14T02:30:00"
    assert run["dst_shifted"] is True
