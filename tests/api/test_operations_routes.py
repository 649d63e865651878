"""The operations routes through the resolver on the real database (the API's walled
login) and moto's SQS: the overview reads every workspace's paused and failing schedules
and stranded runs through the narrow cross-workspace functions, and each dead-letter
queue's depth and oldest message; a redrive moves a dead-letter queue's messages back to
its queue; a staff resume records the staff member and the reason; only staff may."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import UTC, date, datetime, timedelta

import boto3
import pytest
from botocore.stub import Stubber
from moto import mock_aws

from tests.api.conftest import (
    FAILED_NAME,
    MISSING_NAME,
    NOW,
    PUBLISHED_NAME,
    Caller,
    seed_overdue_workspaces,
)
from timekeeper.api import ApiAdapters, create_app
from timekeeper.aws.dead_letters import DeadLetterQueue, DeadLetterQueues, ReceivingDeadLetterQueues
from timekeeper.edge import registries
from timekeeper.local.aws import create_pipeline_queues
from timekeeper.platform.directory import create_workspace
from timekeeper.schedules import service
from timekeeper.snapshots import ledger
from timekeeper.topology import (
    ACCOUNTING,
    EXPORTS,
    MESSAGE_EVENTS,
    MESSAGE_EVENTS_NAME,
    PIPELINES,
    SNAPSHOTS,
    dead_letter_queues,
)

STAFF = Caller(user_id="staff-1", roles="platform:staff")
SWEEP = {"cron": "0 * * * *", "timezone": "UTC"}


@pytest.fixture
def sqs(monkeypatch):
    credentials = {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1"}
    for key, value in credentials.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        yield boto3.client("sqs")


@pytest.fixture
def queues(sqs):
    """Every topology queue and its dead-letter queue, by the operators' names."""
    made = {name: create_pipeline_queues(sqs, pipeline) for name, pipeline in PIPELINES.items()}
    made[SNAPSHOTS.name] = create_pipeline_queues(sqs, SNAPSHOTS)
    made[EXPORTS.name] = create_pipeline_queues(sqs, EXPORTS)
    made[MESSAGE_EVENTS_NAME] = create_pipeline_queues(sqs, MESSAGE_EVENTS)
    return made


@pytest.fixture
def app(api_conn, clock_now, sqs, queues, publisher):
    dead = {name: DeadLetterQueue(name=name, arn=pair.dlq_arn, source_arn=pair.arn) for name, pair in queues.items()}
    return create_app(ApiAdapters(connection=lambda: api_conn, publisher_for=lambda _: publisher,
                                  registry=registries.work_kinds, now=lambda: clock_now["now"],
                                  snapshot_registry=registries.snapshot_types,
                                  dead_letters=lambda: ReceivingDeadLetterQueues(sqs, dead)))


@pytest.fixture
def db(conn):
    conn.execute("TRUNCATE schedule_events, schedule_runs, schedules, operations_actions CASCADE")
    return conn


def schedule(db, workspace_id, name, **rule):
    return service.create_schedule(db, workspace_id=workspace_id, owner="accounting",
                                   work_kind="reconciliation.sweep", actor="owner-1", now=NOW - timedelta(days=1),
                                   recurrence=rule or SWEEP, name=name)


def test_the_overview_lists_paused_and_failing_schedules_of_every_workspace(db, call):
    # Given two workspaces: a paused schedule in one, a failing one in the other, a healthy one
    first, second = uuid.uuid4(), uuid.uuid4()
    paused = schedule(db, first, "paused sweep")
    service.pause_schedule(db, workspace_id=first, schedule_id=paused.id, actor="owner-1", now=NOW)
    failing = schedule(db, second, "failing sweep")
    db.execute("UPDATE schedules SET consecutive_failures = 3, last_outcome = 'reconciliation_failed', "
               "updated_at = %s WHERE id = %s", (NOW - timedelta(minutes=5), failing.id))
    schedule(db, second, "healthy sweep")
    db.commit()

    # When staff (of neither workspace) read the overview
    reply = call("GET", "/operations/overview", as_=STAFF)

    # Then both needing attention are listed, newest change first, and the healthy one is not
    assert reply.status == 200, reply.body
    assert [(s["name"], s["workspace_id"], s["status"], s["pause_reason"], s["consecutive_failures"])
            for s in reply.body["schedules"]] == [
        ("paused sweep", str(first), "paused", "paused_by_owner", 0),
        ("failing sweep", str(second), "active", None, 3)]


