"""Every message's fate: SES's configuration-set events (the payloads AWS documents, in
tests/fixtures/ses_events) published to SNS, delivered raw to the message-events queue and
consumed by the real handler (functions/message_events_consumer) on the one SQS batch
entry; the state recorded beside the delivery row by the provider message id, whatever the
order and however often SNS delivers; hard bounces and complaints suppress the address and
later runs skip it; a malformed event fails only its own item. Real PostgreSQL; moto SES,
SNS and SQS."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from moto import mock_aws

from tests.integration.test_delivery import (
    BODY,
    BUCKET,
    KEY,
    SENDER,
    SETTINGS,
    SUBJECT,
    FakeClock,
    make_tenant,
)
from tests.support import ListPublisher, dispatch_settings
from timekeeper import clock, edge
from timekeeper.aws.ses import SesMailer
from timekeeper.db.connection import connect
from timekeeper.local.aws import create_message_events
from timekeeper.local.lambdas import invoke
from timekeeper.reporting import delivery as dl
from timekeeper.reporting import message_states as ms
from timekeeper.reporting.links import LinkSigner
from timekeeper.reporting.query_schedules import NewQuerySchedule, Source, create_query_schedule
from timekeeper.reporting.work_kinds import register
from timekeeper.schedules.consumer import process_run
from timekeeper.schedules.dispatcher import dispatch
from timekeeper.schedules.work import WorkKindRegistry
from timekeeper.topology import MESSAGE_EVENTS

NOW = datetime(2027, 3, 1, 6, tzinfo=UTC)
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "ses_events"
T = "ms1"


def fixture(name: str) -> dict:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def ses_event(name: str, message_id: str, address: str, *, at: datetime | None = None, **changes) -> dict:
    """A documented SES event record for our message: its id, its recipient and (``at``)
    the event's own instant."""
    event = copy.deepcopy(fixture(name))
    event["mail"]["messageId"] = message_id
    event["mail"]["destination"] = [address]
    for part in ("bounce", "complaint", "deliveryDelay"):
        if part in event:
            key = {"bounce": "bouncedRecipients", "complaint": "complainedRecipients",
                   "deliveryDelay": "delayedRecipients"}[part]
            for recipient in event[part][key]:
                recipient["emailAddress"] = address
    if "delivery" in event:
        event["delivery"]["recipients"] = [address]
    if at is not None:
        stamp = at.isoformat().replace("+00:00", "Z")
        for part in ("bounce", "complaint", "delivery", "deliveryDelay"):
            if part in event:
                event[part]["timestamp"] = stamp
    for part, values in changes.items():
        event[part].update(values)
    return event


class RecordingMailer:
    def __init__(self, ses) -> None:
        self.inner = SesMailer(ses, SENDER)
        self.sent: list[dict] = []

    def send(self, *, to, subject, html, text, headers=None):
        message_id = self.inner.send(to=to, subject=subject, html=html, text=text, headers=headers)
        self.sent.append({"to": to, "id": message_id, "headers": headers, "html": html, "text": text})
        return message_id


@pytest.fixture(scope="module")
def tenant(db_url):
    with connect(db_url) as c:
        return make_tenant(c, T)


@pytest.fixture
def aws(db_url, monkeypatch):
    for key, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1",
                       "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_METRICS_NAMESPACE": "Timekeeper",
                       "DATABASE_URL": db_url}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        s3, ses, sns, sqs = (boto3.client(n) for n in ("s3", "ses", "sns", "sqs"))
        s3.create_bucket(Bucket=BUCKET)
        ses.verify_email_identity(EmailAddress=SENDER)
        topic, queues = create_message_events(sqs, sns)
        edge.reset()
        clock.install(lambda: NOW + timedelta(hours=2))

        class Aws:
            pass

        a = Aws()
        a.s3, a.ses, a.sns, a.sqs, a.topic, a.queues = s3, ses, sns, sqs, topic, queues
        a.changed: list[tuple[str, str, int]] = []
        edge.adapters.install_visibility_changer(lambda arn, handle, seconds: a.changed.append((arn, handle,
                                                                                                  seconds)))
        yield a
        edge.reset()
        clock.install(None)


