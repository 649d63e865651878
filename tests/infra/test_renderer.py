"""The report renderer in the synthesized app: numbers from the topology, asynchronous
retries with an on-failure queue, least-privilege grants on reports/ only, its alarms on
the topic and its dashboard row."""

from __future__ import annotations

import json

from infra import settings
from infra.functions import function_folders
from tests.infra.conftest import alarm_by_name, functions_by_folder, notification_topic_id, queue_by_name, resources
from tests.infra.test_monitoring import _rate_alarm_reads
from timekeeper import observability as obs
from timekeeper.topology import REPORT_RENDERER, WORKER_LOGIN, connection_budget

PERIOD_S = settings.ALARM_PERIOD_MINUTES * 60


def _renderer(template):
    logical_id = functions_by_folder(template)[REPORT_RENDERER.function]
    return logical_id, template["Resources"][logical_id]["Properties"]


def _statements(template, function_props):
    role = function_props["Role"]["Fn::GetAtt"][0]
    return [s for p in resources(template, "AWS::IAM::Policy").values() if {"Ref": role} in p["Properties"]["Roles"]
            for s in p["Properties"]["PolicyDocument"]["Statement"]]


def test_the_renderer_follows_the_topology(synth):
    # Given the synthesized renderer
    template = synth.app_template
    logical_id, props = _renderer(template)
    assert REPORT_RENDERER.function in function_folders()
    # Then its timeout, memory and reserved concurrency are the topology's
    assert props["Timeout"] == REPORT_RENDERER.timeout_s
    assert props["MemorySize"] == REPORT_RENDERER.memory_mb
    assert props["ReservedConcurrentExecutions"] == REPORT_RENDERER.reserved_concurrency
    assert "FILES_BUCKET" in props["Environment"]["Variables"]
    # And it counts in the connection budget
    assert connection_budget().renderers == REPORT_RENDERER.reserved_concurrency
    # And Lambda retries a failed invocation twice, drops old events, and sends both to the failure queue
    [config] = [r["Properties"] for r in resources(template, "AWS::Lambda::EventInvokeConfig").values()
                if r["Properties"]["FunctionName"] == {"Ref": logical_id}]
    assert config["MaximumRetryAttempts"] == REPORT_RENDERER.retry_attempts == 2
    assert config["MaximumEventAgeInSeconds"] == REPORT_RENDERER.max_event_age_s
    queue_id, queue = queue_by_name(template, REPORT_RENDERER.failure_queue_name)
    assert config["DestinationConfig"]["OnFailure"]["Destination"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    assert queue["Properties"]["MessageRetentionPeriod"] == REPORT_RENDERER.failure_retention_days * 86400
    assert queue["Properties"]["SqsManagedSseEnabled"] is True


def test_the_renderer_may_only_read_and_write_reports_and_send_its_failures(synth):
    template = synth.app_template
    _, props = _renderer(template)
    statements = _statements(template, props)
    s3 = [s for s in statements if any(str(a).startswith("s3:") for a in (
        s["Action"] if isinstance(s["Action"], list) else [s["Action"]]))]
    # Then S3: put and get, under reports/ of the files bucket, nothing else
    assert len(s3) == 1 and sorted(s3[0]["Action"]) == ["s3:GetObject", "s3:PutObject"]
    resource = json.dumps(s3[0]["Resource"])
    assert "/reports/*" in resource and "FilesBucketArn" in resource
    actions = {a for s in statements for a in (s["Action"] if isinstance(s["Action"], list) else [s["Action"]])}
    # And no queue but its failure destination, no topic, its own database secret
    assert not {a for a in actions if a.startswith(("sqs:Receive", "sns:", "lambda:"))}
    assert "sqs:SendMessage" in actions and "secretsmanager:GetSecretValue" in actions
    assert WORKER_LOGIN  # the workers' login: checked per function in test_deployability


def test_the_renderer_has_its_alarms_on_the_topic_and_a_dashboard_row(synth):
    template = synth.app_template
    logical_id, _ = _renderer(template)
    topic = notification_topic_id(template)
    function = [{"Name": "FunctionName", "Value": {"Ref": logical_id}}]
    # errors as a rate over several periods (tests/infra/test_monitoring.py), throttles as any
    errors = alarm_by_name(template, f"Timekeeper-{REPORT_RENDERER.name}-errors")
    _rate_alarm_reads(errors, logical_id)
    props = alarm_by_name(template, f"Timekeeper-{REPORT_RENDERER.name}-throttles")
    assert (props["MetricName"], props["Dimensions"], props["Statistic"], props["Period"]) == (
        "Throttles", function, "Sum", PERIOD_S)
    assert (props["Threshold"], props["ComparisonOperator"], props["TreatMissingData"]) == (
        0, "GreaterThanThreshold", "notBreaching")
    for alarm in (errors, props):
        assert alarm["AlarmActions"] == alarm["OKActions"] == [{"Ref": topic}]
    failed = alarm_by_name(template, f"Timekeeper-{REPORT_RENDERER.name}-failed-events")
    queue_id, _ = queue_by_name(template, REPORT_RENDERER.failure_queue_name)
    assert failed["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert failed["Dimensions"] == [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_id, "QueueName"]}}]
    assert failed["AlarmActions"] == [{"Ref": topic}] and failed["Threshold"] == 0
    [dashboard] = resources(template, "AWS::CloudWatch::Dashboard").values()
    body = "".join(p if isinstance(p, str) else json.dumps(p)
                   for p in dashboard["Properties"]["DashboardBody"]["Fn::Join"][1])
    assert f"Report renderer `{REPORT_RENDERER.function}`" in body
    assert obs.REPORT_RENDERED in body and obs.REPORT_RENDER_FAILED in body


def test_the_api_may_request_renders_and_sign_downloads_of_reports_only(synth):
    template = synth.app_template
    renderer_id, _ = _renderer(template)
    api_id = functions_by_folder(template)["api"]
    api = template["Resources"][api_id]["Properties"]
    variables = api["Environment"]["Variables"]
    assert variables["REPORT_RENDERER_FUNCTION"] == {"Ref": renderer_id} and "FILES_BUCKET" in variables
    statements = _statements(template, api)
    invoke = [s for s in statements if s["Action"] == "lambda:InvokeFunction"]
    assert invoke and all(json.dumps(s["Resource"]).count(renderer_id) >= 1 for s in invoke)
    s3 = [s for s in statements if str(s["Action"]).startswith("s3:")]
    # Only GetObject, on key prefixes (reports/ here; exports/ is the export routes', deliveries/ the downloads')
    assert {s["Action"] for s in s3} == {"s3:GetObject"}
    assert any("/reports/*" in json.dumps(s["Resource"]) for s in s3)
    assert all(json.dumps(s["Resource"]).endswith(('/reports/*"]]}', '/exports/*"]]}', '/deliveries/*"]]}'))
               for s in s3)


def test_every_queries_dispatcher_partition_may_ask_the_renderer_again_for_unfinished_renders(synth):
    # Given the renders' sweep in the queries dispatcher's owner-wide pass
    from tests.infra.conftest import functions_of_folder
    from timekeeper.topology import QUERIES

    assert REPORT_RENDERER.swept_by == QUERIES.name
    template = synth.app_template
    renderer_id, _ = _renderer(template)
    ids = functions_of_folder(template)[QUERIES.dispatcher_function]
    assert len(ids) == QUERIES.dispatch_partitions
    for logical_id in ids:
        # Then each partition names the renderer and may invoke it, and nothing else of Lambda's
        props = template["Resources"][logical_id]["Properties"]
        assert props["Environment"]["Variables"]["REPORT_RENDERER_FUNCTION"] == {"Ref": renderer_id}
        invoke = [s for s in _statements(template, props) if "lambda:InvokeFunction" in json.dumps(s["Action"])]
        assert invoke and all(renderer_id in json.dumps(s["Resource"]) for s in invoke), logical_id
