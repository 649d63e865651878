"""Every attempt of a run on its page, through the real consumer: attempts that failed and
gave their lease back, and a stalled attempt taken over, are kept beside the run
(``schedule_run_attempts``); a run settled on its first attempt writes nothing there."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.api.conftest import NOW
from tests.support import ListPublisher, dispatch_settings
from timekeeper.schedules import service
from timekeeper.schedules.consumer import ConsumerSettings, Delivery, RetryLater, process_batch
from timekeeper.schedules.dispatcher import dispatch
from timekeeper.schedules.work import Succeeded, WorkKindRegistry

OWNER = "accounting"
SETTINGS = ConsumerSettings(owner=OWNER, lease=timedelta(minutes=2), max_receive_count=5, failure_threshold=5)
START = NOW.replace(minute=0, second=0, microsecond=0) - timedelta(hours=2)


@pytest.fixture
def db(conn):
    conn.execute("TRUNCATE schedule_run_attempts, schedule_run_actions, schedule_events, schedule_runs, schedules "
                 "CASCADE")
    return conn


class Flaky:
    """A work kind whose handler fails with ``errors`` in turn, then succeeds."""

    def __init__(self, *errors: str) -> None:
        self.errors = list(errors)
        self.registry = WorkKindRegistry()
        self.registry.register(OWNER, "test.flaky", self.handle)

    def handle(self, ctx):
        """Idempotency: test kind, no effect."""
        if self.errors:
            raise RuntimeError(self.errors.pop(0))
        return Succeeded({"attempt": ctx.attempt})


def due_run(db, workspace_id):
    """One hourly schedule of ``workspace_id`` due at START; its run message."""
    service.create_schedule(db, workspace_id=workspace_id, owner=OWNER, work_kind="test.flaky",
                            recurrence={"cron": "0 * * * *", "timezone": "UTC"}, actor="owner-1",
                            now=START - timedelta(minutes=30), name="Flaky sweep")
    publisher = ListPublisher()
    dispatch(db, dispatch_settings(OWNER), now=START, publisher=publisher)
    [message] = publisher.sent
    return message


def receive(db, kind, message, receive_count, now):
    [result] = process_batch(db, [Delivery(f"m{receive_count}", message, receive_count)], now=now,
                             registry=kind.registry, settings=SETTINGS)
    return result


def kept(db, run_id):
    return db.execute("SELECT attempt, ended, error FROM schedule_run_attempts WHERE run_id = %s ORDER BY attempt",
                      (run_id,)).fetchall()


def test_a_run_that_failed_twice_then_succeeded_shows_its_three_attempts_with_both_errors(db, call, caller):
    kind = Flaky("bank feed timed out", "bank feed refused")
    message = due_run(db, caller.workspace_id)
    at = [START + timedelta(minutes=n) for n in (0, 1, 3)]
    assert isinstance(receive(db, kind, message, 1, at[0]), RetryLater)
    assert isinstance(receive(db, kind, message, 2, at[1]), RetryLater)
    assert receive(db, kind, message, 3, at[2]).action == "settled"

    reply = call("GET", f"/runs/{message.run_id}")

    assert reply.status == 200, reply.body
    history = reply.body["attempt_history"]
    assert [(a["number"], a["receive_count"], a["ended"]) for a in history] == [
        (1, 1, "retried"), (2, 2, "retried"), (3, 3, "settled")]
    assert ["bank feed timed out" in (a["error"] or "") for a in history] == [True, False, False]
    assert ["bank feed refused" in (a["error"] or "") for a in history] == [False, True, False]
    assert [a["started_at"] for a in history] == [t.strftime("%Y-%m-%dT%H:%M:%SZ") for t in at]
    assert history[0]["finished_at"] == history[0]["started_at"]  # it failed at once, in simulated time
    assert history[-1] == reply.body["latest_attempt"] and reply.body["state"] == "succeeded"


def test_a_run_settled_on_its_first_attempt_keeps_no_attempt_row(db, call, caller):
    message = due_run(db, caller.workspace_id)
    assert receive(db, Flaky(), message, 1, START).action == "settled"

    assert kept(db, message.run_id) == []
    history = call("GET", f"/runs/{message.run_id}").body["attempt_history"]
    # (a first attempt started with its batch keeps no receive count: nothing more is written)
    assert [(a["number"], a["receive_count"], a["ended"], a["error"]) for a in history] == [
        (1, None, "settled", None)]
    assert history[0]["started_at"] == START.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_a_stalled_attempt_taken_over_is_kept(db, call, caller):
    message = due_run(db, caller.workspace_id)
    # The first receive started the run and its process died (no outcome, the lease runs out)
    db.execute("UPDATE schedule_runs SET state = 'running', attempts = 1, lease_until = %s, "
               "attempt_started_at = %s, attempt_receive_count = 1 WHERE id = %s",
               (START + SETTINGS.lease, START, message.run_id))
    db.commit()
    later = START + SETTINGS.lease + timedelta(seconds=1)
    assert receive(db, Flaky(), message, 2, later).action == "settled"

    assert kept(db, message.run_id) == [{"attempt": 1, "ended": "taken_over", "error": None}]
    history = call("GET", f"/runs/{message.run_id}").body["attempt_history"]
    assert [(a["number"], a["ended"]) for a in history] == [(1, "taken_over"), (2, "settled")]
    assert history[0]["finished_at"] == (START + SETTINGS.lease).strftime("%Y-%m-%dT%H:%M:%SZ")  # its lease's end


def test_an_attempt_row_and_an_action_go_with_their_run(db, caller):
    kind = Flaky("once")
    message = due_run(db, caller.workspace_id)
    receive(db, kind, message, 1, START)
    assert len(kept(db, message.run_id)) == 1
    # (an operator's action on the run goes with it too; the audit log keeps its copy)
    db.execute("INSERT INTO schedule_run_actions (run_id, schedule_id, workspace_id, action, actor, reason, at) "
               "SELECT id, schedule_id, workspace_id, 'fail', 'ops-1', 'stuck', %s FROM schedule_runs WHERE id = %s",
               (START, message.run_id))
    db.execute("DELETE FROM schedule_events WHERE run_id = %s", (message.run_id,))
    db.execute("UPDATE schedules SET last_run_id = NULL")
    db.execute("DELETE FROM schedule_runs WHERE id = %s", (message.run_id,))
    assert kept(db, message.run_id) == []
    assert db.execute("SELECT count(*) AS n FROM schedule_run_actions").fetchone()["n"] == 0
    assert db.execute("SELECT count(*) AS n FROM audit_events WHERE subject_id = %s",
                      (str(message.run_id),)).fetchone()["n"] == 1
