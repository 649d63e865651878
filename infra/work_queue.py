"""A queue-only worker of the topology (:class:`timekeeper.topology.WorkQueue`): a queue
with its dead-letter queue and the consumer reading it; requests are published by a
service (the API), not by a dispatcher.

The exports consumer may write (and abort multipart uploads) under ``exports/`` of the
files bucket and nothing else of it, send to its own queue (it re-offers exports whose
publish was refused), and log in to the database as the workers.
"""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.functions import DatabaseAccess, TimekeeperFunction
from infra.nag import acknowledge
from infra.pipeline import JobQueue
from timekeeper.settings import EXPORTS_PREFIX, FILES_BUCKET_VARIABLE
from timekeeper.topology import WorkQueue


def _acknowledge_prefix(role: iam.IRole, arn_export: str) -> None:
    acknowledge(role, f"AwsSolutions-IAM5[Resource::{arn_export}/{EXPORTS_PREFIX}*]",
                "Export objects are named by their export's id at run time; the grant is limited to the "
                "exports/ prefix of the files bucket and to the actions named beside it.")


def grant_exports_put(role: iam.IRole, bucket: s3.IBucket, arn_export: str) -> None:
    """Let ``role`` write objects (single or multipart) under ``exports/`` of ``bucket``
    (whose ARN the app stack imports as ``arn_export``)."""
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=["s3:PutObject", "s3:AbortMultipartUpload"],
        resources=[bucket.arn_for_objects(f"{EXPORTS_PREFIX}*")]))
    _acknowledge_prefix(role, arn_export)


def grant_exports_get(role: iam.IRole, bucket: s3.IBucket, arn_export: str) -> None:
    """Let ``role`` read objects under ``exports/`` of ``bucket`` (what its presigned URLs need)."""
    role.add_to_principal_policy(iam.PolicyStatement(
        actions=["s3:GetObject"], resources=[bucket.arn_for_objects(f"{EXPORTS_PREFIX}*")]))
    _acknowledge_prefix(role, arn_export)


class WorkQueueResources(Construct):
    """Queue, dead-letter queue and consumer of one work queue; every number from the
    topology (timeout, memory, batch size, maximum concurrency, receives, retention)."""

    def __init__(self, scope: Construct, construct_id: str, *, work_queue: WorkQueue,
                 layer: lambda_.ILayerVersion, database: DatabaseAccess, files_bucket: s3.IBucket,
                 files_arn_export: str, log_retention: logs.RetentionDays, name_prefix: str = "timekeeper"):
        super().__init__(scope, construct_id)
        self.work_queue = work_queue
        self.queues = JobQueue(self, "Queues", consumer=work_queue.consumer, name_prefix=name_prefix)
        def grants(consumer: TimekeeperFunction) -> None:
            grant_exports_put(consumer.role, files_bucket, files_arn_export)
            self.queues.queue.grant_send_messages(consumer.role)

        self.consumer = self.queues.built.build_consumer(
            self, "Consumer", layer=layer, database=database, log_retention=log_retention,
            environment={work_queue.queue_url_variable: self.queues.queue.queue_url,
                         FILES_BUCKET_VARIABLE: files_bucket.bucket_name},
            description=f"Timekeeper {work_queue.name} consumer", grants=grants)
        self.event_source = self.queues.built.event_source
