"""What a first ``cdk deploy`` needs to work and stay safe, asserted on the synthesized
templates: alarms that can reach their topic, one database login per kind of function,
a proxy pool sized from the connection budget, names that let two deployments share an
account, no API Gateway account singleton, alarms on new dead letters and on the
dispatcher's heartbeat, a retention on every log group, least-privilege KMS grants."""

from __future__ import annotations

import fnmatch
import json
from typing import Any

import pytest
from aws_cdk.assertions import Annotations, Match

from infra import settings
from infra.settings import DeploymentConfig
from tests.infra.conftest import alarm_by_name, functions_by_folder, notification_key_id, resources, synthesize
from timekeeper import observability as obs
from timekeeper.topology import (
    API_LOGIN,
    API_RESERVED_CONCURRENCY,
    API_STATEMENT_TIMEOUT_S,
    CONNECT_TIMEOUT_S,
    PIPELINES,
    PROXY_IDLE_CLIENT_TIMEOUT_S,
    REPORT_RENDERER,
    WORKER_LOGIN,
    connection_budget,
)

CLOUDWATCH = {"Service": "cloudwatch.amazonaws.com"}


def _resolve_join(value: Any, refs: dict[str, str]) -> str:
    """A string of an ``Fn::Join`` whose pseudo parameters are replaced from ``refs``."""
    if isinstance(value, str):
        return value
    if "Ref" in value:
        return refs[value["Ref"]]
    separator, parts = value["Fn::Join"]
    return separator.join(_resolve_join(part, refs) for part in parts)


PSEUDO = {"AWS::Partition": "aws", "AWS::Region": "eu-west-1", "AWS::AccountId": "123456789012"}


@pytest.fixture(scope="module")
def staged():
    """A second deployment in the same account: stage ``dev``, an alarm address given."""
    return synthesize({DeploymentConfig.KEY_STAGE: "dev", DeploymentConfig.KEY_ALARM_EMAIL: "ops@example.com"})


