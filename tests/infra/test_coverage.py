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
from timekeeper.topology import PIPELINES, Pipeline

ALARM_SUFFIXES = ("dispatcher-silence", "dispatcher-errors", "queue-age", "dlq-depth", "consumer-errors")


def test_every_function_folder_has_a_lambda(synth):
    # Given the folders under functions/ and the synthesized app
    folders = function_folders()
    built = functions_by_folder(synth.app_template)

    # Then each folder is a Lambda, and no Lambda names a folder that does not exist
    missing = sorted(set(folders) - set(built))
    assert not missing, f"functions/{missing} have no Lambda: wire them in infra/ (stacks.py or a pipeline)"
    assert set(built) <= set(folders)
    assert folders, "functions/ is empty"


def test_every_topology_function_has_a_folder():
    # Given the topology, then each dispatcher and consumer it names exists under functions/
    for pipeline in PIPELINES.values():
        for folder in (pipeline.dispatcher_function, pipeline.consumer_function):
            assert (FUNCTIONS_DIR / folder / "handler.py").is_file(), f"{pipeline.name}: functions/{folder}"


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_every_pipeline_has_rule_queues_event_source_and_alarms(synth, name):
    # Given a pipeline of the topology
    pipeline = PIPELINES[name]
    template = synth.app_template
    functions = functions_by_folder(template)

    # Then its dispatcher has a rule, its queue and DLQ exist, its consumer reads the queue
    assert rule_targeting(template, functions[pipeline.dispatcher_function]) is not None
    queue_id, _ = queue_by_name(template, pipeline.queue_name)
    queue_by_name(template, pipeline.dlq_name)
    sources = event_sources_of(template, functions[pipeline.consumer_function])
    assert [s["EventSourceArn"] for s in sources] == [{"Fn::GetAtt": [queue_id, "Arn"]}]
    # And it has its five alarms
    for suffix in ALARM_SUFFIXES:
        alarm_by_name(template, f"Timekeeper-{pipeline.name}-{suffix}")


def test_a_new_pipeline_in_the_topology_gets_its_infrastructure(monkeypatch):
    # Given a second pipeline added to the topology (reusing existing handler folders)
    probe = Pipeline(name="probe", owner="probe", dispatcher_function="accounting_dispatcher",
                     consumer_function="accounting_consumer", rule_rate_minutes=15, max_concurrency=3,
                     consumer_timeout_s=900, reoffer_after_s=1800, max_receive_count=3, queue_age_alarm_s=1800,
                     dispatcher_silence_alarm_minutes=20)
    monkeypatch.setitem(PIPELINES, probe.name, probe)

    # When the app is synthesized
    template = synthesize().raw[APP_STACK]

    # Then the new pipeline has its own rule, queues, event source and alarms, with its numbers
    queue_id, queue = queue_by_name(template, probe.queue_name)
    assert queue["Properties"]["VisibilityTimeout"] == probe.visibility_timeout_s
    assert queue["Properties"]["RedrivePolicy"]["maxReceiveCount"] == 3
    schedules = [r["Properties"]["ScheduleExpression"] for r in template["Resources"].values()
                 if r["Type"] == "AWS::Events::Rule"]
    assert "rate(15 minutes)" in schedules and len(schedules) == len(PIPELINES)
    mappings = [r["Properties"] for r in template["Resources"].values()
                if r["Type"] == "AWS::Lambda::EventSourceMapping"
                and r["Properties"]["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}]
    assert [m["ScalingConfig"]["MaximumConcurrency"] for m in mappings] == [3]
    assert alarm_by_name(template, "Timekeeper-probe-queue-age")["Threshold"] == 1800
    for suffix in ALARM_SUFFIXES:
        alarm_by_name(template, f"Timekeeper-probe-{suffix}")
    silence = alarm_by_name(template, "Timekeeper-probe-dispatcher-silence")
    assert silence["Period"] == 20 * 60 and silence["TreatMissingData"] == "breaching"
