"""Every function reaches what it calls: in the synthesized templates, each function's
declared AWS services (the topology) have a route from the function's subnets (an
interface endpoint it may reach on 443 with private DNS, the S3 gateway on its route
tables, or a NAT route), and its role holds a grant for each of them.

The endpoint each service needs is botocore's own (the host prefix its client connects
to: the SES client's is ``email``, not ``email-smtp``), not a list kept beside infra.
"""

from __future__ import annotations

from typing import Any

import botocore.session
import pytest

from infra.settings import DeploymentConfig
from tests.infra.conftest import functions_by_folder, resources, synthesize
from timekeeper.settings import FUNCTION_VARIABLE
from timekeeper.topology import OPTIONAL_FUNCTIONS, function_services

#: Role actions every function has whatever it calls (its logs, VPC networking, traces)
#: and KMS, which SNS asks of a publisher to the encrypted topic on its behalf.
BASELINE = {"logs", "ec2", "xray", "kms"}


def endpoint_prefix(service: str) -> str:
    """The host prefix a boto3 client of ``service`` connects to (``email`` for ``ses``)."""
    return botocore.session.get_session().get_service_model(service).endpoint_prefix


class Network:
    """The data stack's network as the walk needs it."""

    def __init__(self, data: dict[str, Any]):
        self.resources = data["Resources"]
        self.outputs = data.get("Outputs", {})
        self.route_table_of = {r["Properties"]["SubnetId"]["Ref"]: r["Properties"]["RouteTableId"]["Ref"]
                               for r in resources(data, "AWS::EC2::SubnetRouteTableAssociation").values()}
        self.endpoints = list(resources(data, "AWS::EC2::VPCEndpoint").values())
        self.routes = [r["Properties"] for r in resources(data, "AWS::EC2::Route").values()]
        self.ingress = [r["Properties"] for r in resources(data, "AWS::EC2::SecurityGroupIngress").values()]

    def resolve(self, value: Any) -> str:
        """The data stack's logical id behind a value the app stack imported."""
        if isinstance(value, dict) and "Fn::GetStackOutput" in value:
            value = self.outputs[value["Fn::GetStackOutput"]["OutputName"]]["Value"]
        elif isinstance(value, dict) and "Fn::ImportValue" in value:
            name = value["Fn::ImportValue"]
            value = next(o["Value"] for o in self.outputs.values() if o.get("Export", {}).get("Name") == name)
        if "Ref" in value:
            return value["Ref"]
        return value["Fn::GetAtt"][0]

    def _admits(self, endpoint_group: str, client_group: str) -> bool:
        return any(i["GroupId"] == {"Fn::GetAtt": [endpoint_group, "GroupId"]}
                   and i["SourceSecurityGroupId"] == {"Fn::GetAtt": [client_group, "GroupId"]}
                   and i["IpProtocol"] == "tcp" and i["FromPort"] <= 443 <= i["ToPort"] for i in self.ingress)

    def _nat_route(self, subnet: str) -> bool:
        table = self.route_table_of[subnet]
        return any(r["RouteTableId"] == {"Ref": table} and r.get("DestinationCidrBlock") == "0.0.0.0/0"
                   and ("NatGatewayId" in r or self._nat_instance_forwards_https(r.get("InstanceId")))
                   for r in self.routes)

    def _nat_instance_forwards_https(self, instance: Any) -> bool:
        """Whether the route's target is a NAT instance (source/destination check off) whose
        security groups admit HTTPS from the VPC's range."""
        if not instance:
            return False
        props = self.resources[instance["Ref"]]["Properties"]
        [vpc] = [r["Properties"] for r in self.resources.values() if r["Type"] == "AWS::EC2::VPC"]
        groups = [g["Fn::GetAtt"][0] for g in props.get("SecurityGroupIds", [])]
        rules = [rule for g in groups for rule in self.resources[g]["Properties"].get("SecurityGroupIngress", [])]
        return props.get("SourceDestCheck") is False and any(
            rule.get("CidrIp") == vpc["CidrBlock"] and rule["IpProtocol"] == "tcp"
            and rule["FromPort"] <= 443 <= rule["ToPort"] for rule in rules)

    def _egress_open(self, group: str) -> bool:
        egress = self.resources[group]["Properties"].get("SecurityGroupEgress", [])
        return any(e.get("CidrIp") == "0.0.0.0/0" and e.get("IpProtocol") == "-1" for e in egress)

    def route(self, service: str, subnets: list[str], groups: list[str]) -> str | None:
        """How functions in ``subnets`` with ``groups`` reach ``service``: ``gateway``,
        ``endpoint`` or ``nat``; None when they cannot."""
        suffix = f".{endpoint_prefix(service)}"
        for endpoint in self.endpoints:
            props = endpoint["Properties"]
            name = props["ServiceName"]["Fn::Join"][1][-1]
            if name != suffix:
                continue
            if props["VpcEndpointType"] == "Gateway" and all(
                    {"Ref": self.route_table_of[s]} in props["RouteTableIds"] for s in subnets):
                return "gateway"
            if props["VpcEndpointType"] == "Interface" and props.get("PrivateDnsEnabled") and any(
                    self._admits(g["Fn::GetAtt"][0], c) for g in props["SecurityGroupIds"] for c in groups):
                return "endpoint"
        if all(self._nat_route(s) for s in subnets) and any(self._egress_open(g) for g in groups):
            return "nat"
        return None