@pytest.fixture
def env(db_url, aws):
    journal = connect(db_url)
    mailer = RecordingMailer(aws.ses)
    fake = FakeClock()
    services = dl.DeliveryServices(journal=lambda: journal, s3=aws.s3, bucket=BUCKET, mailer=mailer,
                                   links=LinkSigner(KEY), download_base_url="https://api.test/",
                                   sleep=fake.sleep, monotonic=fake.monotonic)
    kinds = WorkKindRegistry()
    register(kinds)

    class Env:
        pass

    e = Env()
    e.services, e.mailer, e.kinds = services, mailer, kinds
    yield e
    journal.close()


@pytest.fixture(autouse=True)
def no_suppressions(db_url):
    """Each test starts with an empty suppression list (the tenant's people are shared)."""
    with connect(db_url) as c:
        c.execute("DELETE FROM mail_suppressions")
        c.commit()


def _u(name: str) -> str:
    return f"{T}-{name}"


def _schedule(conn, tenant, name: str, recipients=("rita", "ron")):
    schedule, _ = create_query_schedule(
        conn, workspace_id=tenant.workspace_id, actor=_u("olga"),
        new=NewQuerySchedule(name=name, recurrence={"cron": "0 7 * * *", "timezone": "UTC"},
                             source=Source("query", tenant.query_id), format="csv",
                             recipients=[_u(r) for r in recipients], subject_template=SUBJECT, body_template=BODY),
        now=NOW)
    return schedule


def _deliver(conn, env, schedule, *, day: int = 0):
    """Dispatch and run the schedule's occurrence ``day`` days after the first."""
    at = NOW + timedelta(days=day, hours=1, minutes=1)
    publisher = ListPublisher()
    dispatch(conn, dispatch_settings("queries"), now=at, publisher=publisher, registry=env.kinds)
    (message,) = [m for m in publisher.sent if m.schedule_id == schedule.id]
    process_run(conn, message, receive_count=1, now=at + timedelta(minutes=1), registry=env.kinds,
                settings=SETTINGS, services={"delivery": env.services})
    return message.run_id


def _publish(aws, *events: dict) -> None:
    for event in events:
        aws.sns.publish(TopicArn=aws.topic, Message=json.dumps(event))


def _drain(aws, *, receive_count: int | None = None) -> list[dict]:
    """Receive what SNS delivered to the queue and hand it to the real consumer as Lambda's
    event source would (batches of the consumer's size); returns each batch's response."""
    responses = []
    while True:
        got = aws.sqs.receive_message(QueueUrl=aws.queues.url, MaxNumberOfMessages=MESSAGE_EVENTS.batch_size,
                                      AttributeNames=["All"]).get("Messages", [])
        if not got:
            return responses
        records = [{"messageId": m["MessageId"], "receiptHandle": m["ReceiptHandle"], "body": m["Body"],
                    "attributes": {"ApproximateReceiveCount": str(receive_count or
                                                                  m["Attributes"]["ApproximateReceiveCount"])},
                    "eventSource": "aws:sqs", "eventSourceARN": aws.queues.arn} for m in got]
        response = invoke(MESSAGE_EVENTS.function, {"Records": records})
        failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
        for m in got:
            if m["MessageId"] not in failed:
                aws.sqs.delete_message(QueueUrl=aws.queues.url, ReceiptHandle=m["ReceiptHandle"])
        responses.append({"records": records, "failed": failed})
        if failed:
            return responses


def _sent_to(env, user: str) -> dict:
    (sent,) = [s for s in env.mailer.sent if s["to"] == f"{T}.{user}@x.test"]
    return sent


