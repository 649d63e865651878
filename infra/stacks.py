"""The stacks: ``TimekeeperData`` (stateful: network, database, files bucket, the links'
signing keys) and
``TimekeeperApp`` (stateless: layer, topic, one set of resources per pipeline of
:data:`timekeeper.topology.PIPELINES`, migration trigger, alarms, dashboard).

:func:`build` is the whole app; ``app.py`` and the infra tests both call it, so the tests
synthesize exactly what deploys.
"""

from __future__ import annotations

from dataclasses import dataclass

from aws_cdk import Annotations, App, CfnOutput, CfnResource, Duration, Fn, RemovalPolicy, Stack, triggers
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_s3 as s3
from cdk_nag import AwsSolutionsChecks
from constructs import Construct

from infra import settings
from infra.api import API_FUNCTION, HttpApi
from infra.console import ConsoleResources
from infra.database import AuroraDatabase, Network, existing_access
from infra.delivery import DeliveryResources, link_signing_key
from infra.functions import OWNER, DatabaseAccess, TimekeeperFunction, check_grants
from infra.layer import SharedLayer
from infra.mail import MailResources, MessageEventsResources
from infra.monitoring import Monitoring
from infra.nag import attach_checks
from infra.pipeline import PipelineResources
from infra.renderer import ReportRendererResources
from infra.settings import DeploymentConfig
from infra.snapshots import SnapshotResources
from infra.storage import FileBucket, NotificationTopic
from infra.work_queue import WorkQueueResources
from timekeeper.settings import LOGIN_SECRET_ARNS_VARIABLE, REPORT_RETENTION_DAYS_VARIABLE
from timekeeper.topology import (
    MESSAGE_EVENTS_NAME,
    PIPELINES,
    QUERIES,
    REPORT_RENDERER,
    SNAPSHOTS,
    WORK_QUEUES,
    required_account_concurrency,
)

DATA_STACK = "TimekeeperData"
APP_STACK = "TimekeeperApp"


def keep_provider_logs(stack: Stack, retention: logs.RetentionDays) -> list[logs.LogGroup]:
    """Give every Lambda of ``stack`` that names no log group (CDK's custom resource
    providers: the trigger's, the VPC default security group's) its ``/aws/lambda/<name>``
    log group with ``retention``, created before any custom resource of the stack runs (so
    Lambda never creates it without a retention first). Call once the stack is complete."""
    found = [c for c in stack.node.find_all() if isinstance(c, CfnResource)]
    functions = [c for c in found if c.cfn_resource_type == "AWS::Lambda::Function"
                 and not (isinstance(c, lambda_.CfnFunction) and c.logging_config is not None)]
    custom = [c for c in found if c.cfn_resource_type.startswith("Custom::")
              or c.cfn_resource_type == "AWS::CloudFormation::CustomResource"]
    groups = []
    for function in functions:
        group = logs.LogGroup(function.node.scope, f"{function.node.id}Logs", retention=retention,
                              removal_policy=RemovalPolicy.DESTROY,
                              log_group_name=Fn.join("", ["/aws/lambda/", function.ref]))
        for resource in custom:
            resource.node.add_dependency(group)
        groups.append(group)
    return groups


