"""A run's page and the operators' actions on it through the resolver on the real database
(the API's walled login): the page shows the run, its schedule and attempt; another
workspace's run is 404 (staff reach any); retry, cancel and settle need a reason, take
effect on the run and are recorded beside it with the actor and the reason."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest

from tests.api.conftest import NOW, Caller, enrol
from timekeeper.schedules import service
from timekeeper.topology import ACCOUNTING

STAFF = Caller(user_id="staff-1", roles="platform:staff")
SWEEP = {"cron": "0 * * * *", "timezone": "Europe/Berlin"}
LONG_AGO = NOW - ACCOUNTING.reoffer_after - timedelta(minutes=1)


@pytest.fixture
def db(conn):
    conn.execute("TRUNCATE schedule_run_actions, schedule_events, schedule_runs, schedules CASCADE")
    return conn


@pytest.fixture
def operator(caller):
    return Caller(user_id="operator-1", workspace_id=caller.workspace_id,
                  roles="schedules:read,schedules:run,schedules:admin")


def seed_run(db, workspace_id, *, key="k", **columns):
    """A schedule of ``workspace_id`` (an hourly accounting sweep in Berlin) and one run of it."""
    sweep = service.create_schedule(db, workspace_id=workspace_id, owner="accounting",
                                    work_kind="reconciliation.sweep", actor="owner-1", now=NOW - timedelta(days=1),
                                    recurrence=SWEEP, name="Nightly sweep")
    columns = {"state": "queued", **columns}
    names = ", ".join(columns)
    placeholders = ", ".join(["%s"] * len(columns))
    run_id = db.execute(
        f"""INSERT INTO schedule_runs (schedule_id, workspace_id, owner, work_kind, occurrence_key, occurrence_at,
                   occurrence_local, dst_shifted, trigger, definition_version, queued_at, {names})
            VALUES (%s, %s, 'accounting', 'reconciliation.sweep', %s, %s, %s, true, 'scheduled', 1, %s,
                    {placeholders}) RETURNING id""",
        (sweep.id, workspace_id, key, LONG_AGO, LONG_AGO.replace(tzinfo=None), LONG_AGO,
         *columns.values())).fetchone()["id"]
    db.commit()
    return sweep, run_id


def test_a_run_page_shows_the_run_its_schedule_and_its_failed_attempt(db, call, caller):
    sweep, run_id = seed_run(db, caller.workspace_id, state="failed", attempts=3, started_at=LONG_AGO,
                             attempt_started_at=LONG_AGO, attempt_receive_count=3,
                             finished_at=LONG_AGO + timedelta(seconds=42), outcome_code="reconciliation_failed",
                             error="bank feed unreachable", skipped_backlog=2)

    reply = call("GET", f"/runs/{run_id}")

    assert reply.status == 200, reply.body
    page = reply.body
    assert (page["schedule_id"], page["schedule_name"], page["state"], page["outcome_code"], page["error"]) == (
        str(sweep.id), "Nightly sweep", "failed", "reconciliation_failed", "bank feed unreachable")
    assert (page["dst_shifted"], page["timezone"], page["skipped_backlog"], page["message_id"]) == (
        True, "Europe/Berlin", 2, str(run_id))
    assert page["latest_attempt"] == {
        "number": 3, "consumer": "timekeeper-accounting-runs", "receive_count": 3,
        "started_at": "2027-03-01T11:44:00Z", "finished_at": "2027-03-01T11:44:42Z", "duration_s": 42.0,
        "lease_until": None, "ended": "settled", "error": "bank feed unreachable"}
    assert page["attempt_history"] == [page["latest_attempt"]]  # the earlier two were not kept (seeded row)
    assert (page["stuck"], page["retry_allowed"], page["actions"]) == (None, True, [])


def test_an_attempt_started_and_settled_in_one_batch_has_no_measured_duration(db, call, caller):
    # The consumer stamps both ends with its batch's one clock reading: a duration of 0 would be made up
    _, run_id = seed_run(db, caller.workspace_id, state="succeeded", attempts=1, started_at=LONG_AGO,
                         attempt_started_at=LONG_AGO, finished_at=LONG_AGO, outcome_code="ok")

    reply = call("GET", f"/runs/{run_id}")

    assert reply.status == 200, reply.body
    attempt = reply.body["latest_attempt"]
    assert (attempt["started_at"], attempt["finished_at"], attempt["duration_s"]) == (
        "2027-03-01T11:44:00Z", "2027-03-01T11:44:00Z", None)


def test_another_workspaces_run_is_not_found_but_staff_open_it(db, call, caller):
    other = uuid.uuid4()
    enrol(db, "someone", other)  # the workspace in the directory, whose staff reads record the read
    _, run_id = seed_run(db, other)

    assert call("GET", f"/runs/{run_id}").status == 404
    assert call("POST", f"/runs/{run_id}/cancel", {"reason": "x"}).status == 403  # no admin role: refused first
    other_admin = Caller(workspace_id=caller.workspace_id, roles="schedules:admin")
    assert call("POST", f"/runs/{run_id}/cancel", {"reason": "x"}, as_=other_admin).status == 404
    assert call("POST", f"/runs/{run_id}/retry", {"reason": "x"}).status == 404
    staff = call("GET", f"/runs/{run_id}", as_=STAFF)
    assert (staff.status, staff.body["id"], staff.body["stuck"]) == (200, str(run_id), "not_published")
    read = db.execute("SELECT actor, what, detail FROM staff_reads WHERE workspace_id = %s",
                      (staff.body["workspace_id"],)).fetchall()
    assert [(r["actor"], r["what"], r["detail"]) for r in read] == [("staff-1", "run", {"run_id": str(run_id)})]
    assert call("GET", f"/runs/{uuid.uuid4()}", as_=STAFF).status == 404


def test_a_run_page_needs_a_role_that_reads_schedules(db, call, caller):
    _, run_id = seed_run(db, caller.workspace_id)
    reply = call("GET", f"/runs/{run_id}", as_=Caller(workspace_id=caller.workspace_id, roles="queries:read"))
    assert (reply.status, reply.body["code"]) == (403, "forbidden")


@pytest.mark.parametrize("action", ["retry", "cancel", "fail"])
@pytest.mark.parametrize("body", [{}, {"reason": ""}, {"reason": "   "}, {"reason": "\u200b\u2060"}])
def test_every_action_needs_a_reason(db, call, operator, action, body):
    _, run_id = seed_run(db, operator.workspace_id)
    reply = call("POST", f"/runs/{run_id}/{action}", body, as_=operator)
    assert (reply.status, reply.body["code"], reply.body.get("field")) == (422, "validation_error", "reason")
    assert db.execute("SELECT count(*) AS n FROM schedule_run_actions").fetchone()["n"] == 0


def test_retry_queues_a_manual_run_of_the_schedule_and_records_who_and_why(db, call, operator, publisher):
    sweep, run_id = seed_run(db, operator.workspace_id, state="failed", attempts=1, started_at=LONG_AGO,
                             finished_at=LONG_AGO, outcome_code="reconciliation_failed")

    reply = call("POST", f"/runs/{run_id}/retry", {"reason": "  bank feed is back  "}, as_=operator,
                 headers={"Idempotency-Key": "retry-1"})

    assert reply.status == 202, reply.body
    new_id = reply.body["run_id"]
    assert (reply.body["retried_run_id"], reply.body["created"]) == (str(run_id), True)
    row = db.execute("SELECT schedule_id, trigger, state, requested_by, occurrence_at, occurrence_local "
                     "FROM schedule_runs WHERE id = %s", (new_id,)).fetchone()
    # The new run does the same occurrence again (the work kind sees the retried run's instant)
    assert dict(row) == {"schedule_id": sweep.id, "trigger": "manual", "state": "queued",
                         "requested_by": "operator-1", "occurrence_at": LONG_AGO,
                         "occurrence_local": LONG_AGO.replace(tzinfo=None)}
    assert [str(m.run_id) for m in publisher.sent] == [new_id]
    [action] = call("GET", f"/runs/{run_id}", as_=operator).body["actions"]
    assert (action["action"], action["actor"], action["reason"], action["detail"]["run_id"]) == (
        "retry", "operator-1", "bank feed is back", new_id)
    # The new run names the run it retries, who asked and why; the retried one is no retry
    retry_of = call("GET", f"/runs/{new_id}", as_=operator).body["retry_of"]
    assert (retry_of["run_id"], retry_of["actor"], retry_of["reason"]) == (str(run_id), "operator-1",
                                                                          "bank feed is back")
    assert call("GET", f"/runs/{run_id}", as_=operator).body["retry_of"] is None
    # The schedule's Run now request names the run it retries, in its history and in the audit
    # log, where it pairs with the run's record by that id (not by who and when)
    [event] = db.execute("SELECT detail FROM schedule_events WHERE run_id = %s AND kind = 'run_requested'",
                         (new_id,)).fetchall()
    assert event["detail"] == {"retry_of": str(run_id)}
    audited = db.execute("SELECT kind, subject_id, after ->> 'retry_of' AS retry_of FROM audit_events "
                         "WHERE workspace_id = %s AND kind IN ('run.retried', 'schedule.run_requested') ORDER BY id",
                         (operator.workspace_id,)).fetchall()
    assert [tuple(a.values()) for a in audited] == [("schedule.run_requested", str(sweep.id), str(run_id)),
                                                    ("run.retried", str(run_id), None)]
    # A repeat with the same key answers the same run and records nothing more
    again = call("POST", f"/runs/{run_id}/retry", {"reason": "  bank feed is back  "}, as_=operator,
                 headers={"Idempotency-Key": "retry-1"})
    assert (again.status, again.body["run_id"], again.body["created"]) == (202, new_id, False)
    assert db.execute("SELECT count(*) AS n FROM schedule_run_actions").fetchone()["n"] == 1
    # ... marked as a replay, as every replayed answer is (the first answer was not)
    assert (again.headers.get("idempotent-replayed"), reply.headers.get("idempotent-replayed")) == ("true", None)


def test_cancel_settles_a_queued_run_as_cancelled_and_refuses_one_that_is_not_queued(db, call, operator):
    sweep, run_id = seed_run(db, operator.workspace_id, published_at=NOW, offered_at=NOW)

    reply = call("POST", f"/runs/{run_id}/cancel", {"reason": "duplicate of a manual run"}, as_=operator,
                 headers={"Idempotency-Key": "cancel-1"})

    assert reply.status == 200, reply.body
    assert (reply.body["action"], reply.body["actor"], reply.body["reason"]) == (
        "cancel", "operator-1", "duplicate of a manual run")
    row = db.execute("SELECT state, outcome_code, finished_at FROM schedule_runs WHERE id = %s", (run_id,)).fetchone()
    assert (row["state"], row["outcome_code"], row["finished_at"]) == ("skipped", "cancelled", NOW)
    # The workspace's audit log has the action, with who and why
    audited = db.execute("SELECT actor, kind, subject_id, reason, after ->> 'schedule_id' AS schedule_id "
                         "FROM audit_events WHERE workspace_id = %s AND area = 'run'",
                         (operator.workspace_id,)).fetchall()
    assert [dict(a) for a in audited] == [{"actor": "operator-1", "kind": "run.cancelled", "subject_id": str(run_id),
                                           "reason": "duplicate of a manual run", "schedule_id": str(sweep.id)}]
    failures = db.execute("SELECT consecutive_failures FROM schedules WHERE id = %s", (sweep.id,)).fetchone()
    assert failures["consecutive_failures"] == 0
    # The same request repeated with its key answers the recorded action; a new one is refused
    repeat = call("POST", f"/runs/{run_id}/cancel", {"reason": "duplicate of a manual run"}, as_=operator,
                  headers={"Idempotency-Key": "cancel-1"})
    assert (repeat.status, repeat.body["id"]) == (200, reply.body["id"])
    again = call("POST", f"/runs/{run_id}/cancel", {"reason": "again"}, as_=operator)
    assert (again.status, again.body["code"]) == (409, "not_queued")


def test_settle_fails_a_run_whose_lease_ended_and_refuses_a_healthy_one(db, call, operator):
    _, stuck = seed_run(db, operator.workspace_id, key="stuck", state="running", attempts=2, started_at=LONG_AGO,
                        published_at=LONG_AGO, lease_until=NOW - timedelta(seconds=1))
    healthy = db.execute(
        """INSERT INTO schedule_runs (schedule_id, workspace_id, owner, work_kind, occurrence_key, occurrence_at,
                  occurrence_local, trigger, definition_version, queued_at, state, attempts, started_at, lease_until)
           SELECT schedule_id, workspace_id, owner, work_kind, 'healthy', occurrence_at, occurrence_local, trigger,
                  1, queued_at, 'running', 1, %s, %s FROM schedule_runs WHERE id = %s RETURNING id""",
        (NOW, NOW + timedelta(minutes=5), stuck)).fetchone()["id"]
    db.commit()

    refused = call("POST", f"/runs/{healthy}/fail", {"reason": "looks stuck"}, as_=operator)
    assert (refused.status, refused.body["code"]) == (409, "not_stuck")

    reply = call("POST", f"/runs/{stuck}/fail", {"reason": "consumer crashed at 03:00"}, as_=STAFF)
    assert reply.status == 200, reply.body
    assert (reply.body["action"], reply.body["actor"], reply.body["detail"]["why"]) == (
        "fail", "staff-1", "lease_expired")
    row = db.execute("SELECT state, outcome_code, error FROM schedule_runs WHERE id = %s", (stuck,)).fetchone()
    assert (row["state"], row["outcome_code"], row["error"]) == (
        "failed", "settled_by_operator", "settled by an operator: consumer crashed at 03:00")
    events = [e["kind"] for e in call("GET", f"/runs/{stuck}", as_=operator).body["events"]]
    assert events == ["settled"]


def test_a_retry_of_a_kind_run_from_its_own_route_is_refused(call, analyst, publisher):
    from tests.api.test_own_route_kinds import DELIVERY

    who, query_id = analyst
    created = call("POST", "/query-schedules", {**DELIVERY, "source": {"kind": "query", "query_id": str(query_id)},
                                                "recipients": [who.user_id]}, as_=who)
    assert created.status == 201, created.body
    ran = call("POST", f"/query-schedules/{created.body['id']}/run", as_=who)
    assert ran.status == 202, ran.body
    run_id = ran.body["run_id"]

    page = call("GET", f"/runs/{run_id}", as_=STAFF)
    assert (page.status, page.body["retry_allowed"]) == (200, False)
    refused = call("POST", f"/runs/{run_id}/retry", {"reason": "again"}, as_=STAFF)
    assert (refused.status, refused.body["code"]) == (409, "retry_not_allowed")
    assert len(publisher.sent) == 1


def test_a_test_sends_run_has_its_page(db, call, caller):
    _, run_id = seed_run(db, caller.workspace_id, state="succeeded", attempts=1, started_at=LONG_AGO,
                         finished_at=LONG_AGO, outcome_code="succeeded")
    db.execute("UPDATE schedule_runs SET trigger = 'test', requested_by = 'owner-1' WHERE id = %s", (run_id,))
    db.commit()
    reply = call("GET", f"/runs/{run_id}", as_=caller)
    assert (reply.status, reply.body.get("trigger")) == (200, "test"), reply.body


def test_a_retry_is_marked_in_the_schedules_runs_and_among_the_runs_that_wait_too_long(db, call, operator,
                                                                                       clock_now):
    sweep, run_id = seed_run(db, operator.workspace_id, state="failed", attempts=1, started_at=LONG_AGO,
                             finished_at=LONG_AGO, outcome_code="reconciliation_failed")
    new_id = call("POST", f"/runs/{run_id}/retry", {"reason": "feed is back"}, as_=operator).body["run_id"]

    runs = call("GET", f"/schedules/{sweep.id}", as_=operator).body["history"]["runs"]

    assert {r["id"]: r["retry_of"] for r in runs} == {new_id: str(run_id), str(run_id): None}
    # Later, the retry was never started: the overview's runs that wait too long name what it retried
    clock_now["now"] = NOW + ACCOUNTING.reoffer_after + timedelta(minutes=1)
    stranded = call("GET", "/operations/overview", as_=STAFF).body["stranded_runs"]
    assert [(r["id"], r["retry_of"]) for r in stranded] == [(new_id, str(run_id))]
