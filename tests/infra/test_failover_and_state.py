"""Production on AWS: the database fails over to a reader in the other zone (the lean
profile keeps one instance), the proxy's connection cap is the connection budget of
Aurora's real ``max_connections``, and the state a redeploy must keep (the login secrets,
the links' signing keys, the SES identity) survives the deletion of its stack."""

from __future__ import annotations

import pytest

from infra import cost, settings
from infra.database import READER_PROMOTION_TIER
from infra.settings import DeploymentConfig
from tests.infra.conftest import Synth, resources, synthesize
from timekeeper.topology import connection_budget


@pytest.fixture(scope="module")
def profiles(synth) -> dict[str, Synth]:
    """Every deployment profile of the idle-cost table, synthesized (the default is the session's)."""
    found = {"endpoints": synth}
    for name, (context, _) in cost.PROFILES.items():
        if name != "endpoints":
            found[name] = synthesize(context)
    return found


@pytest.fixture(scope="module")
def teardown() -> Synth:
    """The default profile with deletion protection off (a deployment being torn down)."""
    return synthesize({DeploymentConfig.KEY_DELETION_PROTECTION: "false"})


def _instances(synth: Synth) -> dict[str, dict]:
    return resources(synth.data_template, "AWS::RDS::DBInstance")


def test_the_default_profiles_have_a_reader_in_the_other_zone_that_aurora_promotes(profiles):
    for name in ("endpoints", "nat"):
        # Given the profile's cluster
        instances = {logical_id: r["Properties"] for logical_id, r in _instances(profiles[name]).items()}
        [writer] = [p for k, p in instances.items() if "Writer" in k]
        [reader] = [p for k, p in instances.items() if "Reader" in k]
        # Then both are Serverless v2 instances of the one cluster
        assert writer["DBInstanceClass"] == reader["DBInstanceClass"] == "db.serverless", name
        assert writer["DBClusterIdentifier"] == reader["DBClusterIdentifier"], name
        # And the reader sits in the second zone of the VPC, the writer in the first
        assert writer["AvailabilityZone"] == {"Fn::Select": [0, {"Fn::GetAZs": ""}]}, name
        assert reader["AvailabilityZone"] == {"Fn::Select": [1, {"Fn::GetAZs": ""}]}, name
        # And Aurora promotes it first, and it scales with the writer (tier 0 or 1)
        assert reader["PromotionTier"] == READER_PROMOTION_TIER <= 1, name


def test_the_lean_profile_keeps_one_instance_and_the_reader_is_a_choice(profiles):
    # Given the lean profile: one writer, no reader
    [(logical_id, _)] = _instances(profiles["lean"]).items()
    assert "Writer" in logical_id
    # And its idle floor counts one instance's minimum capacity, the default profile's two
    floors = {name: cost.idle_floor(s.raw) for name, s in profiles.items()}
    aurora = {name: next(line.quantity for line in f.lines if line.item == "Aurora minimum capacity")
              for name, f in floors.items()}
    assert aurora == {"endpoints": 2 * settings.AURORA_MIN_ACU, "nat": 2 * settings.AURORA_MIN_ACU,
                      "lean": settings.AURORA_MIN_ACU}


def test_the_reader_follows_its_context_key():
    assert DeploymentConfig.KEY_DATABASE_READER == "timekeeper:databaseReader"
    lean_with_reader = synthesize({DeploymentConfig.KEY_EGRESS: DeploymentConfig.EGRESS_NAT_INSTANCE,
                                   DeploymentConfig.KEY_DATABASE_READER: "true"})
    assert len(_instances(lean_with_reader)) == 2


def test_the_proxy_opens_the_connection_budget_of_the_max_connections_aurora_derives(profiles):
    budget = connection_budget().total
    for name, synth in profiles.items():
        # Given the profile's cluster capacity and its proxy's cap
        [cluster] = resources(synth.data_template, "AWS::RDS::DBCluster").values()
        scaling = cluster["Properties"]["ServerlessV2ScalingConfiguration"]
        [group] = resources(synth.data_template, "AWS::RDS::DBProxyTargetGroup").values()
        percent = group["Properties"]["ConnectionPoolConfigurationInfo"]["MaxConnectionsPercent"]
        # When max_connections is what Aurora derives from the MAXIMUM capacity
        max_connections = settings.aurora_max_connections(max_acu=scaling["MaxCapacity"],
                                                          min_acu=scaling["MinCapacity"])
        # Then the proxy may open the budget and less than one percent of max_connections more
        opened = percent * max_connections // 100
        assert budget <= opened < budget + max_connections / 100, (name, percent, max_connections)
        assert opened < 2 * budget, name