class DataStack(Stack):
    """Stateful resources: the files bucket, the links' signing keys and, unless an existing
    database is configured, the VPC with its endpoints and Aurora behind RDS Proxy."""

    def __init__(self, scope: Construct, construct_id: str, *, config: DeploymentConfig, **kwargs):
        super().__init__(scope, construct_id, description="Timekeeper: network, database, files", **kwargs)
        self.files = FileBucket(self, "Files", export_retention_days=config.export_retention_days,
                                delivery_retention_days=config.delivery_retention_days,
                                report_retention_days=config.report_retention_days,
                                retain=config.deletion_protection)
        self.database: AuroraDatabase | None = None
        self.network: Network | None = None
        if config.existing_database is None:
            network = self.network = Network(self, "Network", log_retention=config.log_retention,
                                             egress=config.egress)
            self.database = AuroraDatabase(self, "Database", network=network, reader=config.database_reader,
                                           deletion_protection=config.deletion_protection,
                                           log_retention=config.log_retention, name_prefix=config.name_prefix)
            CfnOutput(self, "ProxyEndpoint", value=self.database.proxy.endpoint)
            CfnOutput(self, "DatabaseSecretArn", value=self.database.secret.secret_arn)
        #: The download and opt-out links' signing keys: state that outlives the App stack.
        self.link_secret = link_signing_key(self, "LinkSigningKey", retain=config.deletion_protection)
        CfnOutput(self, "FilesBucketName", value=self.files.bucket.bucket_name)
        # Exported under a name of our own, so the functions' grants on key prefixes of it
        # (the renderer's reports/*) name one stable value their cdk-nag acknowledgments can cite.
        self.files_bucket_arn_export = f"{self.stack_name}-FilesBucketArn"
        CfnOutput(self, "FilesBucketArn", value=self.files.bucket.bucket_arn, export_name=self.files_bucket_arn_export)
        keep_provider_logs(self, config.log_retention)

    @property
    def files_bucket(self) -> s3.IBucket:
        """The files bucket (exports expire under ``exports/``)."""
        return self.files.bucket


