"""The public download route's own function and its fences (the opt-out route's two
methods are answered by the same function, under the same throttle): ``functions/downloads``
(reserved concurrency from the topology, the API's walled login), the route's method
throttle (tighter than the stage's), and optionally (context
``timekeeper:downloadRateLimit``) a WAF web ACL on the stage whose rate-based rule blocks an
IP address that requests more downloads than that in five minutes.

The route itself (``GET /downloads/{token}``, no authorizer) and its grants (the link
signing secret, ``s3:GetObject`` on ``deliveries/``) are wired by :mod:`infra.delivery`.
"""

from __future__ import annotations

from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_wafv2 as wafv2
from constructs import Construct

from infra import settings
from infra.functions import API, DatabaseAccess, TimekeeperFunction
from timekeeper.settings import ENVIRONMENT_VARIABLE, FILES_BUCKET_VARIABLE
from timekeeper.topology import DOWNLOADS

#: The route's path below the stage, as API Gateway's resources spell it.
DOWNLOAD_PATH = ("downloads", "{token}")
#: The public opt-out route's path parts (GET: the confirmation page; POST: RFC 8058
#: one-click), answered by the same function.
OPT_OUT_PATH = ("opt-outs", "{token}")
#: The method throttle's key in the stage's method settings.
DOWNLOAD_METHOD_KEY = f"/{DOWNLOAD_PATH[0]}/{DOWNLOAD_PATH[1]}/GET"
#: The "send me a fresh link" method's key (a POST to the download link itself).
FRESH_LINK_METHOD_KEY = f"/{DOWNLOAD_PATH[0]}/{DOWNLOAD_PATH[1]}/POST"
#: The opt-out methods' keys in the stage's method settings.
OPT_OUT_METHOD_KEYS = tuple(f"/{OPT_OUT_PATH[0]}/{OPT_OUT_PATH[1]}/{verb}" for verb in ("GET", "POST"))


def download_method_options() -> dict[str, apigw.MethodDeploymentOptions]:
    """The stage's method settings for the public link routes (the download route, its
    fresh-link POST and the opt-out route's two methods): each its own throttle, the
    download route's figures."""
    return {key: apigw.MethodDeploymentOptions(
        throttling_rate_limit=settings.DOWNLOAD_THROTTLE_RATE_RPS,
        throttling_burst_limit=settings.DOWNLOAD_THROTTLE_BURST)
        for key in (DOWNLOAD_METHOD_KEY, FRESH_LINK_METHOD_KEY, *OPT_OUT_METHOD_KEYS)}


class DownloadFunction(Construct):
    """``functions/downloads`` (:attr:`function`, a :class:`TimekeeperFunction`)."""

    def __init__(self, scope: Construct, construct_id: str, *, layer: lambda_.ILayerVersion,
                 database: DatabaseAccess, log_retention: logs.RetentionDays, files_bucket_name: str | None,
                 environment: str):
        super().__init__(scope, construct_id)
        variables = {ENVIRONMENT_VARIABLE: environment}
        if files_bucket_name is not None:
            variables[FILES_BUCKET_VARIABLE] = files_bucket_name
        self.function = TimekeeperFunction(
            self, "Handler", folder=DOWNLOADS.function, layer=layer, database=database, login=API,
            timeout_s=settings.DOWNLOAD_TIMEOUT_S, memory_mb=settings.DOWNLOAD_MEMORY_MB,
            log_retention=log_retention, environment=variables,
            description="Timekeeper public link routes (GET /downloads/{token}, GET and POST /opt-outs/{token})")


class DownloadRateRule(Construct):
    """A regional WAF web ACL on ``stage`` (named ``stage_name``): requests to the public link
    routes (downloads and the one-click opt-out, counted together) beyond ``limit`` per IP
    address in five minutes are blocked (403); everything else is allowed."""

    def __init__(self, scope: Construct, construct_id: str, *, stage: apigw.Stage, stage_name: str, limit: int,
                 name_prefix: str):
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

        # The public link routes: downloads and the one-click opt-out (one count per IP address)
        public_links = waf.StatementProperty(or_statement=waf.OrStatementProperty(
            statements=[starts_with(DOWNLOAD_PATH[0]), starts_with(OPT_OUT_PATH[0])]))
        rate = waf.StatementProperty(rate_based_statement=waf.RateBasedStatementProperty(
            limit=limit, aggregate_key_type="IP", evaluation_window_sec=300, scope_down_statement=public_links))
        self.web_acl = waf(
            self, "WebAcl", scope="REGIONAL", name=f"{name_prefix}-api",
            default_action=waf.DefaultActionProperty(allow={}), visibility_config=visibility(f"{name_prefix}-api"),
            rules=[waf.RuleProperty(name="download-rate", priority=0, action=waf.RuleActionProperty(block={}),
                                    visibility_config=visibility(f"{name_prefix}-download-rate"), statement=rate)])
        self.association = wafv2.CfnWebACLAssociation(self, "Association", resource_arn=stage.stage_arn,
                                                      web_acl_arn=self.web_acl.attr_arn)
