"""The local stack's SQS (moto) computes a queue's attribute when it is read: moto computed
every attribute of the queue (each ``ApproximateNumberOfMessages*`` counting the whole queue)
for every message sent and three times for every message a receive returned, which made a
deep queue's fill and drain quadratic (the noisy-neighbour benchmark's 10,000 messages).
The answers stay moto's own."""

from __future__ import annotations

import json

import boto3
import pytest
from moto import mock_aws
from moto.sqs.models import Queue, sqs_backends

from timekeeper.local.aws import REGION, install_fast_queue_attributes


@pytest.fixture
def sqs(monkeypatch):
    monkeypatch.setattr(Queue, "attributes", Queue.attributes)  # restored after the test
    monkeypatch.setattr(Queue, "messages", Queue.messages)
    with mock_aws():
        install_fast_queue_attributes()
        yield boto3.client("sqs", region_name=REGION, aws_access_key_id="local", aws_secret_access_key="local")


def _receive(sqs, url: str) -> list[dict]:
    return sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])


def test_a_send_and_a_receive_do_not_count_the_queue(sqs, monkeypatch):
    url = sqs.create_queue(QueueName="runs")["QueueUrl"]

    def counted(self):
        raise AssertionError("the queue was counted")

    monkeypatch.setattr(Queue, "approximate_number_of_messages", property(counted))
    for i in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"run {i}")
    assert sorted(m["Body"] for m in _receive(sqs, url)) == ["run 0", "run 1", "run 2"]


def test_the_queues_attributes_read_as_moto_gives_them(sqs):
    dlq = sqs.create_queue(QueueName="runs-dlq")["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    redrive = json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5})
    attributes = {"VisibilityTimeout": "120", "RedrivePolicy": redrive}
    url = sqs.create_queue(QueueName="runs", Attributes=attributes)["QueueUrl"]
    for i in range(4):
        sqs.send_message(QueueUrl=url, MessageBody=f"run {i}")
    sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=1, WaitTimeSeconds=0)
    every = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["All"])["Attributes"]
    assert every["ApproximateNumberOfMessages"] == "3"
    assert every["ApproximateNumberOfMessagesNotVisible"] == "1"
    assert every["VisibilityTimeout"] == "120"
    assert json.loads(every["RedrivePolicy"]) == {"deadLetterTargetArn": dlq_arn, "maxReceiveCount": 5}
    assert every["SqsManagedSseEnabled"] in ("true", "false")
    assert "FifoQueue" not in every
    one = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])["Attributes"]
    assert one == {"ApproximateNumberOfMessages": "3"}
    fifo = sqs.create_queue(QueueName="runs.fifo", Attributes={"FifoQueue": "true"})["QueueUrl"]
    assert sqs.get_queue_attributes(QueueUrl=fifo, AttributeNames=["All"])["Attributes"]["FifoQueue"] == "true"


def test_a_message_in_flight_or_delayed_is_not_received_until_it_is_visible(sqs):
    url = sqs.create_queue(QueueName="runs")["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="now")
    sqs.send_message(QueueUrl=url, MessageBody="later", DelaySeconds=900)
    (now,) = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, VisibilityTimeout=900)["Messages"]
    assert now["Body"] == "now"
    assert _receive(sqs, url) == []  # one in flight, one delayed
    sqs.change_message_visibility(QueueUrl=url, ReceiptHandle=now["ReceiptHandle"], VisibilityTimeout=0)
    assert [m["Body"] for m in _receive(sqs, url)] == ["now"]


def test_a_message_past_its_queues_retention_period_is_not_received(sqs):
    url = sqs.create_queue(QueueName="runs", Attributes={"MessageRetentionPeriod": "60"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="old")
    queue = sqs_backends["123456789012"][REGION].get_queue("runs")
    (old,) = queue._messages
    old.sent_timestamp -= 61_000  # sent 61 s earlier than it was: past the 60 s period
    assert _receive(sqs, url) == []
    sqs.send_message(QueueUrl=url, MessageBody="fresh")
    assert [m["Body"] for m in _receive(sqs, url)] == ["fresh"]
