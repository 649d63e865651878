"""The fault campaign (``python -m timekeeper chaos``) over every pipeline, and its audit.

Campaigns run the local stack (the real handlers, moto queues, the embedded database) for
a simulated day with crashes at the product's crash points, database disconnects and
restarts, duplicate SQS deliveries, publish refusals, stalled consumers and SES throttling
and refusals, then six quiet hours, and must pass the audit.
The audit itself is shown to catch each kind of violation on a campaign's final state.
"""

from __future__ import annotations

import hashlib
import os
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import psycopg
import pytest
from psycopg.rows import dict_row

from timekeeper import faults
from timekeeper.local.chaos import audit
from timekeeper.local.chaos.injector import Campaign, CountingMailer, run_chaos
from timekeeper.local.chaos.records import ChaosOptions, Check, Execution, Stall

SEEDS = (11, 12)


@pytest.fixture
def campaign_database(pg_server_url, monkeypatch, request):
    """A database name for one campaign of this test (created afresh by the campaign)."""
    monkeypatch.setenv("DATABASE_URL", pg_server_url)
    monkeypatch.setenv("TIMEKEEPER_HOME", str(request.getfixturevalue("tmp_path")))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    return f"tk_chaos_{worker}_{hashlib.sha1(request.node.nodeid.encode()).hexdigest()[:10]}"


def _connect(pg_server_url: str, database: str) -> psycopg.Connection:
    info = psycopg.conninfo.conninfo_to_dict(pg_server_url)
    info["dbname"] = database
    return psycopg.connect(psycopg.conninfo.make_conninfo(**info), autocommit=True, row_factory=dict_row)


@pytest.fixture
def own_server(monkeypatch, tmp_path):
    """A campaign on an embedded server of its own (in ``tmp_path``), which it may restart
    without breaking the connections of the session's other tests; stopped afterwards."""
    from timekeeper.local import embedded

    monkeypatch.delenv("DATABASE_URL", raising=False)
    monkeypatch.setenv("TIMEKEEPER_HOME", str(tmp_path))
    yield tmp_path / "pgdata"
    embedded.release_server(tmp_path / "pgdata")


@pytest.mark.parametrize("seed", SEEDS)
def test_a_day_of_random_faults_passes_the_audit(own_server, seed):
    # Refusals at 0.05 per published entry: a day publishes a few hundred messages, so at
    # the default 0.02 about one campaign in fifty drew none and failed the check below.
    # Stalls at 0.1 per consumer invocation: a day has about a hundred invocations, and the
    # campaign is seeded but not reproducible across machines (which invocation draws which
    # number depends on timing), so at the default 0.02 (one to three stalls) about one
    # campaign in eight drew none; at 0.1 it draws 13-24.
    # SES throttling and rejections at 0.2 each per submission, with two units of load: a
    # day then submits over a hundred messages (each load unit's hourly delivery sends to
    # the admin and the analyst; the viewer is suppressed early by the sample's bounce), so
    # each kind's expected count is over 20. Three database restarts: each happens at the
    # first crash point at or after its instant (a sweep every 30 minutes reaches one), so
    # their count is not left to chance. Connections are cut at 0.5 a wall-clock second
    # (the default) by the proxy in front of the database: 15-25 cuts in a campaign.
    result = run_chaos(ChaosOptions(days=1, seed=seed, quiet_hours=6, refuse_rate=0.05, stall_rate=0.1, load=2,
                                    ses_throttle_rate=0.2, ses_reject_rate=0.2, db_restarts=3,
                                    show_progress=False))

    assert [check.failures for check in result.checks if not check.held] == []
    totals = result.fault_totals()
    assert totals.get("crash", 0) >= 10, totals
    assert totals.get("duplicate", 0) >= 10, totals
    assert totals.get("disconnect", 0) >= 1, totals
    assert totals.get("refusal", 0) >= 1, totals
    # And processes stalled past their lease were taken over, and refused afterwards
    assert totals.get("stall", 0) >= 1, totals
    assert any(stall.taken_over for stall in result.stalls), result.stalls
    # And SES throttled and rejected submissions, and the server restarted under the product
    assert totals.get("ses_throttle", 0) >= 1, totals
    assert totals.get("ses_reject", 0) >= 1, totals
    assert totals.get("db_restart", 0) == 3 and len(result.restarts) == 3, (totals, result.notes)
    # And connections were cut at moments no crash point chose
    assert totals.get("cut", 0) >= 3, totals
    # And the API was driven meanwhile: 24 requests, six of each kind, audited above
    assert result.api_requests == {"schedule_run": 6, "delivery_run": 6, "export": 6, "render": 6}
    assert all(check.checked > 0 for check in result.checks if "accounting" not in check.name)


