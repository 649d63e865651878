"""Scheduled delivery in the synthesized app: the queries pipeline from the topology, the
consumer's rights and variables (deliveries/ files, SES from the sender only, the link
key, the renderer), the DeliveryFailed alarm, and the one public route."""

from __future__ import annotations

import pytest

from infra.alarms import ALARM_DATAPOINTS, ALARM_EVALUATION_PERIODS, SES_THROTTLED_ALARM_COUNT
from infra.settings import DeploymentConfig
from infra.storage import DELIVERY_RETENTION_DAYS
from tests.infra.conftest import (
    DEPLOYMENT,
    alarm_by_name,
    functions_by_folder,
    functions_of_folder,
    resources,
    synthesize,
)
from timekeeper import observability as obs
from timekeeper.topology import HISTORY, QUERIES


def _statements(template, props):
    role = props["Role"]["Fn::GetAtt"][0]
    return [s for p in resources(template, "AWS::IAM::Policy").values() if {"Ref": role} in p["Properties"]["Roles"]
            for s in p["Properties"]["PolicyDocument"]["Statement"]]


def _function(template, folder):
    return template["Resources"][functions_by_folder(template)[folder]]["Properties"]


def _actions(statement) -> set[str]:
    actions = statement["Action"]
    return {actions} if isinstance(actions, str) else set(actions)


def test_the_delivery_consumer_follows_the_topology_and_has_its_variables(synth):
    template = synth.app_template
    props = _function(template, QUERIES.consumer.function)
    assert props["Timeout"] == QUERIES.consumer.timeout_s == 900
    variables = props["Environment"]["Variables"]
    assert {"FILES_BUCKET", "MAIL_SENDER", "LINK_SIGNING_SECRET_ARN", "DOWNLOAD_BASE_URL",
            "REPORT_RENDERER_FUNCTION"} <= set(variables)
    mappings = [m["Properties"] for m in resources(template, "AWS::Lambda::EventSourceMapping").values()
                if m["Properties"]["FunctionName"] == {"Ref": functions_by_folder(template)[QUERIES.consumer.function]}]
    assert [(m["BatchSize"], m["ScalingConfig"]["MaximumConcurrency"]) for m in mappings] == [(1, 3)]
    dispatcher = _function(template, QUERIES.dispatcher_function)
    assert dispatcher["ReservedConcurrentExecutions"] == 1


def test_the_delivery_consumer_may_send_only_from_the_sender_and_write_only_deliveries(synth):
    template = synth.app_template
    statements = _statements(template, _function(template, QUERIES.consumer.function))
    ses = [s for s in statements if "ses:SendEmail" in _actions(s)]
    assert len(ses) == 1
    assert ses[0]["Condition"] == {"StringEquals": {"ses:FromAddress": DEPLOYMENT["timekeeper:mailSender"]}}
    writes = [s for s in statements if "s3:PutObject" in _actions(s)]
    assert len(writes) == 1 and "/deliveries/*" in str(writes[0]["Resource"])
    assert any("lambda:InvokeFunction" in _actions(s) for s in statements)
    assert any("secretsmanager:GetSecretValue" in _actions(s) for s in statements)


def test_every_queries_dispatcher_partition_may_send_owner_notices_only_from_the_sender(synth):
    # Given the queries dispatcher's code, deployed once per partition (the topology
    # declares SES for it: partition 0's people pass mails owner notices)
    template = synth.app_template
    ids = functions_of_folder(template)[QUERIES.dispatcher_function]
    assert len(ids) == QUERIES.dispatch_partitions == 2
    for logical_id in ids:
        props = template["Resources"][logical_id]["Properties"]
        # Then each may send only from the configured sender, and knows the sender
        ses = [s for s in _statements(template, props) if "ses:SendEmail" in _actions(s)]
        assert len(ses) == 1, logical_id
        assert ses[0]["Condition"] == {"StringEquals": {"ses:FromAddress": DEPLOYMENT["timekeeper:mailSender"]}}
        assert props["Environment"]["Variables"]["MAIL_SENDER"] == DEPLOYMENT["timekeeper:mailSender"]


def test_a_delivery_failure_alarms_on_the_topic(synth):
    alarm = alarm_by_name(synth.app_template, "Timekeeper-delivery-failed")
    assert alarm["MetricName"] == obs.DELIVERY_FAILED and alarm["Threshold"] == 0
    assert alarm["AlarmActions"]


@pytest.fixture(scope="module")
def profiles(synth):
    """The default, nat and lean (nat-instance) profiles."""
    return {"default": synth, "nat": synthesize({DeploymentConfig.KEY_EGRESS: "nat"}),
            "lean": synthesize({DeploymentConfig.KEY_EGRESS: "nat-instance"})}


@pytest.mark.parametrize("profile", ["default", "nat", "lean"])
def test_ses_throttling_alarms_on_the_topic_in_every_profile(profiles, profile):
    template = profiles[profile].app_template
    alarm = alarm_by_name(template, "Timekeeper-mail-throttled")
    assert alarm["MetricName"] == obs.SES_THROTTLED and alarm["Namespace"] == obs.NAMESPACE
    assert (alarm["Statistic"], alarm["Threshold"], alarm["ComparisonOperator"]) == (
        "Sum", SES_THROTTLED_ALARM_COUNT, "GreaterThanThreshold")
    assert (alarm["DatapointsToAlarm"], alarm["EvaluationPeriods"]) == (ALARM_DATAPOINTS, ALARM_EVALUATION_PERIODS)
    assert alarm["TreatMissingData"] == "notBreaching" and alarm["AlarmActions"] and alarm["OKActions"]
    assert alarm["AlarmDescription"].endswith("Runbook: docs/operations.md#mail-throttled")
    # And the delivery consumer may read the quota the sender paces itself to
    statements = _statements(template, _function(template, QUERIES.consumer.function))
    assert [s["Resource"] for s in statements if _actions(s) == {"ses:GetSendQuota"}] == ["*"]


def test_only_the_download_and_opt_out_routes_are_public(synth):
    template = synth.app_template
    methods = {k: m["Properties"] for k, m in resources(template, "AWS::ApiGateway::Method").items()}
    paths = {k: r["Properties"]["PathPart"] for k, r in resources(template, "AWS::ApiGateway::Resource").items()}
    parents = {k: r["Properties"]["ParentId"] for k, r in resources(template, "AWS::ApiGateway::Resource").items()}

    def path(method):
        leaf = method["ResourceId"]["Ref"]
        return f"{paths[parents[leaf]['Ref']]}/{paths[leaf]}"

    public = {(path(m), m["HttpMethod"]) for m in methods.values()
              if m["AuthorizationType"] == "NONE" and m["HttpMethod"] != "OPTIONS"}
    assert public == {("downloads/{token}", "GET"), ("downloads/{token}", "POST"), ("opt-outs/{token}", "GET"),
                      ("opt-outs/{token}", "POST")}
    assert all("AuthorizerId" not in m for m in methods.values() if m["AuthorizationType"] == "NONE")
    assert all(m["AuthorizationType"] == "CUSTOM" for m in methods.values()
               if m["AuthorizationType"] != "NONE" or m["HttpMethod"] == "OPTIONS")


def test_addresses_are_kept_as_long_as_the_delivered_files_by_default():
    # The personal-data retention (delivery rows' addresses) defaults to the delivered
    # files' lifetime in the bucket (timekeeper:deliveryRetentionDays): a recipient's
    # address lives no longer than the file that was sent to it.
    assert HISTORY.personal_data_days == DELIVERY_RETENTION_DAYS == 35
