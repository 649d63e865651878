"""The API function's rights over the dead-letter queues (the operations routes): it is
told every topology dead-letter queue's ARN, may read and consume each one (its depth,
a sample of its oldest messages, the message move task's reads) and start a move task
from it, and may send to that queue's own queue, where a redrive puts the messages back."""

from __future__ import annotations

from typing import Any

from tests.infra.conftest import functions_by_folder, queue_by_name, resources
from timekeeper.settings import dead_letter_queue_arn_variable
from timekeeper.topology import API, dead_letter_queues


def _grants(template: dict[str, Any], role: str) -> list[tuple[set[str], Any]]:
    """(actions, resource) of every statement of the policies attached to ``role``."""
    out = []
    for policy in resources(template, "AWS::IAM::Policy").values():
        props = policy["Properties"]
        if {"Ref": role} not in props.get("Roles", []):
            continue
        for statement in props["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            targets = statement["Resource"] if isinstance(statement["Resource"], list) else [statement["Resource"]]
            out += [(set(actions), target) for target in targets]
    return out


def _allowed(grants: list[tuple[set[str], Any]], target: Any) -> set[str]:
    return set().union(*[actions for actions, resource in grants if resource == target])


def test_the_api_may_read_and_redrive_every_dead_letter_queue(synth):
    template = synth.app_template
    function = template["Resources"][functions_by_folder(template)[API.function]]
    variables = function["Properties"]["Environment"]["Variables"]
    grants = _grants(template, function["Properties"]["Role"]["Fn::GetAtt"][0])
    assert set(dead_letter_queues()) >= {"accounting", "queries", "exports", "snapshots", "message_events"}
    for name, consumer in dead_letter_queues().items():
        dlq_id, _ = queue_by_name(template, consumer.dlq_name)
        queue_id, _ = queue_by_name(template, consumer.queue_name)
        # Told the dead-letter queue's ARN (its queue's is that ARN without "-dlq")
        assert variables[dead_letter_queue_arn_variable(name)] == {"Fn::GetAtt": [dlq_id, "Arn"]}, name
        # May read its depth and sample it, and run SQS's move task from it
        assert _allowed(grants, {"Fn::GetAtt": [dlq_id, "Arn"]}) >= {
            "sqs:GetQueueAttributes", "sqs:GetQueueUrl", "sqs:ReceiveMessage", "sqs:DeleteMessage",
            "sqs:ChangeMessageVisibility", "sqs:StartMessageMoveTask", "sqs:ListMessageMoveTasks"}, name
        # And may send to the queue the messages go back to
        assert "sqs:SendMessage" in _allowed(grants, {"Fn::GetAtt": [queue_id, "Arn"]}), name