def test_every_alarm_can_publish_to_its_encrypted_topic(synth):
    # Given every alarm of the app
    template = synth.app_template
    # (the composite alarm's members notify through it and have no action of their own)
    alarms = {**resources(template, "AWS::CloudWatch::Alarm"), **resources(template, "AWS::CloudWatch::CompositeAlarm")}
    alarms = {k: a for k, a in alarms.items() if "AlarmActions" in a["Properties"]}
    assert alarms and resources(template, "AWS::CloudWatch::CompositeAlarm").keys() <= alarms.keys()
    for alarm in alarms.values():
        name = alarm["Properties"]["AlarmName"]
        arn = f"arn:aws:cloudwatch:eu-west-1:123456789012:alarm:{name}"
        # When we follow the alarm's action to its topic
        [action] = alarm["Properties"]["AlarmActions"]
        topic_id = action["Ref"]
        topic = template["Resources"][topic_id]
        [policy] = [p for p in resources(template, "AWS::SNS::TopicPolicy").values()
                    if {"Ref": topic_id} in p["Properties"]["Topics"]]
        # Then the topic's policy lets CloudWatch publish for this account's alarms, this one included
        [allow] = [s for s in policy["Properties"]["PolicyDocument"]["Statement"]
                   if s["Effect"] == "Allow" and s.get("Principal") == CLOUDWATCH]
        assert allow["Action"] == "sns:Publish" and allow["Resource"] == {"Ref": topic_id}
        assert allow["Condition"]["StringEquals"] == {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}
        assert fnmatch.fnmatchcase(arn, _resolve_join(allow["Condition"]["ArnLike"]["aws:SourceArn"], PSEUDO)), name
        # And the topic's key lets CloudWatch encrypt under the same conditions
        key_id = topic["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]
        statements = template["Resources"][key_id]["Properties"]["KeyPolicy"]["Statement"]
        [grant] = [s for s in statements if s.get("Principal") == CLOUDWATCH]
        assert set(grant["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
        assert grant["Condition"] == allow["Condition"]


def test_the_workers_the_api_and_the_migration_each_log_in_with_their_own_secret(synth):
    data, app = synth.data_template, synth.app_template
    # Given the data stack's secrets: the owner's (cluster master) and one per login
    attachments = {lid: r for lid, r in resources(data, "AWS::SecretsManager::SecretTargetAttachment").items()}
    login_secret = {}
    for lid, attachment in attachments.items():
        secret = data["Resources"][attachment["Properties"]["SecretId"]["Ref"]]
        # The template is JSON text, or a join of JSON text and the master secret's ARN
        text = json.dumps(secret["Properties"]["GenerateSecretString"]["SecretStringTemplate"])
        [username] = [u for u in (settings.DB_ADMIN_USER, WORKER_LOGIN, API_LOGIN) if f'\\"{u}\\"' in text]
        login_secret[username] = lid
    assert set(login_secret) == {settings.DB_ADMIN_USER, WORKER_LOGIN, API_LOGIN}
    # Then the proxy accepts all three
    [proxy] = resources(data, "AWS::RDS::DBProxy").values()
    assert sorted(a["SecretArn"]["Ref"] for a in proxy["Properties"]["Auth"]) == sorted(login_secret.values())
    # And the logins rotate with alternating users under the owner's secret, after the
    # migration set their passwords (no rotation when the schedule is created)
    rotation = {r["Properties"]["SecretId"]["Ref"]: r["Properties"]
                for r in resources(data, "AWS::SecretsManager::RotationSchedule").values()}
    owner = login_secret[settings.DB_ADMIN_USER]
    assert rotation[owner]["HostedRotationLambda"]["RotationType"] == "PostgreSQLSingleUser"
    for login in (WORKER_LOGIN, API_LOGIN):
        props = rotation[login_secret[login]]
        assert props["HostedRotationLambda"]["RotationType"] == "PostgreSQLMultiUser"
        assert props["HostedRotationLambda"]["MasterSecretArn"] == {"Ref": owner}
        assert props["RotateImmediatelyOnUpdate"] is False
    # And each function reads the secret of its own login only
    exports = {o["Export"]["Name"]: o["Value"]["Ref"] for o in data["Outputs"].values()
               if "Ref" in o["Value"] and "Export" in o}

    def secret_of(variable: Any) -> str:
        return next(login for login, lid in login_secret.items() if exports.get(variable["Fn::ImportValue"]) == lid)

    functions = functions_by_folder(app)
    expected = {"migrate": settings.DB_ADMIN_USER, "api": API_LOGIN, "downloads": API_LOGIN}
    for p in PIPELINES.values():
        expected[p.dispatcher_function] = expected[p.consumer.function] = WORKER_LOGIN
    expected[REPORT_RENDERER.function] = WORKER_LOGIN
    found = {folder: secret_of(app["Resources"][functions[folder]]["Properties"]["Environment"]["Variables"][
        "DB_SECRET_ARN"]) for folder in expected}
    assert found == expected
    # And each role may read that secret only; the migration function also reads the
    # logins' secrets, to set their passwords
    readable = {}
    link_readers: set[str] = set()
    for folder in expected:
        role = app["Resources"][functions[folder]]["Properties"]["Role"]["Fn::GetAtt"][0]
        resources_read = [r for p in resources(app, "AWS::IAM::Policy").values()
                          if {"Ref": role} in p["Properties"]["Roles"]
                          for s in p["Properties"]["PolicyDocument"]["Statement"]
                          if "secretsmanager:GetSecretValue" in s["Action"]
                          for r in (s["Resource"] if isinstance(s["Resource"], list) else [s["Resource"]])]
        # (every secret is the data stack's: the logins' and the link signing key, checked below)
        imported = [exports.get(r["Fn::ImportValue"]) for r in resources_read if "Fn::ImportValue" in r]
        readable[folder] = sorted(login for login, lid in login_secret.items() if lid in imported)
        if any(lid is not None and lid.startswith("LinkSigningKey") for lid in imported):
            link_readers.add(folder)
    assert readable == {folder: (sorted([settings.DB_ADMIN_USER, WORKER_LOGIN, API_LOGIN]) if folder == "migrate"
                                 else [login]) for folder, login in expected.items()}
    # The links' signing key: read by the delivery consumer (signs download and opt-out links),
    # the queries dispatcher (signs the opt-out link of each notice e-mail its people pass
    # sends) and the download route's function (verifies) only
    assert link_readers == {"downloads", PIPELINES["queries"].consumer.function,
                            PIPELINES["queries"].dispatcher_function}
    migrate_env = app["Resources"][functions["migrate"]]["Properties"]["Environment"]["Variables"]
    assert "LOGIN_SECRET_ARNS" in migrate_env
    for folder, logical_id in functions.items():
        if folder != "migrate":
            assert "LOGIN_SECRET_ARNS" not in app["Resources"][logical_id]["Properties"]["Environment"]["Variables"]


def test_a_dispatcher_pass_and_an_api_call_end_inside_their_function_timeouts(synth):
    template = synth.app_template
    functions = functions_by_folder(template)
    for p in PIPELINES.values():
        # connect + time budget + one statement timeout + publishing < the deployed timeout
        timeout = template["Resources"][functions[p.dispatcher_function]]["Properties"]["Timeout"]
        assert p.dispatcher_worst_case_s < timeout == p.dispatcher_timeout_s
    api_timeout = template["Resources"][functions["api"]]["Properties"]["Timeout"]
    assert CONNECT_TIMEOUT_S + API_STATEMENT_TIMEOUT_S < api_timeout <= 29


def test_the_proxy_pool_and_the_api_concurrency_come_from_the_connection_budget(synth):
    budget = connection_budget()
    capacity = settings.aurora_max_connections()
    # Given the proxy's target group
    [group] = resources(synth.data_template, "AWS::RDS::DBProxyTargetGroup").values()
    pool = group["Properties"]["ConnectionPoolConfigurationInfo"]
    [proxy] = resources(synth.data_template, "AWS::RDS::DBProxy").values()
    # Then its share of the database's max_connections (derived from the maximum capacity)
    # holds the whole budget
    assert pool["MaxConnectionsPercent"] * capacity / 100 >= budget.total
    # And the budget leaves the reserved connections free
    assert budget.total + settings.DB_RESERVED_CONNECTIONS <= capacity
    # And a client waits at most the connect timeout to borrow, and idle clients are closed
    assert pool["ConnectionBorrowTimeout"] == CONNECT_TIMEOUT_S
    assert proxy["Properties"]["IdleClientTimeout"] == PROXY_IDLE_CLIENT_TIMEOUT_S
    # And the API's concurrency is bounded by its share of the budget
    api = synth.app_template["Resources"][functions_by_folder(synth.app_template)["api"]]
    assert api["Properties"]["ReservedConcurrentExecutions"] == API_RESERVED_CONCURRENCY == budget.api


def test_a_budget_beyond_the_database_capacity_fails_the_synthesis():
    capacity = settings.aurora_max_connections()
    with pytest.raises(ValueError, match="exceeds max_connections"):
        settings.proxy_max_connections_percent(capacity)


def test_a_stage_prefixes_every_physical_name(staged):
    # Given a deployment with stage "dev"
    assert set(staged.raw) == {"TimekeeperData-dev", "TimekeeperApp-dev"}
    names = []
    for template in staged.raw.values():
        for resource in template["Resources"].values():
            props = resource.get("Properties", {})
            for key in ("QueueName", "AlarmName", "DashboardName", "DBClusterIdentifier", "Name"):
                if isinstance(props.get(key), str) and resource["Type"] != "AWS::ApiGateway::Authorizer":
                    names.append(props[key])
            if isinstance(props.get("LogGroupName"), str):
                names.append(props["LogGroupName"])
            lambda_name = props.get("HostedRotationLambda", {}).get("RotationLambdaName")
            if lambda_name:
                names.append(lambda_name)
    # Then every fixed name carries the stage
    assert names and all("timekeeper-dev" in name.lower() for name in names), names


def test_no_retained_resource_has_a_fixed_name(synth):
    # A retained resource with a fixed name blocks re-creating the stack after cdk destroy
    for stack, template in synth.raw.items():
        for logical_id, resource in template["Resources"].items():
            props = resource.get("Properties", {})
            named = any(isinstance(props.get(k), str) for k in ("LogGroupName", "QueueName", "DBClusterIdentifier"))
            if named:
                assert resource.get("DeletionPolicy") != "Retain", (stack, logical_id)


def test_the_api_gateway_account_role_is_left_alone_unless_asked(synth):
    assert not resources(synth.app_template, "AWS::ApiGateway::Account")
    managed = synthesize({DeploymentConfig.KEY_API_GATEWAY_ACCOUNT: "true"})
    [account] = resources(managed.app_template, "AWS::ApiGateway::Account").values()
    assert account["DeletionPolicy"] == "Retain"


@pytest.mark.parametrize("name", sorted(PIPELINES))
def test_new_dead_letters_and_a_missing_heartbeat_alarm(synth, name):
    template = synth.app_template
    # Given the dispatcher's heartbeat as the code emits it (service and pipeline dimensions)
    heartbeat = alarm_by_name(template, f"Timekeeper-{name}-dispatcher-heartbeat")
    assert heartbeat["Namespace"] == obs.NAMESPACE and heartbeat["MetricName"] == obs.DISPATCHER_HEARTBEAT
    assert {d["Name"]: d["Value"] for d in heartbeat["Dimensions"]} == {
        "service": obs.metrics.service, obs.PIPELINE_DIMENSION: name}
    # Then fewer than one pass in the silence window, or no data at all, fires it
    assert heartbeat["Period"] == PIPELINES[name].dispatcher_silence_alarm_minutes * 60
    assert (heartbeat["Statistic"], heartbeat["Threshold"], heartbeat["ComparisonOperator"],
            heartbeat["TreatMissingData"]) == ("Sum", 1, "LessThanThreshold", "breaching")
    # And a growing DLQ fires its own alarm while the depth alarm is already in ALARM
    arrivals = alarm_by_name(template, f"Timekeeper-{name}-dlq-arrivals")
    [expression] = [m for m in arrivals["Metrics"] if "Expression" in m]
    [depth] = [m for m in arrivals["Metrics"] if "MetricStat" in m]
    assert expression["Expression"] == f"DIFF({depth['Id']})" and expression["ReturnData"] is True
    assert depth["MetricStat"]["Metric"]["MetricName"] == "ApproximateNumberOfMessagesVisible"
    assert depth["MetricStat"]["Metric"]["Dimensions"] == alarm_by_name(
        template, f"Timekeeper-{name}-dlq-depth")["Dimensions"]
    assert (arrivals["Threshold"], arrivals["ComparisonOperator"]) == (0, "GreaterThanThreshold")


def _log_group_of(template: dict[str, Any], function_id: str) -> dict[str, Any] | None:
    function = template["Resources"][function_id]["Properties"]
    named = function.get("LoggingConfig", {}).get("LogGroup")
    if named:
        return template["Resources"][named["Ref"]]
    for group in resources(template, "AWS::Logs::LogGroup").values():
        if group["Properties"].get("LogGroupName") == {"Fn::Join": ["", ["/aws/lambda/", {"Ref": function_id}]]}:
            return group
    return None


@pytest.mark.parametrize("stack", ["TimekeeperData", "TimekeeperApp"])
def test_every_log_group_has_a_retention_and_every_function_has_its_log_group(synth, stack):
    template = synth.raw[stack]
    # Every log group the stack creates keeps logs for the configured days
    for logical_id, group in resources(template, "AWS::Logs::LogGroup").items():
        assert group["Properties"].get("RetentionInDays") == 30, logical_id
    # Every function, custom resource providers included, has such a log group
    for function_id in resources(template, "AWS::Lambda::Function"):
        assert _log_group_of(template, function_id) is not None, function_id
    # The hosted rotation functions' log groups exist under the names given to them
    groups = {json.dumps(g["Properties"].get("LogGroupName"))
              for g in resources(template, "AWS::Logs::LogGroup").values()}
    for schedule in resources(template, "AWS::SecretsManager::RotationSchedule").values():
        name = schedule["Properties"]["HostedRotationLambda"]["RotationLambdaName"]
        assert json.dumps(f"/aws/lambda/{name}") in groups


def test_api_gateway_execution_logs_have_a_retention(synth):
    template = synth.app_template
    [api_id] = resources(template, "AWS::ApiGateway::RestApi")
    [stage_id, stage] = next(iter(resources(template, "AWS::ApiGateway::Stage").items()))
    [(group_id, group)] = [(k, g) for k, g in resources(template, "AWS::Logs::LogGroup").items()
                           if "API-Gateway-Execution-Logs_" in json.dumps(g["Properties"].get("LogGroupName"))]
    assert group["Properties"]["LogGroupName"] == {"Fn::Join": ["", ["API-Gateway-Execution-Logs_", {"Ref": api_id},
                                                                     f"/{stage['Properties']['StageName']}"]]}
    assert group_id in stage.get("DependsOn", []), stage_id


def test_only_the_dispatchers_touch_the_topic_key(synth):
    template = synth.app_template
    key_id = notification_key_id(template)
    dispatchers = {p.dispatcher_function for p in PIPELINES.values()}
    functions = functions_by_folder(template)
    for folder, function_id in functions.items():
        role = template["Resources"][function_id]["Properties"]["Role"]["Fn::GetAtt"][0]
        statements = [s for p in resources(template, "AWS::IAM::Policy").values()
                      if {"Ref": role} in p["Properties"]["Roles"]
                      for s in p["Properties"]["PolicyDocument"]["Statement"]]
        kms = [s for s in statements if any(str(a).startswith("kms:") for a in
                                            (s["Action"] if isinstance(s["Action"], list) else [s["Action"]]))]
        if folder in dispatchers:
            # SNS asks a publisher to an encrypted topic for both actions, on that key only
            [grant] = kms
            assert set(grant["Action"]) == {"kms:Decrypt", "kms:GenerateDataKey*"}
            assert grant["Resource"] == {"Fn::GetAtt": [key_id, "Arn"]}
        else:
            assert kms == [], folder


def test_a_deployment_without_an_alarm_address_warns_at_synth(synth, staged):
    warning = Match.string_like_regexp("no subscriber")
    Annotations.from_stack(synth.stacks.app).has_warning("*", warning)
    Annotations.from_stack(staged.stacks.app).has_no_warning("*", warning)
