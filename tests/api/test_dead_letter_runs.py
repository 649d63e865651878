"""A dead-letter message and the run it names, through the resolver on moto's SQS and the
real database: the message names its run by schedule and occurrence; moving it back or
deleting it is recorded on the run (its page and its workspace's audit log); a read that
another reader's receive left short says how many are being read."""

from __future__ import annotations

import json
import uuid

import psycopg
import pytest

from tests.api.conftest import Caller, enrol
from tests.api.test_operations_routes import app, queues, sqs  # noqa: F401 - the fixtures
from tests.api.test_run_routes import LONG_AGO, seed_run

STAFF = Caller(user_id="staff-1", roles="platform:staff")
MESSAGES = "/operations/dead-letter-queues/accounting/messages"


@pytest.fixture
def db(conn):
    conn.execute("TRUNCATE operations_actions, schedule_run_actions, schedule_events, schedule_runs, schedules "
                 "CASCADE")
    return conn


def failed_run_in_another_workspace(db, sqs, queues):  # noqa: F811 - sqs is the client here
    """A failed run of another workspace (in the directory) and its message in the accounting DLQ."""
    other = uuid.uuid4()
    enrol(db, "someone", other)
    sweep, run_id = seed_run(db, other, state="failed", attempts=5, finished_at=LONG_AGO)
    sqs.send_message(QueueUrl=queues["accounting"].dlq_url, MessageBody=json.dumps({
        "run_id": str(run_id), "schedule_id": str(sweep.id), "workspace_id": str(other), "owner": "accounting",
        "work_kind": "reconciliation.sweep"}))
    return other, run_id


def test_a_message_names_its_run_by_schedule_and_occurrence_read_as_staff_read_it(db, call, sqs, queues):  # noqa: F811
    other, run_id = failed_run_in_another_workspace(db, sqs, queues)

    reply = call("GET", MESSAGES, as_=STAFF)

    assert reply.status == 200, reply.body
    [message] = reply.body["items"]
    assert {k: message["run"][k] for k in ("id", "workspace_id", "schedule_name", "state", "timezone",
                                           "occurrence_local")} == {
        "id": str(run_id), "workspace_id": str(other), "schedule_name": "Nightly sweep", "state": "failed",
        "timezone": "Europe/Berlin", "occurrence_local": LONG_AGO.replace(tzinfo=None).isoformat()}
    assert reply.body["being_read"] == 0
    reads = db.execute("SELECT actor, what, detail FROM staff_reads WHERE workspace_id = %s", (other,)).fetchall()
    assert reads == [{"actor": "staff-1", "what": "run", "detail": {"run_id": str(run_id), "via": "dead_letter"}}]


def test_a_read_of_twenty_messages_names_their_runs_with_one_statement(db, call, sqs, queues, api_conn):  # noqa: F811
    # Given twenty dead letters naming runs of two other workspaces and one naming no run any more
    named, workspaces = {}, [uuid.uuid4(), uuid.uuid4()]
    for workspace in workspaces:
        enrol(db, "someone", workspace)
    for i in range(20):
        workspace = workspaces[i % 2]
        sweep, run_id = seed_run(db, workspace, state="failed", attempts=5, finished_at=LONG_AGO)
        named[run_id] = (workspace, sweep.id)
        sqs.send_message(QueueUrl=queues["accounting"].dlq_url, MessageBody=json.dumps({
            "run_id": str(run_id), "workspace_id": str(workspace)}))
    sqs.send_message(QueueUrl=queues["accounting"].dlq_url, MessageBody=json.dumps({
        "run_id": str(uuid.uuid4()), "workspace_id": str(uuid.uuid4())}))
    statements: list[str] = []

    class Recording(psycopg.Cursor):
        def execute(self, query, params=None, **kwargs):
            statements.append(query if isinstance(query, str) else repr(query))
            return super().execute(query, params, **kwargs)

    # When staff read them (the page's read: up to 20 at a time, here 21 asked)
    api_conn.cursor_factory = Recording
    try:
        reply = call("GET", f"{MESSAGES}?limit=21", as_=STAFF)
    finally:
        api_conn.cursor_factory = psycopg.Cursor

    # Then every run is named, looked up with one statement for all of them
    assert reply.status == 200, reply.body
    runs = {m["run"]["id"]: m["run"] for m in reply.body["items"] if m["run"]}
    assert set(runs) == {str(r) for r in named}
    assert all(runs[str(r)]["workspace_id"] == str(w) and runs[str(r)]["schedule_id"] == str(s)
               for r, (w, s) in named.items())
    assert len([m for m in reply.body["items"] if m["run"] is None]) == 1
    lookups = [q for q in statements if "schedule_runs" in q or "operations_run" in q]
    assert len(lookups) == 1, lookups
    # and each run read is in its own workspace's staff reads and audit log, one statement a workspace
    assert len([q for q in statements if "INSERT INTO staff_reads" in q]) == 2
    audited = db.execute("SELECT workspace_id, after ->> 'run_id' AS run_id FROM audit_events "
                         "WHERE kind = 'staff.read' AND workspace_id = ANY(%s)", (workspaces,)).fetchall()
    assert sorted((r["workspace_id"], r["run_id"]) for r in audited) == sorted(
        (w, str(r)) for r, (w, _) in named.items())
    reads = db.execute("SELECT workspace_id, detail ->> 'run_id' AS run_id FROM staff_reads "
                       "WHERE workspace_id = ANY(%s)", (workspaces,)).fetchall()
    assert sorted((r["workspace_id"], r["run_id"]) for r in reads) == sorted(
        (w, str(r)) for r, (w, _) in named.items())


