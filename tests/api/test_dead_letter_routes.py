"""The dead-letter routes through the resolver on moto's SQS: staff read a queue's messages
decoded without losing them, move one back alone, delete one with a reason (recorded); no
one else may."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.api.conftest import Caller
from tests.api.test_operations_routes import app, queues, sqs  # noqa: F401 - the fixtures
from timekeeper.aws.dead_letters import DeadLetterQueue, ReceivingDeadLetterQueues

STAFF = Caller(user_id="staff-1", roles="platform:staff")


@pytest.fixture
def db(conn):
    conn.execute("TRUNCATE operations_actions")
    return conn


def depth(sqs, url):  # noqa: F811 - sqs is the client here
    attributes = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=[
        "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]), int(attributes["ApproximateNumberOfMessagesNotVisible"])


def run_body(run_id):
    return json.dumps({"run_id": str(run_id), "schedule_id": str(uuid.uuid4()), "workspace_id": str(uuid.uuid4()),
                       "owner": "accounting", "work_kind": "reconciliation.sweep"})


def test_reading_the_messages_decodes_them_and_loses_none(db, call, sqs, queues):  # noqa: F811
    run_id = uuid.uuid4()
    sqs.send_message(QueueUrl=queues["accounting"].dlq_url, MessageBody=run_body(run_id))
    sqs.send_message(QueueUrl=queues["accounting"].dlq_url, MessageBody="not json {")

    reply = call("GET", "/operations/dead-letter-queues/accounting/messages", as_=STAFF)

    assert reply.status == 200, reply.body
    assert reply.body["queue"]["messages"] == 2
    by_why = {m["why"]: m for m in reply.body["items"]}
    assert set(by_why) == {"receives_exhausted", "malformed_body"}
    assert by_why["receives_exhausted"]["names"]["kind"] == "run"
    assert by_why["receives_exhausted"]["names"]["id"] == str(run_id)
    assert (by_why["malformed_body"]["decoded"], by_why["malformed_body"]["names"]) == (None, None)
    assert by_why["malformed_body"]["body"] == "not json {"
    assert by_why["receives_exhausted"]["receive_count"] >= 1
    # Nothing was lost nor left hidden: both are visible again
    assert depth(sqs, queues["accounting"].dlq_url) == (2, 0)
    assert len(sqs.receive_message(QueueUrl=queues["accounting"].dlq_url, MaxNumberOfMessages=10)["Messages"]) == 2


def test_redriving_one_message_moves_it_alone_and_records_who_and_why(db, call, sqs, queues):  # noqa: F811
    first, second = uuid.uuid4(), uuid.uuid4()
    sqs.send_message(QueueUrl=queues["accounting"].dlq_url, MessageBody=run_body(first))
    sqs.send_message(QueueUrl=queues["accounting"].dlq_url, MessageBody=run_body(second))
    listed = call("GET", "/operations/dead-letter-queues/accounting/messages", as_=STAFF).body["items"]
    chosen = next(m for m in listed if m["names"]["id"] == str(first))

    reply = call("POST", f"/operations/dead-letter-queues/accounting/messages/{chosen['message_id']}/redrive",
                 {"reason": " consumer fixed "}, as_=STAFF)

    assert reply.status == 200, reply.body
    assert (reply.body["action"], reply.body["reason"], reply.body["message"]["names"]["id"]) == (
        "redrive_message", "consumer fixed", str(first))
    moved = sqs.receive_message(QueueUrl=queues["accounting"].url, MaxNumberOfMessages=10)["Messages"]
    assert [json.loads(m["Body"])["run_id"] for m in moved] == [str(first)]
    assert depth(sqs, queues["accounting"].dlq_url) == (1, 0)
    left = call("GET", "/operations/dead-letter-queues/accounting/messages", as_=STAFF).body["items"]
    assert [m["names"]["id"] for m in left] == [str(second)]
    [action] = call("GET", "/operations/overview", as_=STAFF).body["recent_actions"]
    assert (action["action"], action["actor"], action["target"], action["reason"]) == (
        "redrive_message", "staff-1", f"accounting/{chosen['message_id']}", "consumer fixed")
    # The same message again is gone: 404
    again = call("POST", f"/operations/dead-letter-queues/accounting/messages/{chosen['message_id']}/redrive",
                 {"reason": "again"}, as_=STAFF)
    assert (again.status, again.body["code"]) == (404, "not_found")


def test_deleting_one_message_needs_a_reason_and_removes_it_alone(db, call, sqs, queues):  # noqa: F811
    sqs.send_message(QueueUrl=queues["exports"].dlq_url, MessageBody="garbage")
    sqs.send_message(QueueUrl=queues["exports"].dlq_url,
                     MessageBody=json.dumps({"export_id": str(uuid.uuid4()), "workspace_id": str(uuid.uuid4())}))
    listed = call("GET", "/operations/dead-letter-queues/exports/messages", as_=STAFF).body["items"]
    garbage = next(m for m in listed if m["why"] == "malformed_body")
    target = f"/operations/dead-letter-queues/exports/messages/{garbage['message_id']}/delete"

    blank = call("POST", target, {"reason": " \u200b "}, as_=STAFF)
    assert (blank.status, blank.body["code"], blank.body["field"]) == (422, "validation_error", "reason")
    assert depth(sqs, queues["exports"].dlq_url) == (2, 0)

    reply = call("POST", target, {"reason": "a test message someone sent by hand"}, as_=STAFF)
    assert reply.status == 200, reply.body
    assert depth(sqs, queues["exports"].dlq_url) == (1, 0)
    [kept] = call("GET", "/operations/dead-letter-queues/exports/messages", as_=STAFF).body["items"]
    assert kept["names"]["kind"] == "export"


def test_the_queues_are_listed_with_their_depth(db, call, sqs, queues):  # noqa: F811
    sqs.send_message(QueueUrl=queues["queries"].dlq_url, MessageBody="x")
    reply = call("GET", "/operations/dead-letter-queues", as_=STAFF)
    assert reply.status == 200, reply.body
    assert {q["name"]: q["messages"] for q in reply.body["items"]}["queries"] == 1


@pytest.mark.parametrize(("method", "target"), [
    ("GET", "/operations/dead-letter-queues"),
    ("GET", "/operations/dead-letter-queues/accounting/messages"),
    ("POST", "/operations/dead-letter-queues/accounting/messages/abc/redrive"),
    ("POST", "/operations/dead-letter-queues/accounting/messages/abc/delete"),
])
def test_only_staff_reach_the_dead_letters(call, method, target):
    reply = call(method, target, {"reason": "x"} if method == "POST" else None,
                 as_=Caller(roles="schedules:admin,schedules:read"))
    assert (reply.status, reply.body["code"]) == (403, "forbidden")


def test_an_unknown_queue_is_not_found(call):
    reply = call("GET", "/operations/dead-letter-queues/nowhere/messages", as_=STAFF)
    assert (reply.status, reply.body["code"]) == (404, "not_found")


DEEP_BODIES = ['{"x":' + "[" * 300 + "]" * 300 + "}", "[" * 100000 + "]" * 100000]


@pytest.mark.parametrize("body", DEEP_BODIES, ids=["depth-300", "depth-100000"])
def test_a_deeply_nested_body_is_read_as_sent_and_the_queue_stays_readable(db, call, sqs, queues, body):  # noqa: F811
    sqs.send_message(QueueUrl=queues["exports"].dlq_url, MessageBody=body)
    sqs.send_message(QueueUrl=queues["exports"].dlq_url,
                     MessageBody=json.dumps({"export_id": str(uuid.uuid4()), "workspace_id": str(uuid.uuid4())}))

    reply = call("GET", "/operations/dead-letter-queues/exports/messages", as_=STAFF)

    assert reply.status == 200, reply.body
    by_why = {m["why"]: m for m in reply.body["items"]}
    assert (by_why["malformed_body"]["body"], by_why["malformed_body"]["decoded"]) == (body, None)
    assert by_why["receives_exhausted"]["names"]["kind"] == "export"


@pytest.mark.parametrize("action", ["delete", "redrive"])
@pytest.mark.parametrize("body", DEEP_BODIES, ids=["depth-300", "depth-100000"])
def test_acting_on_a_deeply_nested_message_answers_and_is_recorded(db, call, sqs, queues, body, action):  # noqa: F811
    message_id = sqs.send_message(QueueUrl=queues["exports"].dlq_url, MessageBody=body)["MessageId"]

    reply = call("POST", f"/operations/dead-letter-queues/exports/messages/{message_id}/{action}",
                 {"reason": "remove poison"}, as_=STAFF)

    assert reply.status == 200, reply.body
    assert reply.body["message"]["why"] == "malformed_body"
    assert depth(sqs, queues["exports"].dlq_url) == (0, 0)
    [recorded] = call("GET", "/operations/overview", as_=STAFF).body["recent_actions"]
    assert (recorded["action"], recorded["target"]) == (f"{action}_message", f"exports/{message_id}")


def test_a_failure_before_acting_leaves_the_message_in_the_queue(db, sqs, queues):  # noqa: F811
    message_id = sqs.send_message(QueueUrl=queues["exports"].dlq_url, MessageBody="x")["MessageId"]
    pair = queues["exports"]
    adapter = ReceivingDeadLetterQueues(sqs, {"exports": DeadLetterQueue("exports", pair.dlq_arn, pair.arn)})

    def fail(message):
        raise RuntimeError("lookup failed")

    with pytest.raises(RuntimeError):
        adapter.delete_message("exports", message_id, prepare=fail)
    assert depth(sqs, queues["exports"].dlq_url) == (1, 0)


def test_a_redriven_message_keeps_its_group(db, call, sqs, queues):  # noqa: F811
    message_id = sqs.send_message(QueueUrl=queues["accounting"].dlq_url, MessageBody=run_body(uuid.uuid4()),
                                  MessageGroupId="workspace-a")["MessageId"]

    reply = call("POST", f"/operations/dead-letter-queues/accounting/messages/{message_id}/redrive",
                 {"reason": "consumer fixed"}, as_=STAFF)

    assert reply.status == 200, reply.body
    [moved] = sqs.receive_message(QueueUrl=queues["accounting"].url, MaxNumberOfMessages=10,
                                  AttributeNames=["MessageGroupId"])["Messages"]
    assert moved["Attributes"]["MessageGroupId"] == "workspace-a"


def test_a_message_beyond_the_first_fifty_is_reached(db, call, sqs, queues):  # noqa: F811
    ids = [sqs.send_message(QueueUrl=queues["exports"].dlq_url, MessageBody=json.dumps({"n": n}))["MessageId"]
           for n in range(60)]

    for message_id in ids[-5:]:
        reply = call("POST", f"/operations/dead-letter-queues/exports/messages/{message_id}/delete",
                     {"reason": "deep delete"}, as_=STAFF)
        assert reply.status == 200, reply.body
    assert depth(sqs, queues["exports"].dlq_url) == (55, 0)