def test_the_overview_lists_runs_that_wait_too_long_and_why(db, call):
    # Given a workspace's runs: one accepted long ago and never started, one started whose
    # lease ended, one released (not published) long ago, and one accepted a minute ago
    workspace = uuid.uuid4()
    sweep = schedule(db, workspace, "sweep")
    long_ago = NOW - ACCOUNTING.reoffer_after - timedelta(minutes=1)

    def run(key, **columns):
        names = ", ".join(columns)
        placeholders = ", ".join(["%s"] * len(columns))
        db.execute(f"""INSERT INTO schedule_runs (schedule_id, workspace_id, owner, work_kind, occurrence_key,
                          occurrence_at, occurrence_local, trigger, definition_version, queued_at, {names})
                       VALUES (%s, %s, 'accounting', 'reconciliation.sweep', %s, %s, %s, 'scheduled', 1, %s,
                               {placeholders})""",
                   (sweep.id, workspace, key, long_ago, long_ago.replace(tzinfo=None), long_ago, *columns.values()))

    run("a", state="queued", published_at=long_ago, offered_at=long_ago)
    run("b", state="running", published_at=long_ago, started_at=long_ago, attempts=1,
        lease_until=NOW - timedelta(seconds=1))
    run("c", state="queued", offered_at=long_ago, released_at=long_ago)
    run("d", state="queued", published_at=NOW - timedelta(minutes=1), offered_at=NOW - timedelta(minutes=1))
    db.commit()

    reply = call("GET", "/operations/overview", as_=STAFF)

    assert reply.status == 200, reply.body
    assert sorted((r["why"], r["state"], r["workspace_id"]) for r in reply.body["stranded_runs"]) == [
        ("lease_expired", "running", str(workspace)), ("not_published", "queued", str(workspace)),
        ("not_started", "queued", str(workspace))]


