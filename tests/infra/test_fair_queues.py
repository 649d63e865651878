"""Fair queues in the stacks: the run queues stay standard queues (SQS fair queues are
standard queues whose messages carry a MessageGroupId), and a pipeline with capped work
kinds lets its consumer send a released run's copy to its own run queue."""

from __future__ import annotations

import pytest

from tests.infra.conftest import functions_by_folder, queue_by_name, resources
from timekeeper.settings import run_queue_url_variable
from timekeeper.topology import PIPELINES, queue_consumers


def _actions(statement: dict) -> set[str]:
    action = statement["Action"]
    return {action} if isinstance(action, str) else set(action)


@pytest.mark.parametrize("name", sorted(c.queue_name for c in queue_consumers()))
def test_every_queue_stays_a_standard_queue(synth, name):
    _, queue = queue_by_name(synth.app_template, name)
    assert "FifoQueue" not in queue["Properties"] and not queue["Properties"]["QueueName"].endswith(".fifo")


@pytest.mark.parametrize("name", sorted(n for n, p in PIPELINES.items() if p.capped_work_kinds))
def test_a_consumer_with_capped_work_kinds_may_send_to_its_own_run_queue(synth, name):
    pipeline = PIPELINES[name]
    template = synth.app_template
    consumer = template["Resources"][functions_by_folder(template)[pipeline.consumer.function]]["Properties"]
    role_id = consumer["Role"]["Fn::GetAtt"][0]
    queue_id, _ = queue_by_name(template, pipeline.consumer.queue_name)
    assert consumer["Environment"]["Variables"][run_queue_url_variable(name)] == {"Ref": queue_id}
    granted: set[str] = set()
    for policy in resources(template, "AWS::IAM::Policy").values():
        if {"Ref": role_id} not in policy["Properties"]["Roles"]:
            continue
        for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
            if statement["Effect"] == "Allow" and statement.get("Resource") == {"Fn::GetAtt": [queue_id, "Arn"]}:
                granted |= _actions(statement)
    assert "sqs:SendMessage" in granted


def test_the_queries_pipeline_caps_deliveries_per_workspace():
    assert PIPELINES["queries"].capped_work_kinds == ("queries.deliver",)
    assert PIPELINES["queries"].max_in_flight_per_workspace == 1
