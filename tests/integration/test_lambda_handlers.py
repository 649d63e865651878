"""The real Lambda handlers with real-shaped events, against the real database and moto."""

from __future__ import annotations

import json
import logging
import uuid
from datetime import timedelta

import boto3
import pytest
from moto import mock_aws

from tests.support import scheduled_event, sqs_event
from timekeeper import clock, edge
from timekeeper.aws.sns import SnsNotifier
from timekeeper.aws.sqs import SqsRunPublisher
from timekeeper.local.aws import create_pipeline_queues
from timekeeper.local.event_source import SqsEventSource
from timekeeper.local.lambdas import invoke
from timekeeper.schedules import service
from timekeeper.schedules.dispatcher import Partition
from timekeeper.schedules.messages import RunMessage
from timekeeper.topology import ACCOUNTING


@pytest.fixture
def aws(db_url, conn, monkeypatch):
    """moto with the accounting queues and topic; the edge configured from the environment."""
    conn.execute("TRUNCATE schedules, schedule_runs, schedule_events, schedule_notifications CASCADE")
    for key, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1",
                       "POWERTOOLS_TRACE_DISABLED": "true", "POWERTOOLS_METRICS_NAMESPACE": "Timekeeper",
                       "DATABASE_URL": db_url}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        sqs = boto3.client("sqs")
        pair = create_pipeline_queues(sqs, ACCOUNTING)
        topic = boto3.client("sns").create_topic(Name="notices")["TopicArn"]
        monkeypatch.setenv("RUN_QUEUE_URL_ACCOUNTING", pair.url)
        monkeypatch.setenv("NOTIFICATION_TOPIC_ARN", topic)
        edge.reset()
        yield {"sqs": sqs, "queue": pair, "topic": topic}
        edge.reset()
        clock.install(None)


def hourly(conn, now, kind="reconciliation.sweep"):
    return service.create_schedule(conn, workspace_id=uuid.uuid4(), owner="accounting", work_kind=kind,
                                   recurrence={"cron": "0 * * * *", "timezone": "UTC"}, actor="t",
                                   now=now - timedelta(minutes=30))


def receive_all(sqs, url):
    got = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"]).get("Messages", [])
    return got


def test_dispatcher_handler_publishes_claimed_runs_to_the_queue(aws, conn, utc):
    # Given a due schedule
    now = utc(2027, 1, 4, 10, 0)
    schedule = hourly(conn, now)
    clock.install(lambda: now)
    # When EventBridge invokes the dispatcher
    result = invoke("accounting_dispatcher", scheduled_event(now))
    # Then one run message is on the queue
    assert result["claimed"] == 1 and result["published"] == 1
    (message,) = receive_all(aws["sqs"], aws["queue"].url)
    body = RunMessage.model_validate_json(message["Body"])
    assert body.schedule_id == schedule.id


def test_each_partitions_tick_claims_its_own_share_and_a_malformed_tick_is_refused(aws, conn, utc):
    # Given 40 due schedules
    now = utc(2027, 1, 4, 10, 0)
    schedules = [hourly(conn, now) for _ in range(40)]
    clock.install(lambda: now)
    # When the rule of partition 1 of 2 ticks its dispatcher function
    result = invoke("accounting_dispatcher", scheduled_event(now, {"partition": 1, "partitions": 2}))
    # Then it claimed exactly the schedules of its half of the slots
    mine = {s.id for s in schedules if Partition(1, 2).owns(s.id)}
    assert result["claimed"] == len(mine) > 0
    sent = set()
    while got := receive_all(aws["sqs"], aws["queue"].url):
        sent |= {RunMessage.model_validate_json(m["Body"]).schedule_id for m in got}
        aws["sqs"].delete_message_batch(QueueUrl=aws["queue"].url, Entries=[
            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(got)])
    assert sent == mine
    # And partition 0's tick claims the rest
    assert invoke("accounting_dispatcher", scheduled_event(now, {"partition": 0, "partitions": 2}))["claimed"] \
        == len(schedules) - len(mine)
    # And a tick naming no valid partition fails the invocation, naming the field
    for detail in ({"partition": 2, "partitions": 2}, {"partition": "1", "partitions": 2}, {"partition": 0}):
        with pytest.raises(ValueError, match="partition"):
            invoke("accounting_dispatcher", scheduled_event(now, detail))