def granted_services(template: dict[str, Any], role: str) -> set[str]:
    """The service prefixes of every action granted to ``role`` by the app stack's policies."""
    found = set()
    for policy in resources(template, "AWS::IAM::Policy").values():
        props = policy["Properties"]
        if {"Ref": role} not in props.get("Roles", []):
            continue
        for statement in props["PolicyDocument"]["Statement"]:
            actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
            found |= {a.split(":")[0] for a in actions}
    return found


def walk(synth) -> dict[str, dict[str, str | None]]:
    """Every function folder -> its declared services -> the route it has."""
    app, network = synth.app_template, Network(synth.data_template)
    declared = function_services()
    found = {}
    for folder, logical_id in functions_by_folder(app).items():
        props = app["Resources"][logical_id]["Properties"]
        assert props["Environment"]["Variables"][FUNCTION_VARIABLE] == folder
        if "VpcConfig" not in props:  # outside the VPC (the JWT authorizer): it calls no AWS service
            assert declared[folder] == frozenset(), folder
            found[folder] = {}
            continue
        subnets = [network.resolve(s) for s in props["VpcConfig"]["SubnetIds"]]
        groups = [network.resolve(g) for g in props["VpcConfig"]["SecurityGroupIds"]]
        found[folder] = {service: network.route(service, subnets, groups) for service in sorted(declared[folder])}
    return found


def test_every_function_of_the_topology_is_deployed_and_every_deployed_function_declares_its_calls(synth):
    # The JWT authorizer is deployed when an issuer is configured (tests/infra/test_authorizer.py)
    assert set(functions_by_folder(synth.app_template)) == set(function_services()) - OPTIONAL_FUNCTIONS


def test_every_function_reaches_every_service_it_declares_through_an_endpoint(synth):
    # Given the default deployment (isolated subnets, no NAT)
    routes = walk(synth)
    # Then every declared service of every function has its endpoint (S3: the gateway)
    missing = {f"{folder} -> {service}" for folder, found in routes.items() for service, how in found.items()
               if how is None}
    assert not missing, f"no route: {sorted(missing)}"
    assert routes["queries_consumer"]["ses"] == routes["snapshot_planner"]["lambda"] == "endpoint"
    assert routes["report_renderer"]["s3"] == "gateway"


@pytest.fixture(scope="module", params=[DeploymentConfig.EGRESS_NAT, DeploymentConfig.EGRESS_NAT_INSTANCE])
def nat(request):
    return synthesize({DeploymentConfig.KEY_EGRESS: request.param})


def test_with_the_nat_setting_every_function_reaches_every_service_through_the_nat(nat):
    routes = walk(nat)
    missing = {f"{folder} -> {service}" for folder, found in routes.items() for service, how in found.items()
               if how is None}
    assert not missing, f"no route: {sorted(missing)}"
    # No interface endpoint is paid for: everything but S3 (the free gateway) goes through the NAT
    assert {how for found in routes.values() for service, how in found.items() if service != "s3"} == {"nat"}
    assert not [e for e in resources(nat.data_template, "AWS::EC2::VPCEndpoint").values()
                if e["Properties"]["VpcEndpointType"] == "Interface"]


