"""The files bucket (exports, reports, delivered files) and the notification topic (pause
notices and alarms)."""

from __future__ import annotations

from aws_cdk import Aws, Duration, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sns_subscriptions as subscriptions
from constructs import Construct

from timekeeper.settings import DEFAULT_REPORT_RETENTION_DAYS, DELIVERIES_PREFIX, EXPORTS_PREFIX, REPORTS_PREFIX

# The files bucket's prefixes are timekeeper.settings' (the code writing the objects reads
# the same ones): objects under EXPORTS_PREFIX expire (``timekeeper:exportRetentionDays``),
# under DELIVERIES_PREFIX too (``timekeeper:deliveryRetentionDays``), and rendered reports
# under REPORTS_PREFIX (``timekeeper:reportRetentionDays``): a PDF holds the workspace's
# data (members' names and amounts), and a delivered report's links point at its render's
# object, so a render outlives the longest link as a delivered file does.
#: The longest lifetime of a delivery's signed link (a schedule's ``link_ttl_hours`` is at
#: most 720), in days.
LINK_MAX_LIFETIME_DAYS = 30
#: Delivered files outlive their longest link by at least this: a link's lifetime starts
#: when its message is sent, which can be up to 4.5 hours (3 receives x 5,400 s) after the
#: file was written, and S3 counts whole days from the object's creation.
DELIVERY_RETENTION_MARGIN_DAYS = 1
#: The default retention of delivered files (days).
DELIVERY_RETENTION_DAYS = 35
#: The default retention of rendered reports (days): a delivered report's links point at
#: its render's object and live up to LINK_MAX_LIFETIME_DAYS, so renders are kept as long
#: as delivered files (the same margin); a person who wants an older render renders again.
REPORT_RETENTION_DAYS = DEFAULT_REPORT_RETENTION_DAYS
#: How long the access logs of the files bucket are kept.
ACCESS_LOG_DAYS = 90


class FileBucket(Construct):
    """A private, encrypted, TLS-only bucket; files under ``exports/`` expire after
    ``export_retention_days``, files under ``deliveries/`` after ``delivery_retention_days``
    and rendered reports under ``reports/`` after ``report_retention_days`` (both longer than
    a delivery link lives: ``ValueError`` otherwise). Server access logs go to a second
    bucket of the same kind. ``retain`` keeps both buckets when the stack is deleted
    (otherwise they must be empty)."""

    def __init__(self, scope: Construct, construct_id: str, *, export_retention_days: int, retain: bool,
                 delivery_retention_days: int = DELIVERY_RETENTION_DAYS,
                 report_retention_days: int = REPORT_RETENTION_DAYS):
        shortest = LINK_MAX_LIFETIME_DAYS + DELIVERY_RETENTION_MARGIN_DAYS
        if min(delivery_retention_days, report_retention_days) < shortest:
            raise ValueError(f"delivered files and rendered reports must outlive their links: at least "
                             f"{shortest} days")
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
                s3.LifecycleRule(id="expire-deliveries", prefix=DELIVERIES_PREFIX,
                                 expiration=Duration.days(delivery_retention_days)),
                s3.LifecycleRule(id="expire-reports", prefix=REPORTS_PREFIX,
                                 expiration=Duration.days(report_retention_days)),
                s3.LifecycleRule(id="abort-incomplete-uploads",
                                 abort_incomplete_multipart_upload_after=Duration.days(1)),
            ])


def alarm_arn_pattern(name_prefix: str) -> str:
    """The ARN pattern of this deployment's CloudWatch alarms (their names start with the
    capitalized ``name_prefix``, e.g. ``Timekeeper-``), in the deploying account and region."""
    return (f"arn:{Aws.PARTITION}:cloudwatch:{Aws.REGION}:{Aws.ACCOUNT_ID}:alarm:"
            f"{name_prefix.capitalize()}-*")


class NotificationTopic(Construct):
    """The SNS topic for owner pause notices and every alarm, encrypted with a customer
    managed key (rotated). The topic policy replaces SNS's default one, so it states every
    publisher besides the functions' roles: CloudWatch alarms of this account whose names
    start with the deployment's prefix (``aws:SourceAccount`` and ``aws:SourceArn``); the
    key's policy lets the same alarms encrypt. ``email`` adds an email subscription
    (confirmed by its recipient)."""

    def __init__(self, scope: Construct, construct_id: str, *, email: str | None = None,
                 name_prefix: str = "timekeeper"):
        super().__init__(scope, construct_id)
        alarms = {"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                  "ArnLike": {"aws:SourceArn": alarm_arn_pattern(name_prefix)}}
        self.key = kms.Key(self, "Key", enable_key_rotation=True, description="Timekeeper notification topic",
                           removal_policy=RemovalPolicy.DESTROY)
        self.key.add_to_resource_policy(iam.PolicyStatement(
            sid="CloudWatchAlarmsEncrypt", principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
            actions=["kms:Decrypt", "kms:GenerateDataKey*"], resources=["*"], conditions=alarms))
        self.topic = sns.Topic(self, "Topic", display_name="Timekeeper", master_key=self.key,
                               enforce_ssl=True)
        self.topic.add_to_resource_policy(iam.PolicyStatement(
            sid="CloudWatchAlarmsPublish", principals=[iam.ServicePrincipal("cloudwatch.amazonaws.com")],
            actions=["sns:Publish"], resources=[self.topic.topic_arn], conditions=alarms))
        if email:
            self.topic.add_subscription(subscriptions.EmailSubscription(email))
