"""Alarms: each one's metric, statistic, period, threshold, comparison and missing-data
treatment, all notifying the topic; the dashboard has a row per pipeline and uses the
metric names the code emits."""

from __future__ import annotations

import json

import pytest

from infra import alarms, settings
from infra.metrics import PIPELINE_DIMENSION
from infra.settings import ROOT, DeploymentConfig
from tests.infra.conftest import (
    alarm_by_name,
    functions_by_folder,
    functions_of_folder,
    notification_topic_id,
    queue_by_name,
    resources,
    synthesize,
)
from timekeeper import observability as obs
from timekeeper.topology import (
    AUTHORIZER,
    CONNECT_TIMEOUT_S,
    DOWNLOADS,
    PIPELINES,
    REPORT_RENDERER,
    WORK_QUEUES,
    connection_budget,
)

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
    # And the dispatcher's error rate (notifying through the dispatchers' composite alarm)
    _rate_alarm_reads(alarm_by_name(template, f"Timekeeper-{name}-dispatcher-errors"),
                      dispatcher[0]["Value"]["Ref"])
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
    # And the consumer's error rate
    _rate_alarm_reads(alarm_by_name(template, f"Timekeeper-{name}-consumer-errors"), consumer[0]["Value"]["Ref"])


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_every_dispatcher_partition_has_its_silence_and_errors_alarm(synth, name):
    # Given the pipeline's dispatcher functions, one per partition
    p = PIPELINES[name]
    template = synth.app_template
    ids = functions_of_folder(template)[p.dispatcher_function]
    assert len(ids) == p.dispatch_partitions
    for index, logical_id in enumerate(ids):
        suffix = f"-p{index}" if index else ""
        dimensions = [{"Name": "FunctionName", "Value": {"Ref": logical_id}}]
        # Then a partition that is not invoked, or fails, alarms on its own
        _assert_alarm(alarm_by_name(template, f"Timekeeper-{name}-dispatcher-silence{suffix}"), template,
                      namespace="AWS/Lambda", metric="Invocations", dimensions=dimensions, statistic="Sum",
                      period=p.dispatcher_silence_alarm_minutes * 60, threshold=1, comparison="LessThanThreshold",
                      missing="breaching")
        _rate_alarm_reads(alarm_by_name(template, f"Timekeeper-{name}-dispatcher-errors{suffix}"), logical_id)
        assert dimensions


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
    # Eight per pipeline and two (silence, errors) per further dispatcher partition, ten for
    # the snapshot pipeline, four for the report renderer, four per work queue, the
    # auto-pause alarm, the delivery-failure and SES-throttling alarms, the failed-posting-jobs alarm, four for
    # the API and two for its download function (no JWT authorizer by default), four for the
    # database, two for SES reputation, four for the message-events queue; a duration alarm
    # per long function (every dispatcher partition, consumer, the renderer, the snapshot
    # dispatcher, planner and job, the message-events consumer).
    partition_alarms = sum(2 * (p.dispatch_partitions - 1) for p in PIPELINES.values())
    durations = sum(p.dispatch_partitions + 1 for p in PIPELINES.values()) + len(WORK_QUEUES) + 1 + 3 + 1
    assert len(alarms) == (8 * len(PIPELINES) + partition_alarms + 10 + 4 + 4 * len(WORK_QUEUES) + 1 + 2 + 1
                           + 4 + 2 + 4 + 2 + 4 + durations)
    # Each notifies the topic, or is a member of the composite alarm that does
    [composite] = resources(template, "AWS::CloudWatch::CompositeAlarm").values()
    assert composite["Properties"]["AlarmActions"] == [topic]
    rule = json.dumps(composite["Properties"]["AlarmRule"])
    for logical_id, alarm in alarms.items():
        assert alarm["Properties"].get("AlarmActions") == [topic] or logical_id in rule, logical_id


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


def test_the_dashboards_text_sends_operators_to_the_runbooks(synth):
    # The text widget at the top names the page with the alarms' runbooks, which exists
    body = _dashboard_body(synth.app_template)
    assert "docs/operations.md" in body and "README.md" not in body
    assert (ROOT / "docs" / "operations.md").is_file()


