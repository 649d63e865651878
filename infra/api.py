"""The schedule owners' HTTP API: an API Gateway REST API (regional, proxy integration) in
front of ``functions/api``, guarded by a Lambda REQUEST authorizer.

The authorizer is Timekeeper's JWT authorizer for an OpenID Connect issuer (context
``timekeeper:jwtIssuer`` and ``timekeeper:jwtAudience``, or ``timekeeper:cognitoUserPool``:
:mod:`infra.authorizer`), or the operator's own (``timekeeper:authorizerFunctionArn``: a
function that verifies the caller's token and returns the claims ``user_id``,
``workspace_id`` and ``roles`` in its ``context``). With neither, a placeholder that denies
every request is deployed, so the API is never open by accident.
"""

from __future__ import annotations

from collections.abc import Sequence

from aws_cdk import Duration, Fn, RemovalPolicy
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra import settings
from infra.authorizer import JwtAuthorizerResources
from infra.downloads import DownloadFunction, download_method_options
from infra.firewall import ApiFirewall
from infra.functions import API, DatabaseAccess, TimekeeperFunction
from infra.nag import acknowledge
from infra.pipeline import PipelineResources
from infra.settings import JwtSettings
from infra.snapshots import SnapshotResources
from infra.work_queue import WorkQueueResources, grant_exports_get
from timekeeper.settings import (
    ENVIRONMENT_VARIABLE,
    FILES_BUCKET_VARIABLE,
    dead_letter_queue_arn_variable,
    run_queue_url_variable,
)
from timekeeper.topology import SNAPSHOTS

#: The API's functions/ folder.
API_FUNCTION = "api"
#: The deployment stage (the ``ApiUrl`` output ends with it).
API_STAGE = "v1"
#: How long API Gateway reuses an authorizer's answer for the same ``Authorization`` header
#: (seconds): the longest a token is still let in after it expired (besides the
#: authorizer's 30 s of clock skew). Each request past it invokes the authorizer again.
AUTHORIZER_CACHE_TTL_S = 30

_DENY_ALL = '''"""Placeholder authorizer: denies every request until the operator deploys with
timekeeper:authorizerFunctionArn pointing at an authorizer for their identity provider."""


def handler(event, context):
    return {"principalId": "nobody", "policyDocument": {"Version": "2012-10-17", "Statement": [
        {"Action": "execute-api:Invoke", "Effect": "Deny", "Resource": event["methodArn"]}]}}
'''


class PlaceholderAuthorizer(Construct):
    """A deny-all authorizer function (inline code, logs only)."""

    def __init__(self, scope: Construct, construct_id: str, *, log_retention: logs.RetentionDays):
        super().__init__(scope, construct_id)
        log_group = logs.LogGroup(self, "Logs", retention=log_retention)
        role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                        description="Timekeeper placeholder authorizer (deny all)")
        log_group.grant_write(role)
        self.function = lambda_.Function(
            self, "Function", runtime=lambda_.Runtime.PYTHON_3_12, handler="index.handler",
            code=lambda_.Code.from_inline(_DENY_ALL), role=role, log_group=log_group,
            timeout=Duration.seconds(5), memory_size=128,
            description="Timekeeper placeholder authorizer: denies every request")
        acknowledge(self.function, "AwsSolutions-L1",
                    "The placeholder runs on the same Python 3.12 as every Timekeeper function; it is "
                    "replaced by the operator's authorizer (timekeeper:authorizerFunctionArn).")


