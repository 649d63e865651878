"""Each pipeline's resources carry the topology's numbers: rule rate, dispatcher reserved
concurrency and async settings, queue and DLQ settings, event source settings, and the
function settings every Lambda shares (runtime, layer, tracing, database environment)."""

from __future__ import annotations

import pytest
from aws_cdk.assertions import Match

from infra import settings
from infra.pipeline import dispatcher_max_event_age_s
from tests.infra.conftest import (
    event_sources_of,
    functions_by_folder,
    functions_of_folder,
    queue_by_name,
    resources,
    rule_targeting,
    synthesize,
)
from timekeeper.settings import run_queue_url_variable
from timekeeper.topology import PIPELINES

PIPELINE_NAMES = sorted(PIPELINES)


def _rate(minutes: int) -> str:
    return f"rate({minutes} minute{'' if minutes == 1 else 's'})"


@pytest.mark.parametrize("name", PIPELINE_NAMES)
def test_rule_ticks_the_dispatcher_at_the_topology_rate(synth, name):
    # Given the pipeline and its dispatcher
    pipeline = PIPELINES[name]
    dispatcher = functions_by_folder(synth.app_template)[pipeline.dispatcher_function]

    # Then one enabled rule invokes it at the topology's rate, without retries
    _, rule = rule_targeting(synth.app_template, dispatcher)
    assert rule["Properties"]["ScheduleExpression"] == _rate(pipeline.rule_rate_minutes)
    assert rule["Properties"]["State"] == "ENABLED"
    assert rule["Properties"]["Targets"][0]["RetryPolicy"] == {
        "MaximumRetryAttempts": 0, "MaximumEventAgeInSeconds": dispatcher_max_event_age_s(pipeline)}


@pytest.mark.parametrize("name", PIPELINE_NAMES)
def test_dispatcher_is_single_and_drops_stale_ticks(synth, name):
    # Given the dispatcher function
    pipeline = PIPELINES[name]
    template = synth.app_template
    dispatcher_id = functions_by_folder(template)[pipeline.dispatcher_function]
    dispatcher = template["Resources"][dispatcher_id]["Properties"]

    # Then it runs one at a time, within the topology's timeout, and knows its queue and topic
    assert dispatcher["ReservedConcurrentExecutions"] == 1
    assert dispatcher["Timeout"] == pipeline.dispatcher_timeout_s
    queue_id, _ = queue_by_name(template, pipeline.consumer.queue_name)
    assert dispatcher["Environment"]["Variables"][run_queue_url_variable(pipeline.name)] == {"Ref": queue_id}
    assert "NOTIFICATION_TOPIC_ARN" in dispatcher["Environment"]["Variables"]
    # And an asynchronous tick is never retried and dropped once a period old
    synth.template("TimekeeperApp").has_resource_properties("AWS::Lambda::EventInvokeConfig", {
        "FunctionName": {"Ref": dispatcher_id}, "MaximumRetryAttempts": 0,
        "MaximumEventAgeInSeconds": dispatcher_max_event_age_s(pipeline), "Qualifier": "$LATEST"})


def test_dispatcher_max_event_age_is_one_tick_and_at_least_lambdas_minimum():
    # Given the topology, then each dispatcher drops a tick the next one supersedes
    for pipeline in PIPELINES.values():
        assert dispatcher_max_event_age_s(pipeline) == max(60, 60 * pipeline.rule_rate_minutes)
    assert dispatcher_max_event_age_s(PIPELINES["accounting"]) == 60


