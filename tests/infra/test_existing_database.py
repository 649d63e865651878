"""An existing database by context: no VPC or cluster is created, every function points at
the given endpoint, in the given subnets with the given security group; the migration
function uses the given (owner's) secret, the workers and the API generated login secrets."""

from __future__ import annotations

import json

import pytest

from infra.settings import DeploymentConfig
from tests.infra.conftest import functions_by_folder, resources, synthesize
from timekeeper.topology import API_LOGIN, PIPELINES, WORKER_LOGIN

SECRET_ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:timekeeper-db-AbCdEf"
EXISTING = {
    DeploymentConfig.KEY_DB_HOST: "tk-proxy.proxy-abc.eu-west-1.rds.amazonaws.com",
    DeploymentConfig.KEY_DB_SECRET_ARN: SECRET_ARN,
    DeploymentConfig.KEY_DB_NAME: "scheduling",
    DeploymentConfig.KEY_VPC_ID: "vpc-0123456789abcdef0",
    DeploymentConfig.KEY_SUBNET_IDS: "subnet-0aaa,subnet-0bbb",
    DeploymentConfig.KEY_DB_SECURITY_GROUP: "sg-0123456789abcdef0",
    DeploymentConfig.KEY_DELETION_PROTECTION: "false",
}


@pytest.fixture(scope="module")
def existing():
    return synthesize(EXISTING)


def test_no_network_or_database_is_created(existing):
    for type_ in ("AWS::EC2::VPC", "AWS::RDS::DBCluster", "AWS::RDS::DBProxy", "AWS::EC2::VPCEndpoint"):
        assert not resources(existing.data_template, type_), type_
    # and no alarm watches a cluster or proxy this deployment does not have (the operator's to watch)
    names = [a["Properties"]["AlarmName"] for a in resources(existing.app_template, "AWS::CloudWatch::Alarm").values()]
    assert not [n for n in names if n.startswith("Timekeeper-database-")]
    assert "Timekeeper-api-5xx" in names and "Timekeeper-mail-bounce-rate" in names


def test_functions_use_the_given_database_and_network(existing):
    template = existing.app_template
    for folder, logical_id in functions_by_folder(template).items():
        props = template["Resources"][logical_id]["Properties"]
        variables = props["Environment"]["Variables"]
        assert variables["DB_HOST"] == EXISTING[DeploymentConfig.KEY_DB_HOST], folder
        assert variables["DB_NAME"] == "scheduling", folder
        assert props["VpcConfig"] == {"SubnetIds": ["subnet-0aaa", "subnet-0bbb"],
                                      "SecurityGroupIds": ["sg-0123456789abcdef0"]}, folder


def test_each_function_logs_in_with_its_own_secret(existing):
    # Given the generated login secrets, by the username each holds
    template = existing.app_template
    logins = {}
    for logical_id, secret in resources(template, "AWS::SecretsManager::Secret").items():
        generated = json.loads(secret["Properties"]["GenerateSecretString"]["SecretStringTemplate"])
        if "username" in generated:  # a login's secret (the other is the download links' signing key)
            logins[generated["username"]] = {"Ref": logical_id}
    assert set(logins) == {WORKER_LOGIN, API_LOGIN}
    expected = {"migrate": SECRET_ARN, "api": logins[API_LOGIN]}
    for pipeline in PIPELINES.values():
        expected[pipeline.dispatcher_function] = expected[pipeline.consumer.function] = logins[WORKER_LOGIN]
    # Then the migration function has the owner's, the workers and the API their own
    functions = functions_by_folder(template)
    found = {folder: template["Resources"][functions[folder]]["Properties"]["Environment"]["Variables"][
        "DB_SECRET_ARN"] for folder in expected}
    assert found == expected


def test_deletion_protection_off_destroys_instead_of_retaining(existing):
    buckets = resources(existing.data_template, "AWS::S3::Bucket").values()
    assert {b["DeletionPolicy"] for b in buckets} == {"Delete"}


def test_without_a_vpc_the_functions_run_outside_any_vpc():
    context = {k: v for k, v in EXISTING.items() if k in (DeploymentConfig.KEY_DB_HOST,
                                                            DeploymentConfig.KEY_DB_SECRET_ARN)}
    template = synthesize(context).app_template
    for logical_id in functions_by_folder(template).values():
        assert "VpcConfig" not in template["Resources"][logical_id]["Properties"]


@pytest.mark.parametrize("context", [
    {DeploymentConfig.KEY_DB_HOST: "db.example.internal"},
    {DeploymentConfig.KEY_DB_HOST: "db", DeploymentConfig.KEY_DB_SECRET_ARN: SECRET_ARN,
     DeploymentConfig.KEY_VPC_ID: "vpc-1"},
    {DeploymentConfig.KEY_DB_HOST: "db", DeploymentConfig.KEY_DB_SECRET_ARN: SECRET_ARN,
     DeploymentConfig.KEY_SUBNET_IDS: "subnet-1"},
    {DeploymentConfig.KEY_LOG_RETENTION: "31"},
])
def test_inconsistent_context_fails_at_synth(context):
    with pytest.raises(Exception, match="timekeeper:"):
        synthesize(context)