def test_the_overview_shows_each_dead_letter_queues_depth_and_oldest_message(db, call, sqs, queues, clock_now):
    # Given two messages in the accounting dead-letter queue
    for n in range(2):
        sqs.send_message(QueueUrl=queues["accounting"].dlq_url, MessageBody=json.dumps({"n": n}))
    sent = datetime.now(UTC)
    clock_now["now"] = sent + timedelta(minutes=10)

    reply = call("GET", "/operations/overview", as_=STAFF)

    # Then every queue is listed; accounting's holds 2, the oldest about ten minutes old
    assert reply.status == 200, reply.body
    by_name = {q["name"]: q for q in reply.body["dead_letter_queues"]}
    assert set(by_name) == {*PIPELINES, SNAPSHOTS.name, EXPORTS.name, MESSAGE_EVENTS_NAME} == set(dead_letter_queues())
    assert by_name["accounting"]["messages"] == 2
    assert 590 <= by_name["accounting"]["oldest_age_s"] <= 610
    assert by_name["exports"] == {"name": "exports", "messages": 0, "oldest_sent_at": None, "oldest_age_s": None,
                                  "redrive_running": None}
    # And reading it hid nothing: both are still visible
    attributes = sqs.get_queue_attributes(QueueUrl=queues["accounting"].dlq_url,
                                          AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    assert attributes["ApproximateNumberOfMessages"] == "2"


def test_a_redrive_moves_the_dead_letters_back_to_their_queue(db, call, sqs, queues):
    # Given three dead letters of the exports queue
    bodies = [json.dumps({"export": n}) for n in range(3)]
    for body in bodies:
        sqs.send_message(QueueUrl=queues["exports"].dlq_url, MessageBody=body)

    # When staff redrive it with a reason
    reply = call("POST", "/operations/dead-letter-queues/exports/redrive", {"reason": "bucket policy fixed"},
                 as_=STAFF)

    # Then 202, the three moved: the dead-letter queue is empty and the queue holds the same bodies
    assert reply.status == 202, reply.body
    assert (reply.body["queue"], reply.body["messages"], reply.body["moved"]) == ("exports", 3, 3)
    got = sqs.receive_message(QueueUrl=queues["exports"].url, MaxNumberOfMessages=10)["Messages"]
    assert sorted(m["Body"] for m in got) == sorted(bodies)
    assert sqs.receive_message(QueueUrl=queues["exports"].dlq_url, MaxNumberOfMessages=10).get("Messages") is None
    # And a second redrive finds nothing to move
    again = call("POST", "/operations/dead-letter-queues/exports/redrive", {"reason": "again"}, as_=STAFF)
    assert (again.status, again.body["code"]) == (409, "empty")
    # And the overview lists the redrive with who and why (the refused one is not an action)
    [action] = call("GET", "/operations/overview", as_=STAFF).body["recent_actions"]
    assert (action["action"], action["actor"], action["target"], action["reason"], action["detail"]["moved"]) == (
        "redrive", "staff-1", "exports", "bucket policy fixed", 3)


@pytest.mark.parametrize(("target", "body", "status", "code", "field"), [
    ("/operations/dead-letter-queues/nowhere/redrive", {"reason": "x"}, 404, "not_found", None),
    ("/operations/dead-letter-queues/exports/redrive", {"reason": "   "}, 422, "validation_error", "reason"),
    ("/operations/dead-letter-queues/exports/redrive", {}, 422, "validation_error", "reason"),
])
def test_a_bad_redrive_request_is_refused(call, target, body, status, code, field):
    reply = call("POST", target, body, as_=STAFF)
    assert (reply.status, reply.body["code"], reply.body.get("field")) == (status, code, field)


def test_a_staff_resume_records_who_and_why(db, call):
    # Given a schedule paused after failures in a workspace staff do not belong to
    workspace = uuid.uuid4()
    paused = schedule(db, workspace, "sweep")
    service.pause_schedule(db, workspace_id=workspace, schedule_id=paused.id, actor="system", now=NOW,
                           reason="consecutive_failures")
    db.commit()

    reply = call("POST", f"/operations/workspaces/{workspace}/schedules/{paused.id}/resume",
                 {"reason": "upstream ledger is back"}, as_=STAFF)

    assert reply.status == 200, reply.body
    assert reply.body["status"] == "active"
    event = db.execute("SELECT actor, reason, detail FROM schedule_events WHERE schedule_id = %s AND kind = 'resumed'",
                       (paused.id,)).fetchone()
    assert (event["actor"], event["reason"], event["detail"]) == (
        "staff-1", "upstream ledger is back", {"previous_reason": "consecutive_failures"})
    # And it is an operations action too
    recorded = db.execute("SELECT action, actor, target, reason FROM operations_actions").fetchall()
    assert [tuple(r.values()) for r in recorded] == [("resume", "staff-1", str(paused.id), "upstream ledger is back")]
    # And another workspace's id with the schedule is 404 (the schedule is looked up in the named workspace)
    other = call("POST", f"/operations/workspaces/{uuid.uuid4()}/schedules/{paused.id}/resume",
                 {"reason": "x"}, as_=STAFF)
    assert (other.status, other.body["code"]) == (404, "not_found")


def test_an_erasure_reaches_every_workspace_and_is_recorded_by_the_ids_digest(db, call):
    # Given a person's opt-out in one workspace and, in another, a suppressed address of a
    # message of theirs that bounced (neither is the staff member's workspace)
    person, first, second = f"user-{uuid.uuid4()}", uuid.uuid4(), uuid.uuid4()
    db.execute("""INSERT INTO mail_opt_outs (workspace_id, schedule_id, user_id, run_id, opted_out_at)
                  VALUES (%s, %s, %s, %s, %s)""", (first, uuid.uuid4(), person, uuid.uuid4(), NOW))
    db.execute("""INSERT INTO message_events (provider_message_id, state, event_at, workspace_id, user_id, received_at)
                  VALUES ('m-erase', 'bounced', %s, %s, %s, %s)""", (NOW, second, person, NOW))
    db.execute("""INSERT INTO mail_suppressions (workspace_id, address, reason, provider_message_id, suppressed_at)
                  VALUES (%s, 'gone@example.com', 'bounced', 'm-erase', %s)""", (second, NOW))
    db.commit()

    # When staff erase the person through the API's walled login
    reply = call("POST", "/operations/erasures", {"user_id": person, "reason": "request 2027-114"}, as_=STAFF)

    # Then both are gone and the reply says so
    digest = hashlib.sha256(person.encode()).hexdigest()
    assert reply.status == 200, reply.body
    assert reply.body == {"user_digest": digest, "recipient_lists": 0, "opt_outs": 1, "delivery_addresses": 0,
                          "suppressions": 1, "erased_at": NOW.isoformat().replace("+00:00", "Z")}
    assert db.execute("SELECT count(*) AS n FROM mail_opt_outs WHERE user_id = %s", (person,)).fetchone()["n"] == 0
    assert db.execute("SELECT count(*) AS n FROM mail_suppressions WHERE workspace_id = %s",
                      (second,)).fetchone()["n"] == 0
    # And the operations action names the digest, never the id
    [action] = call("GET", "/operations/overview", as_=STAFF).body["recent_actions"]
    assert (action["action"], action["actor"], action["target"], action["reason"]) == (
        "erase", "staff-1", f"sha256:{digest}", "request 2027-114")
    assert action["detail"] == {"recipient_lists": 0, "opt_outs": 1, "delivery_addresses": 0, "suppressions": 1}
    assert person not in json.dumps(action)
    # And repeating it removes nothing more (a retried request is safe)
    again = call("POST", "/operations/erasures", {"user_id": person, "reason": "retry"}, as_=STAFF)
    assert (again.status, again.body["opt_outs"], again.body["suppressions"]) == (200, 0, 0)


@pytest.mark.parametrize(("body", "field"), [
    ({"reason": "x"}, "user_id"),
    ({"user_id": "", "reason": "x"}, "user_id"),
    ({"user_id": "two words", "reason": "x"}, "user_id"),
    ({"user_id": "u" * 201, "reason": "x"}, "user_id"),
    ({"user_id": "u-1"}, "reason"),
    ({"user_id": "u-1", "reason": " "}, "reason"),
    ({"user_id": "u-1", "reason": "x", "extra": 1}, "extra"),
])
def test_a_bad_erasure_request_is_a_422_naming_the_field(db, call, body, field):
    reply = call("POST", "/operations/erasures", body, as_=STAFF)
    assert (reply.status, reply.body["code"], reply.body.get("field")) == (422, "validation_error", field)
    assert db.execute("SELECT count(*) AS n FROM operations_actions").fetchone()["n"] == 0


@pytest.mark.parametrize(("method", "target"), [
    ("GET", "/operations/overview"),
    ("POST", "/operations/dead-letter-queues/exports/redrive"),
    ("POST", f"/operations/workspaces/{uuid.uuid4()}/schedules/{uuid.uuid4()}/resume"),
    ("POST", "/operations/erasures"),
])
def test_only_staff_may(call, method, target):
    admin = Caller(roles="schedules:read,schedules:write,schedules:run,queries:admin")
    body = {"reason": "x", "user_id": "u-1"} if target.endswith("erasures") else {"reason": "x"}
    reply = call(method, target, body if method == "POST" else None, as_=admin)
    assert (reply.status, reply.body["code"]) == (403, "forbidden")
    assert call(method, target, body if method == "POST" else None, claims=None).status == 401


def test_on_aws_a_redrive_starts_the_queues_message_move_task_back_to_its_source():
    # SQS's StartMessageMoveTask (moto has none): the request names the dead-letter queue as
    # the source and its queue as the destination, after checking no task is running
    client = boto3.client("sqs", region_name="us-east-1", aws_access_key_id="t", aws_secret_access_key="t")
    dlq = "arn:aws:sqs:us-east-1:123456789012:timekeeper-accounting-runs-dlq"
    source = "arn:aws:sqs:us-east-1:123456789012:timekeeper-accounting-runs"
    url = "https://sqs.us-east-1.amazonaws.com/123456789012/timekeeper-accounting-runs-dlq"
    stub = Stubber(client)
    stub.add_response("get_queue_url", {"QueueUrl": url},
                      {"QueueName": "timekeeper-accounting-runs-dlq", "QueueOwnerAWSAccountId": "123456789012"})
    stub.add_response("get_queue_attributes", {"Attributes": {"ApproximateNumberOfMessages": "4",
                                                              "ApproximateNumberOfMessagesNotVisible": "0"}})
    stub.add_response("receive_message", {"Messages": [
        {"MessageId": "m", "ReceiptHandle": "r", "Body": "{}", "Attributes": {"SentTimestamp": "1800000000000"}}]})
    stub.add_response("list_message_move_tasks", {"Results": [{"Status": "COMPLETED"}]},
                      {"SourceArn": dlq, "MaxResults": 1})
    stub.add_response("start_message_move_task", {"TaskHandle": "task-1"},
                      {"SourceArn": dlq, "DestinationArn": source})
    with stub:
        started = DeadLetterQueues(client, {"accounting": DeadLetterQueue("accounting", dlq, source)}).redrive(
            "accounting")
    assert (started.task, started.messages, started.moved) == ("task-1", 4, None)
    stub.assert_no_pending_responses()


def overdue_workspaces(db):
    """Three workspaces created on 10 January 2027 (Berlin, so January is their only
    completed month at NOW and overdue since 1 February 23:00 UTC): one never planned
    (missing), one whose January runs failed, one whose January is published."""
    db.execute("TRUNCATE snapshot_runs, snapshot_planner_watermarks, workspace_memberships, workspaces CASCADE")
    made = seed_overdue_workspaces(db, created=datetime(2027, 1, 10, tzinfo=UTC), periods=[date(2027, 1, 1)])
    db.commit()
    return made


def test_the_overview_lists_every_workspaces_overdue_periods_most_overdue_first(db, call):
    # Given a workspace never planned, one whose January failed, one whose January is published
    made = overdue_workspaces(db)
    types = registries.snapshot_types().enabled()

    # When staff (of none of them) read the overview
    reply = call("GET", "/operations/overview", as_=STAFF)

    # Then every type's January of the first two is overdue, with its status, and the third is not
    assert reply.status == 200, reply.body
    overdue = reply.body["overdue_periods"]
    assert reply.body["overdue_periods_total"] == 2 * len(types)
    assert sorted((p["workspace_name"], p["owner"], p["snapshot_type"], p["period"], p["status"]) for p in overdue) \
        == sorted((name, t.owner, t.name, "2027-01-01", status) for t in types
                  for name, status in ((MISSING_NAME, "missing"), (FAILED_NAME, "failed")))
    first = overdue[0]
    assert first["timezone"] == "Europe/Berlin"
    assert first["due_at"] == "2027-02-01T23:00:00Z"
    assert first["overdue_hours"] == (NOW - datetime(2027, 2, 1, 23, tzinfo=UTC)).total_seconds() / 3600
    failed = next(p for p in overdue if p["status"] == "failed")
    assert (failed["workspace_id"], failed["version"], failed["failure_code"]) == (
        str(made[FAILED_NAME]), 1, "generator_failed")
    assert all(p["run_id"] is None and p["version"] is None for p in overdue if p["status"] == "missing")
    assert str(made[PUBLISHED_NAME]) not in {p["workspace_id"] for p in overdue}


def test_the_overview_bounds_the_overdue_periods_and_counts_them_all(db, call):
    overdue_workspaces(db)
    types = registries.snapshot_types().enabled()

    reply = call("GET", "/operations/overview?limit=1", as_=STAFF)

    assert reply.status == 200, reply.body
    assert len(reply.body["overdue_periods"]) == 1
    assert reply.body["overdue_periods_total"] == 2 * len(types)


def test_the_staff_list_of_overdue_periods_is_the_planners(db, api_conn):
    # Given the three workspaces: the planner's overdue count (the alarm's) and the staff read
    # on the API's walled login name the same periods
    overdue_workspaces(db)
    registry = registries.snapshot_types()
    with db.transaction():
        pipeline = ledger.overdue_periods(db, registry, now=NOW)
    with api_conn.transaction():
        staff, total = ledger.overdue_periods_for_staff(api_conn, registry, now=NOW, limit=500)
    assert sorted(pipeline) == sorted((p.workspace_id, p.owner, p.snapshot_type, p.period) for p in staff)
    assert total == len(pipeline) > 0


def test_a_workspaces_period_listing_marks_overdue_exactly_the_periods_the_planner_and_staff_count(db, call):
    # Given two workspaces created two years before NOW (1 March 2027, 12:00 UTC), never
    # planned: one active, one disabled
    db.execute("TRUNCATE snapshot_runs, snapshot_planner_watermarks, workspace_memberships, workspaces CASCADE")
    created = datetime(2025, 3, 10, tzinfo=UTC)
    active = create_workspace(db, name="Old", timezone="Europe/Berlin", currency="EUR", now=created).id
    disabled = create_workspace(db, name="Gone", timezone="Europe/Berlin", currency="EUR", now=created,
                                status="disabled").id
    db.commit()
    registry = registries.snapshot_types()
    types = registry.enabled()

    def listing(workspace_id) -> dict[tuple[str, str], bool]:
        reply = call("GET", f"/snapshots/workspaces/{workspace_id}/periods?limit=200", as_=STAFF)
        assert reply.status == 200, reply.body
        return {(i["snapshot_type"], i["period"]): i["overdue"] for i in reply.body["items"]}

    # When staff list each workspace's periods
    periods = listing(active)
    # Then every month since the workspace's first is listed (missing), but only the two
    # completed months within the planner's three-month horizon whose grace has passed are
    # overdue: February ended 13 hours ago in Berlin, inside the 24-hour grace
    assert len(periods) == 24 * len(types)
    assert {key for key, overdue in periods.items() if overdue} == {
        (t.name, month) for t in types for month in ("2026-12", "2027-01")}
    # And those are the periods the planner's alarm and the operations overview count
    with db.transaction():
        planner = {(t, f"{p:%Y-%m}") for w, _, t, p in ledger.overdue_periods(db, registry, now=NOW) if w == active}
    overview = call("GET", "/operations/overview?limit=500", as_=STAFF).body["overdue_periods"]
    assert planner == {key for key, overdue in periods.items() if overdue}
    assert {(p["snapshot_type"], p["period"][:7]) for p in overview if p["workspace_id"] == str(active)} == planner
    # And a disabled workspace's months are listed, none overdue (the planner plans none)
    assert len(listing(disabled)) == 24 * len(types) and not any(listing(disabled).values())
    assert str(disabled) not in {p["workspace_id"] for p in overview}


def test_only_staff_read_the_overdue_periods(db, call):
    overdue_workspaces(db)
    reply = call("GET", "/operations/overview", as_=Caller(user_id="admin-1", roles="workspace:admin"))
    assert reply.status == 403, reply.body
    assert reply.body["code"] == "forbidden"


def test_a_members_erasure_pseudonymises_their_snapshot_rows_and_is_recorded_by_the_ids_digest(db, call):
    from timekeeper.platform.directory import create_workspace as new_workspace

    # Given a published aging version naming a member of a workspace (not the staff member's)
    workspace = new_workspace(db, name="Club", timezone="UTC", now=NOW - timedelta(days=90)).id
    member = uuid.uuid4()
    run = db.execute("""
        INSERT INTO snapshot_runs (owner, snapshot_type, workspace_id, period, version, mode, reason, requested_by,
                                   state, rows_written, created_at, updated_at)
        VALUES ('platform', 'ar_aging', %s, '2027-01-01', 1, 'manual', 'test', 'staff', 'running', 1, %s, %s)
        RETURNING id""", (workspace, NOW, NOW)).fetchone()["id"]
    db.execute("INSERT INTO snapshot_ar_aging (run_id, workspace_id, invoice_id, member_id, due_date, days_past_due, "
               "bucket, outstanding_minor, currency) VALUES (%s, %s, %s, %s, '2027-01-05', 26, '0-30', 500, 'EUR')",
               (run, workspace, uuid.uuid4(), member))
    db.execute("UPDATE snapshot_runs SET state = 'published', is_current = true, published_at = %s WHERE id = %s",
               (NOW, run))
    db.commit()

    # When staff erase the member through the API's walled login
    body = {"workspace_id": str(workspace), "member_id": str(member), "reason": "request 2027-115"}
    reply = call("POST", "/operations/member-erasures", body, as_=STAFF)

    # Then the row names no one, keeps its figure, and the reply says so
    digest = hashlib.sha256(str(member).encode()).hexdigest()
    assert reply.status == 200, reply.body
    assert reply.body == {"member_digest": digest, "workspace_id": str(workspace), "snapshot_rows": 1,
                          "erased_at": NOW.isoformat().replace("+00:00", "Z")}
    row = db.execute("SELECT member_id, outstanding_minor FROM snapshot_ar_aging WHERE run_id = %s",
                     (run,)).fetchone()
    assert (row["member_id"], row["outstanding_minor"]) == (None, 500)
    # And the operations action names the digest, never the id
    [action] = call("GET", "/operations/overview", as_=STAFF).body["recent_actions"]
    assert (action["action"], action["target"], action["detail"]) == (
        "erase", f"member:sha256:{digest}", {"workspace_id": str(workspace), "snapshot_rows": 1})
    assert str(member) not in json.dumps(action)
    # And a repeat changes nothing; a malformed id is a 422 naming it; only staff may
    assert call("POST", "/operations/member-erasures", body, as_=STAFF).body["snapshot_rows"] == 0
    bad = call("POST", "/operations/member-erasures", {**body, "member_id": "M1"}, as_=STAFF)
    assert (bad.status, bad.body["field"]) == (422, "member_id")
    refused = call("POST", "/operations/member-erasures", body, as_=Caller(user_id="member-1", roles="schedules:read"))
    assert refused.status == 403
    # And the workspace's audit log holds the erasure, by digest, with the staff member's reason
    events = db.execute("SELECT kind, actor, after, reason FROM audit_events WHERE workspace_id = %s "
                        "AND kind = 'staff.member_erased' ORDER BY id", (workspace,)).fetchall()
    assert [(e["kind"], e["after"], e["reason"]) for e in events][0] == (
        "staff.member_erased", {"member": f"sha256:{digest}", "snapshot_rows": 1}, "request 2027-115")
    assert str(member) not in json.dumps([e["after"] for e in events])


def test_a_member_erasure_in_a_workspace_that_does_not_exist_is_a_404_naming_it(db, call):
    body = {"workspace_id": str(uuid.uuid4()), "member_id": str(uuid.uuid4()), "reason": "typo"}
    reply = call("POST", "/operations/member-erasures", body, as_=STAFF)
    assert (reply.status, reply.body["field"]) == (404, "workspace_id")
    assert call("GET", "/operations/overview", as_=STAFF).body["recent_actions"] == []


def test_the_overview_filters_schedules_by_kind_status_and_name_and_runs_by_state(db, call):
    first = uuid.uuid4()
    paused = schedule(db, first, "Paused LEDGER sweep")
    service.pause_schedule(db, workspace_id=first, schedule_id=paused.id, actor="owner-1", now=NOW)
    failing = schedule(db, first, "failing sweep")
    db.execute("UPDATE schedules SET consecutive_failures = 2 WHERE id = %s", (failing.id,))
    long_ago = NOW - ACCOUNTING.reoffer_after - timedelta(minutes=1)
    for key, state in (("a", "queued"), ("b", "running")):
        db.execute("""INSERT INTO schedule_runs (schedule_id, workspace_id, owner, work_kind, occurrence_key,
                          occurrence_at, occurrence_local, trigger, definition_version, queued_at, state,
                          published_at, offered_at, started_at, lease_until)
                      VALUES (%s, %s, 'accounting', 'reconciliation.sweep', %s, %s, %s, 'scheduled', 1, %s, %s,
                              %s, %s, %s, %s)""",
                   (paused.id, first, key, long_ago, long_ago.replace(tzinfo=None), long_ago, state, long_ago,
                    long_ago, long_ago if state == "running" else None,
                    NOW - timedelta(seconds=1) if state == "running" else None))
    db.commit()

    def names(query):
        reply = call("GET", f"/operations/overview?{query}", as_=STAFF)
        assert reply.status == 200, reply.body
        body = reply.body
        return sorted(s["name"] for s in body["schedules"]), sorted(r["state"] for r in body["stranded_runs"])

    assert names("schedule=ledger") == (["Paused LEDGER sweep"], ["queued", "running"])
    assert names("status=active") == (["failing sweep"], ["queued", "running"])
    assert names("state=running")[1] == ["running"]
    assert names("kind=reconciliation.sweep") == (["Paused LEDGER sweep", "failing sweep"], ["queued", "running"])
    assert names("kind=batch.roll") == ([], [])
    for query, field in (("status=gone", "status"), ("state=done", "state"), ("schedule=", "schedule"),
                         ("kind=" + "k" * 101, "kind")):
        reply = call("GET", f"/operations/overview?{query}", as_=STAFF)
        assert (reply.status, reply.body.get("field")) == (422, field), query