def test_every_crash_point_is_hit_crashes_once_and_the_system_recovers(campaign_database):
    # Six units of load make 24 sweeps due in one minute: one of the two dispatcher
    # partitions claims at least 12 of them (a publish of two batches); the refusals reach
    # the release path; each point crashes at its first hit, then never again.
    result = run_chaos(ChaosOptions(days=1, seed=5, quiet_hours=6, database=campaign_database, load=6,
                                    each_point_once=True, disconnect_rate=0, duplicate_rate=0.05, cut_rate=0,
                                    refuse_rate=0.05, show_progress=False))

    assert {point: result.faults[("crash", point)] for point in faults.CRASH_POINTS} == {
        point: 1 for point in faults.CRASH_POINTS}
    assert [check.failures for check in result.checks if not check.held] == []
    # The session's server is DATABASE_URL's: its restart is skipped, and the result says so
    assert (result.skipped_restarts, result.fault_totals().get("db_restart", 0)) == (1, 0)
    assert "DATABASE_URL" in result.notes[0]


@pytest.fixture(scope="module")
def finished_campaign(pg_server_url, tmp_path_factory):
    """One small campaign whose final state the audit tests tamper with."""
    mp = pytest.MonkeyPatch()
    mp.setenv("DATABASE_URL", pg_server_url)
    mp.setenv("TIMEKEEPER_HOME", str(tmp_path_factory.mktemp("chaos-home")))
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    database = f"tk_chaos_{worker}_audit"
    result = run_chaos(ChaosOptions(days=1, seed=3, quiet_hours=6, database=database, show_progress=False))
    mp.undo()
    assert result.passed, [c.failures for c in result.checks if not c.held]
    return database


@pytest.fixture
def tampered(pg_server_url, finished_campaign):
    """The finished campaign's database, in a transaction rolled back after the test."""
    conn = _connect(pg_server_url, finished_campaign)
    conn.execute("BEGIN")
    yield conn
    conn.execute("ROLLBACK")
    conn.close()


def test_the_audit_catches_a_missing_occurrence(tampered):
    assert audit._occurrences(tampered).held
    tampered.execute("""UPDATE schedule_runs SET occurrence_at = occurrence_at + interval '1 minute'
                         WHERE id = (SELECT id FROM schedule_runs WHERE trigger = 'scheduled'
                                      ORDER BY occurrence_at DESC LIMIT 1 OFFSET 5)""")
    assert not audit._occurrences(tampered).held


def test_the_audit_owes_a_windowed_occurrence_once_its_given_instant_has_passed(tampered):
    # Given the sample's windowed sweep (a run after its first), as if the campaign had ended after one of its
    # occurrences but before the instant its window gave the run (the run not there yet)
    run = tampered.execute("""SELECT r.schedule_id, r.occurrence_at, r.due_at FROM schedule_runs r
                                JOIN schedules s ON s.id = r.schedule_id
                               WHERE s.recurrence ? 'window_minutes' AND r.trigger = 'scheduled'
                                 AND r.due_at > r.occurrence_at + interval '1 minute'
                                 AND EXISTS (SELECT FROM schedule_runs e WHERE e.schedule_id = r.schedule_id
                                                AND e.occurrence_at < r.occurrence_at)
                               ORDER BY r.occurrence_at LIMIT 1""").fetchone()
    assert run is not None  # the campaign's samples have a windowed schedule
    tampered.execute("DELETE FROM schedule_runs WHERE schedule_id = %s AND occurrence_at >= %s",
                     (run["schedule_id"], run["occurrence_at"]))
    tampered.execute("UPDATE schedules SET next_due_at = %s WHERE id = %s", (run["due_at"], run["schedule_id"]))
    # Then the audit, at an end inside the window, owes nothing yet; after the given instant it owes the run
    assert audit._occurrences(tampered, last_pass=run["due_at"] - timedelta(seconds=1)).failures == []
    late = audit._occurrences(tampered, last_pass=run["due_at"] + timedelta(seconds=1))
    assert any(f"occurrence {run['occurrence_at']:%Y-%m-%d %H:%M} has 0 runs" in failure for failure in late.failures)


def test_the_audit_catches_an_unfinished_run(tampered):
    assert audit._terminal(tampered).held
    tampered.execute("""UPDATE schedule_runs SET state = 'running', finished_at = NULL
                         WHERE id = (SELECT id FROM schedule_runs LIMIT 1)""")
    assert not audit._terminal(tampered).held


