"""The local stack's SQS (moto) checks a received message's retention from its queue's
``MessageRetentionPeriod`` alone: moto computed every attribute of the queue (each counting
the whole queue) for every message a receive returned, which made a deep queue's drain
quadratic (the noisy-neighbour benchmark's 10,000 messages). The answer stays the same."""

from __future__ import annotations

import boto3
import pytest
from moto import mock_aws
from moto.sqs.models import Queue, SQSBackend, sqs_backends

from timekeeper.local.aws import REGION, install_fast_retention_check


@pytest.fixture
def sqs(monkeypatch):
    # restored after the test, whatever the check installed
    monkeypatch.setattr(SQSBackend, "is_message_valid_based_on_retention_period",
                        SQSBackend.is_message_valid_based_on_retention_period)
    with mock_aws():
        install_fast_retention_check()
        yield boto3.client("sqs", region_name=REGION, aws_access_key_id="local", aws_secret_access_key="local")


def _receive(sqs, url: str) -> list[dict]:
    return sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=0).get("Messages", [])


def test_a_receive_does_not_compute_every_attribute_of_the_queue(sqs, monkeypatch):
    url = sqs.create_queue(QueueName="runs")["QueueUrl"]
    for i in range(3):
        sqs.send_message(QueueUrl=url, MessageBody=f"run {i}")

    def every_attribute(self):
        raise AssertionError("a receive computed every attribute of the queue")

    monkeypatch.setattr(Queue, "attributes", property(every_attribute))
    assert sorted(m["Body"] for m in _receive(sqs, url)) == ["run 0", "run 1", "run 2"]


def test_a_message_past_its_queues_retention_period_is_not_received(sqs):
    url = sqs.create_queue(QueueName="runs", Attributes={"MessageRetentionPeriod": "60"})["QueueUrl"]
    sqs.send_message(QueueUrl=url, MessageBody="old")
    queue = sqs_backends["123456789012"][REGION].get_queue("runs")
    (old,) = queue._messages
    old.sent_timestamp -= 61_000  # sent 61 s earlier than it was: past the 60 s period
    assert _receive(sqs, url) == []
    sqs.send_message(QueueUrl=url, MessageBody="fresh")
    assert [m["Body"] for m in _receive(sqs, url)] == ["fresh"]