def _export_of(data, value) -> dict:
    """The data stack's value behind an ``Fn::ImportValue`` of the app stack."""
    name = value["Fn::ImportValue"]
    return next(o["Value"] for o in data["Outputs"].values() if o.get("Export", {}).get("Name") == name)


def _assert_expression_alarm(props, template, *, expression, over, threshold):
    """An alarm on a math expression ``expression`` over the metric ``over`` (namespace,
    name, dimensions), notifying the topic when it fires and clears."""
    [expr] = [m for m in props["Metrics"] if "Expression" in m]
    [metric] = [m for m in props["Metrics"] if "MetricStat" in m]
    assert expr["Expression"] == expression and expr.get("ReturnData", True) is True
    stat = metric["MetricStat"]
    assert (stat["Metric"]["Namespace"], stat["Metric"]["MetricName"], stat["Metric"]["Dimensions"]) == over
    assert stat["Period"] == PERIOD_S and metric["ReturnData"] is False
    assert props["Threshold"] == threshold and props["ComparisonOperator"] == "GreaterThanThreshold"
    assert props["TreatMissingData"] == "notBreaching"
    topic = {"Ref": _topic_id(template)}
    assert props["AlarmActions"] == [topic] and props["OKActions"] == [topic]


def test_the_renderers_failure_queue_notifies_again_on_a_second_failure(synth):
    # Given the renderer's on-failure queue
    template = synth.app_template
    queue_id = queue_by_name(template, f"timekeeper-{REPORT_RENDERER.name}-failed")[0]
    depth = ("AWS/SQS", "ApproximateNumberOfMessagesVisible",
             [{"Name": "QueueName", "Value": {"Fn::GetAtt": [queue_id, "QueueName"]}}])

    # Then besides its depth, its growth alarms (a new failure while the depth alarm is still
    # in ALARM notifies again), as every dead-letter queue's does
    _assert_expression_alarm(alarm_by_name(template, f"Timekeeper-{REPORT_RENDERER.name}-failed-arrivals"),
                             template, expression="DIFF(depth)", over=depth, threshold=0)
    dlq = alarm_by_name(template, f"Timekeeper-{next(iter(PIPELINES))}-dlq-arrivals")
    assert [m.get("Expression") for m in dlq["Metrics"]] == [
        m.get("Expression") for m in alarm_by_name(
            template, f"Timekeeper-{REPORT_RENDERER.name}-failed-arrivals")["Metrics"]]


def test_api_alarms_on_function_errors_throttles_5xx_and_latency(synth):
    # Given the API function and its REST API stage
    template = synth.app_template
    function = [{"Name": "FunctionName", "Value": {"Ref": functions_by_folder(template)["api"]}}]
    [api] = resources(template, "AWS::ApiGateway::RestApi").values()
    [stage_id] = resources(template, "AWS::ApiGateway::Stage")
    stage = [{"Name": "ApiName", "Value": api["Properties"]["Name"]}, {"Name": "Stage", "Value": {"Ref": stage_id}}]
    common = {"period": PERIOD_S, "comparison": "GreaterThanThreshold", "missing": "notBreaching"}

    # Then the function's errors and throttles, any 5XX answer and the p95 latency alarm
    _rate_alarm_reads(alarm_by_name(template, "Timekeeper-api-errors"), function[0]["Value"]["Ref"])
    _assert_alarm(alarm_by_name(template, "Timekeeper-api-throttles"), template, namespace="AWS/Lambda",
                  metric="Throttles", dimensions=function, statistic="Sum", threshold=0, **common)
    # (5XX answers as a share of requests over several periods: one 5XX does not page)
    server_errors = alarm_by_name(template, "Timekeeper-api-5xx")
    stats = {m["Id"]: m["MetricStat"] for m in server_errors["Metrics"] if "MetricStat" in m}
    assert {k: (s["Metric"]["Namespace"], s["Metric"]["MetricName"], s["Stat"], s["Period"])
            for k, s in stats.items()} == {"errors": ("AWS/ApiGateway", "5XXError", "Sum", PERIOD_S),
                                           "invocations": ("AWS/ApiGateway", "Count", "Sum", PERIOD_S)}
    assert all(s["Metric"]["Dimensions"] == stage for s in stats.values())
    assert (server_errors["Threshold"], server_errors["DatapointsToAlarm"], server_errors["EvaluationPeriods"]) == (
        alarms.ERROR_RATE_ALARM_PERCENT, 2, 3)
    [expression] = [m["Expression"] for m in server_errors["Metrics"] if "Expression" in m]
    assert f">= {alarms.ERROR_RATE_MIN_INVOCATIONS}" in expression
    latency = alarm_by_name(template, "Timekeeper-api-latency")
    assert latency["ExtendedStatistic"] == "p95"
    _assert_alarm({**latency, "Statistic": "p95"}, template, namespace="AWS/ApiGateway", metric="Latency",
                  dimensions=stage, statistic="p95", threshold=settings.API_LATENCY_ALARM_MS, **common)
    assert 0 < settings.API_LATENCY_ALARM_MS < settings.API_TIMEOUT_S * 1000