def test_states_are_recorded_beside_the_delivery_whatever_the_order_and_once(conn, env, aws, tenant):
    # Given a delivery to Rita and Ron through SES
    schedule = _schedule(conn, tenant, "Order rule")
    run_id = _deliver(conn, env, schedule)
    rita, ron = _sent_to(env, "rita"), _sent_to(env, "ron")
    sent_at = NOW + timedelta(hours=1, minutes=2)
    # When SNS delivers, out of order and twice: Rita's complaint before her delivery, the
    # delivery twice; Ron's late delay report after his delivery
    complaint = ses_event("complaint", rita["id"], rita["to"], at=sent_at + timedelta(minutes=9))
    delivered = ses_event("delivery", rita["id"], rita["to"], at=sent_at + timedelta(seconds=4))
    _publish(aws, complaint, delivered, delivered,
             ses_event("delivery", ron["id"], ron["to"], at=sent_at + timedelta(seconds=5)),
             ses_event("delivery_delay", ron["id"], ron["to"], at=sent_at + timedelta(seconds=2)))
    responses = _drain(aws)
    # Then every item was acknowledged
    assert all(not r["failed"] for r in responses)
    # And the states stand by the order rule: the complaint outranks the later-arriving
    # delivery, Ron's delivery outranks the delay reported after it
    states = ms.states_of_run(conn, workspace_id=tenant.workspace_id, run_id=run_id)
    assert (states[_u("rita")].state, states[_u("rita")].kind) == ("complained", "abuse")
    assert states[_u("rita")].events == 2  # the duplicate delivery changed nothing
    assert states[_u("rita")].event_at == sent_at + timedelta(minutes=9)
    assert states[_u("ron")].state == "delivered"
    # And each distinct event is kept once, in event order
    events = ms.events_of_run(conn, workspace_id=tenant.workspace_id, run_id=run_id)
    assert [e.state for e in events[_u("rita")]] == ["delivered", "complained"]
    assert [e.state for e in events[_u("ron")]] == ["delivery_delayed", "delivered"]
    # And the complaint put Rita's address on the workspace's suppression list, Ron's is not on it
    assert [(s.address, s.reason) for s in ms.list_suppressions(conn, workspace_id=tenant.workspace_id)
            if s.address in (rita["to"], ron["to"])] == [(rita["to"], "complained")]


def test_a_hard_bounce_suppresses_the_address_and_the_next_run_skips_it_a_soft_one_does_not(conn, env, aws,
                                                                                              tenant):
    # Given a delivery to Ron and Cleo
    schedule = _schedule(conn, tenant, "Bounces", recipients=("ron", "cleo"))
    first = _deliver(conn, env, schedule)
    ron, cleo = _sent_to(env, "ron"), _sent_to(env, "cleo")
    # When Ron's message bounces permanently and Cleo's transiently
    _publish(aws, ses_event("bounce", ron["id"], ron["to"]),
             ses_event("bounce", cleo["id"], cleo["to"], bounce={"bounceType": "Transient",
                                                               "bounceSubType": "MailboxFull"}))
    assert all(not r["failed"] for r in _drain(aws))
    states = ms.states_of_run(conn, workspace_id=tenant.workspace_id, run_id=first)
    assert (states[_u("ron")].state, states[_u("ron")].kind, states[_u("ron")].subkind) == (
        "bounced", "Permanent", "General")
    assert (states[_u("cleo")].state, states[_u("cleo")].kind) == ("bounced", "Transient")
    # Then the next day's run skips Ron as suppressed and sends to Cleo again
    env.mailer.sent.clear()
    second = _deliver(conn, env, schedule, day=1)
    outcomes = {d.user_id: (d.status, d.skip_reason)
                for d in dl.list_deliveries(conn, workspace_id=tenant.workspace_id, run_id=second)}
    assert outcomes == {_u("ron"): ("skipped", "suppressed"), _u("cleo"): ("sent", None)}
    assert [s["to"] for s in env.mailer.sent] == [cleo["to"]]


def test_a_reject_is_recorded(conn, env, aws, tenant):
    schedule = _schedule(conn, tenant, "Rejects", recipients=("rita",))
    run_id = _deliver(conn, env, schedule)
    rita = _sent_to(env, "rita")
    _publish(aws, ses_event("reject", rita["id"], rita["to"]))
    assert all(not r["failed"] for r in _drain(aws))
    state = ms.states_of_run(conn, workspace_id=tenant.workspace_id, run_id=run_id)[_u("rita")]
    assert (state.state, state.kind) == ("rejected", "Bad content")


