"""Every work queue of the topology (exports) gets its queue and encrypted DLQ, its
consumer with the topology's numbers, least-privilege grants on the files bucket, its
alarms on the alarm topic and a dashboard row; the API may publish to it and presign
downloads under exports/ only."""

from __future__ import annotations

import json

import pytest

from tests.infra.conftest import (
    alarm_by_name,
    event_sources_of,
    functions_by_folder,
    functions_of_folder,
    queue_by_name,
    resources,
)
from tests.infra.test_monitoring import PERIOD_S, _assert_alarm, _dashboard_body, _rate_alarm_reads
from timekeeper.topology import PIPELINES, WORK_QUEUES

ALARM_SUFFIXES = ("queue-age", "dlq-depth", "dlq-arrivals", "consumer-errors")


def _statements(template, folder: str) -> list[dict]:
    functions = functions_by_folder(template)
    role = template["Resources"][functions[folder]]["Properties"]["Role"]["Fn::GetAtt"][0]
    return [statement for policy in resources(template, "AWS::IAM::Policy").values()
            if {"Ref": role} in policy["Properties"]["Roles"]
            for statement in policy["Properties"]["PolicyDocument"]["Statement"]]


def _actions(statement: dict) -> list[str]:
    action = statement["Action"]
    return [action] if isinstance(action, str) else action


@pytest.mark.parametrize("name", sorted(WORK_QUEUES))
def test_queue_dlq_and_consumer_follow_the_topology(synth, name):
    q = WORK_QUEUES[name]
    template = synth.app_template
    # Then the queue's visibility is 6 x the consumer timeout, redrive after max receives, both encrypted
    queue_id, queue = queue_by_name(template, q.consumer.queue_name)
    dlq_id, dlq = queue_by_name(template, q.consumer.dlq_name)
    assert queue["Properties"]["VisibilityTimeout"] == q.consumer.visibility_timeout_s == 6 * q.consumer.timeout_s
    assert queue["Properties"]["RedrivePolicy"] == {"deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
                                                    "maxReceiveCount": q.consumer.max_receive_count}
    assert queue["Properties"]["SqsManagedSseEnabled"] and dlq["Properties"]["SqsManagedSseEnabled"]
    assert dlq["Properties"]["MessageRetentionPeriod"] == q.consumer.dlq_retention_days * 86400
    # And the consumer reads it with partial batch responses, the topology's batch size and concurrency
    functions = functions_by_folder(template)
    consumer = template["Resources"][functions[q.consumer.function]]["Properties"]
    assert consumer["Timeout"] == q.consumer.timeout_s and consumer["MemorySize"] == q.consumer.memory_mb
    assert consumer["EphemeralStorage"] == {"Size": q.consumer.ephemeral_storage_mb}
    assert "ReservedConcurrentExecutions" not in consumer
    [source] = event_sources_of(template, functions[q.consumer.function])
    assert source["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    assert source["BatchSize"] == q.consumer.batch_size
    assert source["ScalingConfig"] == {"MaximumConcurrency": q.consumer.max_concurrency}
    assert source["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    variables = consumer["Environment"]["Variables"]
    assert {q.queue_url_variable, "FILES_BUCKET", "DB_SECRET_ARN"} <= set(variables)


def test_the_export_consumer_may_write_under_exports_only(synth):
    template = synth.app_template
    statements = _statements(template, "export_consumer")
    s3 = [s for s in statements if any(a.startswith("s3:") for a in _actions(s))]
    # Then its only S3 right is writing (and aborting multipart uploads) under exports/
    assert len(s3) == 1 and sorted(_actions(s3[0])) == ["s3:AbortMultipartUpload", "s3:PutObject"]
    assert json.dumps(s3[0]["Resource"]).endswith('"/exports/*"]]}')
    actions = {a for s in statements for a in _actions(s)}
    assert {"sqs:ReceiveMessage", "sqs:DeleteMessage", "sqs:SendMessage", "secretsmanager:GetSecretValue"} <= actions
    assert not {a for a in actions if a.startswith(("sns:", "s3:Delete", "s3:List"))}


def test_the_api_may_publish_exports_and_read_them_for_its_download_links(synth):
    template = synth.app_template
    functions = functions_by_folder(template)
    statements = _statements(template, "api")
    s3 = [s for s in statements if any(a.startswith("s3:") for a in _actions(s))
          and json.dumps(s["Resource"]).endswith('"/exports/*"]]}')]
    assert len(s3) == 1 and _actions(s3[0]) == ["s3:GetObject"]
    # (and nothing but GetObject on the bucket at all: reports/ for the report routes)
    assert {a for s in statements for a in _actions(s) if a.startswith("s3:")} == {"s3:GetObject"}
    variables = template["Resources"][functions["api"]]["Properties"]["Environment"]["Variables"]
    assert {"FILES_BUCKET", *(q.queue_url_variable for q in WORK_QUEUES.values())} <= set(variables)
    assert "sqs:SendMessage" in {a for s in statements for a in _actions(s)}


@pytest.mark.parametrize("name", sorted(WORK_QUEUES))
def test_work_queue_alarms_and_dashboard_row(synth, name):
    q = WORK_QUEUES[name]
    template = synth.app_template
    functions = functions_by_folder(template)
    consumer = [{"Name": "FunctionName", "Value": {"Ref": functions[q.consumer.function]}}]
    queue_id = queue_by_name(template, q.consumer.queue_name)[0]
    dlq_id = queue_by_name(template, q.consumer.dlq_name)[0]
    queue = [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_id, "QueueName"]}}]
    dlq = [{"Name": "QueueName", "Value": {"Fn::GetAtt": [dlq_id, "QueueName"]}}]
    _assert_alarm(alarm_by_name(template, f"Timekeeper-{name}-queue-age"), template, namespace="AWS/SQS",
                  metric="ApproximateAgeOfOldestMessage", dimensions=queue, statistic="Maximum", period=PERIOD_S,
                  threshold=q.consumer.queue_age_alarm_s, comparison="GreaterThanThreshold", missing="notBreaching")
    _assert_alarm(alarm_by_name(template, f"Timekeeper-{name}-dlq-depth"), template, namespace="AWS/SQS",
                  metric="ApproximateNumberOfMessagesVisible", dimensions=dlq, statistic="Maximum", period=PERIOD_S,
                  threshold=0, comparison="GreaterThanThreshold", missing="notBreaching")
    _rate_alarm_reads(alarm_by_name(template, f"Timekeeper-{name}-consumer-errors"), consumer[0]["Value"]["Ref"])
    arrivals = alarm_by_name(template, f"Timekeeper-{name}-dlq-arrivals")
    assert [m["Expression"] for m in arrivals["Metrics"] if "Expression" in m] == ["DIFF(depth)"]
    for suffix in ALARM_SUFFIXES:
        assert alarm_by_name(template, f"Timekeeper-{name}-{suffix}")["AlarmActions"]
    body = _dashboard_body(template)
    assert f"Work queue `{name}`" in body and f"{name}: queue age (s) and DLQ depth" in body
    assert f"{name}: consumer" in body


