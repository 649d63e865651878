"""Each run-queue consumer may set the visibility timeout of the messages it received (the
retry backoff of the one SQS batch entry) and find its queue's URL from the event's ARN."""

from __future__ import annotations

import pytest

from tests.infra.conftest import functions_by_folder, queue_by_name, resources
from timekeeper.topology import PIPELINES


def _actions(statement: dict) -> set[str]:
    action = statement["Action"]
    return {action} if isinstance(action, str) else set(action)


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_the_consumer_may_change_the_visibility_of_its_queues_messages(synth, name):
    # Given the pipeline's consumer, its role and its run queue
    pipeline = PIPELINES[name]
    template = synth.app_template
    consumer = template["Resources"][functions_by_folder(template)[pipeline.consumer.function]]["Properties"]
    role_id = consumer["Role"]["Fn::GetAtt"][0]
    queue_id, _ = queue_by_name(template, pipeline.consumer.queue_name)
    # Then a policy of that role allows ChangeMessageVisibility and GetQueueUrl on that queue
    granted: set[str] = set()
    for policy in resources(template, "AWS::IAM::Policy").values():
        if {"Ref": role_id} not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Allow" and statement.get("Resource") == {"Fn::GetAtt": [queue_id, "Arn"]}:
                granted |= _actions(statement)
    assert {"sqs:ChangeMessageVisibility", "sqs:GetQueueUrl"} <= granted