def test_the_download_function_alarms_on_its_errors_and_throttles(synth):
    # Given the public download route's own function (its own reserved executions)
    template = synth.app_template
    function = [{"Name": "FunctionName", "Value": {"Ref": functions_by_folder(template)[DOWNLOADS.function]}}]
    common = {"period": PERIOD_S, "comparison": "GreaterThanThreshold", "missing": "notBreaching",
              "namespace": "AWS/Lambda", "dimensions": function, "statistic": "Sum", "threshold": 0}

    # Then its errors and its throttles alarm, as the API function's do
    _rate_alarm_reads(alarm_by_name(template, "Timekeeper-api-downloads-errors"), function[0]["Value"]["Ref"])
    _assert_alarm(alarm_by_name(template, "Timekeeper-api-downloads-throttles"), template, metric="Throttles",
                  **common)
    # And without a JWT authorizer in the stack there is no authorizer alarm
    with pytest.raises(KeyError):
        alarm_by_name(template, "Timekeeper-api-authorizer-errors")


def test_the_jwt_authorizer_alarms_on_its_errors():
    # Given a deployment whose API trusts an OpenID Connect issuer (the stack's JWT authorizer)
    template = synthesize({DeploymentConfig.KEY_JWT_ISSUER: "https://login.acme-saas.dev/realms/tk",
                           DeploymentConfig.KEY_JWT_AUDIENCE: "timekeeper-api"}).app_template
    function = [{"Name": "FunctionName", "Value": {"Ref": functions_by_folder(template)[AUTHORIZER.function]}}]

    # Then its errors alarm (an error is a 500 for every caller; a bad token is a Deny)
    _rate_alarm_reads(alarm_by_name(template, "Timekeeper-api-authorizer-errors"), function[0]["Value"]["Ref"])


def test_database_alarms_on_capacity_connections_and_the_proxy(synth):
    # Given the data stack's cluster and proxy, as the app stack imports them
    template, data = synth.app_template, synth.data_template
    [cluster_id] = resources(data, "AWS::RDS::DBCluster")
    [proxy_id] = resources(data, "AWS::RDS::DBProxy")
    budget = connection_budget().total
    common = {"period": PERIOD_S, "comparison": "GreaterThanThreshold", "missing": "notBreaching",
              "statistic": "Maximum", "namespace": "AWS/RDS"}

    def imported(props, dimension):
        [d] = props["Dimensions"]
        assert d["Name"] == dimension
        return _export_of(data, d["Value"]), [d]

    # Then Aurora near its ACU ceiling
    capacity = alarm_by_name(template, "Timekeeper-database-capacity")
    source, dims = imported(capacity, "DBClusterIdentifier")
    assert source == {"Ref": cluster_id}
    _assert_alarm(capacity, template, metric="ACUUtilization", dimensions=dims,
                  threshold=settings.AURORA_ACU_ALARM_PERCENT, **common)
    # And more Aurora connections than the budget plus the reserved ones
    connections = alarm_by_name(template, "Timekeeper-database-connections")
    source, dims = imported(connections, "DBClusterIdentifier")
    assert source == {"Ref": cluster_id}
    _assert_alarm(connections, template, metric="DatabaseConnections", dimensions=dims,
                  threshold=budget + settings.DB_RESERVED_CONNECTIONS, **common)
    # And more proxy clients than the budget, and borrows near the connect timeout (microseconds)
    clients = alarm_by_name(template, "Timekeeper-database-proxy-clients")
    source, dims = imported(clients, "ProxyName")
    assert source == {"Ref": proxy_id}
    _assert_alarm(clients, template, metric="ClientConnections", dimensions=dims, threshold=budget, **common)
    borrow = alarm_by_name(template, "Timekeeper-database-proxy-borrow-latency")
    source, dims = imported(borrow, "ProxyName")
    assert source == {"Ref": proxy_id}
    _assert_alarm(borrow, template, metric="DatabaseConnectionsBorrowLatency", dimensions=dims,
                  threshold=settings.PROXY_BORROW_ALARM_SHARE * CONNECT_TIMEOUT_S * 1_000_000, **common)
    assert borrow["Threshold"] < CONNECT_TIMEOUT_S * 1_000_000