class HttpApi(Construct):
    """The REST API, its function and its authorizer.

    The function may publish to every pipeline's run queue ("Run now") and logs in to the
    database as the API (its own secret; row-level security applies); its reserved
    concurrency bounds its database connections (the topology's connection budget). API
    Gateway writes JSON access logs, error execution logs (both log groups with a
    retention) and X-Ray traces. API Gateway's account-wide CloudWatch role is a regional
    singleton: it is created only when ``manage_account_role`` (README.md, one-time setup).
    ``environment`` (``production`` | ``development``) says which snapshot types staff may
    request.
    """

    def __init__(self, scope: Construct, construct_id: str, *, layer: lambda_.ILayerVersion,
                 database: DatabaseAccess, pipelines: list[PipelineResources], log_retention: logs.RetentionDays,
                 authorizer_function_arn: str | None = None, jwt: JwtSettings | None = None,
                 manage_account_role: bool = False,
                 name_prefix: str = "timekeeper", work_queues: Sequence[WorkQueueResources] = (),
                 files_bucket: s3.IBucket | None = None, files_arn_export: str = "", environment: str = "production",
                 download_rate_limit: int | None = None, snapshots: SnapshotResources | None = None):
        super().__init__(scope, construct_id)
        variables = {run_queue_url_variable(r.pipeline.name): r.queues.queue.queue_url for r in pipelines}
        variables.update({r.work_queue.queue_url_variable: r.queues.queue.queue_url for r in work_queues})
        # The operations routes read and redrive every dead-letter queue (by the topology's
        # names: timekeeper.topology.dead_letter_queues): (queue, its dead-letter queue).
        dead_letters: dict[str, tuple[sqs.IQueue, sqs.IQueue]] = {
            **{r.pipeline.name: (r.queues.queue, r.queues.dead_letter_queue) for r in pipelines},
            **{r.work_queue.name: (r.queues.queue, r.queues.dead_letter_queue) for r in work_queues}}
        if snapshots is not None:
            dead_letters[SNAPSHOTS.name] = (snapshots.queue, snapshots.dead_letter_queue)
        # Which snapshot types staff may request (timekeeper.edge.registries.snapshot_types).
        variables[ENVIRONMENT_VARIABLE] = environment
        if files_bucket is not None:
            variables[FILES_BUCKET_VARIABLE] = files_bucket.bucket_name
        self.function = TimekeeperFunction(
            self, "Handler", folder=API_FUNCTION, layer=layer, database=database, login=API,
            timeout_s=settings.API_TIMEOUT_S, memory_mb=settings.API_MEMORY_MB, log_retention=log_retention,
            environment=variables, description="Timekeeper schedule owners' HTTP API")
        for resources in [*pipelines, *work_queues]:
            resources.queues.queue.grant_send_messages(self.function.role)
        for name, (queue, dlq) in dead_letters.items():
            self.watch_dead_letters(name, queue, dlq)
        if files_bucket is not None:
            # Its presigned download links carry its own rights: read under exports/ only.
            grant_exports_get(self.function.role, files_bucket, files_arn_export)

        #: The public download route's own function (wired to its route by infra.delivery).
        self.downloads = DownloadFunction(self, "Downloads", layer=layer, database=database,
                                          log_retention=log_retention,
                                          files_bucket_name=files_bucket.bucket_name if files_bucket else None,
                                          environment=environment).function
        #: The JWT authorizer and its user pool (None: another authorizer).
        self.jwt_authorizer: JwtAuthorizerResources | None = None
        if authorizer_function_arn:
            authorizer_function = lambda_.Function.from_function_attributes(
                self, "OperatorAuthorizer", function_arn=authorizer_function_arn, same_environment=True)
        elif jwt is not None:
            self.jwt_authorizer = JwtAuthorizerResources(self, "JwtAuthorizer", jwt=jwt, layer=layer,
                                                         log_retention=log_retention, name_prefix=name_prefix)
            authorizer_function = self.jwt_authorizer.function.function
        else:
            authorizer_function = PlaceholderAuthorizer(self, "PlaceholderAuthorizer",
                                                        log_retention=log_retention).function
        self.authorizer = apigw.RequestAuthorizer(
            self, "Authorizer", handler=authorizer_function,
            identity_sources=[apigw.IdentitySource.header("Authorization")],
            results_cache_ttl=Duration.seconds(AUTHORIZER_CACHE_TTL_S))

        access_logs = logs.LogGroup(self, "AccessLogs", retention=log_retention)
        self.api = apigw.LambdaRestApi(
            self, "Api", handler=self.function.function, proxy=True,
            rest_api_name=name_prefix,
            description="Timekeeper: schedule owners' routes",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            cloud_watch_role=manage_account_role,
            cloud_watch_role_removal_policy=RemovalPolicy.RETAIN if manage_account_role else None,
            default_method_options=apigw.MethodOptions(
                authorizer=self.authorizer, authorization_type=apigw.AuthorizationType.CUSTOM),
            deploy_options=apigw.StageOptions(
                stage_name=API_STAGE, tracing_enabled=True,
                throttling_rate_limit=settings.API_THROTTLE_RATE_RPS,
                throttling_burst_limit=settings.API_THROTTLE_BURST,
                method_options=download_method_options(),
                logging_level=apigw.MethodLoggingLevel.ERROR, data_trace_enabled=False,
                access_log_destination=apigw.LogGroupLogDestination(access_logs),
                access_log_format=apigw.AccessLogFormat.json_with_standard_fields(
                    caller=False, http_method=True, ip=True, protocol=True, request_time=True,
                    resource_path=True, response_length=True, status=True, user=False)),
        )

        # The execution log group API Gateway would create without a retention, created first.
        execution_logs = logs.LogGroup(
            self, "ExecutionLogs", retention=log_retention, removal_policy=RemovalPolicy.DESTROY,
            log_group_name=Fn.join("", ["API-Gateway-Execution-Logs_", self.api.rest_api_id,
                                        f"/{API_STAGE}"]))
        self.api.deployment_stage.node.add_dependency(execution_logs)
        #: The stage's WAF web ACL: managed rule groups and the public links' rate rule
        #: (None: the deployment opted out, timekeeper:waf=false).
        self.firewall = ApiFirewall(
            self, "Firewall", stage=self.api.deployment_stage, stage_name=API_STAGE, rate_limit=download_rate_limit,
            name_prefix=name_prefix, log_retention=log_retention) if download_rate_limit else None

        acknowledge(self.api, "AwsSolutions-APIG2",
                    "Requests are validated in the function by pydantic models (Powertools' resolver with "
                    "OpenAPI validation), the same models that generate the API's OpenAPI document.")
        acknowledge(self.api, "AwsSolutions-APIG3",
                    "Every route but the public link routes needs the authorizer; the stage and the public "
                    "methods are throttled, and a WAF web ACL guards the stage unless the deployment opts out "
                    "(timekeeper:waf=false, the lean profile's choice).")
        acknowledge(self.api, "AwsSolutions-COG4",
                    "Identity is the operator's identity provider behind a Lambda REQUEST authorizer, not "
                    "necessarily a Cognito user pool (README.md).")
        if manage_account_role:
            acknowledge(self.api, "AwsSolutions-IAM4[Policy::arn:<AWS::Partition>:iam::aws:policy/service-role/"
                                  "AmazonAPIGatewayPushToCloudWatchLogs]",
                        "API Gateway's account-wide logging role must use this AWS policy to write stage logs.")

    def watch_dead_letters(self, name: str, queue: sqs.IQueue, dlq: sqs.IQueue) -> None:
        """Let the operations routes read and redrive ``dlq`` (``queue``'s dead-letter queue,
        named ``name`` in :func:`timekeeper.topology.dead_letter_queues`): its ARN in the
        function's environment; its depth and a sample of its oldest messages; SQS's message
        move task back to ``queue``, which acts with the caller's rights (consume the DLQ,
        send to the queue)."""
        self.function.function.add_environment(dead_letter_queue_arn_variable(name), dlq.queue_arn)
        dlq.grant_consume_messages(self.function.role)
        dlq.grant(self.function.role, "sqs:StartMessageMoveTask", "sqs:ListMessageMoveTasks")
        queue.grant_send_messages(self.function.role)
