"""The idle floor: what a deployment costs per month before it does any work, computed from
its synthesized templates with a pinned price table, per deployment profile.

Run from the repository root (synthesis with bundling skipped, no AWS call)::

    PYTHONPATH=shared:. python3 -m infra.cost                 # every profile, as a table
    PYTHONPATH=shared:. python3 -m infra.cost --lines lean    # one profile, line by line
    PYTHONPATH=shared:. python3 -m infra.cost --write docs/deploy.md   # refresh the docs' table

What counts: what bills by the hour or the month whether or not anything happens
(interface endpoints per AZ, NAT gateways and instances, public IPv4 addresses, WAF web
ACLs and their rules, Aurora's minimum capacity, RDS Proxy's minimum, alarms by metric,
composite alarms, dashboards, secrets, KMS keys) and
what the deployment does by itself while idle (the scheduled dispatcher and planner passes,
the SQS event sources' long polls). What does not: anything that grows with use (storage,
log ingestion, data processed by endpoints or the NAT, requests, e-mail, traces) and every
free tier (the figures are for an account whose free tiers are used up).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: The region and the day the prices were transcribed from the pages in each entry's source.
PRICE_REGION = "us-east-1"
PRICES_DATED = "2026-12-02"
HOURS_PER_MONTH = 730
SECONDS_PER_MONTH = HOURS_PER_MONTH * 3600


@dataclass(frozen=True)
class Price:
    """One list price (USD) per ``unit``, and the page it is published on."""

    usd: float
    unit: str
    source: str


#: List prices of us-east-1 (on-demand, no free tier), pinned: a change of AWS's prices is
#: a change of this table, reviewed like code.
PRICES: dict[str, Price] = {
    "interface_endpoint": Price(0.01, "endpoint ENI (per AZ) hour", "https://aws.amazon.com/privatelink/pricing/"),
    "nat_gateway": Price(0.045, "NAT gateway hour", "https://aws.amazon.com/vpc/pricing/"),
    "public_ipv4": Price(0.005, "public IPv4 address hour", "https://aws.amazon.com/vpc/pricing/"),
    "ec2_t4g.nano": Price(0.0042, "t4g.nano instance hour (Linux)", "https://aws.amazon.com/ec2/pricing/on-demand/"),
    "ebs_gp3": Price(0.08, "gp3 GB-month", "https://aws.amazon.com/ebs/pricing/"),
    "aurora_serverless_v2": Price(0.12, "ACU hour (Aurora Standard)", "https://aws.amazon.com/rds/aurora/pricing/"),
    "rds_proxy_serverless": Price(0.015, "ACU hour of the target, at least 8 ACUs",
                                  "https://aws.amazon.com/rds/proxy/pricing/"),
    "alarm_metric": Price(0.10, "standard-resolution alarm metric month", "https://aws.amazon.com/cloudwatch/pricing/"),
    "composite_alarm": Price(0.50, "composite alarm month", "https://aws.amazon.com/cloudwatch/pricing/"),
    "waf_web_acl": Price(5.00, "WAF web ACL month", "https://aws.amazon.com/waf/pricing/"),
    "waf_rule": Price(1.00, "WAF rule or managed rule group month", "https://aws.amazon.com/waf/pricing/"),
    "dashboard": Price(3.00, "dashboard month", "https://aws.amazon.com/cloudwatch/pricing/"),
    "secret": Price(0.40, "secret month", "https://aws.amazon.com/secrets-manager/pricing/"),
    "kms_key": Price(1.00, "customer managed key month", "https://aws.amazon.com/kms/pricing/"),
    "lambda_arm64": Price(0.0000133334, "GB-second (arm64)", "https://aws.amazon.com/lambda/pricing/"),
    "lambda_x86_64": Price(0.0000166667, "GB-second (x86_64)", "https://aws.amazon.com/lambda/pricing/"),
    "lambda_request": Price(0.20 / 1_000_000, "request", "https://aws.amazon.com/lambda/pricing/"),
    "sqs_request": Price(0.40 / 1_000_000, "standard queue request", "https://aws.amazon.com/sqs/pricing/"),
}

#: RDS Proxy bills a Serverless v2 target for at least this many ACUs.
PROXY_MINIMUM_ACU = 8
#: Assumptions of the idle estimate: an idle scheduled pass (a dispatcher finding nothing
#: due, the planner finding nothing to plan) takes about this long; Lambda keeps this many
#: long polls (20 s each) on every SQS event source while its queue is empty; a NAT
#: instance's root volume (the Amazon Linux 2023 image's) is this large.
IDLE_PASS_S = 0.5
SQS_IDLE_POLLERS = 5
SQS_LONG_POLL_S = 20
NAT_INSTANCE_ROOT_GB = 8

#: The deployment profiles: a name, the CDK context that chooses it, and what it is.
PROFILES: dict[str, tuple[dict[str, str], str]] = {
    "endpoints": ({}, "the default: isolated subnets, an interface endpoint per declared service in each of 2 AZs"),
    "nat": ({"timekeeper:egress": "nat"}, "one NAT gateway instead of the interface endpoints"),
    "lean": ({"timekeeper:egress": "nat-instance"}, "one t4g.nano NAT instance instead of the endpoints"),
}

#: Context every estimate synthesizes with: a sender (required; it costs nothing) and no
#: bundling (the layer's contents do not change the bill).
ESTIMATE_CONTEXT = {"timekeeper:mailSender": "reports@mail.your-domain.dev",
                    "timekeeper:mailDomain": "mail.your-domain.dev", "aws:cdk:bundling-stacks": []}

#: Where ``--write`` puts the table in a Markdown file.
BEGIN, END = "<!-- idle-cost:begin -->", "<!-- idle-cost:end -->"


@dataclass(frozen=True)
class Line:
    """One item of the floor: ``quantity`` of ``unit`` (per month) at ``price``."""

    item: str
    quantity: float
    price: str
    monthly_usd: float


@dataclass(frozen=True)
class Estimate:
    """A profile's idle floor, line by line (USD per month)."""

    profile: str
    lines: tuple[Line, ...]

    @property
    def total(self) -> float:
        """The floor (USD per month)."""
        return sum(line.monthly_usd for line in self.lines)

    def by_group(self) -> dict[str, float]:
        """USD per month by the groups the docs' table shows."""
        groups: dict[str, float] = {}
        for line in self.lines:
            group = GROUP_OF.get(line.item, "other")
            groups[group] = groups.get(group, 0.0) + line.monthly_usd
        return groups