@pytest.mark.parametrize("action, recorded, kind", [("redrive", "redriven", "dead_letter.redriven"),
                                                    ("delete", "dead_letter_deleted", "dead_letter.deleted")])
def test_moving_back_or_deleting_a_message_is_recorded_on_its_run(db, call, sqs, queues, action, recorded,  # noqa: F811
                                                                   kind):
    other, run_id = failed_run_in_another_workspace(db, sqs, queues)
    [message] = call("GET", MESSAGES, as_=STAFF).body["items"]

    reply = call("POST", f"{MESSAGES}/{message['message_id']}/{action}", {"reason": "consumer fixed"}, as_=STAFF)

    assert reply.status == 200, reply.body
    assert reply.body["message"]["run"]["id"] == str(run_id)
    page = call("GET", f"/runs/{run_id}", as_=STAFF).body
    assert [(a["action"], a["actor"], a["reason"], a["detail"]) for a in page["actions"]] == [
        (recorded, "staff-1", "consumer fixed",
         {"queue": "accounting", "message_id": message["message_id"], "state_before": "failed"})]
    audited = db.execute("SELECT kind, actor, subject_id, reason FROM audit_events WHERE workspace_id = %s "
                         "AND kind LIKE 'dead_letter.%%'", (other,)).fetchall()
    assert audited == [{"kind": kind, "actor": "staff-1", "subject_id": str(run_id), "reason": "consumer fixed"}]
    db.execute("UPDATE users SET display_name = 'Stella Staff' WHERE id = 'staff-1'")  # enrolled by the calls
    db.commit()
    [recent] = call("GET", "/operations/overview", as_=STAFF).body["recent_actions"]
    assert (recent["actor"], recent["actor_name"]) == ("staff-1", "Stella Staff")


def test_a_message_whose_run_is_gone_is_acted_on_without_a_run(db, call, sqs, queues):  # noqa: F811
    sqs.send_message(QueueUrl=queues["accounting"].dlq_url, MessageBody=json.dumps({
        "run_id": str(uuid.uuid4()), "workspace_id": str(uuid.uuid4())}))
    [message] = call("GET", MESSAGES, as_=STAFF).body["items"]
    assert (message["names"]["kind"], message["run"]) == ("run", None)

    reply = call("POST", f"{MESSAGES}/{message['message_id']}/delete", {"reason": "stale"}, as_=STAFF)

    assert (reply.status, reply.body["message"]["run"]) == (200, None)
    assert db.execute("SELECT count(*) AS n FROM schedule_run_actions").fetchone()["n"] == 0


def test_a_read_while_another_reader_holds_the_messages_says_they_are_being_read(db, call, sqs, queues):  # noqa: F811
    for _ in range(2):
        sqs.send_message(QueueUrl=queues["accounting"].dlq_url, MessageBody="not json {")
    # Another reader's read holds both hidden (its visibility timeout) while ours reads
    held = sqs.receive_message(QueueUrl=queues["accounting"].dlq_url, MaxNumberOfMessages=10, VisibilityTimeout=30)
    assert len(held["Messages"]) == 2

    reply = call("GET", MESSAGES, as_=STAFF)

    assert reply.status == 200, reply.body
    assert (reply.body["queue"]["messages"], reply.body["items"], reply.body["being_read"]) == (2, [], 2)
    # The other reader lets them go: the next read shows them and nothing is being read
    sqs.change_message_visibility_batch(QueueUrl=queues["accounting"].dlq_url, Entries=[
        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"], "VisibilityTimeout": 0}
        for i, m in enumerate(held["Messages"])])
    again = call("GET", MESSAGES, as_=STAFF).body
    assert (len(again["items"]), again["being_read"]) == (2, 0)