def test_the_audit_catches_a_streak_the_history_does_not_imply(tampered):
    assert audit._streaks(tampered).held
    tampered.execute("""UPDATE schedules SET consecutive_failures = consecutive_failures + 1
                         WHERE id = (SELECT schedule_id FROM schedule_runs WHERE state = 'succeeded' LIMIT 1)""")
    assert not audit._streaks(tampered).held


def test_the_audit_takes_an_ownerless_pause_as_no_run_s_doing_and_still_catches_a_pause_without_cause(tampered):
    # The owner hand-off pauses a schedule whose runs imply nothing: the pause is not the runs'
    schedule = """(SELECT schedule_id FROM schedule_runs r JOIN schedules s ON s.id = r.schedule_id
                    WHERE r.state = 'succeeded' AND s.status = 'active'
                      AND NOT EXISTS (SELECT 1 FROM schedule_events e WHERE e.schedule_id = s.id
                                        AND e.kind = 'resumed') LIMIT 1)"""
    tampered.execute(f"UPDATE schedules SET status = 'paused', pause_reason = 'ownerless', next_due_at = NULL "
                     f"WHERE id = {schedule}")
    assert audit._streaks(tampered).held
    # A pause for a reason the history would have to imply is still caught
    tampered.execute("UPDATE schedules SET pause_reason = 'consecutive_failures' WHERE pause_reason = 'ownerless'")
    assert not audit._streaks(tampered).held


def test_the_api_audit_catches_a_500_a_key_naming_two_runs_and_a_run_nobody_asked_for(tampered):
    from datetime import UTC, datetime

    from timekeeper.local.chaos.api import ApiDriver, ApiRequest, ApiTargets, audit_api

    # (a schedule the campaign's own API requests did not run)
    schedule = tampered.execute("""SELECT r.id, r.schedule_id FROM schedule_runs r
                                    WHERE r.trigger = 'scheduled'
                                      AND NOT EXISTS (SELECT 1 FROM schedule_runs m WHERE m.schedule_id = r.schedule_id
                                                        AND m.trigger = 'manual') LIMIT 1""").fetchone()
    at = datetime(2027, 3, 1, 12, tzinfo=UTC)
    path = f"/schedules/{schedule['schedule_id']}/run"
    driver = ApiDriver([], ApiTargets(), 1, invoke=None)
    assert audit_api(tampered, driver).held
    # A run the API accepted, and nothing else manual on the schedule: held
    tampered.execute("UPDATE schedule_runs SET trigger = 'manual' WHERE id = %s", (schedule["id"],))
    driver.requests = [ApiRequest("schedule_run", path, "k1", at, "ws", [503, 201], [str(schedule["id"])])]
    assert audit_api(tampered, driver).held
    # A 500 among the answers, one key naming two runs, a manual run no accepted key made:
    # each caught
    run = str(schedule["id"])
    for request in (ApiRequest("schedule_run", path, "k1", at, "ws", [500, 201], [run]),
                    ApiRequest("schedule_run", path, "k1", at, "ws", [201, 200], [run, str(uuid4())]),
                    ApiRequest("schedule_run", path, "k2", at, "ws", [201], [str(uuid4())])):
        driver.requests = [request]
        assert not audit_api(tampered, driver).held, request


def test_the_streak_history_places_a_takeovers_settlement_where_the_process_stalled(tampered):
    # Given a schedule's last six runs: four failures, a success a takeover settled on its
    # clock past the lease, and a failure the simulation settled before that instant
    # (while the stalled process was frozen) but with an earlier finished_at
    schedule = tampered.execute("""SELECT schedule_id FROM schedule_runs WHERE trigger = 'scheduled'
                                    GROUP BY schedule_id HAVING count(*) >= 6 AND bool_and(state = 'succeeded')
                                    LIMIT 1""").fetchone()["schedule_id"]
    runs = tampered.execute("""SELECT id, finished_at FROM schedule_runs WHERE schedule_id = %s
                                ORDER BY finished_at DESC LIMIT 6""", (schedule,)).fetchall()[::-1]
    failed = [r["id"] for r in runs[:4]] + [runs[5]["id"]]
    tampered.execute("""UPDATE schedule_runs SET state = 'failed', outcome_code = 'unexpected_error', error = 'x'
                         WHERE id = ANY(%s)""", (failed,))
    resumed_at = runs[5]["finished_at"] + timedelta(seconds=1)
    tampered.execute("UPDATE schedule_runs SET finished_at = %s WHERE id = %s", (resumed_at, runs[4]["id"]))
    tampered.execute("UPDATE schedules SET consecutive_failures = 1, status = 'active', pause_reason = NULL "
                     "WHERE id = %s", (schedule,))
    name = tampered.execute("SELECT name FROM schedules WHERE id = %s", (schedule,)).fetchone()["name"] + ":"

    def mine(check: Check) -> list[str]:
        return [f for f in check.failures if f.startswith(name)]

    # Then by finished_at alone the history implies five failures in a row (a pause) ...
    assert mine(audit._streaks(tampered))
    # ... and in commit order (the takeover committed at the instant its process stalled) it holds
    campaign = Campaign(ChaosOptions())
    stalled_at = runs[5]["finished_at"] - timedelta(seconds=30)
    campaign.result.stalls = [Stall(runs[4]["id"], 1, stalled_at, resumed_at, taken_over=True)]
    assert not mine(audit._streaks(tampered, campaign))


