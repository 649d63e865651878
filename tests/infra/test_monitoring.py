"""Alarms: each one's metric, statistic, period, threshold, comparison and missing-data
treatment, all notifying the topic; the dashboard has a row per pipeline and uses the
metric names the code emits."""

from __future__ import annotations

import json

import pytest

from infra import settings
from infra.monitoring import PIPELINE_DIMENSION
from tests.infra.conftest import alarm_by_name, functions_by_folder, notification_topic_id, queue_by_name, resources
from timekeeper import observability as obs
from timekeeper.topology import PIPELINES, WORK_QUEUES

PERIOD_S = settings.ALARM_PERIOD_MINUTES * 60


def _topic_id(template) -> str:
    return notification_topic_id(template)


def _assert_alarm(props, template, *, namespace, metric, dimensions, statistic, period, threshold, comparison,
                  missing):
    assert props["Namespace"] == namespace
    assert props["MetricName"] == metric
    assert props["Dimensions"] == dimensions
    assert props["Statistic"] == statistic
    assert props["Period"] == period
    assert props["Threshold"] == threshold
    assert props["ComparisonOperator"] == comparison
    assert props["TreatMissingData"] == missing
    assert props["EvaluationPeriods"] == 1
    topic = {"Ref": _topic_id(template)}
    assert props["AlarmActions"] == [topic]
    assert props["OKActions"] == [topic]


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_pipeline_alarms(synth, name):
    # Given the pipeline's functions and queues
    p = PIPELINES[name]
    template = synth.app_template
    functions = functions_by_folder(template)
    dispatcher = [{"Name": "FunctionName", "Value": {"Ref": functions[p.dispatcher_function]}}]
    consumer = [{"Name": "FunctionName", "Value": {"Ref": functions[p.consumer.function]}}]
    queue_id = queue_by_name(template, p.consumer.queue_name)[0]
    dlq_id = queue_by_name(template, p.consumer.dlq_name)[0]
    queue = [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_id, "QueueName"]}}]
    dlq = [{"Name": "QueueName", "Value": {"Fn::GetAtt": [dlq_id, "QueueName"]}}]

    # Then silence: fewer than one invocation in the topology's window, missing data breaching
    _assert_alarm(alarm_by_name(template, f"Timekeeper-{name}-dispatcher-silence"), template,
                  namespace="AWS/Lambda", metric="Invocations", dimensions=dispatcher, statistic="Sum",
                  period=p.dispatcher_silence_alarm_minutes * 60, threshold=1, comparison="LessThanThreshold",
                  missing="breaching")
    assert p.dispatcher_silence_alarm_minutes == 5 or name != "accounting"
    # And dispatcher errors
    _assert_alarm(alarm_by_name(template, f"Timekeeper-{name}-dispatcher-errors"), template,
                  namespace="AWS/Lambda", metric="Errors", dimensions=dispatcher, statistic="Sum",
                  period=PERIOD_S, threshold=0, comparison="GreaterThanThreshold", missing="notBreaching")
    # And queue age above the topology's threshold (missing data is not breaching)
    _assert_alarm(alarm_by_name(template, f"Timekeeper-{name}-queue-age"), template,
                  namespace="AWS/SQS", metric="ApproximateAgeOfOldestMessage", dimensions=queue,
                  statistic="Maximum", period=PERIOD_S, threshold=p.consumer.queue_age_alarm_s,
                  comparison="GreaterThanThreshold", missing="notBreaching")
    # And any message in the DLQ
    _assert_alarm(alarm_by_name(template, f"Timekeeper-{name}-dlq-depth"), template,
                  namespace="AWS/SQS", metric="ApproximateNumberOfMessagesVisible", dimensions=dlq,
                  statistic="Maximum", period=PERIOD_S, threshold=0, comparison="GreaterThanThreshold",
                  missing="notBreaching")
    # And consumer errors
    _assert_alarm(alarm_by_name(template, f"Timekeeper-{name}-consumer-errors"), template,
                  namespace="AWS/Lambda", metric="Errors", dimensions=consumer, statistic="Sum",
                  period=PERIOD_S, threshold=0, comparison="GreaterThanThreshold", missing="notBreaching")


def test_schedule_auto_paused_alarm_matches_what_the_code_emits(synth):
    # Given the metric set Powertools emits for ScheduleAutoPaused
    obs.metrics.add_metric(name=obs.SCHEDULE_AUTO_PAUSED, unit="Count", value=1)
    emitted = obs.metrics.serialize_metric_set()
    obs.metrics.clear_metrics()
    [directive] = emitted["_aws"]["CloudWatchMetrics"]
    [dimension_names] = directive["Dimensions"]
    emitted_dimensions = [{"Name": n, "Value": emitted[n]} for n in dimension_names]

    # Then the alarm watches exactly that namespace, name and dimension set
    _assert_alarm(alarm_by_name(synth.app_template, "Timekeeper-schedule-auto-paused"), synth.app_template,
                  namespace=directive["Namespace"], metric=obs.SCHEDULE_AUTO_PAUSED, dimensions=emitted_dimensions,
                  statistic="Sum", period=PERIOD_S, threshold=0, comparison="GreaterThanThreshold",
                  missing="notBreaching")


def test_every_alarm_notifies_the_topic(synth):
    template = synth.app_template
    topic = {"Ref": _topic_id(template)}
    alarms = resources(template, "AWS::CloudWatch::Alarm")
    # Seven per pipeline, ten for the snapshot pipeline, three for the report renderer, four per
    # work queue, the auto-pause alarm, the delivery-failure alarm, four for the message-events queue.
    assert len(alarms) == 7 * len(PIPELINES) + 10 + 3 + 4 * len(WORK_QUEUES) + 1 + 1 + 4
    for alarm in alarms.values():
        assert alarm["Properties"]["AlarmActions"] == [topic]


def _dashboard_body(template) -> str:
    [dashboard] = resources(template, "AWS::CloudWatch::Dashboard").values()
    body = dashboard["Properties"]["DashboardBody"]
    # The body is an Fn::Join of literal JSON pieces and references.
    return "".join(part if isinstance(part, str) else json.dumps(part) for part in body["Fn::Join"][1])


def test_dashboard_has_a_row_per_pipeline_with_the_emitted_metric_names(synth):
    body = _dashboard_body(synth.app_template)
    assert obs.NAMESPACE in body
    for name in (obs.SCHEDULES_CLAIMED, obs.RUNS_PUBLISHED, obs.PUBLISH_REFUSED, obs.RUN_SUCCEEDED,
                 obs.RUN_SKIPPED, obs.RUN_FAILED, obs.SCHEDULE_AUTO_PAUSED):
        assert name in body, name
    assert "Monthly snapshots" in body and obs.SNAPSHOT_OVERDUE in body and obs.SNAPSHOT_PUBLISHED in body
    for pipeline in PIPELINES.values():
        assert f"Pipeline `{pipeline.name}`" in body
        assert f"{pipeline.name}: queue age (s) and DLQ depth" in body
        assert f"{pipeline.name}: outcomes by kind" in body
        assert "SEARCH(" in body and f"{PIPELINE_DIMENSION}=" in body