def test_max_connections_is_aws_s_value_for_the_maximum_capacity():
    # AWS's published values (Aurora PostgreSQL Serverless v2), not the minimum's memory rule
    assert settings.aurora_max_connections(max_acu=4, min_acu=0.5) == 823
    assert settings.aurora_max_connections(max_acu=1, min_acu=0.5) == 189
    assert settings.aurora_max_connections(max_acu=16, min_acu=1) == 3360
    # And a minimum of 0.5 ACU caps it at 2,000 whatever the maximum
    assert settings.aurora_max_connections(max_acu=64, min_acu=0.5) == 2000
    assert settings.aurora_max_connections(max_acu=64, min_acu=2) == 5000
    with pytest.raises(ValueError, match="AURORA_MAX_ACU 3"):
        settings.aurora_max_connections(max_acu=3)
    # And the deployed cap: 6 % of 823 = 49 connections for the budget of 42
    assert settings.proxy_max_connections_percent(42, max_connections=823) == 6


def _policies(resource: dict) -> tuple[str | None, str | None]:
    return resource.get("DeletionPolicy"), resource.get("UpdateReplacePolicy")


def test_the_login_secrets_are_retained_like_the_cluster(synth, teardown):
    # Given the default deployment: every database login's secret is kept when the Data
    # stack is deleted or the secret replaced, as the cluster is snapshotted
    secrets = resources(synth.data_template, "AWS::SecretsManager::Secret")
    logins = {k: r for k, r in secrets.items() if "Database" in k}
    assert len(logins) == 3  # the owner's, the workers', the API's
    assert {_policies(r) for r in logins.values()} == {("Retain", "Retain")}
    [cluster] = resources(synth.data_template, "AWS::RDS::DBCluster").values()
    assert _policies(cluster) == ("Snapshot", "Snapshot")
    # And a deployment being torn down (deletion protection off) deletes them with its cluster
    torn = [r for k, r in resources(teardown.data_template, "AWS::SecretsManager::Secret").items()
            if "Database" in k]
    assert {_policies(r) for r in torn} == {("Delete", "Delete")}


def test_the_link_signing_keys_live_in_the_data_stack_and_are_retained(synth, teardown):
    # Given the default deployment: the links' secret is in the Data stack, retained
    data = resources(synth.data_template, "AWS::SecretsManager::Secret")
    [(key_id, key)] = [(k, r) for k, r in data.items() if k.startswith("LinkSigningKey")]
    assert _policies(key) == ("Retain", "Retain")
    # And the App stack holds no secret of its own for them: recreating it keeps every link valid
    assert not [k for k in resources(synth.app_template, "AWS::SecretsManager::Secret") if "LinkSigning" in k]
    # And the functions that sign and verify read it across the stacks
    variables = [r["Properties"].get("Environment", {}).get("Variables", {})
                 for r in resources(synth.app_template, "AWS::Lambda::Function").values()]
    linked = [v["LINK_SIGNING_SECRET_ARN"] for v in variables if "LINK_SIGNING_SECRET_ARN" in v]
    assert linked and all("Fn::ImportValue" in value for value in linked)
    # And a teardown deletes it
    [torn] = [r for k, r in resources(teardown.data_template, "AWS::SecretsManager::Secret").items()
              if k.startswith("LinkSigningKey")]
    assert _policies(torn) == ("Delete", "Delete")


def test_the_ses_identity_is_retained(synth, teardown):
    [identity] = resources(synth.app_template, "AWS::SES::EmailIdentity").values()
    assert _policies(identity) == ("Retain", "Retain")
    [torn] = resources(teardown.app_template, "AWS::SES::EmailIdentity").values()
    assert _policies(torn) == ("Delete", "Delete")
