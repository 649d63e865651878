"""Run and export messages carry their workspace as ``MessageGroupId`` on the standard
queues (SQS fair queues), through moto's SQS."""

from __future__ import annotations

import uuid

import boto3
from moto import mock_aws

from timekeeper.aws.sqs import SqsMessagePublisher, SqsRunPublisher
from timekeeper.reporting.exports import ExportMessage
from timekeeper.schedules.messages import RunMessage


def _received(sqs, url):
    got = []
    while batch := sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, AttributeNames=["All"]).get("Messages"):
        got.extend(batch)
    return got


def test_run_messages_carry_their_workspace_as_message_group_on_a_standard_queue():
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="runs")["QueueUrl"]
        workspaces = [uuid.uuid4() for _ in range(3)]
        messages = [RunMessage(run_id=uuid.uuid4(), schedule_id=uuid.uuid4(), workspace_id=workspaces[i % 3],
                               owner="accounting", work_kind="batch.roll") for i in range(25)]
        assert SqsRunPublisher(sqs, url, in_flight=2).publish(messages) == set()
        got = _received(sqs, url)
        assert len(got) == 25
        by_run = {RunMessage.model_validate_json(m["Body"]).run_id: m["Attributes"]["MessageGroupId"] for m in got}
        assert by_run == {m.run_id: str(m.workspace_id) for m in messages}


def test_export_messages_and_delayed_sends_carry_the_workspace_too():
    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="exports")["QueueUrl"]
        export = ExportMessage(export_id=uuid.uuid4(), workspace_id=uuid.uuid4())
        publisher = SqsMessagePublisher(sqs, url, key=lambda m: m.export_id)
        assert publisher.publish([export]) == set()
        run = RunMessage(run_id=uuid.uuid4(), schedule_id=uuid.uuid4(), workspace_id=uuid.uuid4(),
                         owner="queries", work_kind="queries.deliver")
        assert SqsRunPublisher(sqs, url).send_delayed(run, 0) is True
        groups = sorted(m["Attributes"]["MessageGroupId"] for m in _received(sqs, url))
        assert groups == sorted([str(export.workspace_id), str(run.workspace_id)])


def test_a_local_redrive_keeps_each_message_s_workspace_group():
    from timekeeper.aws.dead_letters import DeadLetterQueue, ReceivingDeadLetterQueues

    with mock_aws():
        sqs = boto3.client("sqs", region_name="us-east-1")
        dlq = sqs.create_queue(QueueName="runs-dlq")["QueueUrl"]
        source = sqs.create_queue(QueueName="runs")["QueueUrl"]

        def arn(url):
            return sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]

        sqs.send_message(QueueUrl=dlq, MessageBody="{}", MessageGroupId="workspace-a")
        queues = ReceivingDeadLetterQueues(sqs, {"runs": DeadLetterQueue("runs", arn(dlq), arn(source))})
        assert queues.redrive("runs").moved == 1
        (moved,) = _received(sqs, source)
        assert moved["Attributes"]["MessageGroupId"] == "workspace-a"
