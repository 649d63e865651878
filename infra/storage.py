"""The files bucket (exports and reports) and the notification topic (pause notices and
alarms)."""

from __future__ import annotations

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

#: Key prefix of exported files; objects under it expire (``timekeeper:exportRetentionDays``).
EXPORTS_PREFIX = "exports/"
#: How long the access logs of the files bucket are kept.
ACCESS_LOG_DAYS = 90


class FileBucket(Construct):
    """A private, encrypted, TLS-only bucket; files under ``exports/`` expire after
    ``export_retention_days``. Server access logs go to a second bucket of the same kind.
    ``retain`` keeps both buckets when the stack is deleted (otherwise they must be empty)."""

    def __init__(self, scope: Construct, construct_id: str, *, export_retention_days: int, retain: bool):
        super().__init__(scope, construct_id)
        removal = RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY
        common = {"encryption": s3.BucketEncryption.S3_MANAGED, "block_public_access": s3.BlockPublicAccess.BLOCK_ALL,
                  "enforce_ssl": True, "object_ownership": s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
                  "removal_policy": removal}
        self.access_logs = s3.Bucket(
            self, "AccessLogs", **common,
            lifecycle_rules=[s3.LifecycleRule(id="expire-access-logs", expiration=Duration.days(ACCESS_LOG_DAYS))])
        self.bucket = s3.Bucket(
            self, "Files", **common,
            server_access_logs_bucket=self.access_logs, server_access_logs_prefix="files/",
            lifecycle_rules=[
                s3.LifecycleRule(id="expire-exports", prefix=EXPORTS_PREFIX,
                                 expiration=Duration.days(export_retention_days)),
                s3.LifecycleRule(id="abort-incomplete-uploads",
                                 abort_incomplete_multipart_upload_after=Duration.days(1)),
            ])


class NotificationTopic(Construct):
    """The SNS topic for owner pause notices and every alarm, encrypted with a customer
    managed key (rotated) whose policy lets CloudWatch alarms publish. ``email`` adds an
    email subscription (confirmed by its recipient)."""

    def __init__(self, scope: Construct, construct_id: str, *, email: str | None = None):
        super().__init__(scope, construct_id)
        self.key = kms.Key(self, "Key", enable_key_rotation=True, description="Timekeeper notification topic",
                           removal_policy=RemovalPolicy.DESTROY)
        self.key.add_to_resource_policy(iam.PolicyStatement(
            principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
            actions=["kms:Decrypt", "kms:GenerateDataKey*"], resources=["*"]))
        self.topic = sns.Topic(self, "Topic", display_name="Timekeeper", master_key=self.key,
                               enforce_ssl=True)
        if email:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