def test_malformed_events_fail_only_their_own_items(conn, env, aws, tenant):
    # Given a delivery to Rita
    schedule = _schedule(conn, tenant, "Malformed", recipients=("rita",))
    run_id = _deliver(conn, env, schedule)
    rita = _sent_to(env, "rita")
    bounce_without_its_object = ses_event("bounce", rita["id"], rita["to"])
    del bounce_without_its_object["bounce"]
    # When one batch holds a good delivery event, text that is not JSON, a bounce without
    # its bounce object and an event without a message id
    no_id = ses_event("delivery", rita["id"], rita["to"])
    del no_id["mail"]["messageId"]
    good = ses_event("delivery", rita["id"], rita["to"])
    bodies = [json.dumps(good), "not json {", json.dumps(bounce_without_its_object), json.dumps(no_id)]
    records = [{"messageId": f"m{i}", "receiptHandle": f"h{i}", "body": b, "attributes": {},
                "eventSource": "aws:sqs", "eventSourceARN": aws.queues.arn} for i, b in enumerate(bodies)]
    response = invoke(MESSAGE_EVENTS.function, {"Records": records})
    # Then only the three malformed items fail (they reach the DLQ after maxReceiveCount)
    assert {f["itemIdentifier"] for f in response["batchItemFailures"]} == {"m1", "m2", "m3"}
    # And the good one was recorded
    assert ms.states_of_run(conn, workspace_id=tenant.workspace_id, run_id=run_id)[_u("rita")].state == "delivered"


def test_an_event_for_an_unknown_message_is_retried_then_dropped_on_the_last_receive(conn, env, aws, tenant):
    event = ses_event("delivery", "no-such-message", "someone@x.test")
    record = {"messageId": "u1", "receiptHandle": "hu", "body": json.dumps(event),
              "eventSource": "aws:sqs", "eventSourceARN": aws.queues.arn}
    # When an event names a message id no delivery has (yet), on its first receive
    first = invoke(MESSAGE_EVENTS.function, {"Records": [{**record, "attributes": {"ApproximateReceiveCount": "1"}}]})
    # Then it comes back after a minute
    assert first["batchItemFailures"] == [{"itemIdentifier": "u1"}]
    assert aws.changed == [(aws.queues.arn, "hu", 60)]
    # And on its last receive it is acknowledged (dropped, logged), not sent to the DLQ
    last = invoke(MESSAGE_EVENTS.function, {"Records": [{**record, "attributes": {
        "ApproximateReceiveCount": str(MESSAGE_EVENTS.max_receive_count)}}]})
    assert last["batchItemFailures"] == []


def test_event_types_we_do_not_record_are_acknowledged(conn, aws):
    event = {"eventType": "Open", "mail": fixture("delivery")["mail"], "open": {"timestamp": "2027-03-01T07:00:00Z"}}
    response = invoke(MESSAGE_EVENTS.function, {"Records": [{"messageId": "o1", "receiptHandle": "ho",
                                                             "body": json.dumps(event), "attributes": {},
                                                             "eventSourceARN": aws.queues.arn}]})
    assert response["batchItemFailures"] == []


