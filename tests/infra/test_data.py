"""The stateful side and the shared resources: VPC without NAT and its endpoints, Aurora
Serverless v2 behind a TLS-only RDS Proxy with rotated credentials, the files bucket, the
encrypted topic, and migrations run by a trigger before any rule or consumer starts."""

from __future__ import annotations

import uuid

import aws_cdk as cdk
import pytest
from aws_cdk.assertions import Match

from infra import settings
from infra.database import ENGINE_VERSION
from infra.settings import DeploymentConfig
from infra.storage import DELIVERY_RETENTION_DAYS, LINK_MAX_LIFETIME_DAYS, REPORT_RETENTION_DAYS
from tests.infra.conftest import (
    DEPLOYMENT,
    event_sources_of,
    functions_by_folder,
    notification_key_id,
    resources,
    synthesize,
)
from timekeeper.settings import DELIVERIES_PREFIX, EXPORTS_PREFIX, REPORTS_PREFIX
from timekeeper.topology import PIPELINES


def test_vpc_has_isolated_subnets_only_and_the_endpoints(synth):
    template = synth.data_template
    # Then there is no way out of the VPC but its endpoints
    for type_ in ("AWS::EC2::NatGateway", "AWS::EC2::InternetGateway", "AWS::EC2::EIP"):
        assert not resources(template, type_), type_
    subnets = resources(template, "AWS::EC2::Subnet")
    assert len(subnets) == 2
    assert all(not s["Properties"].get("MapPublicIpOnLaunch") for s in subnets.values())
    # And the endpoints are SQS, SNS, Secrets Manager, Lambda, the SES API (interface) and S3
    # (gateway): what the functions declare (tests/infra/test_reachability.py walks each
    # function to its route); no CloudWatch Logs endpoint, since no function calls that API
    services = {endpoint["Properties"]["ServiceName"]["Fn::Join"][1][-1]: endpoint["Properties"]["VpcEndpointType"]
                for endpoint in resources(template, "AWS::EC2::VPCEndpoint").values()}
    assert services == {".sqs": "Interface", ".sns": "Interface", ".secretsmanager": "Interface",
                        ".lambda": "Interface", ".email": "Interface", ".s3": "Gateway"}
    synth.template("TimekeeperData").resource_count_is("AWS::EC2::FlowLog", 1)


def test_aurora_serverless_v2_behind_a_tls_only_proxy(synth):
    data = synth.template("TimekeeperData")
    data.has_resource_properties("AWS::RDS::DBCluster", {
        "Engine": "aurora-postgresql",
        "EngineVersion": ENGINE_VERSION.aurora_postgres_full_version,
        "DBClusterIdentifier": "timekeeper",
        "ServerlessV2ScalingConfiguration": {"MinCapacity": settings.AURORA_MIN_ACU,
                                             "MaxCapacity": settings.AURORA_MAX_ACU},
        "StorageEncrypted": True,
        "DeletionProtection": True,
        "EnableIAMDatabaseAuthentication": True,
        "EnableCloudwatchLogsExports": ["postgresql"],
        "DatabaseName": "timekeeper",
    })
    assert ENGINE_VERSION.aurora_postgres_major_version in ("15", "16")
    data.has_resource("AWS::RDS::DBCluster", {"DeletionPolicy": "Snapshot"})
    data.has_resource_properties("AWS::RDS::DBInstance", {"DBInstanceClass": "db.serverless",
                                                          "PubliclyAccessible": False})
    data.has_resource_properties("AWS::RDS::DBProxy", {"EngineFamily": "POSTGRESQL", "RequireTLS": True})
    data.has_resource_properties("AWS::SecretsManager::RotationSchedule", {
        "RotationRules": {"ScheduleExpression": f"rate({settings.SECRET_ROTATION_DAYS} days)"},
        "HostedRotationLambda": Match.object_like({"RotationType": "PostgreSQLSingleUser"})})


def test_only_the_function_group_reaches_the_proxy_and_only_the_proxy_the_cluster(synth):
    template = synth.data_template
    ingress = [r["Properties"] for r in resources(template, "AWS::EC2::SecurityGroupIngress").values()]
    database_rules = [r for r in ingress if r.get("FromPort") == settings.DB_PORT]
    assert database_rules and all("SourceSecurityGroupId" in r for r in database_rules)
    assert not [r for r in ingress if r.get("CidrIp") == "0.0.0.0/0"]