def test_the_audit_catches_an_effect_of_a_run_that_did_not_succeed(tampered):
    assert audit._accounting_effects(tampered).held
    run = tampered.execute("SELECT id, workspace_id FROM schedule_runs WHERE state = 'failed' LIMIT 1").fetchone()
    if run is None:
        run = tampered.execute("""UPDATE schedule_runs SET state = 'failed', outcome_code = 'x'
                                   WHERE id = (SELECT id FROM schedule_runs WHERE state = 'succeeded' LIMIT 1)
                                   RETURNING id, workspace_id""").fetchone()
    plan = tampered.execute("SELECT id, workspace_id, currency FROM billing_plans LIMIT 1").fetchone()
    tampered.execute("""INSERT INTO draft_invoices (workspace_id, billing_plan_id, billing_date, amount, currency,
                                                    prepared_at, prepared_by_run_id)
                        VALUES (%s, %s, '1999-01-01', 1, %s, now(), %s)""",
                     (plan["workspace_id"], plan["id"], plan["currency"], run["id"]))
    assert not audit._accounting_effects(tampered).held


def test_the_audit_catches_a_second_message_outside_the_window(tampered):
    campaign = Campaign(ChaosOptions())
    campaign.mailer = CountingMailer(None, None, lambda: 0)
    # (a delivery's message: the outbox also holds owner notices, which name no run)
    sent = tampered.execute("""SELECT run_id, user_id, provider_message_id FROM query_delivery_outbox
                                WHERE provider_message_id IS NOT NULL AND run_id IS NOT NULL
                                ORDER BY run_id, user_id LIMIT 1""").fetchone()
    key = (str(sent["run_id"]), sent["user_id"])
    campaign.mailer.sends[key] = [("unrecorded", 7), (sent["provider_message_id"], 8)]
    campaign.failed_invocations = {7}  # the first send's attempt died before recording it: the window
    mine = f"run {key[0]} recipient {key[1]}:"
    assert not [f for f in audit._delivery_effects(tampered, campaign).failures if f.startswith(mine)]
    campaign.failed_invocations = set()  # ... but an attempt that lived sent it twice
    assert [f for f in audit._delivery_effects(tampered, campaign).failures if f.startswith(mine)]


def test_an_unrecorded_notice_message_passes_only_when_its_pass_lost_its_database(tampered):
    # Given an owner notice message the campaign recorded (the people pass sent it), the
    # only one its person got (the audit compares each person's messages as a whole)
    sent = tampered.execute("""SELECT u.email, min(o.provider_message_id) AS provider_message_id
                                 FROM query_delivery_outbox o JOIN users u ON u.id = o.user_id
                                WHERE o.run_id IS NULL AND o.provider_message_id IS NOT NULL
                                GROUP BY u.email HAVING count(*) = 1 LIMIT 1""").fetchone()
    if sent is None:  # the campaign told nobody: make one recorded notice message
        sent = tampered.execute("""UPDATE query_delivery_outbox SET run_id = NULL, provider_message_id = 'notice-1',
                                           communication_key = 'notice:' || communication_key
                                    WHERE communication_key = (
                                        SELECT communication_key FROM query_delivery_outbox
                                         WHERE provider_message_id IS NOT NULL
                                           AND user_id NOT IN (SELECT user_id FROM query_delivery_outbox
                                                                WHERE run_id IS NULL)
                                         LIMIT 1)
                                    RETURNING (SELECT email FROM users WHERE id = user_id) AS email,
                                              provider_message_id""").fetchone()
    campaign = Campaign(ChaosOptions())
    campaign.mailer = CountingMailer(None, None, lambda: 0)
    mine = f"notice messages to {sent['email']}:"
    # When a first submission was accepted but not recorded by a pass that lost its database
    campaign.mailer.notice_sends[sent["email"]] = [("unrecorded", 3), (sent["provider_message_id"], 4)]
    campaign.failed_invocations = {3}
    assert not [f for f in audit._delivery_effects(tampered, campaign).failures if f.startswith(mine)]
    # ... but a pass that kept its database mailed the person twice
    campaign.failed_invocations = set()
    assert [f for f in audit._delivery_effects(tampered, campaign).failures if f.startswith(mine)]
    # ... and a recorded message nobody sent is caught as well
    campaign.mailer.notice_sends[sent["email"]] = [("another", 4)]
    assert [f for f in audit._delivery_effects(tampered, campaign).failures if f.startswith(mine)]