class AppStack(Stack):
    """Stateless resources built from the topology: for every pipeline a rule, dispatcher,
    run queue, dead-letter queue, consumer and its alarms; for every work queue (exports) its
    queue, dead-letter queue, consumer and alarms; the report renderer with its on-failure
    queue; the layer; the notification topic;
    the HTTP API (when functions/api exists); the migration trigger (which runs before any
    rule, consumer or API function exists); the dashboard."""

    def __init__(self, scope: Construct, construct_id: str, *, config: DeploymentConfig, data: DataStack,
                 **kwargs):
        super().__init__(scope, construct_id, description="Timekeeper: pipelines, layer, alarms", **kwargs)
        database = (data.database.access() if data.database is not None
                    else existing_access(self, config.existing_database))  # type: ignore[arg-type]
        self.layer = SharedLayer(self, "SharedLayer", bundle=config.bundle_layer).layer
        notifications = NotificationTopic(self, "Notifications", email=config.alarm_email,
                                          name_prefix=config.name_prefix)
        self.topic = notifications.topic

        self.pipelines = [
            PipelineResources(self, f"Pipeline-{pipeline.name}", pipeline=pipeline, layer=self.layer,
                              database=database, topic=self.topic, log_retention=config.log_retention,
                              name_prefix=config.name_prefix)
            for pipeline in PIPELINES.values()
        ]
        self.snapshots = SnapshotResources(self, "Snapshots", pipeline=SNAPSHOTS, layer=self.layer, database=database,
                                           log_retention=config.log_retention, environment=config.environment,
                                           name_prefix=config.name_prefix)
        self.renderer = ReportRendererResources(
            self, "ReportRenderer", renderer=REPORT_RENDERER, layer=self.layer, database=database,
            files_bucket_name=data.files_bucket.bucket_name,
            files_bucket_arn_export=data.files_bucket_arn_export,
            log_retention=config.log_retention, name_prefix=config.name_prefix)
        files = s3.Bucket.from_bucket_attributes(self, "FilesBucket",
                                                 bucket_arn=Fn.import_value(data.files_bucket_arn_export),
                                                 bucket_name=data.files_bucket.bucket_name)
        self.work_queues = [
            WorkQueueResources(self, f"WorkQueue-{queue.name}", work_queue=queue, layer=self.layer,
                               database=database, files_bucket=files, files_arn_export=data.files_bucket_arn_export,
                               log_retention=config.log_retention, name_prefix=config.name_prefix)
            for queue in WORK_QUEUES.values()
        ]
        by_name = {resources.pipeline.name: resources for resources in self.pipelines}
        for resources in self.work_queues:
            if resources.work_queue.swept_by is not None:
                by_name[resources.work_queue.swept_by].sweep(resources.work_queue, resources.queues.queue)
        if REPORT_RENDERER.swept_by is not None:
            # the renders' sweep (partition 0's owner-wide pass) asks for unfinished renders
            # again; every partition runs the same code, so each may invoke the renderer
            for dispatcher in by_name[REPORT_RENDERER.swept_by].dispatchers:
                self.renderer.connect_caller(dispatcher, downloads=False)
        self.api: HttpApi | None = None
        if (settings.FUNCTIONS_DIR / API_FUNCTION / "handler.py").is_file():
            self.api = HttpApi(self, "Api", layer=self.layer, database=database, pipelines=self.pipelines,
                               log_retention=config.log_retention,
                               authorizer_function_arn=config.authorizer_function_arn, jwt=config.jwt,
                               manage_account_role=config.manage_api_gateway_account,
                               name_prefix=config.name_prefix, work_queues=self.work_queues,
                               files_bucket=files, files_arn_export=data.files_bucket_arn_export,
                               environment=config.environment, download_rate_limit=config.download_rate_limit,
                               snapshots=self.snapshots)
            CfnOutput(self, "ApiUrl", value=self.api.api.url)
            # Renders past the files bucket's retention are told as expired (no link S3 would refuse).
            self.api.function.function.add_environment(REPORT_RETENTION_DAYS_VARIABLE,
                                                       str(config.report_retention_days))
            self.renderer.connect_caller(self.api.function, downloads=True)
        #: The deployed console and its sign-in (None: not deployed).
        self.console: ConsoleResources | None = None
        if self.api is not None and config.console is not None and config.jwt is not None:
            self.console = ConsoleResources(self, "Console", api=self.api, console=config.console, jwt=config.jwt)
            CfnOutput(self, "ConsoleCallbackUrl", value=self.console.redirect_uri)
        queries = next(r for r in self.pipelines if r.pipeline.name == QUERIES.name)
        self.mail = MailResources(self, "Mail", mail=config.mail, name_prefix=config.name_prefix,
                                  retain=config.deletion_protection)
        CfnOutput(self, "MessageEventsTopicArn", value=self.mail.events.topic_arn)
        self.message_events = MessageEventsResources(self, "MessageEvents", mail=self.mail, layer=self.layer,
                                                     database=database, log_retention=config.log_retention,
                                                     name_prefix=config.name_prefix)
        if self.api is not None:
            self.api.watch_dead_letters(MESSAGE_EVENTS_NAME, self.message_events.queues.queue,
                                        self.message_events.queues.dead_letter_queue)
        self.delivery = DeliveryResources(self, "Delivery", pipeline=queries, renderer=self.renderer, api=self.api,
                                          files_bucket_name=data.files_bucket.bucket_name,
                                          files_bucket_arn_export=data.files_bucket_arn_export,
                                          mail=self.mail, link_secret=data.link_secret)
        self.migrate = self._migration_trigger(database, config)
        self.monitoring = Monitoring(self, "Monitoring", pipelines=self.pipelines, topic=self.topic,
                                     name_prefix=config.name_prefix, snapshots=self.snapshots,
                                     renderer=self.renderer, work_queues=self.work_queues,
                                     delivery=self.delivery, api=self.api, database=data.database,
                                     mail=self.mail, network=data.network, message_events=self.message_events)
        CfnOutput(self, "NotificationTopicArn", value=self.topic.topic_arn)
        CfnOutput(self, "DashboardName", value=self.monitoring.dashboard.dashboard_name)
        for resources in self.pipelines:
            CfnOutput(self, f"DeadLetterQueueUrl{resources.pipeline.name.title()}",
                      value=resources.queues.dead_letter_queue.queue_url)
        for queue_resources in self.work_queues:
            CfnOutput(self, f"DeadLetterQueueUrl{queue_resources.work_queue.name.title()}",
                      value=queue_resources.queues.dead_letter_queue.queue_url)
        CfnOutput(self, "DeadLetterQueueUrlSnapshots", value=self.snapshots.dead_letter_queue.queue_url)
        CfnOutput(self, "DeadLetterQueueUrlMessageEvents",
                  value=self.message_events.queues.dead_letter_queue.queue_url)
        if not config.reserved_concurrency:
            Annotations.of(self).add_warning_v2(
                "timekeeper:noReservedConcurrency",
                f"{DeploymentConfig.KEY_RESERVED_CONCURRENCY}=false: no function reserves concurrency, so the "
                f"account's quota alone bounds them (and their database connections). Raise the quota to "
                f"{required_account_concurrency()} and deploy without the setting (docs/deploy.md).")
        if not config.alarm_email:
            Annotations.of(self).add_warning_v2(
                "timekeeper:noAlarmSubscriber",
                f"The notification topic has no subscriber: alarms will notify nobody. Deploy with "
                f"-c {DeploymentConfig.KEY_ALARM_EMAIL}=<address>, or subscribe to the NotificationTopicArn output.")
        keep_provider_logs(self, config.log_retention)

    def _migration_trigger(self, database: DatabaseAccess, config: DeploymentConfig) -> TimekeeperFunction:
        logins = [database.worker_secret, database.api_secret]
        migrate = TimekeeperFunction(
            self, "Migrate", folder=settings.MIGRATE_FUNCTION, layer=self.layer, database=database, login=OWNER,
            timeout_s=settings.MIGRATE_TIMEOUT_S, memory_mb=settings.MIGRATE_MEMORY_MB,
            log_retention=config.log_retention, description="Timekeeper migrations (CDK trigger on deploy)",
            environment={LOGIN_SECRET_ARNS_VARIABLE: Fn.join(",", [secret.secret_arn for secret in logins])})
        # It sets the workers' and the API's passwords from their secrets (the owner's rights).
        for secret in logins:
            secret.grant_read(migrate.role)
        trigger = triggers.Trigger(
            self, "MigrateOnDeploy", handler=migrate.function, execute_on_handler_change=True,
            invocation_type=triggers.InvocationType.REQUEST_RESPONSE,
            timeout=Duration.seconds(settings.MIGRATE_TIMEOUT_S))
        # Rules and event sources start only once the schema they need exists.
        trigger.execute_before(*[rule for r in self.pipelines for rule in r.rules],
                               *[r.consumer for r in self.pipelines],
                               *[r.consumer for r in self.work_queues], self.message_events.consumer,
                               *self.snapshots.rules, self.snapshots.job, self.renderer.function,
                               *([self.api.function] if self.api else []))
        return migrate


@dataclass
class Stacks:
    """The synthesizable app: its stacks and the cdk-nag pack attached to it."""

    data: DataStack
    app: AppStack
    checks: AwsSolutionsChecks


def build(app: App) -> Stacks:
    """Build every stack of Timekeeper into ``app`` and attach cdk-nag's AwsSolutions pack.

    The stacks are environment-agnostic (account and region come from the deploying
    credentials), so synthesis makes no AWS call and needs no cdk.context.json. With the
    context ``timekeeper:stage`` the stack names end with ``-<stage>`` and every physical
    name starts with ``timekeeper-<stage>``, so several deployments share an account.
    Raises ``ValueError`` when a function's grants and its topology declaration of the AWS
    services it calls disagree (:func:`infra.functions.check_grants`).
    """
    config = DeploymentConfig.from_node(app.node)
    data = DataStack(app, config.stack_name(DATA_STACK), config=config)
    application = AppStack(app, config.stack_name(APP_STACK), config=config, data=data)
    check_grants(application)
    checks = attach_checks(app)
    return Stacks(data=data, app=application, checks=checks)
