"""One pipeline of the topology: per dispatcher partition an EventBridge rule ticking a
reserved-concurrency-one dispatcher function, a run queue with its dead-letter queue, and
the consumer reading it.

Every number comes from the :class:`timekeeper.topology.Pipeline` passed in.
"""

from __future__ import annotations

from collections.abc import Callable

from aws_cdk import Duration
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_lambda_event_sources as sources
from aws_cdk import aws_logs as logs
from aws_cdk import aws_sns as sns
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from infra import settings
from infra.functions import WORKER, DatabaseAccess, TimekeeperFunction
from infra.nag import acknowledge
from timekeeper.settings import NOTIFICATION_TOPIC_VARIABLE, run_queue_url_variable
from timekeeper.topology import SQS, Pipeline, QueueConsumer, WorkQueue


def dispatcher_max_event_age_s(pipeline: Pipeline) -> int:
    """How long a throttled tick may wait before Lambda drops it: one rule period (at least
    Lambda's minimum of 60 s), since the next tick supersedes it."""
    return max(60, 60 * pipeline.rule_rate_minutes)


def partition_tick(index: int, partitions: int) -> events.RuleTargetInput:
    """The event a dispatcher partition's rule sends: the scheduled event itself (its id,
    time, account, region and resources) with ``detail`` ``{"partition": index,
    "partitions": partitions}``, so the one dispatcher code knows which share it claims."""
    return events.RuleTargetInput.from_object({
        "version": "0", "id": events.EventField.event_id, "detail-type": events.EventField.detail_type,
        "source": events.EventField.source, "account": events.EventField.account, "time": events.EventField.time,
        "region": events.EventField.region, "resources": events.EventField.from_path("$.resources"),
        "detail": {"partition": index, "partitions": partitions}})


def queue_names(consumer: QueueConsumer, name_prefix: str = "timekeeper") -> tuple[str, str]:
    """(queue, dead-letter queue) names of ``consumer`` in a deployment whose names start
    with ``name_prefix``; the default prefix gives the topology's names (the local stack's)."""
    return (name_prefix + consumer.queue_name.removeprefix("timekeeper"),
            name_prefix + consumer.dlq_name.removeprefix("timekeeper"))


class ConsumedQueue:
    """A :class:`~timekeeper.topology.QueueConsumer` built: its queue and dead-letter queue
    (created in ``scope`` as ``queue_id`` and ``DeadLetterQueue``), then
    :meth:`build_consumer` builds its consumer function and connects it with the SQS event
    source. Every queue consumer of the deployment (run queues, work queues, the snapshot
    job queue) is built here, from its description alone.

    Both queues: SQS-managed encryption, TLS-only policies; visibility timeout =
    ``consumer.visibility_timeout_s`` (6 x the consumer timeout), redrive after
    ``consumer.max_receive_count`` receives, DLQ kept ``consumer.dlq_retention_days`` days.
    Names from :func:`queue_names`."""

    def __init__(self, scope: Construct, *, consumer: QueueConsumer, name_prefix: str = "timekeeper",
                 queue_id: str = "Queue"):
        self.consumer = consumer
        queue_name, dlq_name = queue_names(consumer, name_prefix)
        self.dead_letter_queue = sqs.Queue(
            scope, "DeadLetterQueue", queue_name=dlq_name,
            encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True,
            retention_period=Duration.days(consumer.dlq_retention_days))
        self.queue = sqs.Queue(
            scope, queue_id, queue_name=queue_name,
            encryption=sqs.QueueEncryption.SQS_MANAGED, enforce_ssl=True,
            visibility_timeout=Duration.seconds(consumer.visibility_timeout_s),
            dead_letter_queue=sqs.DeadLetterQueue(queue=self.dead_letter_queue,
                                                  max_receive_count=consumer.max_receive_count))
        self.event_source: sources.SqsEventSource | None = None
        self.function: TimekeeperFunction | None = None

    def build_consumer(self, scope: Construct, construct_id: str, *, layer: lambda_.ILayerVersion,
                       database: DatabaseAccess, log_retention: logs.RetentionDays, description: str,
                       environment: dict[str, str] | None = None,
                       grants: Callable[[TimekeeperFunction], None] | None = None) -> TimekeeperFunction:
        """Build the consumer function in ``scope`` as ``construct_id`` (the description's
        folder, timeout, memory (default ``infra.settings.CONSUMER_MEMORY_MB``) and /tmp;
        the workers' database login; ``environment`` added), let ``grants`` give it what
        else it may do, then :meth:`attach` it. Returns the function."""
        c = self.consumer
        self.function = TimekeeperFunction(
            scope, construct_id, folder=c.function, layer=layer, database=database, login=WORKER,
            timeout_s=c.timeout_s, memory_mb=c.memory_mb or settings.CONSUMER_MEMORY_MB,
            ephemeral_storage_mb=c.ephemeral_storage_mb, log_retention=log_retention, environment=environment,
            description=f"{description} (max concurrency {c.max_concurrency})")
        if grants is not None:
            grants(self.function)
        self.attach(self.function.function)
        self.function.lambda_services.add(SQS)  # the event source polls with its role
        return self.function

    def attach(self, function: lambda_.IFunction) -> sources.SqsEventSource:
        """Connect ``function`` (the consumer's, ``consumer.function``) to the queue: batch
        size, batching window and maximum concurrency from the description, partial batch
        responses (ReportBatchItemFailures) on. Returns the event source."""
        c = self.consumer
        self.event_source = sources.SqsEventSource(
            self.queue, batch_size=c.batch_size,
            max_batching_window=Duration.seconds(c.max_batching_window_s) if c.max_batching_window_s else None,
            max_concurrency=c.max_concurrency, report_batch_item_failures=True)
        function.add_event_source(self.event_source)
        return self.event_source


