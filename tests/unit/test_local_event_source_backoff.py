"""The local event source keeps a consumer's visibility change (a retry's backoff) in
simulated time: the failed message comes back after the backoff, not the queue's timeout."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import boto3
import pytest
from moto import mock_aws

from timekeeper.local.event_source import SqsEventSource

NOW = datetime(2027, 3, 1, 6, tzinfo=UTC)


@pytest.fixture
def queue(monkeypatch):
    """One SQS queue in moto: ``(client, url, arn)``."""
    credentials = {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1"}
    for key, value in credentials.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    with mock_aws():
        sqs = boto3.client("sqs")
        url = sqs.create_queue(QueueName="q")["QueueUrl"]
        yield sqs, url, sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]


def test_a_failed_message_whose_visibility_was_changed_returns_after_the_backoff(queue):
    sqs, url, arn = queue
    calls: list[str] = []
    source: SqsEventSource

    def function(event):
        (record,) = event["Records"]
        calls.append(record["messageId"])
        if len(calls) == 1:  # the first receive fails its item after setting a 30 s backoff
            source.change_visibility(record["receiptHandle"], 30)
            return {"batchItemFailures": [{"itemIdentifier": record["messageId"]}]}
        return {"batchItemFailures": []}

    source = SqsEventSource(sqs=sqs, queue_url=url, queue_arn=arn, function=function, batch_size=1,
                            max_concurrency=2, visibility_timeout=timedelta(seconds=5400))
    sqs.send_message(QueueUrl=url, MessageBody="{}")
    # When the first receive fails with a 30 s backoff
    assert source.poll(NOW) == 1
    # Then the message is hidden for 30 simulated seconds, not the queue's 5,400
    assert source.next_visible_at() == NOW + timedelta(seconds=30)
    assert source.poll(NOW + timedelta(seconds=29)) == 0
    assert source.poll(NOW + timedelta(seconds=30)) == 1
    assert len(calls) == 2 and source.in_flight == 0


def test_a_duplicate_sent_back_during_the_last_receive_makes_the_source_due_again(queue):
    # A duplicate is sent back while its original is being handled, after the receive that
    # emptied the queue: the source must say it holds a message, or nothing polls it again
    # (the simulation polls a source only when it knows the source holds something).
    sqs, url, arn = queue
    bodies: list[str] = []
    sent_back: list[str] = []

    def duplicate(message):
        if sent_back:
            return False
        sent_back.append(message["Body"])
        return True

    source = SqsEventSource(sqs=sqs, queue_url=url, queue_arn=arn,
                            function=lambda event: bodies.extend(r["body"] for r in event["Records"]),
                            batch_size=10, max_concurrency=1, visibility_timeout=timedelta(seconds=60),
                            duplicate=duplicate)
    sqs.send_message(QueueUrl=url, MessageBody='{"n": 1}')
    assert source.poll(NOW) == 1
    # Then the copy waits in the queue and the source reports it due from that instant
    assert source.next_visible_at() == NOW
    assert source.poll(NOW + timedelta(minutes=1)) == 1
    assert bodies == ['{"n": 1}', '{"n": 1}']
    assert source.next_visible_at() is None