def test_ses_reputation_alarms_watch_the_deliveries_configuration_set(synth):
    # Given the configuration set every delivery is sent with
    template = synth.app_template
    [set_id] = resources(template, "AWS::SES::ConfigurationSet")
    assert template["Resources"][set_id]["Properties"]["ReputationOptions"] == {"ReputationMetricsEnabled": True}
    dims = [{"Name": "ses:configuration-set", "Value": {"Ref": set_id}}]
    common = {"namespace": "AWS/SES", "dimensions": dims, "statistic": "Maximum",
              "period": settings.SES_REPUTATION_PERIOD_MINUTES * 60,
              "comparison": "GreaterThanOrEqualToThreshold", "missing": "notBreaching"}

    # Then its bounce and complaint rates alarm below the levels at which SES reviews an account
    _assert_alarm(alarm_by_name(template, "Timekeeper-mail-bounce-rate"), template,
                  metric="Reputation.BounceRate", threshold=settings.SES_BOUNCE_RATE_ALARM, **common)
    _assert_alarm(alarm_by_name(template, "Timekeeper-mail-complaint-rate"), template,
                  metric="Reputation.ComplaintRate", threshold=settings.SES_COMPLAINT_RATE_ALARM, **common)
    assert settings.SES_BOUNCE_RATE_ALARM < 0.05 and settings.SES_COMPLAINT_RATE_ALARM <= 0.001


def test_dashboard_has_api_database_and_mail_rows(synth):
    body = _dashboard_body(synth.app_template)
    for title in ("## API `", "api: requests, 4XX, 5XX", "api: latency (ms)", "api: function",
                  "## Database (", "database: capacity (ACU) and utilisation (%)", "database: connections",
                  "database: proxy borrow latency", "## Mail (", "mail: bounce and complaint rates"):
        assert title in body, title
    for metric in ("5XXError", "Latency", "ACUUtilization", "ServerlessDatabaseCapacity", "ClientConnections",
                   "DatabaseConnectionsBorrowLatency", "Reputation.BounceRate", "Reputation.ComplaintRate"):
        assert f'"{metric}"' in body, metric
    # And the alarm status widget lists the new alarms too (by ARN)
    ids = {r["Properties"]["AlarmName"]: lid
           for lid, r in resources(synth.app_template, "AWS::CloudWatch::Alarm").items()}
    for name in ("Timekeeper-api-5xx", "Timekeeper-api-latency", "Timekeeper-database-capacity",
                 "Timekeeper-database-proxy-clients", "Timekeeper-mail-bounce-rate",
                 f"Timekeeper-{REPORT_RENDERER.name}-failed-arrivals"):
        assert json.dumps({"Fn::GetAtt": [ids[name], "Arn"]}) in body, name


def test_the_lean_profiles_nat_instance_alarms_when_it_fails_or_falls_silent():
    # Given the lean profile (one NAT instance instead of the endpoints)
    lean = synthesize({"timekeeper:egress": "nat-instance"})
    [instance_id] = resources(lean.data_template, "AWS::EC2::Instance")

    # Then a failed status check, or no data at all (stopped, terminated), notifies
    props = alarm_by_name(lean.app_template, "Timekeeper-network-nat-instance")
    [dimension] = props["Dimensions"]
    assert dimension["Name"] == "InstanceId" and _export_of(lean.data_template, dimension["Value"]) == {
        "Ref": instance_id}
    _assert_alarm({**props, "Dimensions": []}, lean.app_template, namespace="AWS/EC2", metric="StatusCheckFailed",
                  dimensions=[], statistic="Maximum", period=PERIOD_S, threshold=0,
                  comparison="GreaterThanThreshold", missing="breaching")


