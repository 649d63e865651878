"""The local AWS: moto (in-process, or a server on loopback) with the queues, dead-letter queues and the
notification topic the topology describes (the same redrive policy and visibility
timeout the CDK stacks deploy), the work queues (exports) and the files bucket."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import boto3

from timekeeper import settings as names
from timekeeper.topology import (
    MESSAGE_EVENTS,
    MESSAGE_EVENTS_NAME,
    PIPELINES,
    SNAPSHOTS,
    WORK_QUEUES,
    Pipeline,
    QueueConsumer,
    SnapshotPipeline,
    WorkQueue,
)

REGION = "us-east-1"
#: The local files bucket (exports and rendered reports); the edge reads it from ``FILES_BUCKET``.
FILES_BUCKET_NAME = "timekeeper-files"
#: Scheduled delivery locally: the (moto-verified) sender, the development link signing key
#: (never a deployment's: AWS reads it from Secrets Manager) and the links' base URL.
MAIL_SENDER = "reports@timekeeper.local"
LOCAL_LINK_SIGNING_KEY = "timekeeper-local-development-link-signing-key"
LOCAL_DOWNLOAD_BASE_URL = "http://127.0.0.1:8080/"


@dataclass(frozen=True)
class QueuePair:
    """A queue of the topology and its dead-letter queue (URLs and ARNs): a pipeline's run
    queue, the snapshot pipeline's job queue or a work queue (``pipeline`` says which;
    ``pipeline.consumer`` describes the queue and its consumer)."""

    pipeline: Pipeline | SnapshotPipeline | WorkQueue | QueueConsumer
    url: str
    arn: str
    dlq_url: str
    dlq_arn: str


@dataclass
class LocalAws:
    """A running moto server and the resources created in it."""

    endpoint: str
    queues: dict[str, QueuePair]
    topic_arn: str
    server: object | None = None
    files_bucket: str = ""
    mock: object | None = None
    #: The work queues (no dispatcher), by name.
    work_queues: dict[str, QueuePair] = field(default_factory=dict)
    #: The message-events queue and the topic standing for the configuration set's
    #: event destination (the local mailer publishes SES-shaped events there).
    message_events: QueuePair | None = None
    message_events_topic_arn: str = ""

    def client(self, service: str):
        """A boto3 client for ``service`` against the local AWS."""
        if self.endpoint:
            return boto3.client(service, endpoint_url=self.endpoint, region_name=REGION,
                                aws_access_key_id="local", aws_secret_access_key="local")
        return boto3.client(service, region_name=REGION)

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.mock is not None:
            self.mock.stop()
            self.mock = None


def _set_fake_credentials() -> None:
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    os.environ.setdefault("AWS_DEFAULT_REGION", REGION)
    os.environ.setdefault("AWS_REGION", REGION)


def create_pipeline_queues(sqs, pipeline: Pipeline | SnapshotPipeline | WorkQueue | QueueConsumer) -> QueuePair:
    """Create the DLQ (its retention) and the queue (redrive and visibility) of ``pipeline``'s
    queue consumer (:class:`timekeeper.topology.QueueConsumer`) with ``sqs``: a pipeline's
    run queue, the snapshot job queue, a work queue or a bare consumer (the message-events
    queue); idempotent."""
    consumer = pipeline if isinstance(pipeline, QueueConsumer) else pipeline.consumer
    dlq_url = sqs.create_queue(QueueName=consumer.dlq_name, Attributes={
        "MessageRetentionPeriod": str(consumer.dlq_retention_days * 86400)})["QueueUrl"]
    dlq_arn = sqs.get_queue_attributes(QueueUrl=dlq_url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    url = sqs.create_queue(QueueName=consumer.queue_name, Attributes={
        "VisibilityTimeout": str(consumer.visibility_timeout_s),
        "RedrivePolicy": json.dumps({"deadLetterTargetArn": dlq_arn, "maxReceiveCount": consumer.max_receive_count}),
    })["QueueUrl"]
    arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"]["QueueArn"]
    return QueuePair(pipeline, url, arn, dlq_url, dlq_arn)


#: The local stand-in of the configuration set's event topic.
MESSAGE_EVENTS_TOPIC = "timekeeper-message-events"


def create_message_events(sqs, sns) -> tuple[str, QueuePair]:
    """The message-events topic and its queue (:data:`timekeeper.topology.MESSAGE_EVENTS`),
    subscribed with raw message delivery as infra subscribes it: ``(topic ARN, queues)``;
    idempotent."""
    queues = create_pipeline_queues(sqs, MESSAGE_EVENTS)
    topic_arn = sns.create_topic(Name=MESSAGE_EVENTS_TOPIC)["TopicArn"]
    sns.subscribe(TopicArn=topic_arn, Protocol="sqs", Endpoint=queues.arn,
                  Attributes={"RawMessageDelivery": "true"})
    return topic_arn, queues


class _QueueAttributes(Mapping):
    """moto's ``Queue.attributes`` (every attribute of an SQS queue by its API name), each
    computed when it is read. moto computes the whole dictionary for each use, and its
    ``ApproximateNumberOfMessages*`` count the whole queue reading the clock per message;
    it uses the dictionary for one attribute on every message sent (``ContentBasedDeduplication``)
    and three times for every message a receive returns (``MessageRetentionPeriod``), so a
    queue of thousands took minutes to fill or drain. The values are moto's own: the queue's
    attribute by its snake-case name, booleans as ``"true"``/``"false"``, the redrive policy
    as JSON; FIFO attributes on a FIFO queue, KMS attributes on an encrypted one."""

    def __init__(self, queue: Any) -> None:
        self._queue = queue
        names = list(queue.BASE_ATTRIBUTES)
        if queue.fifo_queue:
            names += queue.FIFO_ATTRIBUTES
        if queue.kms_master_key_id:
            names += queue.KMS_ATTRIBUTES
        self._names = list(dict.fromkeys(names))

    def __getitem__(self, name: str) -> Any:
        from moto.core.utils import camelcase_to_underscores

        if name not in self._names:
            raise KeyError(name)
        if name == "RedrivePolicy" and self._queue.redrive_policy:
            return json.dumps(self._queue.redrive_policy)
        value = getattr(self._queue, camelcase_to_underscores(name))
        return str(value).lower() if isinstance(value, bool) else value

    def __contains__(self, name: object) -> bool:
        return name in self._names

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)


def _visible_messages(queue: Any) -> list[Any]:
    """moto's ``Queue.messages`` (the messages visible and not delayed, in arrival order)
    with one reading of the clock for the whole queue: moto reads it twice per message, and
    every receive of up to 10 messages reads the whole list, so a receive from a queue of
    10,000 messages cost 20,000 clock readings."""
    from moto.core.utils import unix_time_millis

    now = unix_time_millis()
    return [m for m in queue._messages if now > m.visible_at and not now < m.delayed_until]


def install_fast_queue_attributes() -> None:
    """Make moto's SQS queues compute an attribute when it is read (:class:`_QueueAttributes`)
    and list their visible messages with one clock reading (:func:`_visible_messages`);
    idempotent. The local stack's queues answer as before (``GetQueueAttributes`` gives the
    same values, a receive the same messages), and a send or receive no longer walks the
    whole queue per message."""
    from moto.sqs.models import Queue

    Queue.attributes = property(_QueueAttributes)
    Queue.messages = property(_visible_messages)


def start_local_aws(*, server: bool = False, port: int = 0) -> LocalAws:
    """Start moto, create every pipeline's queues, the snapshot job queue, every work queue,
    the message-events topic and queue, the notification topic and the files bucket, and
    point this process's AWS SDK at it (fake credentials, ``RUN_QUEUE_URL_<PIPELINE>``,
    ``SNAPSHOT_JOB_QUEUE_URL``, ``WORK_QUEUE_URL_<QUEUE>``, ``DEAD_LETTER_QUEUE_ARN_<QUEUE>``,
    ``NOTIFICATION_TOPIC_ARN``, ``FILES_BUCKET``, ``MAIL_SENDER``, ``LINK_SIGNING_KEY`` and
    ``DOWNLOAD_BASE_URL`` unless set).

    ``server=False`` (the simulation): moto in-process (``mock_aws``), the fastest path
    through the same boto3 calls. ``server=True`` (``serve``): a moto server on 127.0.0.1
    (``port`` 0 picks a free one) reachable by other processes, via ``AWS_ENDPOINT_URL``.
    """
    _set_fake_credentials()
    install_fast_queue_attributes()
    if server:
        from moto.server import ThreadedMotoServer

        moto_server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
        moto_server.start()
        host, bound_port = moto_server.get_host_and_port()
        endpoint = f"http://{host}:{bound_port}"
        os.environ["AWS_ENDPOINT_URL"] = endpoint
        local = LocalAws(endpoint=endpoint, queues={}, topic_arn="", server=moto_server)
    else:
        from moto import mock_aws

        os.environ.pop("AWS_ENDPOINT_URL", None)
        mock = mock_aws()
        mock.start()
        local = LocalAws(endpoint="", queues={}, topic_arn="", mock=mock)
    sqs = local.client("sqs")
    for name, pipeline in PIPELINES.items():
        pair = create_pipeline_queues(sqs, pipeline)
        local.queues[name] = pair
        os.environ[names.run_queue_url_variable(name)] = pair.url
    snapshot_jobs = create_pipeline_queues(sqs, SNAPSHOTS)
    local.queues[SNAPSHOTS.name] = snapshot_jobs
    os.environ[names.SNAPSHOT_JOB_QUEUE_URL_VARIABLE] = snapshot_jobs.url
    for name, work_queue in WORK_QUEUES.items():
        pair = create_pipeline_queues(sqs, work_queue)
        local.work_queues[name] = pair
        os.environ[work_queue.queue_url_variable] = pair.url
    local.message_events_topic_arn, local.message_events = create_message_events(sqs, local.client("sns"))
    watched = {**local.queues, **local.work_queues, MESSAGE_EVENTS_NAME: local.message_events}
    for name, pair in watched.items():  # the operations routes read them
        os.environ[names.dead_letter_queue_arn_variable(name)] = pair.dlq_arn
    local.topic_arn = local.client("sns").create_topic(Name="timekeeper-notifications")["TopicArn"]
    os.environ[names.NOTIFICATION_TOPIC_VARIABLE] = local.topic_arn
    local.client("s3").create_bucket(Bucket=FILES_BUCKET_NAME)
    local.files_bucket = FILES_BUCKET_NAME
    os.environ[names.FILES_BUCKET_VARIABLE] = FILES_BUCKET_NAME
    # Scheduled delivery: SES (moto) sends from a verified sender; links are signed with a
    # development key and point at serve's default address (serve sets its own address
    # once it listens).
    local.client("ses").verify_email_identity(EmailAddress=MAIL_SENDER)
    os.environ[names.MAIL_SENDER_VARIABLE] = MAIL_SENDER
    os.environ.setdefault(names.LINK_KEY_VARIABLE, LOCAL_LINK_SIGNING_KEY)
    os.environ.setdefault(names.DOWNLOAD_BASE_URL_VARIABLE, LOCAL_DOWNLOAD_BASE_URL)
    return local