def test_the_audit_catches_a_rejected_recipient_submitted_again(tampered):
    # Given a recipient the provider rejected and the journal recorded so
    row = tampered.execute("""UPDATE query_deliveries SET status = 'failed', error_code = 'rejected'
                               WHERE (run_id, user_id) = (SELECT run_id, user_id FROM query_deliveries
                                                           WHERE status = 'sent' LIMIT 1)
                               RETURNING run_id, user_id""").fetchone()
    key = (str(row["run_id"]), row["user_id"])
    mine = f"run {key[0]} recipient {key[1]}:"
    campaign = Campaign(ChaosOptions())
    campaign.mailer = CountingMailer(None, None, lambda: 0)
    campaign.mailer.refused[key] = [("Throttling", 6, 0), ("MessageRejected", 7, 0)]
    assert not [f for f in audit._delivery_effects(tampered, campaign).failures if f.startswith(mine)]
    # When a later attempt submitted it again (and the provider accepted it) ...
    campaign.mailer.sends[key] = [("accepted-later", 8)]
    assert [f for f in audit._delivery_effects(tampered, campaign).failures if "after the rejection" in f]
    # ... or rejected it again, while both attempts lived
    campaign.mailer.sends.pop(key)
    campaign.mailer.refused[key].append(("MessageRejected", 8, 0))
    assert [f for f in audit._delivery_effects(tampered, campaign).failures if "permanent refusal was retried" in f]
    # And a rejection an attempt that lived made must be what the journal recorded
    tampered.execute("UPDATE query_deliveries SET error_code = 'throttled' WHERE run_id = %s AND user_id = %s",
                     (row["run_id"], row["user_id"]))
    assert [f for f in audit._delivery_effects(tampered, campaign).failures
            if f.startswith(mine) and "rejected by an attempt that lived" in f]


def test_the_audit_catches_an_attempt_that_ran_beside_a_killed_one():
    campaign = Campaign(ChaosOptions())
    run, start = uuid4(), datetime(2027, 3, 1, tzinfo=UTC)
    lease = timedelta(minutes=5)
    campaign.executions = [Execution(run, 1, start, start + lease, 1, killed=True),
                           Execution(run, 2, start + lease, start + 2 * lease, 2)]
    assert audit._no_concurrent_execution(campaign).held
    campaign.executions[1] = Execution(run, 2, start + timedelta(minutes=1), start + lease, 2)
    assert not audit._no_concurrent_execution(campaign).held
    campaign.executions[1] = Execution(run, 1, start + lease, start + 2 * lease, 2)  # the same fencing token
    assert not audit._no_concurrent_execution(campaign).held


def test_an_attempt_may_follow_at_once_a_killed_one_whose_settlement_committed():
    # The invocation died after attempt 1's outcome (or its lease given back for a retry)
    # committed, e.g. at the acknowledgement or in a later run of the batch: attempt 2 of a
    # retry within the receives may start a minute later without running beside it.
    campaign = Campaign(ChaosOptions())
    run, start = uuid4(), datetime(2027, 3, 1, tzinfo=UTC)
    lease = timedelta(minutes=15)
    campaign.executions = [Execution(run, 1, start, start + lease, 1, settled=True, killed=True),
                           Execution(run, 2, start + timedelta(minutes=1), start + timedelta(minutes=16), 2)]
    assert audit._no_concurrent_execution(campaign).held


def test_a_campaign_marks_the_executions_whose_settlement_committed():
    campaign = Campaign(ChaosOptions(crash_rate=0, disconnect_rate=0))
    now = datetime(2027, 3, 1, tzinfo=UTC)
    started = type("RunContext", (), {"run_id": uuid4(), "attempt": 1, "now": now, "owner": "accounting"})()
    campaign("consumer.handler_started", started)
    campaign("consumer.after_settle_commit", None)
    second = type("RunContext", (), {"run_id": uuid4(), "attempt": 1, "now": now, "owner": "accounting"})()
    campaign("consumer.handler_started", second)
    assert [e.settled for e in campaign.executions] == [True, False]
