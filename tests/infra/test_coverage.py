"""Later work cannot forget the infrastructure: every folder under functions/ has a Lambda
in the synthesized template, and every pipeline of the topology has its rule, queue, DLQ,
event source and alarms."""

from __future__ import annotations

import pytest

from infra.functions import function_folders
from infra.settings import FUNCTIONS_DIR
from infra.stacks import APP_STACK
from tests.infra.conftest import (
    alarm_by_name,
    event_sources_of,
    functions_by_folder,
    queue_by_name,
    rule_targeting,
    synthesize,
)
from timekeeper.topology import OPTIONAL_FUNCTIONS, PIPELINES, SNAPSHOTS, Pipeline, QueueConsumer

ALARM_SUFFIXES = ("dispatcher-silence", "dispatcher-errors", "queue-age", "dlq-depth", "consumer-errors")


def test_every_function_folder_has_a_lambda(synth):
    # Given the folders under functions/ and the synthesized app
    folders = function_folders()
    built = functions_by_folder(synth.app_template)

    # Then each folder is a Lambda (an optional one when configured: tests/infra/test_authorizer.py),
    # and no Lambda names a folder that does not exist
    missing = sorted(set(folders) - set(built) - OPTIONAL_FUNCTIONS)
    assert not missing, f"functions/{missing} have no Lambda: wire them in infra/ (stacks.py or a pipeline)"
    assert set(built) <= set(folders)
    assert folders, "functions/ is empty"


def test_every_topology_function_has_a_folder():
    # Given the topology, then each dispatcher and consumer it names exists under functions/
    for pipeline in PIPELINES.values():
        for folder in (pipeline.dispatcher_function, pipeline.consumer.function):
            assert (FUNCTIONS_DIR / folder / "handler.py").is_file(), f"{pipeline.name}: functions/{folder}"


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_every_pipeline_has_rule_queues_event_source_and_alarms(synth, name):
    # Given a pipeline of the topology
    pipeline = PIPELINES[name]
    template = synth.app_template
    functions = functions_by_folder(template)

    # Then its dispatcher has a rule, its queue and DLQ exist, its consumer reads the queue
    assert rule_targeting(template, functions[pipeline.dispatcher_function]) is not None
    queue_id, _ = queue_by_name(template, pipeline.consumer.queue_name)
    queue_by_name(template, pipeline.consumer.dlq_name)
    sources = event_sources_of(template, functions[pipeline.consumer.function])
    assert [s["EventSourceArn"] for s in sources] == [{"Fn::GetAtt": [queue_id, "Arn"]}]
    # And it has its five alarms
    for suffix in ALARM_SUFFIXES:
        alarm_by_name(template, f"Timekeeper-{pipeline.name}-{suffix}")