def test_without_a_nat_instance_there_is_no_nat_instance_alarm(synth):
    names = [a["Properties"]["AlarmName"] for a in resources(synth.app_template, "AWS::CloudWatch::Alarm").values()]
    assert "Timekeeper-network-nat-instance" not in names


def test_failed_posting_jobs_alarm_while_any_waits_for_a_retry(synth):
    # Given the synthesized app, then the failed-posting-jobs alarm watches the sweep's count
    [alarm] = [a for a in resources(synth.app_template, "AWS::CloudWatch::Alarm").values()
               if a["Properties"]["AlarmName"].endswith("-posting-jobs-failed")]
    props = alarm["Properties"]
    assert (props["MetricName"], props["Statistic"], props["Threshold"]) == ("PostingJobsFailed", "Maximum", 0)
    assert props["ComparisonOperator"] == "GreaterThanThreshold" and props["TreatMissingData"] == "notBreaching"


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_each_pipeline_alarms_on_its_run_failure_rate_over_several_periods(synth, name):
    # Given the pipeline's run outcomes, emitted with the pipeline's dimension alone
    p = PIPELINES[name]
    template = synth.app_template
    props = alarm_by_name(template, f"Timekeeper-{name}-run-failure-rate")
    stats = {m["Id"]: m["MetricStat"] for m in props["Metrics"] if "MetricStat" in m}
    dimensions = [{"Name": "pipeline", "Value": name}, {"Name": "service", "Value": obs.metrics.service}]
    # Then it divides the failed runs by every settled run of the pipeline, per alarm period ...
    assert {(s["Metric"]["MetricName"], s["Stat"], s["Period"]) for s in stats.values()} == {
        (obs.RUN_FAILED, "Sum", PERIOD_S), (obs.RUN_SUCCEEDED, "Sum", PERIOD_S), (obs.RUN_SKIPPED, "Sum", PERIOD_S)}
    for stat in stats.values():
        assert stat["Metric"]["Namespace"] == obs.NAMESPACE
        assert sorted(stat["Metric"]["Dimensions"], key=lambda d: d["Name"]) == dimensions
    [expression] = [m for m in props["Metrics"] if "Expression" in m]
    assert expression.get("ReturnData", True) is True
    text = expression["Expression"]
    assert f">= {p.failure_rate_alarm_min_runs}" in text and "100 *" in text and "/" in text
    # ... and fires on a rate above the topology's threshold in several periods in a row,
    # never on one failure (a single period, or fewer runs than the minimum, stays quiet)
    assert props["Threshold"] == p.failure_rate_alarm_percent
    assert props["ComparisonOperator"] == "GreaterThanThreshold"
    assert props["EvaluationPeriods"] == props["DatapointsToAlarm"] == p.failure_rate_alarm_periods > 1
    assert p.failure_rate_alarm_min_runs > 1
    assert props["TreatMissingData"] == "notBreaching"
    topic = {"Ref": _topic_id(template)}
    assert props["AlarmActions"] == [topic] and props["OKActions"] == [topic]