class JobQueue(Construct):
    """The construct holding a pipeline's or a work queue's :class:`ConsumedQueue`
    (``.queue``, ``.dead_letter_queue``, ``.built``)."""

    def __init__(self, scope: Construct, construct_id: str, *, consumer: QueueConsumer,
                 name_prefix: str = "timekeeper"):
        super().__init__(scope, construct_id)
        self.built = ConsumedQueue(self, consumer=consumer, name_prefix=name_prefix)
        self.queue = self.built.queue
        self.dead_letter_queue = self.built.dead_letter_queue


class PipelineResources(Construct):
    """Rules and dispatchers (one each per partition), queues and consumer of one pipeline.

    Every dispatcher partition may send to its run queue and publish notifications; the consumer
    receives from the queue (granted by the event source). Both log in to the database as
    the workers (their secret only).
    """

    def __init__(self, scope: Construct, construct_id: str, *, pipeline: Pipeline, layer: lambda_.ILayerVersion,
                 database: DatabaseAccess, topic: sns.ITopic, log_retention: logs.RetentionDays,
                 name_prefix: str = "timekeeper"):
        super().__init__(scope, construct_id)
        self.pipeline = pipeline
        self.queues = JobQueue(self, "Queues", consumer=pipeline.consumer, name_prefix=name_prefix)

        #: One function per dispatcher partition (reserved concurrency 1 each), each ticked by
        #: its own rule whose event names the partition; partition 0 keeps the construct ids
        #: of the unpartitioned dispatcher.
        self.dispatchers: list[TimekeeperFunction] = []
        self.rules: list[events.Rule] = []
        for index in pipeline.partitions:
            suffix = str(index) if index else ""
            dispatcher = TimekeeperFunction(
                self, f"Dispatcher{suffix}", folder=pipeline.dispatcher_function, layer=layer, database=database,
                login=WORKER, timeout_s=pipeline.dispatcher_timeout_s, memory_mb=settings.DISPATCHER_MEMORY_MB,
                log_retention=log_retention,
                environment={run_queue_url_variable(pipeline.name): self.queues.queue.queue_url,
                             NOTIFICATION_TOPIC_VARIABLE: topic.topic_arn},
                description=f"Timekeeper {pipeline.name} dispatcher, partition {index} of "
                            f"{pipeline.dispatch_partitions} (rate {pipeline.rule_rate_minutes} min)")
            dispatcher.function.configure_async_invoke(
                retry_attempts=0, max_event_age=Duration.seconds(dispatcher_max_event_age_s(pipeline)))
            self.queues.queue.grant_send_messages(dispatcher.role)
            topic.grant_publish(dispatcher.role)
            acknowledge(dispatcher.role, "AwsSolutions-IAM5[Action::kms:GenerateDataKey*]",
                        "Publishing to the encrypted topic needs a data key (SNS asks publishers for "
                        "kms:GenerateDataKey* and kms:Decrypt); the grant names only the topic's key.")
            self.dispatchers.append(dispatcher)
            self.rules.append(events.Rule(
                self, f"Schedule{suffix}",
                description=f"Timekeeper {pipeline.name}: one pass of dispatcher partition {index} per tick",
                schedule=events.Schedule.rate(Duration.minutes(pipeline.rule_rate_minutes)),
                targets=[targets.LambdaFunction(
                    dispatcher.function, retry_attempts=0,
                    max_event_age=Duration.seconds(dispatcher_max_event_age_s(pipeline)),
                    event=partition_tick(index, pipeline.dispatch_partitions))],
            ))
        self.dispatcher = self.dispatchers[0]
        self.rule = self.rules[0]

        self.consumer = self.queues.built.build_consumer(
            self, "Consumer", layer=layer, database=database, log_retention=log_retention,
            description=f"Timekeeper {pipeline.name} consumer")
        self.event_source = self.queues.built.event_source
        if pipeline.capped_work_kinds:
            # a run the per-workspace cap holds back is released as a delayed copy of its
            # message (the received one acknowledged): the consumer sends to its own queue
            self.consumer.function.add_environment(run_queue_url_variable(pipeline.name),
                                                   self.queues.queue.queue_url)
            self.queues.queue.grant_send_messages(self.consumer.role)

    def sweep(self, work_queue: WorkQueue, queue: sqs.IQueue) -> None:
        """Let the owner-wide dispatcher (partition 0, which runs the owner's maintenance
        tasks) offer ``work_queue``'s unpublished requests again: ``queue``'s URL in its
        environment and the right to send to it."""
        self.dispatcher.function.add_environment(work_queue.queue_url_variable, queue.queue_url)
        queue.grant_send_messages(self.dispatcher.role)
