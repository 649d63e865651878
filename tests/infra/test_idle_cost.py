"""The idle floor: ``infra.cost`` reads the synthesized templates of every deployment
profile, counts what bills while idle with its pinned prices, and the table in
docs/deploy.md is what it computes today."""

from __future__ import annotations

import pytest

from infra import cost, settings
from infra.database import interface_endpoints_needed
from tests.infra.conftest import resources
from timekeeper.topology import PIPELINES, SNAPSHOTS

DEPLOY_DOC = settings.ROOT / "docs" / "deploy.md"


@pytest.fixture(scope="module")
def estimates() -> dict[str, cost.Estimate]:
    return cost.estimate_profiles()


def test_the_docs_table_is_what_the_script_computes_from_the_templates(estimates):
    # Given the script run on the synthesized templates of every profile
    table = cost.markdown_table(estimates)

    # Then docs/deploy.md shows exactly its figures (refresh: python3 -m infra.cost --write docs/deploy.md)
    assert cost.block_of(DEPLOY_DOC.read_text()) == table
    assert set(estimates) == {"endpoints", "nat", "lean"}
    for name, (context, _) in cost.PROFILES.items():
        assert (f"`{name}`" in DEPLOY_DOC.read_text()) and all(f"{k}={v}" in DEPLOY_DOC.read_text()
                                                                 for k, v in context.items())


def _line(estimate: cost.Estimate, item: str) -> cost.Line:
    [line] = [line for line in estimate.lines if line.item == item]
    return line


def test_the_default_floor_counts_what_its_templates_hold(synth):
    # Given the default deployment's templates (the session's synthesis)
    estimate = cost.idle_floor(synth.raw)
    app, data = synth.app_template, synth.data_template

    # Then each declared service's endpoint is paid in both zones, Aurora's minimum and the
    # proxy's 8-ACU minimum by the hour
    assert _line(estimate, "interface endpoints").quantity == 2 * len(interface_endpoints_needed())
    assert _line(estimate, "interface endpoints").monthly_usd == pytest.approx(
        2 * len(interface_endpoints_needed()) * 0.01 * 730)
    # (the writer's and the reader's: the reader Aurora promotes on failover idles too)
    assert _line(estimate, "Aurora minimum capacity").monthly_usd == pytest.approx(
        2 * settings.AURORA_MIN_ACU * 0.12 * 730)
    assert _line(estimate, "RDS Proxy minimum").monthly_usd == pytest.approx(8 * 0.015 * 730)
    assert _line(estimate, "NAT gateways").monthly_usd == 0
    # And every alarm is billed by its metrics (a DIFF expression over one metric is one; a
    # pipeline's run failure rate reads its three outcome metrics, an error rate two), a
    # composite alarm by itself
    alarms = resources(app, "AWS::CloudWatch::Alarm")
    error_rates = [a for a in alarms.values() if "errors" in {m["Id"] for m in a["Properties"].get("Metrics", [])}]
    assert error_rates
    assert _line(estimate, "alarm metrics").quantity == len(alarms) + 2 * len(PIPELINES) + len(error_rates)
    assert _line(estimate, "composite alarms").quantity == len(resources(app, "AWS::CloudWatch::CompositeAlarm")) == 1
    assert _line(estimate, "secrets").quantity == (len(resources(app, "AWS::SecretsManager::Secret"))
                                                   + len(resources(data, "AWS::SecretsManager::Secret")))
    # And the scheduled passes: a pass a minute per dispatcher partition and the snapshot
    # dispatcher, the planner every 15 minutes
    per_month = 730 * 60
    dispatchers = sum(p.dispatch_partitions for p in PIPELINES.values()) + 1
    assert _line(estimate, "scheduled passes (Lambda)").quantity == pytest.approx(
        dispatchers * per_month + per_month / SNAPSHOTS.planner_rate_minutes)
    assert estimate.total == pytest.approx(sum(line.monthly_usd for line in estimate.lines))