def test_a_malformed_message_fails_only_its_own_batch_item(aws, conn, utc):
    # Given a batch with a good run message and a malformed one
    now = utc(2027, 1, 4, 10, 0)
    hourly(conn, now)
    clock.install(lambda: now)
    invoke("accounting_dispatcher", scheduled_event(now))
    (good,) = receive_all(aws["sqs"], aws["queue"].url)
    event = sqs_event(json.loads(good["Body"]), "{not json", {"run_id": "x"})
    # When the consumer handles it
    response = invoke("accounting_consumer", event)
    # Then only the two malformed items are reported failed; the good run settled
    failed = {f["itemIdentifier"] for f in response["batchItemFailures"]}
    assert failed == {event["Records"][1]["messageId"], event["Records"][2]["messageId"]}
    state = conn.execute("SELECT state FROM schedule_runs").fetchone()["state"]
    assert state in ("succeeded", "skipped")


def test_a_malformed_message_reaches_the_dlq_after_max_receive_count(aws, utc):
    # Given a malformed message on the queue and the event source mapping of the topology
    sqs, pair = aws["sqs"], aws["queue"]
    sqs.send_message(QueueUrl=pair.url, MessageBody="not a run")
    source = SqsEventSource(sqs=sqs, queue_url=pair.url, queue_arn=pair.arn,
                            function=lambda event: invoke("accounting_consumer", event),
                            batch_size=ACCOUNTING.consumer.batch_size,
                            max_concurrency=ACCOUNTING.consumer.max_concurrency,
                            visibility_timeout=timedelta(seconds=ACCOUNTING.consumer.visibility_timeout_s))
    now = utc(2027, 1, 4, 10, 0)
    # When it is polled after each visibility timeout
    receives = 0
    for i in range(ACCOUNTING.consumer.max_receive_count + 1):
        receives += source.poll(now + i * source.visibility_timeout + timedelta(seconds=1))
    # Then it was received maxReceiveCount times and then moved to the dead-letter queue
    assert receives == ACCOUNTING.consumer.max_receive_count
    dead = sqs.receive_message(QueueUrl=pair.dlq_url, MaxNumberOfMessages=10).get("Messages", [])
    assert [m["Body"] for m in dead] == ["not a run"]


def test_the_publisher_reports_a_refused_call_as_refused_runs(aws):
    message = RunMessage(run_id=uuid.uuid4(), schedule_id=uuid.uuid4(), workspace_id=uuid.uuid4(),
                         owner="accounting", work_kind="batch.roll")
    missing = aws["queue"].url.rsplit("/", 1)[0] + "/no-such-queue"
    assert SqsRunPublisher(aws["sqs"], missing).publish([message]) == {message.run_id}
    assert SqsRunPublisher(aws["sqs"], aws["queue"].url).publish([message]) == set()


def test_pause_notices_are_published_to_the_topic(aws):
    sns = boto3.client("sns")
    queue_url = aws["sqs"].create_queue(QueueName="notices-inbox")["QueueUrl"]
    arn = aws["sqs"].get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    sns.subscribe(TopicArn=aws["topic"], Protocol="sqs", Endpoint=arn)
    SnsNotifier(sns, aws["topic"]).notify(subject="Timekeeper accounting: schedule_paused",
                                          payload={"reason": "consecutive_failures"})
    (received,) = aws["sqs"].receive_message(QueueUrl=queue_url).get("Messages", [])
    assert json.loads(json.loads(received["Body"])["Message"]) == {"reason": "consecutive_failures"}