def test_files_bucket_is_private_encrypted_tls_only_and_expires_exports(synth):
    data = synth.template("TimekeeperData")
    data.has_resource_properties("AWS::S3::Bucket", {
        "BucketEncryption": {"ServerSideEncryptionConfiguration": [
            {"ServerSideEncryptionByDefault": {"SSEAlgorithm": "AES256"}}]},
        "PublicAccessBlockConfiguration": {"BlockPublicAcls": True, "BlockPublicPolicy": True,
                                           "IgnorePublicAcls": True, "RestrictPublicBuckets": True},
        "LifecycleConfiguration": {"Rules": Match.array_with([Match.object_like({
            "Id": "expire-exports", "Prefix": EXPORTS_PREFIX, "ExpirationInDays": 30, "Status": "Enabled"})])},
        "LoggingConfiguration": Match.any_value(),
    })
    for policy in resources(synth.data_template, "AWS::S3::BucketPolicy").values():
        statements = policy["Properties"]["PolicyDocument"]["Statement"]
        assert any(s["Effect"] == "Deny" and s["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
                   for s in statements)


def test_notification_topic_is_encrypted_with_a_rotated_key_cloudwatch_may_use(synth):
    app = synth.template("TimekeeperApp")
    key_id = notification_key_id(synth.app_template)
    app.has_resource_properties("AWS::SNS::Topic", {"KmsMasterKeyId": {"Fn::GetAtt": [key_id, "Arn"]}})
    app.has_resource_properties("AWS::KMS::Key", {
        "EnableKeyRotation": True,
        "KeyPolicy": {"Statement": Match.array_with([Match.object_like({
            "Principal": {"Service": "cloudwatch.amazonaws.com"}})])}})


def test_migrations_run_by_trigger_before_rules_and_consumers(synth):
    template = synth.app_template
    functions = functions_by_folder(template)
    triggers = resources(template, "Custom::Trigger")
    [(trigger_id, trigger)] = triggers.items()
    # Then the trigger invokes the migrate function's current version synchronously, on change
    props = trigger["Properties"]
    assert props["InvocationType"] == "RequestResponse"
    assert props["ExecuteOnHandlerChange"] is True
    version_id = props["HandlerArn"]["Ref"]
    assert template["Resources"][version_id]["Properties"]["FunctionName"] == {
        "Ref": functions[settings.MIGRATE_FUNCTION]}
    # And every rule and event source waits for it
    for rule in resources(template, "AWS::Events::Rule").values():
        assert trigger_id in rule.get("DependsOn", [])
    for pipeline in PIPELINES.values():
        consumer = functions[pipeline.consumer.function]
        assert trigger_id in template["Resources"][consumer].get("DependsOn", [])
        assert event_sources_of(template, consumer)
    mappings = resources(template, "AWS::Lambda::EventSourceMapping").values()
    assert all(trigger_id in m.get("DependsOn", []) for m in mappings)


def test_outputs_for_the_operator(synth):
    assert {"ProxyEndpoint", "DatabaseSecretArn", "FilesBucketName"} <= set(synth.data_template["Outputs"])
    outputs = set(synth.app_template["Outputs"])
    assert {"NotificationTopicArn", "DashboardName"} <= outputs
    for pipeline in PIPELINES.values():
        assert f"DeadLetterQueueUrl{pipeline.name.title()}" in outputs


def test_a_layer_change_gives_the_migrate_function_a_new_version(monkeypatch):
    # Given two builds whose layer content differs (e.g. a new migration file in shared/)
    import infra.layer

    versions = []
    for digest in ("1" * 64, "2" * 64):
        monkeypatch.setattr(infra.layer, "layer_hash", lambda *args, digest=digest, **kwargs: digest)
        template = synthesize().app_template
        [trigger] = resources(template, "Custom::Trigger").values()
        versions.append(trigger["Properties"]["HandlerArn"]["Ref"])

    # Then the trigger points at a new version, so CloudFormation runs the migrations again
    assert versions[0] != versions[1]


def test_delivered_files_and_rendered_reports_expire_after_their_links(synth):
    from timekeeper.reporting import delivery as dl
    from timekeeper.reporting import exports, rendering
    from timekeeper.reporting.query_schedules import MAX_LINK_TTL_HOURS

    # The prefixes the rules name are the ones the code writes under
    workspace, item = uuid.uuid4(), uuid.uuid4()
    assert dl.object_key(workspace, item, "csv").startswith(DELIVERIES_PREFIX)
    assert exports.object_key(workspace, item, "csv").startswith(EXPORTS_PREFIX)
    assert rendering.object_key(workspace, "key").startswith(REPORTS_PREFIX)
    assert LINK_MAX_LIFETIME_DAYS * 24 == MAX_LINK_TTL_HOURS
    [files] = [b["Properties"] for b in resources(synth.data_template, "AWS::S3::Bucket").values()
               if "LoggingConfiguration" in b["Properties"]]
    rules = {r["Id"]: r for r in files["LifecycleConfiguration"]["Rules"]}
    # Files under deliveries/ expire after the documented retention, longer than any link lives
    assert rules["expire-deliveries"] == {"Id": "expire-deliveries", "Prefix": DELIVERIES_PREFIX,
                                          "ExpirationInDays": DELIVERY_RETENTION_DAYS, "Status": "Enabled"}
    assert DELIVERY_RETENTION_DAYS > LINK_MAX_LIFETIME_DAYS
    # Rendered reports expire after their own retention, as long as delivered files are kept
    # (a delivered report's links point at its render)
    assert rules["expire-reports"] == {"Id": "expire-reports", "Prefix": REPORTS_PREFIX,
                                       "ExpirationInDays": REPORT_RETENTION_DAYS, "Status": "Enabled"}
    # And no other rule expires a delivered file or a report sooner
    own = {DELIVERIES_PREFIX: "expire-deliveries", REPORTS_PREFIX: "expire-reports"}
    for rule in rules.values():
        if "ExpirationInDays" in rule:
            prefix = rule.get("Prefix", "")
            for linked in (DELIVERIES_PREFIX, REPORTS_PREFIX):
                if linked.startswith(prefix):
                    assert rule["Id"] == own[linked] and rule["ExpirationInDays"] >= DELIVERY_RETENTION_DAYS, rule
    assert rules["expire-exports"]["Prefix"] == EXPORTS_PREFIX


def test_an_export_file_expiry_longer_than_the_export_rows_retention_is_refused_at_synth():
    from timekeeper.topology import HISTORY

    app = cdk.App(context={DeploymentConfig.KEY_EXPORT_RETENTION: str(HISTORY.exports_days + 1), **DEPLOYMENT})
    with pytest.raises(ValueError, match="exportRetentionDays must be at most"):
        DeploymentConfig.from_node(app.node)
    app = cdk.App(context={DeploymentConfig.KEY_EXPORT_RETENTION: str(HISTORY.exports_days), **DEPLOYMENT})
    assert DeploymentConfig.from_node(app.node).export_retention_days == HISTORY.exports_days


def test_a_delivery_retention_shorter_than_a_link_is_refused_at_synth():
    app = cdk.App(context={DeploymentConfig.KEY_DELIVERY_RETENTION: "30", **DEPLOYMENT})
    with pytest.raises(ValueError, match="deliveryRetentionDays must be at least 31"):
        DeploymentConfig.from_node(app.node)
    app = cdk.App(context={DeploymentConfig.KEY_DELIVERY_RETENTION: "60", **DEPLOYMENT})
    assert DeploymentConfig.from_node(app.node).delivery_retention_days == 60


def test_a_report_retention_shorter_than_a_link_is_refused_at_synth():
    app = cdk.App(context={DeploymentConfig.KEY_REPORT_RETENTION: "30", **DEPLOYMENT})
    with pytest.raises(ValueError, match="reportRetentionDays must be at least 31"):
        DeploymentConfig.from_node(app.node)
    app = cdk.App(context={DeploymentConfig.KEY_REPORT_RETENTION: "90", **DEPLOYMENT})
    assert DeploymentConfig.from_node(app.node).report_retention_days == 90