def test_every_work_queue_consumer_starts_after_the_migration(synth):
    template = synth.app_template
    functions = functions_by_folder(template)
    for q in WORK_QUEUES.values():
        [mapping_id] = [k for k, r in resources(template, "AWS::Lambda::EventSourceMapping").items()
                        if r["Properties"]["FunctionName"] == {"Ref": functions[q.consumer.function]}]
        consumer = template["Resources"][functions[q.consumer.function]]
        depends = set(consumer.get("DependsOn", [])) | set(template["Resources"][mapping_id].get("DependsOn", []))
        assert any("MigrateOnDeploy" in d for d in depends), (q.name, depends)


@pytest.mark.parametrize("name", sorted(q for q, queue in WORK_QUEUES.items() if queue.swept_by))
def test_the_sweeping_dispatcher_may_offer_the_queues_unpublished_requests_again(synth, name):
    # Given the work queue and the dispatchers of the pipeline that sweeps it
    queue = WORK_QUEUES[name]
    template = synth.app_template
    queue_id, _ = queue_by_name(template, queue.queue_name)
    dispatchers = functions_of_folder(template)[PIPELINES[queue.swept_by].dispatcher_function]

    def sends_to_queue(logical_id: str) -> bool:
        role = template["Resources"][logical_id]["Properties"]["Role"]["Fn::GetAtt"][0]
        return any("sqs:SendMessage" in _actions(s) and {"Fn::GetAtt": [queue_id, "Arn"]} in
                   (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])
                   for policy in resources(template, "AWS::IAM::Policy").values()
                   if {"Ref": role} in policy["Properties"]["Roles"]
                   for s in policy["Properties"]["PolicyDocument"]["Statement"])

    def variables(logical_id: str) -> dict:
        return template["Resources"][logical_id]["Properties"]["Environment"]["Variables"]

    # Then the owner-wide partition (0, which runs the maintenance tasks) names the queue and may send to it
    assert variables(dispatchers[0])[queue.queue_url_variable] == {"Ref": queue_id}
    assert sends_to_queue(dispatchers[0])
    # And the other partitions may not
    for other in dispatchers[1:]:
        assert queue.queue_url_variable not in variables(other) and not sends_to_queue(other)