@pytest.mark.parametrize("name", PIPELINE_NAMES)
def test_queue_and_dlq_follow_the_topology(synth, name):
    # Given the pipeline's queues
    pipeline = PIPELINES[name]
    template = synth.app_template
    queue_id, queue = queue_by_name(template, pipeline.consumer.queue_name)
    dlq_id, dlq = queue_by_name(template, pipeline.consumer.dlq_name)

    # Then the run queue redrives to the DLQ after maxReceiveCount, with 6x the consumer timeout
    assert (queue["Properties"]["VisibilityTimeout"] == pipeline.consumer.visibility_timeout_s
            == 6 * pipeline.consumer.timeout_s)
    assert queue["Properties"]["RedrivePolicy"] == {
        "deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]}, "maxReceiveCount": pipeline.consumer.max_receive_count}
    # And both are encrypted, the DLQ keeps messages for the topology's retention (14 days)
    assert queue["Properties"]["SqsManagedSseEnabled"] is True
    assert dlq["Properties"]["SqsManagedSseEnabled"] is True
    assert dlq["Properties"]["MessageRetentionPeriod"] == pipeline.consumer.dlq_retention_days * 86400 == 14 * 86400
    # And both refuse requests without TLS
    for logical_id in (queue_id, dlq_id):
        synth.template("TimekeeperApp").has_resource_properties("AWS::SQS::QueuePolicy", {
            "Queues": [{"Ref": logical_id}],
            "PolicyDocument": {"Statement": Match.array_with([Match.object_like({
                "Effect": "Deny", "Action": "sqs:*", "Principal": {"AWS": "*"},
                "Condition": {"Bool": {"aws:SecureTransport": "false"}}})])}})


@pytest.mark.parametrize("name", PIPELINE_NAMES)
def test_consumer_event_source_follows_the_topology(synth, name):
    # Given the consumer
    pipeline = PIPELINES[name]
    template = synth.app_template
    consumer_id = functions_by_folder(template)[pipeline.consumer.function]
    consumer = template["Resources"][consumer_id]["Properties"]

    # Then one event source feeds it with the topology's batch size and maximum concurrency,
    # reporting partial batch failures
    [source] = event_sources_of(template, consumer_id)
    assert source["BatchSize"] == pipeline.consumer.batch_size
    assert source["ScalingConfig"] == {"MaximumConcurrency": pipeline.consumer.max_concurrency}
    assert source["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
    assert source.get("MaximumBatchingWindowInSeconds", 0) == pipeline.consumer.max_batching_window_s
    # And the consumer is capped by the event source, not by reserved concurrency
    assert "ReservedConcurrentExecutions" not in consumer
    assert consumer["Timeout"] == pipeline.consumer.timeout_s
    assert consumer["Timeout"] * 6 <= queue_by_name(template, pipeline.consumer.queue_name)[1]["Properties"][
        "VisibilityTimeout"]


def test_every_function_has_the_layer_runtime_tracing_and_database_settings(synth):
    # Given every Lambda built from functions/
    template = synth.app_template
    layers = list(resources(template, "AWS::Lambda::LayerVersion"))
    assert len(layers) == 1
    functions = functions_by_folder(template)

    for folder, logical_id in functions.items():
        props = template["Resources"][logical_id]["Properties"]
        # Then each runs the handler on Python 3.12 with the shared layer attached
        assert props["Handler"] == "handler.lambda_handler", folder
        assert props["Runtime"] == "python3.12", folder
        assert props["Architectures"] == [settings.DEFAULT_ARCHITECTURE], folder
        assert props["Layers"] == [{"Ref": layers[0]}], folder
        assert props["TracingConfig"] == {"Mode": "Active"}, folder
        # And it finds the database the way timekeeper.edge.adapters expects, inside the VPC
        variables = props["Environment"]["Variables"]
        assert {"DB_HOST", "DB_NAME", "DB_SECRET_ARN"} <= set(variables), folder
        assert "DATABASE_URL" not in variables, folder
        assert props["VpcConfig"]["SubnetIds"], folder
        assert props["LoggingConfig"]["LogGroup"], folder


def test_layer_is_python_312_on_graviton_by_default(synth):
    assert settings.DEFAULT_ARCHITECTURE == "arm64"
    synth.template("TimekeeperApp").has_resource_properties("AWS::Lambda::LayerVersion", {
        "CompatibleRuntimes": ["python3.12"], "CompatibleArchitectures": ["arm64"]})


def test_x86_64_by_context_moves_every_function_and_the_layer_together():
    # Given a deployment that chooses x86_64
    template = synthesize({"timekeeper:architecture": "x86_64"}).app_template

    # Then every function of functions/ and the layer they share run on it
    functions = functions_by_folder(template)
    assert functions
    for folder, logical_id in functions.items():
        assert template["Resources"][logical_id]["Properties"]["Architectures"] == ["x86_64"], folder
    [layer] = resources(template, "AWS::Lambda::LayerVersion").values()
    assert layer["Properties"]["CompatibleArchitectures"] == ["x86_64"]


def test_an_unknown_architecture_fails_at_synth():
    with pytest.raises(ValueError, match="timekeeper:architecture"):
        synthesize({"timekeeper:architecture": "sparc"})


def test_each_function_asset_holds_only_its_handler(synth):
    # Given the staged assets of the function folders
    for folder in functions_by_folder(synth.app_template):
        source = settings.FUNCTIONS_DIR / folder
        # Then the folder is thin: a handler and nothing but Python sources beside it
        files = [p.name for p in source.rglob("*") if p.is_file() and "__pycache__" not in p.parts]
        assert "handler.py" in files
        assert all(name.endswith(".py") for name in files), (folder, files)


def test_least_privilege_grants(synth):
    # Given the policies of the pipeline functions
    template = synth.app_template
    functions = functions_by_folder(template)
    policies = resources(template, "AWS::IAM::Policy")

    def actions_of(folder: str) -> set[str]:
        role = template["Resources"][functions[folder]]["Properties"]["Role"]["Fn::GetAtt"][0]
        found: set[str] = set()
        for policy in policies.values():
            if {"Ref": role} in policy["Properties"]["Roles"]:
                for statement in policy["Properties"]["PolicyDocument"]["Statement"]:
                    action = statement["Action"]
                    found.update([action] if isinstance(action, str) else action)
        return found

    for pipeline in PIPELINES.values():
        dispatcher = actions_of(pipeline.dispatcher_function)
        consumer = actions_of(pipeline.consumer.function)
        # Then the dispatcher may send runs and publish notifications, but not receive
        assert {"sqs:SendMessage", "sns:Publish", "secretsmanager:GetSecretValue"} <= dispatcher
        assert "sqs:ReceiveMessage" not in dispatcher
        # And the consumer may receive and delete runs, but not publish; it sends only when
        # its pipeline caps work kinds (a released run's copy, to its own run queue)
        assert {"sqs:ReceiveMessage", "sqs:DeleteMessage", "secretsmanager:GetSecretValue"} <= consumer
        assert "sns:Publish" not in consumer
        assert ("sqs:SendMessage" in consumer) == bool(pipeline.capped_work_kinds)
    # And the migration function only reads its secret (plus logs, networking, tracing)
    migrate = actions_of(settings.MIGRATE_FUNCTION)
    assert not {a for a in migrate if a.startswith(("sqs:", "sns:", "s3:"))}
    assert "secretsmanager:GetSecretValue" in migrate
    # And no function uses an AWS managed policy
    for folder, logical_id in functions.items():
        role_id = template["Resources"][logical_id]["Properties"]["Role"]["Fn::GetAtt"][0]
        assert "ManagedPolicyArns" not in template["Resources"][role_id]["Properties"], folder


def test_every_event_source_is_built_from_a_queue_consumer_of_the_topology(synth):
    # Given every queue consumer the topology describes (run queues, work queues, snapshot jobs)
    from timekeeper.topology import queue_consumers

    template = synth.app_template
    functions = functions_by_folder(template)
    mappings = resources(template, "AWS::Lambda::EventSourceMapping")
    consumers = queue_consumers()

    # Then the app has exactly one SQS event source per consumer, each with the description's
    # queue (redrive, visibility), function, batching and concurrency, reporting partial failures
    assert len(mappings) == len(consumers) == len({c.queue_name for c in consumers})
    for c in consumers:
        queue_id, queue = queue_by_name(template, c.queue_name)
        dlq_id, _ = queue_by_name(template, c.dlq_name)
        assert queue["Properties"]["VisibilityTimeout"] == c.visibility_timeout_s
        assert queue["Properties"]["RedrivePolicy"] == {"deadLetterTargetArn": {"Fn::GetAtt": [dlq_id, "Arn"]},
                                                        "maxReceiveCount": c.max_receive_count}
        [source] = event_sources_of(template, functions[c.function])
        assert source["EventSourceArn"] == {"Fn::GetAtt": [queue_id, "Arn"]}
        assert source["BatchSize"] == c.batch_size
        assert source["ScalingConfig"] == {"MaximumConcurrency": c.max_concurrency}
        assert source.get("MaximumBatchingWindowInSeconds", 0) == c.max_batching_window_s
        assert source["FunctionResponseTypes"] == ["ReportBatchItemFailures"]
        assert template["Resources"][functions[c.function]]["Properties"]["Timeout"] == c.timeout_s


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_each_dispatcher_partition_is_its_own_function_ticked_by_its_own_rule_naming_it(synth, name):
    # Given the pipeline's dispatcher code, deployed once per partition
    p = PIPELINES[name]
    template = synth.app_template
    ids = functions_of_folder(template)[p.dispatcher_function]
    assert len(ids) == p.dispatch_partitions > 1
    rules = resources(template, "AWS::Events::Rule")
    for index, logical_id in enumerate(ids):
        function = template["Resources"][logical_id]["Properties"]
        # Then each partition's function runs one pass at a time with the dispatcher's numbers
        assert function["ReservedConcurrentExecutions"] == 1
        assert function["Timeout"] == p.dispatcher_timeout_s
        # And exactly one rule ticks it, every rule_rate_minutes, with the partition in the event's detail
        [target] = [t for rule in rules.values() for t in rule["Properties"]["Targets"]
                    if t["Arn"] == {"Fn::GetAtt": [logical_id, "Arn"]}]
        [rule] = [r for r in rules.values() if target in r["Properties"]["Targets"]]
        assert rule["Properties"]["ScheduleExpression"] == _rate(p.rule_rate_minutes)
        template_text = target["InputTransformer"]["InputTemplate"]
        assert f'"detail":{{"partition":{index},"partitions":{p.dispatch_partitions}}}' in template_text
        assert target["InputTransformer"]["InputPathsMap"]["time"] == "$.time"