def test_an_owner_notice_message_without_a_run_gets_its_states_and_its_bounce_suppresses(conn, env, aws, tenant):
    # Given an owner notice e-mailed to the schedule's owner through the per-recipient
    # outbox (its row has no run)
    from timekeeper.platform import notices
    from timekeeper.reporting.notice_mail import DIGEST_WINDOW, send_notice_mail
    from timekeeper.schedules.notifications import DELIVERY_SKIPPED_STALE, Notice, enqueue_notifications

    schedule = _schedule(conn, tenant, "Noticed")

    def tell(at, key):
        with conn.transaction():
            enqueue_notifications(conn, [Notice(schedule.id, tenant.workspace_id, "queries", DELIVERY_SKIPPED_STALE,
                                                key, {"schedule_id": str(schedule.id), "reason": "skipped_stale"})],
                                  now=at)
        notices.tell_people(conn, now=at)
        return send_notice_mail(conn, mailer=env.mailer, now=at)

    assert tell(NOW, f"stale:{schedule.id}:1")["sent"] == 1
    owner = f"{T}.olga@x.test"
    (sent,) = [s for s in env.mailer.sent if s["to"] == owner]
    row = conn.execute("SELECT run_id FROM query_delivery_outbox WHERE provider_message_id = %s",
                       (sent["id"],)).fetchone()
    assert row["run_id"] is None
    # When SES reports its delivery and then a permanent bounce (duplicated)
    bounce = ses_event("bounce", sent["id"], owner, at=NOW + timedelta(minutes=2))
    _publish(aws, ses_event("delivery", sent["id"], owner, at=NOW + timedelta(minutes=1)), bounce, bounce)
    assert all(not r["failed"] for r in _drain(aws))
    # Then the message's state is kept without a run, and the address is suppressed
    state = conn.execute("SELECT run_id, state, events FROM message_states WHERE provider_message_id = %s",
                         (sent["id"],)).fetchone()
    assert (state["run_id"], state["state"], state["events"]) == (None, "bounced", 2)
    assert [s.address for s in ms.list_suppressions(conn, workspace_id=tenant.workspace_id)] == [owner]
    # And the owner's next notice stays in the product, not mailed to the suppressed address
    later = NOW + DIGEST_WINDOW + timedelta(minutes=5)
    counts = tell(later, f"stale:{schedule.id}:2")
    assert (counts["sent"], counts["suppressed"]) == (0, 1)
    assert [s["to"] for s in env.mailer.sent].count(owner) == 1
    newest = notices.list_notices(conn, workspace_id=tenant.workspace_id, user_id=_u("olga"))[0]
    assert newest.read_at is None and newest.mailed_at == later


def test_an_address_taken_off_the_suppression_list_is_sent_to_again_until_it_bounces_again(conn, env, aws,
                                                                                            tenant):
    # Given Ron's address suppressed by a permanent bounce, and the next run skipping him
    schedule = _schedule(conn, tenant, "Removal", recipients=("ron",))
    _deliver(conn, env, schedule)
    ron = _sent_to(env, "ron")
    _publish(aws, ses_event("bounce", ron["id"], ron["to"].upper()))
    assert all(not r["failed"] for r in _drain(aws))
    env.mailer.sent.clear()
    skipped = _deliver(conn, env, schedule, day=1)
    assert [(d.status, d.skip_reason) for d in dl.list_deliveries(conn, workspace_id=tenant.workspace_id,
                                                                  run_id=skipped)] == [("skipped", "suppressed")]
    # When an admin takes it off the list (compared lower-cased), with a reason
    with conn.transaction():
        removed = ms.remove_suppression(conn, workspace_id=tenant.workspace_id, address=ron["to"].upper(),
                                        actor=_u("ada"), reason="mailbox fixed", now=NOW + timedelta(days=1, hours=3))
    assert removed is not None and (removed.address, removed.suppression_reason, removed.provider_message_id) == (
        ron["to"], "bounced", ron["id"])
    with conn.transaction():
        assert ms.remove_suppression(conn, workspace_id=tenant.workspace_id, address=ron["to"], actor=_u("ada"),
                                     reason="again", now=NOW + timedelta(days=1, hours=4)) is None
    assert [r.id for r in ms.list_suppression_removals(conn, workspace_id=tenant.workspace_id)] == [removed.id]
    # Then the next run sends to him again
    sent = _deliver(conn, env, schedule, day=2)
    assert [(d.status, d.skip_reason) for d in dl.list_deliveries(conn, workspace_id=tenant.workspace_id,
                                                                  run_id=sent)] == [("sent", None)]
    again = _sent_to(env, "ron")
    # And a new permanent bounce puts the address back on the list
    _publish(aws, ses_event("bounce", again["id"], again["to"]))
    assert all(not r["failed"] for r in _drain(aws))
    assert [s.address for s in ms.list_suppressions(conn, workspace_id=tenant.workspace_id)] == [ron["to"]]