def test_a_new_pipeline_in_the_topology_gets_its_infrastructure(monkeypatch):
    # Given a second pipeline added to the topology (reusing existing handler folders)
    probe = Pipeline(name="probe", owner="probe", dispatcher_function="accounting_dispatcher",
                     consumer=QueueConsumer(queue_name="timekeeper-probe-runs", function="accounting_consumer",
                                            timeout_s=900, max_receive_count=3, max_concurrency=3,
                                            queue_age_alarm_s=1800),
                     rule_rate_minutes=15, reoffer_after_s=1800, dispatcher_silence_alarm_minutes=20)
    monkeypatch.setitem(PIPELINES, probe.name, probe)

    # When the app is synthesized
    template = synthesize().raw[APP_STACK]

    # Then the new pipeline has its own rule, queues, event source and alarms, with its numbers
    queue_id, queue = queue_by_name(template, probe.consumer.queue_name)
    assert queue["Properties"]["VisibilityTimeout"] == probe.consumer.visibility_timeout_s
    assert queue["Properties"]["RedrivePolicy"]["maxReceiveCount"] == 3
    schedules = [r["Properties"]["ScheduleExpression"] for r in template["Resources"].values()
                 if r["Type"] == "AWS::Events::Rule"]
    # One rule per dispatcher partition of each pipeline (the probe has one), plus the
    # snapshot planner's and the snapshot dispatcher's.
    partitions = sum(p.dispatch_partitions for p in PIPELINES.values())
    assert "rate(15 minutes)" in schedules and len(schedules) == partitions + 2
    mappings = [r["Properties"] for r in template["Resources"].values()
                if r["Type"] == "AWS::Lambda::EventSourceMapping"
                and r["Properties"]["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}]
    assert [m["ScalingConfig"]["MaximumConcurrency"] for m in mappings] == [3]
    assert alarm_by_name(template, "Timekeeper-probe-queue-age")["Threshold"] == 1800
    for suffix in ALARM_SUFFIXES:
        alarm_by_name(template, f"Timekeeper-probe-{suffix}")
    silence = alarm_by_name(template, "Timekeeper-probe-dispatcher-silence")
    assert silence["Period"] == 20 * 60 and silence["TreatMissingData"] == "breaching"


SNAPSHOT_ALARMS = ("dispatcher-silence", "dispatcher-heartbeat", "planner-silence", "planner-errors", "job-errors",
                   "queue-age", "dlq-depth", "dlq-arrivals", "overdue", "failed")


def test_the_snapshot_pipeline_has_rules_queues_event_source_and_alarms(synth):
    # Given the snapshot pipeline of the topology and the synthesized app
    template = synth.app_template
    functions = functions_by_folder(template)

    # Then the planner and the dispatcher each have their rule at the topology's rate
    _, planner_rule = rule_targeting(template, functions[SNAPSHOTS.planner_function])
    _, dispatcher_rule = rule_targeting(template, functions[SNAPSHOTS.dispatcher_function])
    assert planner_rule["Properties"]["ScheduleExpression"] == f"rate({SNAPSHOTS.planner_rate_minutes} minutes)"
    assert dispatcher_rule["Properties"]["ScheduleExpression"] == "rate(1 minute)"
    # And the job queue redrives to its DLQ after the topology's receives; the run job reads it
    queue_id, queue = queue_by_name(template, SNAPSHOTS.consumer.queue_name)
    queue_by_name(template, SNAPSHOTS.consumer.dlq_name)
    assert queue["Properties"]["RedrivePolicy"]["maxReceiveCount"] == SNAPSHOTS.consumer.max_receive_count
    assert queue["Properties"]["VisibilityTimeout"] == SNAPSHOTS.consumer.visibility_timeout_s
    (source,) = event_sources_of(template, functions[SNAPSHOTS.consumer.function])
    assert source["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    assert source["ScalingConfig"]["MaximumConcurrency"] == SNAPSHOTS.consumer.max_concurrency
    assert source["BatchSize"] == 1 and source["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    # And the dispatcher and planner run one at a time; the run job holds its chunks' time
    resources = template["Resources"]
    assert resources[functions[SNAPSHOTS.dispatcher_function]]["Properties"]["ReservedConcurrentExecutions"] == 1
    assert resources[functions[SNAPSHOTS.planner_function]]["Properties"]["ReservedConcurrentExecutions"] == 1
    assert resources[functions[SNAPSHOTS.consumer.function]]["Properties"]["Timeout"] == SNAPSHOTS.consumer.timeout_s
    # And the deployed environment disables the development-only self-test type
    for folder in (SNAPSHOTS.planner_function, SNAPSHOTS.dispatcher_function, SNAPSHOTS.consumer.function):
        env = resources[functions[folder]]["Properties"]["Environment"]["Variables"]
        assert env["TIMEKEEPER_ENVIRONMENT"] == "production"
    # And every alarm exists; overdue and silence are the ones that page when nothing happens
    for suffix in SNAPSHOT_ALARMS:
        alarm_by_name(template, f"Timekeeper-snapshots-{suffix}")
    assert alarm_by_name(template, "Timekeeper-snapshots-planner-silence")["TreatMissingData"] == "breaching"
    overdue = alarm_by_name(template, "Timekeeper-snapshots-overdue")
    assert overdue["MetricName"] == "SnapshotOverdue" and overdue["Threshold"] == 0
