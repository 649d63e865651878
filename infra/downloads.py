"""The public download route's own function and its fences (the opt-out route's two
methods are answered by the same function, under the same throttle): ``functions/downloads``
(reserved concurrency from the topology, the API's walled login), the route's method
throttle (tighter than the stage's). The stage's WAF rate rule on these routes is
:class:`infra.firewall.ApiFirewall`'s.

The route itself (``GET /downloads/{token}``, no authorizer) and its grants (the link
signing secret, ``s3:GetObject`` on ``deliveries/``) are wired by :mod:`infra.delivery`.
"""

from __future__ import annotations

from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
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
