"""The API stage's WAF web ACL: in every profile by default, AWS's managed rule groups
(the Common set's body-size rule counting only) behind the public links' rate rule, its
logs in an ``aws-waf-logs-`` group with a retention; ``timekeeper:waf=false`` opts out."""

from __future__ import annotations

import json

import pytest
from cfnlint.api import ManualArgs, lint_file

from infra import settings
from infra.api import API_STAGE
from infra.settings import DeploymentConfig
from tests.infra.conftest import resources, synthesize

MANAGED = ["AWSManagedRulesCommonRuleSet", "AWSManagedRulesKnownBadInputsRuleSet",
           "AWSManagedRulesAmazonIpReputationList"]


@pytest.fixture(scope="module")
def profiles(synth):
    """The default, nat and nat-instance profiles' syntheses."""
    return {"endpoints": synth, "nat": synthesize({DeploymentConfig.KEY_EGRESS: "nat"}),
            "nat-instance": synthesize({DeploymentConfig.KEY_EGRESS: "nat-instance"})}


def _web_acl(template):
    [(acl_id, acl)] = resources(template, "AWS::WAFv2::WebACL").items()
    return acl_id, acl["Properties"]


@pytest.mark.parametrize("profile", ["endpoints", "nat", "nat-instance"])
def test_every_profile_puts_the_managed_rules_and_the_rate_rule_in_front_of_the_stage(profiles, profile):
    # Given a profile synthesized without any WAF context
    template = profiles[profile].app_template
    acl_id, props = _web_acl(template)

    # Then the regional web ACL allows by default, rate rule first, then the managed groups
    assert props["Scope"] == "REGIONAL" and props["DefaultAction"] == {"Allow": {}}
    rules = sorted(props["Rules"], key=lambda r: r["Priority"])
    assert [r["Name"] for r in rules] == ["download-rate", *MANAGED]
    rate = rules[0]
    assert rate["Action"] == {"Block": {}}
    statement = rate["Statement"]["RateBasedStatement"]
    assert (statement["Limit"], statement["AggregateKeyType"], statement["EvaluationWindowSec"]) == (
        settings.DOWNLOAD_RATE_LIMIT, "IP", 300)
    # (the public link routes, counted together: downloads and the one-click opt-out)
    matches = [s["ByteMatchStatement"] for s in statement["ScopeDownStatement"]["OrStatement"]["Statements"]]
    assert [(m["SearchString"], m["PositionalConstraint"], m["FieldToMatch"]) for m in matches] == [
        (f"/{API_STAGE}/downloads/", "STARTS_WITH", {"UriPath": {}}),
        (f"/{API_STAGE}/opt-outs/", "STARTS_WITH", {"UriPath": {}})]
    for rule in rules[1:]:
        group = rule["Statement"]["ManagedRuleGroupStatement"]
        assert (group["VendorName"], group["Name"]) == ("AWS", rule["Name"])
        assert rule["OverrideAction"] == {"None": {}}  # the group's own actions (block) apply
    # And it guards the API's stage
    [association] = resources(template, "AWS::WAFv2::WebACLAssociation").values()
    assert association["Properties"]["WebACLArn"] == {"Fn::GetAtt": [acl_id, "Arn"]}
    [stage_id] = resources(template, "AWS::ApiGateway::Stage")
    assert stage_id in json.dumps(association["Properties"]["ResourceArn"])


def test_the_common_rule_sets_body_size_rule_only_counts(synth):
    # The API takes JSON bodies up to API Gateway's limit (a query definition, a recipient
    # list); the Common set would block any body over 8 KB
    _, props = _web_acl(synth.app_template)
    [common] = [r for r in props["Rules"] if r["Name"] == "AWSManagedRulesCommonRuleSet"]
    overrides = common["Statement"]["ManagedRuleGroupStatement"]["RuleActionOverrides"]
    assert overrides == [{"Name": "SizeRestrictions_BODY", "ActionToUse": {"Count": {}}}]


def test_the_web_acl_logs_to_a_waf_log_group_with_a_retention_and_redacts_secrets(synth):
    template = synth.app_template
    acl_id, _ = _web_acl(template)
    [(group_id, group)] = [(k, r) for k, r in resources(template, "AWS::Logs::LogGroup").items()
                           if str(r["Properties"].get("LogGroupName", "")).startswith("aws-waf-logs-")]
    assert group["Properties"]["LogGroupName"] == "aws-waf-logs-timekeeper-api"
    assert group["Properties"]["RetentionInDays"] == 30
    [logging] = resources(template, "AWS::WAFv2::LoggingConfiguration").values()
    props = logging["Properties"]
    assert props["ResourceArn"] == {"Fn::GetAtt": [acl_id, "Arn"]}
    [destination] = props["LogDestinationConfigs"]
    assert "log-group:aws-waf-logs-timekeeper-api" in json.dumps(destination) and ":*" not in json.dumps(destination)
    # (link tokens ride in the path, credentials in the headers)
    assert props["RedactedFields"] == [{"UriPath": {}}, {"QueryString": {}},
                                       {"SingleHeader": {"Name": "authorization"}},
                                       {"SingleHeader": {"Name": "cookie"}}]


@pytest.fixture(scope="module")
def fenced():
    return synthesize({DeploymentConfig.KEY_DOWNLOAD_RATE_LIMIT: "120"})


def test_the_rate_limit_setting_is_the_rate_rules_limit_and_the_stack_stays_clean(fenced):
    _, props = _web_acl(fenced.app_template)
    [rate] = [r for r in props["Rules"] if r["Name"] == "download-rate"]
    assert rate["Statement"]["RateBasedStatement"]["Limit"] == 120
    # cdk-nag (synthesis passed through it) and cfn-lint stay clean
    assert [v.rule_name for v in fenced.stacks.checks.validate_scope(fenced.app).violations] == []
    matches = lint_file(fenced.outdir / "TimekeeperApp.template.json", ManualArgs(regions=["us-east-1", "eu-west-1"]))
    assert [f"{m.rule.id} {m.message}" for m in matches if m.rule.id.startswith("E")] == []


def test_a_deployment_may_opt_out_of_the_web_acl():
    lean = synthesize({DeploymentConfig.KEY_EGRESS: "nat-instance", DeploymentConfig.KEY_WAF: "false"})
    for type_ in ("AWS::WAFv2::WebACL", "AWS::WAFv2::WebACLAssociation", "AWS::WAFv2::LoggingConfiguration"):
        assert not resources(lean.app_template, type_), type_


def test_a_rate_limit_without_the_web_acl_fails_the_synthesis():
    with pytest.raises(ValueError, match="downloadRateLimit"):
        synthesize({DeploymentConfig.KEY_WAF: "false", DeploymentConfig.KEY_DOWNLOAD_RATE_LIMIT: "300"})


@pytest.mark.parametrize("limit", ["5", "0"])
def test_a_rate_limit_waf_cannot_enforce_fails_the_synthesis(limit):
    with pytest.raises(ValueError, match="downloadRateLimit"):
        synthesize({DeploymentConfig.KEY_DOWNLOAD_RATE_LIMIT: limit})
