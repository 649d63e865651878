"""The report renderer: a function invoked asynchronously by the callers that request
renders (the API, delivery), its on-failure queue, and the grants it needs.

Every number comes from :data:`timekeeper.topology.REPORT_RENDERER`: the timeout, memory,
reserved concurrency (also its share of the connection budget) and the asynchronous
invocation's retry attempts and maximum event age. An event Lambda gives up on (every
attempt raised, or it waited past the maximum age) goes to the on-failure queue, whose
depth has an alarm (``infra.monitoring``).
"""

from __future__ import annotations

from aws_cdk import Duration, Fn
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_destinations as destinations
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra.functions import WORKER, DatabaseAccess, TimekeeperFunction
from infra.nag import acknowledge
from timekeeper.settings import FILES_BUCKET_VARIABLE, RENDERER_FUNCTION_VARIABLE, REPORTS_PREFIX
from timekeeper.topology import SQS, Renderer


def failure_queue_name(renderer: Renderer, name_prefix: str = "timekeeper") -> str:
    """The on-failure queue's name in a deployment whose names start with ``name_prefix``."""
    return f"{name_prefix}-{renderer.name}-failed"


class ReportRendererResources(Construct):
    """The renderer function (workers' login; ``s3:PutObject`` and ``s3:GetObject`` on
    ``reports/*`` of the files bucket and nothing else of it), its asynchronous-invoke
    settings and its on-failure queue (SQS-managed encryption, TLS only).

    ``files_bucket_name`` names the data stack's files bucket, ``files_bucket_arn_export``
    the export of its ARN (imported, so the grant's cdk-nag acknowledgment can cite it)."""

    def __init__(self, scope: Construct, construct_id: str, *, renderer: Renderer, layer: lambda_.ILayerVersion,
                 database: DatabaseAccess, files_bucket_name: str, files_bucket_arn_export: str,
                 log_retention: logs.RetentionDays,
                 name_prefix: str = "timekeeper"):
        super().__init__(scope, construct_id)
        self.renderer = renderer
        self._files_bucket_name = files_bucket_name
        self._reports_arn = Fn.join("", [Fn.import_value(files_bucket_arn_export), f"/{REPORTS_PREFIX}*"])
        self._reports_finding = f"AwsSolutions-IAM5[Resource::{files_bucket_arn_export}/{REPORTS_PREFIX}*]"
        self.failure_queue = sqs.Queue(
            self, "FailureQueue", queue_name=failure_queue_name(renderer, name_prefix),
            encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True,
            retention_period=Duration.days(renderer.failure_retention_days))
        acknowledge(self.failure_queue, "AwsSolutions-SQS3",
                    "This queue is the renderer's on-failure destination (where Lambda puts the events it "
                    "gave up on): it is itself the dead-letter queue, alarmed on depth.")
        self.function = TimekeeperFunction(
            self, "Renderer", folder=renderer.function, layer=layer, database=database, login=WORKER,
            timeout_s=renderer.timeout_s, memory_mb=renderer.memory_mb, log_retention=log_retention,
            environment={FILES_BUCKET_VARIABLE: files_bucket_name},
            description=f"Timekeeper report renderer (async, {renderer.retry_attempts} retries)")
        self.function.function.configure_async_invoke(
            retry_attempts=renderer.retry_attempts, max_event_age=Duration.seconds(renderer.max_event_age_s),
            on_failure=destinations.SqsDestination(self.failure_queue))
        self.function.lambda_services.add(SQS)  # Lambda sends failed events to the queue with its role
        self.function.role.add_to_policy(iam.PolicyStatement(
            sid="RenderedReports", actions=["s3:PutObject", "s3:GetObject"],
            resources=[self._reports_arn]))
        acknowledge(self.function.role, self._reports_finding,
                    "The renderer writes one object per render under reports/ (keys derived from the "
                    "renders' idempotency keys, unknown in advance); it may touch nothing else of the bucket.")

    def connect_caller(self, caller: TimekeeperFunction, *, downloads: bool) -> None:
        """Let ``caller`` request renders: ``lambda:InvokeFunction`` on the renderer only and
        the variables naming it and the files bucket; with ``downloads``, ``s3:GetObject``
        on ``reports/*`` too (its presigned links are signed with its own role)."""
        # The unqualified function only (CDK's grant_invoke would add every version and alias: ``:*``).
        caller.role.add_to_policy(iam.PolicyStatement(
            sid="RequestRenders", actions=["lambda:InvokeFunction"], resources=[self.function.function.function_arn]))
        caller.function.add_environment(RENDERER_FUNCTION_VARIABLE, self.function.function.function_name)
        caller.function.add_environment(FILES_BUCKET_VARIABLE, self._files_bucket_name)
        if downloads:
            caller.role.add_to_policy(iam.PolicyStatement(
                sid="RenderedReportDownloads", actions=["s3:GetObject"], resources=[self._reports_arn]))
            acknowledge(caller.role, self._reports_finding,
                        "Download links of rendered reports are presigned with this role: reading under "
                        "reports/ only (one object per render, keys unknown in advance).")