def test_only_the_declared_services_get_an_interface_endpoint(synth):
    # Given every service some function declares (S3 is the gateway)
    needed = {endpoint_prefix(s) for services in function_services().values() for s in services} - {"s3"}
    # Then those are the interface endpoints, and CloudWatch Logs (which no function calls) is not one
    built = {e["Properties"]["ServiceName"]["Fn::Join"][1][-1].lstrip(".")
             for e in resources(synth.data_template, "AWS::EC2::VPCEndpoint").values()
             if e["Properties"]["VpcEndpointType"] == "Interface"}
    assert built == needed
    assert "logs" not in built and {"lambda", "email"} <= built


def test_every_function_is_granted_what_it_declares_and_nothing_else(synth):
    app = synth.app_template
    declared = function_services()
    for folder, logical_id in functions_by_folder(app).items():
        role = app["Resources"][logical_id]["Properties"]["Role"]["Fn::GetAtt"][0]
        granted = granted_services(app, role) - BASELINE
        # Lambda itself uses the role for an SQS event source (it polls the queue) and an
        # on-failure destination (it sends the event there): those sqs grants are not the code's
        polled = {"sqs"} if [m for m in resources(app, "AWS::Lambda::EventSourceMapping").values()
                             if m["Properties"]["FunctionName"] == {"Ref": logical_id}] else set()
        polled |= {"sqs"} if [c for c in resources(app, "AWS::Lambda::EventInvokeConfig").values()
                              if c["Properties"]["FunctionName"] == {"Ref": logical_id}
                              and "OnFailure" in c["Properties"].get("DestinationConfig", {})] else set()
        assert {endpoint_prefix(s) for s in declared[folder]} <= {endpoint_prefix(g) for g in granted}, folder
        assert granted - polled <= set(declared[folder]), f"{folder} is granted {sorted(granted - polled)}"


def test_a_grant_the_topology_does_not_declare_fails_the_synthesis(monkeypatch):
    # Given the delivery consumer's declaration without SES, while infra still grants it ses:SendEmail
    import infra.functions

    reduced = {**function_services(), "queries_consumer": function_services()["queries_consumer"] - {"ses"}}
    monkeypatch.setattr(infra.functions, "function_services", lambda: reduced)
    # When the app is synthesized, then it fails naming the function and the service
    with pytest.raises(ValueError, match=r"functions/queries_consumer is granted \['ses'\]"):
        synthesize()


def test_each_deployed_function_cold_starts_with_the_variables_infra_sets(synth, monkeypatch):
    # Given each function's environment as synthesized (values CloudFormation resolves become
    # placeholders; the link signing secret is a real one, in moto), in an AWS-like process
    import boto3
    from moto import mock_aws

    from timekeeper.edge import adapters, startup

    app = synth.app_template
    with mock_aws():
        monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
        for name in ("DATABASE_URL", "AWS_ENDPOINT_URL"):
            monkeypatch.delenv(name, raising=False)
        link_secret = boto3.client("secretsmanager", region_name="eu-west-1").create_secret(
            Name="link-key", SecretString='{"key": "%s"}' % ("k" * 48))["ARN"]
        for folder, logical_id in functions_by_folder(app).items():
            variables = app["Resources"][logical_id]["Properties"]["Environment"]["Variables"]
            for name, value in variables.items():
                placeholder = f"https://{name.lower()}.example/{folder}" if "URL" in name else f"{name}-of-{folder}"
                monkeypatch.setenv(name, link_secret if name == "LINK_SIGNING_SECRET_ARN"
                                   else value if isinstance(value, str) else placeholder)
            adapters.reset()
            # When Lambda imports its handler, then its cold start finds every variable it
            # needs and asks for exactly the services it declares
            startup.cold_start(folder)
            assert adapters.requested_services() == function_services()[folder], folder
            for name in variables:
                monkeypatch.delenv(name)
    adapters.reset()