GROUPS = ("network", "firewall", "database", "monitoring", "secrets and keys", "idle work")
GROUP_OF = {"interface endpoints": "network", "NAT gateways": "network", "public IPv4 addresses": "network",
            "NAT instances": "network", "NAT instance volumes": "network",
            "WAF web ACLs": "firewall", "WAF rules": "firewall", "composite alarms": "monitoring",
            "Aurora minimum capacity": "database", "RDS Proxy minimum": "database",
            "alarm metrics": "monitoring", "dashboards": "monitoring",
            "secrets": "secrets and keys", "KMS keys": "secrets and keys",
            "scheduled passes (Lambda)": "idle work", "SQS long polls of event sources": "idle work"}


def _resources(templates: Mapping[str, dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [r.get("Properties", {}) for t in templates.values() for r in t.get("Resources", {}).values()
            if r.get("Type") == type_]


def _all_resources(templates: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for template in templates.values():
        found.update(template.get("Resources", {}))
    return found


def _monthly(key: str, quantity: float, *, hours: bool) -> float:
    return quantity * PRICES[key].usd * (HOURS_PER_MONTH if hours else 1)


def _line(item: str, quantity: float, key: str, *, hours: bool) -> Line:
    return Line(item=item, quantity=quantity, price=f"${PRICES[key].usd:g} per {PRICES[key].unit}",
                monthly_usd=_monthly(key, quantity, hours=hours))


def _alarm_metrics(alarm: dict[str, Any]) -> int:
    """Metrics an alarm is billed for: one for a single-metric alarm, each metric a math
    expression reads."""
    if "Metrics" in alarm:
        return sum(1 for m in alarm["Metrics"] if "MetricStat" in m)
    return 1


_RATE = re.compile(r"rate\((\d+) (minute|minutes|hour|hours)\)")


def _scheduled_passes(templates: Mapping[str, dict[str, Any]]) -> tuple[float, float]:
    """(invocations, USD of their GB-seconds) per month of every Lambda a rate rule invokes."""
    everything = _all_resources(templates)
    invocations = cost = 0.0
    for rule in _resources(templates, "AWS::Events::Rule"):
        match = _RATE.fullmatch(rule.get("ScheduleExpression", ""))
        if not match:
            continue
        minutes = int(match[1]) * (60 if match[2].startswith("hour") else 1)
        for target in rule.get("Targets", []):
            arn = target.get("Arn")
            if not (isinstance(arn, dict) and "Fn::GetAtt" in arn):
                continue
            function = everything.get(arn["Fn::GetAtt"][0], {})
            if function.get("Type") != "AWS::Lambda::Function":
                continue
            props = function["Properties"]
            passes = SECONDS_PER_MONTH / 60 / minutes
            architecture = (props.get("Architectures") or ["x86_64"])[0]
            gb_seconds = passes * IDLE_PASS_S * props.get("MemorySize", 128) / 1024
            invocations += passes
            cost += gb_seconds * PRICES[f"lambda_{architecture}"].usd
    return invocations, cost


def idle_floor(templates: Mapping[str, dict[str, Any]], *, profile: str = "") -> Estimate:
    """The idle floor of the deployment whose synthesized templates are ``templates``
    (stack name -> template), in USD per month of :data:`HOURS_PER_MONTH` hours at
    :data:`PRICES`. Pure: reads the templates only."""
    everything = _all_resources(templates)
    lines: list[Line] = []

    azs = sum(len(e.get("SubnetIds", [])) for e in _resources(templates, "AWS::EC2::VPCEndpoint")
              if e.get("VpcEndpointType") == "Interface")
    lines.append(_line("interface endpoints", azs, "interface_endpoint", hours=True))
    lines.append(_line("NAT gateways", len(_resources(templates, "AWS::EC2::NatGateway")), "nat_gateway", hours=True))
    instances = _resources(templates, "AWS::EC2::Instance")
    for instance_type in sorted({i["InstanceType"] for i in instances}):
        count = sum(1 for i in instances if i["InstanceType"] == instance_type)
        lines.append(_line("NAT instances", count, f"ec2_{instance_type}", hours=True))
    if instances:
        lines.append(_line("NAT instance volumes", len(instances) * NAT_INSTANCE_ROOT_GB, "ebs_gp3", hours=False))
    # An Elastic IP (a NAT gateway's) and an instance in a public subnet each hold one.
    addresses = len(_resources(templates, "AWS::EC2::EIP")) + len(instances)
    lines.append(_line("public IPv4 addresses", addresses, "public_ipv4", hours=True))

    acls = _resources(templates, "AWS::WAFv2::WebACL")
    lines.append(_line("WAF web ACLs", len(acls), "waf_web_acl", hours=False))
    # each rule bills, a managed rule group as one rule
    lines.append(_line("WAF rules", sum(len(a.get("Rules", [])) for a in acls), "waf_rule", hours=False))

    clusters = {lid: r["Properties"] for lid, r in everything.items() if r.get("Type") == "AWS::RDS::DBCluster"}
    minimum_acu = 0.0
    for instance in _resources(templates, "AWS::RDS::DBInstance"):
        if instance.get("DBInstanceClass") == "db.serverless":
            cluster = clusters[instance["DBClusterIdentifier"]["Ref"]]
            minimum_acu += float(cluster["ServerlessV2ScalingConfiguration"]["MinCapacity"])
    lines.append(_line("Aurora minimum capacity", minimum_acu, "aurora_serverless_v2", hours=True))
    proxies = len(_resources(templates, "AWS::RDS::DBProxy"))
    lines.append(_line("RDS Proxy minimum", proxies * max(PROXY_MINIMUM_ACU, minimum_acu), "rds_proxy_serverless",
                       hours=True))

    alarm_metrics = sum(_alarm_metrics(a) for a in _resources(templates, "AWS::CloudWatch::Alarm"))
    lines.append(_line("alarm metrics", alarm_metrics, "alarm_metric", hours=False))
    composites = len(_resources(templates, "AWS::CloudWatch::CompositeAlarm"))
    lines.append(_line("composite alarms", composites, "composite_alarm", hours=False))
    lines.append(_line("dashboards", len(_resources(templates, "AWS::CloudWatch::Dashboard")), "dashboard",
                       hours=False))
    lines.append(_line("secrets", len(_resources(templates, "AWS::SecretsManager::Secret")), "secret", hours=False))
    lines.append(_line("KMS keys", len(_resources(templates, "AWS::KMS::Key")), "kms_key", hours=False))

    invocations, compute = _scheduled_passes(templates)
    lines.append(Line(item="scheduled passes (Lambda)", quantity=invocations,
                      price=f"{IDLE_PASS_S:g} s per pass at the function's memory and architecture, plus "
                            f"${PRICES['lambda_request'].usd * 1e6:g} per million requests",
                      monthly_usd=compute + invocations * PRICES["lambda_request"].usd))
    sources = [m for m in _resources(templates, "AWS::Lambda::EventSourceMapping") if "EventSourceArn" in m]
    polls = len(sources) * SQS_IDLE_POLLERS * SECONDS_PER_MONTH / SQS_LONG_POLL_S
    lines.append(_line("SQS long polls of event sources", polls, "sqs_request", hours=False))
    return Estimate(profile=profile, lines=tuple(lines))


def cdk_context() -> dict[str, Any]:
    """The context of cdk.json (the feature flags the app is built with)."""
    return json.loads((Path(__file__).resolve().parent.parent / "cdk.json").read_text())["context"]


def synthesize(context: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The templates (stack name -> template) of the app built with cdk.json's context,
    :data:`ESTIMATE_CONTEXT` and ``context``, bundling skipped. No AWS call."""
    import aws_cdk as cdk

    from infra.stacks import build

    outdir = tempfile.mkdtemp(prefix="tk-cost-")
    try:
        app = cdk.App(context={**cdk_context(), **ESTIMATE_CONTEXT, **context}, outdir=outdir)
        build(app)
        assembly = app.synth()
        return {stack.stack_name: stack.template for stack in assembly.stacks}
    finally:
        shutil.rmtree(outdir, ignore_errors=True)


def estimate_profiles(extra: Mapping[str, Any] | None = None) -> dict[str, Estimate]:
    """Every profile of :data:`PROFILES`, synthesized with ``extra`` context over its own."""
    return {name: idle_floor(synthesize({**context, **(extra or {})}), profile=name)
            for name, (context, _) in PROFILES.items()}


def markdown_table(estimates: Mapping[str, Estimate]) -> str:
    """The docs' table: one column per profile, one row per group, the total last."""
    names = list(estimates)
    rows = [f"| USD per month ({PRICE_REGION}, prices of {PRICES_DATED}) | " + " | ".join(f"`{n}`" for n in names)
            + " |", "|---|" + "---:|" * len(names)]
    for group in GROUPS:
        rows.append(f"| {group} | " + " | ".join(f"{estimates[n].by_group().get(group, 0.0):.2f}" for n in names)
                    + " |")
    rows.append("| **idle floor** | " + " | ".join(f"**{estimates[n].total:.2f}**" for n in names) + " |")
    return "\n".join(rows)


def lines_table(estimate: Estimate) -> str:
    """One profile line by line."""
    rows = ["| item | quantity per month | price | USD per month |", "|---|---:|---|---:|"]
    rows += [f"| {line.item} | {line.quantity:,.1f} | {line.price} | {line.monthly_usd:.2f} |"
             for line in estimate.lines]
    rows.append(f"| **total** | | | **{estimate.total:.2f}** |")
    return "\n".join(rows)


def replace_block(text: str, table: str) -> str:
    """``text`` with the part between :data:`BEGIN` and :data:`END` replaced by ``table``.
    Raises ``ValueError`` when the markers are missing."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no {BEGIN} ... {END} block")
    return text[:start + len(BEGIN)] + "\n" + table + "\n" + text[end:]


def block_of(text: str) -> str:
    """The table between :data:`BEGIN` and :data:`END` of ``text`` (stripped)."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"no {BEGIN} ... {END} block")
    return text[start + len(BEGIN):end].strip()


def main(argv: list[str] | None = None) -> int:
    """The command line (see the module's docstring). Returns the exit status."""
    parser = argparse.ArgumentParser(description="Timekeeper's idle floor per deployment profile")
    parser.add_argument("--lines", metavar="PROFILE", choices=sorted(PROFILES), help="one profile, line by line")
    parser.add_argument("--write", metavar="MARKDOWN", type=Path, help="replace the table between the markers")
    parser.add_argument("-c", "--context", action="append", default=[], metavar="KEY=VALUE",
                        help="extra CDK context for every profile")
    args = parser.parse_args(argv)
    extra = dict(item.split("=", 1) for item in args.context)
    if args.lines:
        context, _ = PROFILES[args.lines]
        print(lines_table(idle_floor(synthesize({**context, **extra}), profile=args.lines)))
        return 0
    table = markdown_table(estimate_profiles(extra))
    if args.write:
        args.write.write_text(replace_block(args.write.read_text(), table))
    print(table)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "shared"))
    sys.exit(main())