def _rate_alarm_reads(props, function_id):
    """The alarm is the error rate of ``function_id`` over two of three five-minute periods."""
    stats = {m["Id"]: m["MetricStat"] for m in props["Metrics"] if "MetricStat" in m}
    assert {k: (s["Metric"]["MetricName"], s["Stat"], s["Period"]) for k, s in stats.items()} == {
        "errors": ("Errors", "Sum", PERIOD_S), "invocations": ("Invocations", "Sum", PERIOD_S)}
    for stat in stats.values():
        assert stat["Metric"]["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": function_id}}]
    [expression] = [m["Expression"] for m in props["Metrics"] if "Expression" in m]
    assert expression == (f"IF(FILL(invocations, 0) >= {alarms.ERROR_RATE_MIN_INVOCATIONS}, "
                          "100 * FILL(errors, 0) / invocations, 0)")
    assert props["Threshold"] == alarms.ERROR_RATE_ALARM_PERCENT
    assert props["ComparisonOperator"] == "GreaterThanThreshold" and props["TreatMissingData"] == "notBreaching"
    assert (props["DatapointsToAlarm"], props["EvaluationPeriods"]) == (2, 3)
    assert alarms.ERROR_RATE_MIN_INVOCATIONS > 1


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_function_errors_alarm_on_a_rate_over_several_periods_never_on_one_error(synth, name):
    template = synth.app_template
    p = PIPELINES[name]
    functions = functions_by_folder(template)
    props = alarm_by_name(template, f"Timekeeper-{name}-consumer-errors")
    _rate_alarm_reads(props, functions[p.consumer.function])
    topic = {"Ref": _topic_id(template)}
    assert props["AlarmActions"] == [topic] and props["OKActions"] == [topic]
    _rate_alarm_reads(alarm_by_name(template, f"Timekeeper-{name}-dispatcher-errors"), functions[p.dispatcher_function])
    for alarm_name, folder in (("Timekeeper-api-errors", "api"),
                               ("Timekeeper-api-downloads-errors", DOWNLOADS.function),
                               (f"Timekeeper-{REPORT_RENDERER.name}-errors", REPORT_RENDERER.function)):
        _rate_alarm_reads(alarm_by_name(template, alarm_name), functions[folder])
    for queue in WORK_QUEUES.values():
        _rate_alarm_reads(alarm_by_name(template, f"Timekeeper-{queue.name}-consumer-errors"),
                          functions[queue.consumer.function])


def test_long_functions_alarm_when_their_duration_nears_the_topologys_timeout(synth):
    template = synth.app_template
    functions = functions_of_folder(template)
    expected = {}
    for name, p in PIPELINES.items():
        expected[f"Timekeeper-{name}-consumer-duration"] = (functions[p.consumer.function][0], p.consumer.timeout_s)
        for i, function_id in enumerate(functions[p.dispatcher_function]):
            suffix = f"-p{i}" if i else ""
            expected[f"Timekeeper-{name}-dispatcher{suffix}-duration"] = (function_id, p.dispatcher_timeout_s)
    for queue in WORK_QUEUES.values():
        expected[f"Timekeeper-{queue.name}-consumer-duration"] = (functions[queue.consumer.function][0],
                                                                  queue.consumer.timeout_s)
    expected[f"Timekeeper-{REPORT_RENDERER.name}-duration"] = (functions[REPORT_RENDERER.function][0],
                                                               REPORT_RENDERER.timeout_s)
    for alarm_name, (function_id, timeout_s) in expected.items():
        props = alarm_by_name(template, alarm_name)
        assert (props["MetricName"], props["Statistic"], props["Period"]) == ("Duration", "Maximum", PERIOD_S)
        assert props["Dimensions"] == [{"Name": "FunctionName", "Value": {"Ref": function_id}}]
        assert props["Threshold"] == int(alarms.DURATION_ALARM_SHARE * timeout_s * 1000) < timeout_s * 1000
        assert props["ComparisonOperator"] == "GreaterThanThreshold"
        assert (props["DatapointsToAlarm"], props["EvaluationPeriods"]) == (2, 3)
    # (the API and the download function answer within seconds: no duration alarm)
    names = {a["Properties"]["AlarmName"] for a in resources(template, "AWS::CloudWatch::Alarm").values()}
    assert "Timekeeper-api-duration" not in names


def test_one_composite_alarm_pages_when_dispatchers_fail_together(synth):
    template = synth.app_template
    ids = {r["Properties"]["AlarmName"]: lid for lid, r in resources(template, "AWS::CloudWatch::Alarm").items()}
    [composite] = resources(template, "AWS::CloudWatch::CompositeAlarm").values()
    props = composite["Properties"]
    assert props["AlarmName"] == "Timekeeper-dispatchers-failing"
    rule = json.dumps(props["AlarmRule"])
    members = [n for n in ids if "-dispatcher-errors" in n or n.endswith("-dispatcher-heartbeat")]
    members = [n for n in members if not n.startswith("Timekeeper-snapshots-")]
    assert len(members) == sum(p.dispatch_partitions + 1 for p in PIPELINES.values())
    for name in members:
        # each member is in the rule, and notifies only through the composite
        assert ids[name] in rule, name
        member = template["Resources"][ids[name]]["Properties"]
        assert "AlarmActions" not in member and "OKActions" not in member
    topic = {"Ref": _topic_id(template)}
    assert props["AlarmActions"] == [topic] and props["OKActions"] == [topic]