def test_outcomes_are_counted_per_pipeline_and_work_kind(aws, conn, utc, capsys):
    # Given a dispatched run
    now = utc(2027, 1, 4, 10, 0)
    hourly(conn, now)
    clock.install(lambda: now)
    invoke("accounting_dispatcher", scheduled_event(now))
    (message,) = receive_all(aws["sqs"], aws["queue"].url)
    capsys.readouterr()
    # When the consumer settles it
    invoke("accounting_consumer", sqs_event(json.loads(message["Body"])))
    # Then an EMF line carries the outcome with the pipeline and work kind dimensions
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.startswith("{")]
    detailed = [line for line in lines if line.get("pipeline") == "accounting"
                and line.get("work_kind") == "reconciliation.sweep"]
    assert detailed, lines
    directive = detailed[0]["_aws"]["CloudWatchMetrics"][0]
    assert set(directive["Dimensions"][0]) == {"service", "pipeline", "work_kind"}
    assert directive["Metrics"][0]["Name"] in ("RunSucceeded", "RunSkipped")
    # And another carries the pipeline's total without the work kind (what the pipeline's
    # failure-rate alarm divides: one series per outcome and pipeline)
    totals = [line for line in lines if line.get("pipeline") == "accounting" and "work_kind" not in line
              and ("RunSucceeded" in line or "RunSkipped" in line)]
    assert totals, lines
    assert set(totals[0]["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]) == {"service", "pipeline"}


def test_a_batch_whose_every_item_fails_returns_its_failures_instead_of_raising(aws):
    # Given a batch holding a single poison message (and one of another owner's runs)
    stranger = RunMessage(run_id=uuid.uuid4(), schedule_id=uuid.uuid4(), workspace_id=uuid.uuid4(),
                          owner="queries", work_kind="x")
    event = sqs_event("not a run message", stranger)
    # When the consumer function handles it
    response = invoke("accounting_consumer", event)
    # Then the invocation succeeds and reports exactly those items failed (no function error,
    # so the consumer-errors alarm stays quiet; SQS still redelivers and dead-letters them)
    assert sorted(f["itemIdentifier"] for f in response["batchItemFailures"]) == sorted(
        r["messageId"] for r in event["Records"])


def test_the_dispatchers_owner_wide_pass_prunes_history_and_counts_it(aws, conn, utc, capsys, caplog):
    # Given an accounting schedule with three runs finished 200 days ago, the last its latest
    now = utc(2027, 9, 1, 10, 0)
    schedule = hourly(conn, now - timedelta(days=201))
    old = now - timedelta(days=200)
    for i in range(3):
        conn.execute("""
            INSERT INTO schedule_runs (schedule_id, workspace_id, owner, work_kind, occurrence_key, occurrence_at,
                                       occurrence_local, trigger, definition_version, state, queued_at, finished_at,
                                       outcome_code)
            VALUES (%s, %s, 'accounting', 'reconciliation.sweep', %s, %s, %s, 'scheduled', 1, 'succeeded', %s, %s,
                    'ok')""", (schedule.id, schedule.workspace_id, f"k{i}", old, old.replace(tzinfo=None),
                               old + timedelta(hours=i), old + timedelta(hours=i, minutes=1)))
    conn.execute("""UPDATE schedules SET last_run_id = (SELECT id FROM schedule_runs ORDER BY queued_at DESC LIMIT 1)
                     WHERE id = %s""", (schedule.id,))
    clock.install(lambda: now)
    capsys.readouterr()
    caplog.set_level(logging.INFO, logger="timekeeper")  # whatever level a local stack left it at
    # When partition 0's rule ticks (the owner-wide pass runs the maintenance)
    invoke("accounting_dispatcher", scheduled_event(now, {"partition": 0, "partitions": 2}))
    # Then the two older runs are gone, the latest kept
    assert conn.execute("SELECT count(*) AS n FROM schedule_runs WHERE finished_at < %s",
                        (now - timedelta(days=90),)).fetchone()["n"] == 1
    # And the HistoryPruned metric of the pipeline counts them with their events, and a log line says so
    captured = capsys.readouterr()
    lines = [json.loads(line) for line in (captured.out + captured.err).splitlines() if line.startswith("{")]
    pruned = [line for line in lines if "HistoryPruned" in line and line.get("pipeline") == "accounting"]
    values = pruned[0]["HistoryPruned"] if pruned else []
    assert sum(values if isinstance(values, list) else [values]) >= 2, lines
    assert [r.retention["runs"] for r in caplog.records if r.getMessage() == "history pruned"] == [2]
