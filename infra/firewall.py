"""The API stage's WAF web ACL (regional): AWS's managed rule groups and the public link
routes' rate rule, with its logs.

On by default; ``timekeeper:waf=false`` opts out (the lean profile may: about $9 a month
before requests). The rate rule's limit is ``timekeeper:downloadRateLimit`` (default
:data:`infra.settings.DOWNLOAD_RATE_LIMIT`).
"""

from __future__ import annotations

from aws_cdk import ArnFormat, RemovalPolicy, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_logs as logs
from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct

from infra.downloads import DOWNLOAD_PATH, OPT_OUT_PATH

#: AWS's managed rule groups the web ACL evaluates, in order (each its own rule, priority
#: 1, 2, 3): OWASP-style common threats, request patterns known to exploit software, and
#: addresses Amazon's threat intelligence lists.
MANAGED_RULE_GROUPS = ("AWSManagedRulesCommonRuleSet", "AWSManagedRulesKnownBadInputsRuleSet",
                       "AWSManagedRulesAmazonIpReputationList")
#: Rules of the managed groups that only count (never block), with the reason: the Common
#: rule set blocks bodies over 8 KB, but the API accepts bodies up to API Gateway's 10 MB
#: (Lambda's 6 MB request limit applies first): a long query definition, a recipient list
#: or a member import is a legitimate large JSON body, and each is validated by the API's
#: models (a 422 naming the field).
COUNT_ONLY = {"AWSManagedRulesCommonRuleSet": ("SizeRestrictions_BODY",)}
#: The rate rule's name (priority 0: evaluated first, before the managed groups).
RATE_RULE = "download-rate"
#: WAF's five-minute window of a rate-based rule (seconds).
RATE_WINDOW_S = 300


def waf_log_group_name(name_prefix: str) -> str:
    """The web ACL's log group: WAF delivers only to a group whose name starts with
    ``aws-waf-logs-``."""
    return f"aws-waf-logs-{name_prefix}-api"


class ApiFirewall(Construct):
    """A regional WAF web ACL (:attr:`web_acl`) associated with ``stage`` (named
    ``stage_name``): the public link routes (downloads and the one-click opt-out, counted
    together) beyond ``rate_limit`` requests per IP address in five minutes are blocked
    (403), then :data:`MANAGED_RULE_GROUPS` (with :data:`COUNT_ONLY` overridden to count);
    everything else is allowed. Every request is logged to :attr:`log_group`
    (``log_retention``), with the path, the query string, the ``Authorization`` and
    ``Cookie`` headers redacted (they carry link tokens and credentials)."""

    def __init__(self, scope: Construct, construct_id: str, *, stage: apigw.Stage, stage_name: str, rate_limit: int,
                 name_prefix: str, log_retention: logs.RetentionDays):
        super().__init__(scope, construct_id)
        waf = wafv2.CfnWebACL

        def visibility(metric: str) -> wafv2.CfnWebACL.VisibilityConfigProperty:
            return waf.VisibilityConfigProperty(cloud_watch_metrics_enabled=True, metric_name=metric,
                                                sampled_requests_enabled=True)

        def starts_with(part: str) -> wafv2.CfnWebACL.StatementProperty:
            # the path WAF sees begins with the stage
            return waf.StatementProperty(byte_match_statement=waf.ByteMatchStatementProperty(
                field_to_match=waf.FieldToMatchProperty(uri_path={}), positional_constraint="STARTS_WITH",
                search_string=f"/{stage_name}/{part}/",
                text_transformations=[waf.TextTransformationProperty(priority=0, type="NONE")]))

        public_links = waf.StatementProperty(or_statement=waf.OrStatementProperty(
            statements=[starts_with(DOWNLOAD_PATH[0]), starts_with(OPT_OUT_PATH[0])]))
        rate = waf.StatementProperty(rate_based_statement=waf.RateBasedStatementProperty(
            limit=rate_limit, aggregate_key_type="IP", evaluation_window_sec=RATE_WINDOW_S,
            scope_down_statement=public_links))
        rules = [waf.RuleProperty(name=RATE_RULE, priority=0, action=waf.RuleActionProperty(block={}),
                                  visibility_config=visibility(f"{name_prefix}-{RATE_RULE}"), statement=rate)]
        for priority, group in enumerate(MANAGED_RULE_GROUPS, start=1):
            overrides = [waf.RuleActionOverrideProperty(name=rule, action_to_use=waf.RuleActionProperty(count={}))
                         for rule in COUNT_ONLY.get(group, ())]
            rules.append(waf.RuleProperty(
                name=group, priority=priority, override_action=waf.OverrideActionProperty(none={}),
                visibility_config=visibility(f"{name_prefix}-{group}"),
                statement=waf.StatementProperty(managed_rule_group_statement=waf.ManagedRuleGroupStatementProperty(
                    vendor_name="AWS", name=group, rule_action_overrides=overrides or None))))
        self.web_acl = waf(
            self, "WebAcl", scope="REGIONAL", name=f"{name_prefix}-api",
            default_action=waf.DefaultActionProperty(allow={}), visibility_config=visibility(f"{name_prefix}-api"),
            rules=rules)
        self.association = wafv2.CfnWebACLAssociation(self, "Association", resource_arn=stage.stage_arn,
                                                      web_acl_arn=self.web_acl.attr_arn)
        name = waf_log_group_name(name_prefix)
        self.log_group = logs.LogGroup(self, "Logs", log_group_name=name, retention=log_retention,
                                       removal_policy=RemovalPolicy.DESTROY)
        # WAF takes the group's ARN without CloudWatch's trailing ":*"
        group_arn = Stack.of(self).format_arn(service="logs", resource="log-group", resource_name=name,
                                              arn_format=ArnFormat.COLON_RESOURCE_NAME)
        redacted = [wafv2.CfnLoggingConfiguration.FieldToMatchProperty(uri_path={}),
                    wafv2.CfnLoggingConfiguration.FieldToMatchProperty(query_string={}),
                    *(wafv2.CfnLoggingConfiguration.FieldToMatchProperty(single_header={"Name": header})
                      for header in ("authorization", "cookie"))]
        self.logging = wafv2.CfnLoggingConfiguration(self, "Logging", resource_arn=self.web_acl.attr_arn,
                                                     log_destination_configs=[group_arn], redacted_fields=redacted)
        self.logging.node.add_dependency(self.log_group)