def test_the_lean_profile_trades_the_endpoints_for_one_nat_instance(estimates):
    endpoints, nat, lean = estimates["endpoints"], estimates["nat"], estimates["lean"]
    # The NAT profiles pay no interface endpoint
    assert _line(nat, "interface endpoints").quantity == _line(lean, "interface endpoints").quantity == 0
    # One NAT gateway (and its address) for nat; one instance, its volume and address for lean
    assert _line(nat, "NAT gateways").quantity == 1 and _line(lean, "NAT gateways").quantity == 0
    assert _line(lean, "NAT instances").quantity == 1
    assert _line(nat, "public IPv4 addresses").quantity == _line(lean, "public IPv4 addresses").quantity == 1
    # And the floor falls from one profile to the next; the database is the same in the
    # default profiles, the lean one saves the reader's minimum capacity
    assert lean.total < nat.total < endpoints.total
    assert nat.by_group()["database"] == endpoints.by_group()["database"]
    assert endpoints.by_group()["database"] - lean.by_group()["database"] == pytest.approx(
        settings.AURORA_MIN_ACU * 0.12 * 730)
    # (arm64 functions: the passes are priced at Graviton's rate)
    x86 = cost.idle_floor(cost.synthesize({"timekeeper:architecture": "x86_64"}))
    assert _line(lean, "scheduled passes (Lambda)").monthly_usd < _line(x86, "scheduled passes (Lambda)").monthly_usd


def test_the_floor_of_a_handmade_template():
    # Given a template with two endpoints in three subnets each, a NAT gateway and its address,
    # a 1-ACU Serverless v2 writer behind a proxy, an expression alarm over two metrics and
    # a plain one, a composite alarm, a dashboard, a secret, a key, a WAF web ACL of three rules
    template = {"Resources": {
        "E1": {"Type": "AWS::EC2::VPCEndpoint", "Properties": {"VpcEndpointType": "Interface",
                                                                "SubnetIds": ["a", "b", "c"]}},
        "E2": {"Type": "AWS::EC2::VPCEndpoint", "Properties": {"VpcEndpointType": "Interface",
                                                                "SubnetIds": ["a", "b", "c"]}},
        "G": {"Type": "AWS::EC2::VPCEndpoint", "Properties": {"VpcEndpointType": "Gateway"}},
        "N": {"Type": "AWS::EC2::NatGateway", "Properties": {}},
        "IP": {"Type": "AWS::EC2::EIP", "Properties": {}},
        "C": {"Type": "AWS::RDS::DBCluster", "Properties": {"ServerlessV2ScalingConfiguration": {"MinCapacity": 1}}},
        "W": {"Type": "AWS::RDS::DBInstance", "Properties": {"DBInstanceClass": "db.serverless",
                                                              "DBClusterIdentifier": {"Ref": "C"}}},
        "P": {"Type": "AWS::RDS::DBProxy", "Properties": {}},
        "A1": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"Metrics": [
            {"Id": "e", "Expression": "a + b"}, {"Id": "a", "MetricStat": {}}, {"Id": "b", "MetricStat": {}}]}},
        "A2": {"Type": "AWS::CloudWatch::Alarm", "Properties": {"MetricName": "Errors"}},
        "D": {"Type": "AWS::CloudWatch::Dashboard", "Properties": {}},
        "S": {"Type": "AWS::SecretsManager::Secret", "Properties": {}},
        "K": {"Type": "AWS::KMS::Key", "Properties": {}},
        "CA": {"Type": "AWS::CloudWatch::CompositeAlarm", "Properties": {}},
        "WAF": {"Type": "AWS::WAFv2::WebACL", "Properties": {"Rules": [{"Name": "a"}, {"Name": "b"}, {"Name": "c"}]}},
    }}

    # When its floor is computed
    estimate = cost.idle_floor({"Only": template})

    # Then each item is its quantity at its price
    expected = {"interface endpoints": 6 * 0.01 * 730, "NAT gateways": 0.045 * 730,
                "public IPv4 addresses": 0.005 * 730, "Aurora minimum capacity": 0.12 * 730,
                "RDS Proxy minimum": 8 * 0.015 * 730, "alarm metrics": 3 * 0.10, "dashboards": 3.00,
                "composite alarms": 0.50, "WAF web ACLs": 5.00, "WAF rules": 3 * 1.00,
                "secrets": 0.40, "KMS keys": 1.00, "scheduled passes (Lambda)": 0, "SQS long polls of event sources": 0}
    assert {line.item: round(line.monthly_usd, 6) for line in estimate.lines} == pytest.approx(expected)
    assert estimate.total == pytest.approx(sum(expected.values()))


def test_every_price_names_its_source_page():
    assert cost.PRICE_REGION == "us-east-1"
    for key, price in cost.PRICES.items():
        assert price.usd > 0 and price.unit, key
        assert price.source.startswith("https://aws.amazon.com/") and price.source.endswith("/pricing/") or (
            price.source.startswith("https://aws.amazon.com/ec2/pricing/")), key
