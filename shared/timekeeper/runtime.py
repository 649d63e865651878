"""The Lambda edge: settings validated at cold start, adapters created once per execution
environment, and the handler bodies every pipeline shares (handlers stay thin; domain
code never reads the environment or creates boto3 clients).

Environment (names and ARNs only; secrets come from Secrets Manager):
``RUN_QUEUE_URL_<PIPELINE>`` (e.g. ``RUN_QUEUE_URL_ACCOUNTING``, the pipeline's run queue),
``NOTIFICATION_TOPIC_ARN`` (optional), and either ``DATABASE_URL`` (local stack) or
``DB_SECRET_ARN`` with ``DB_HOST`` (RDS Proxy endpoint) in AWS; ``TIMEKEEPER_ENVIRONMENT``
(``development``, the default, or ``production``) says which snapshot types are enabled.
Each function's secret is its own login's: the workers', the API's, or (migration function
only) the owner's, which also gets ``LOGIN_SECRET_ARNS`` (comma-separated) to set the other logins' passwords.
Each handler names its pipeline from the topology, so one process (the local stack) can
host them all.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache
from typing import TYPE_CHECKING, Any

import boto3
import psycopg
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from timekeeper import clock
from timekeeper.aws.sns import SnsNotifier
from timekeeper.aws.sqs import SqsRunPublisher
from timekeeper.db.connection import ConnectionProvider, connect, login_url, set_login_password
from timekeeper.observability import PipelineMetrics, logger, metrics
from timekeeper.schedules.consumer import ConsumerSettings, Delivery, process_batch
from timekeeper.schedules.dispatcher import DispatchReport, OfferLimits, dispatch
from timekeeper.schedules.messages import RunMessage
from timekeeper.schedules.work import WorkKindRegistry, run_maintenance
from timekeeper.topology import PIPELINES, PROXY_IDLE_CLIENT_TIMEOUT_S, Pipeline

if TYPE_CHECKING:
    from timekeeper.snapshots.registry import SnapshotRegistry


class RuntimeSettings(BaseModel):
    """Validated process settings; raises ``pydantic.ValidationError`` at cold start when
    the environment is incomplete, so a misconfigured function fails loudly at once."""

    model_config = ConfigDict(frozen=True)

    notification_topic_arn: str | None = None
    database_url: str | None = None
    db_secret_arn: str | None = None
    db_host: str | None = None
    db_name: str = "timekeeper"
    #: Secrets of the logins whose passwords the migration function sets (owner's function only).
    login_secret_arns: tuple[str, ...] = ()

    @model_validator(mode="after")
    def _database_named(self) -> RuntimeSettings:
        if not self.database_url and not (self.db_secret_arn and self.db_host):
            raise ValueError("set DATABASE_URL, or DB_SECRET_ARN and DB_HOST")
        return self


@cache
def settings() -> RuntimeSettings:
    """Settings from the environment, read once per execution environment."""
    env = os.environ
    return RuntimeSettings(
        notification_topic_arn=env.get("NOTIFICATION_TOPIC_ARN") or None,
        database_url=env.get("DATABASE_URL") or None, db_secret_arn=env.get("DB_SECRET_ARN") or None,
        db_host=env.get("DB_HOST") or None, db_name=env.get("DB_NAME", "timekeeper"),
        login_secret_arns=tuple(a.strip() for a in env.get("LOGIN_SECRET_ARNS", "").split(",") if a.strip()),
    )


def _secret(arn: str, *, force_fetch: bool = False) -> dict[str, Any]:
    """A JSON secret (``username``, ``password``, ...) from Secrets Manager, cached 300 s."""
    from aws_lambda_powertools.utilities.parameters import get_secret

    return get_secret(arn, transform="json", max_age=300, force_fetch=force_fetch)


def database_url(*, force_fetch: bool = False, login: str | None = None) -> str:
    """The libpq URL of the database. In AWS: the RDS Proxy host and this function's own
    secret (its login; cached 300 s, ``force_fetch`` bypasses the cache). Locally:
    ``DATABASE_URL``, switched to the login role ``login`` when one is given (the local
    server trusts local logins; see :func:`timekeeper.db.connection.login_url`)."""
    s = settings()
    if s.database_url:
        return login_url(s.database_url, login) if login else s.database_url
    from psycopg.conninfo import make_conninfo

    secret = _secret(s.db_secret_arn, force_fetch=force_fetch)
    return make_conninfo(host=s.db_host, port=secret.get("port", 5432), dbname=s.db_name,
                         user=secret["username"], password=secret["password"], sslmode="require")


def open_with_rotation(connector: Callable[[str], psycopg.Connection], *,
                       login: str | None = None) -> psycopg.Connection:
    """Open a connection with ``connector(url)`` (``login`` as for :func:`database_url`);
    when it fails and the credentials come from Secrets Manager, fetch the secret again
    once (it may have rotated to the other user) and retry.
    Raises ``psycopg.OperationalError`` when the retry fails too."""
    try:
        return connector(database_url(login=login))
    except psycopg.OperationalError:
        if settings().database_url:
            raise
        return connector(database_url(force_fetch=True, login=login))


#: A Lambda environment reopens a connection idle this long (seconds): the proxy closes
#: idle clients after PROXY_IDLE_CLIENT_TIMEOUT_S, and a frozen environment cannot notice.
CONNECTION_MAX_IDLE_S = PROXY_IDLE_CLIENT_TIMEOUT_S / 2


@cache
def database() -> ConnectionProvider:
    """The execution environment's lazy database connection (recreated when broken or
    idle for :data:`CONNECTION_MAX_IDLE_S`)."""
    return ConnectionProvider(lambda: open_with_rotation(connect), max_idle_s=CONNECTION_MAX_IDLE_S)


def provision_logins(conn: psycopg.Connection) -> list[str]:
    """Set the password of every login named by ``LOGIN_SECRET_ARNS`` from its secret's
    current value (``username``, ``password``), on ``conn`` (the owner's, in the
    migration function). Idempotent: after a rotation the secret names the login that
    already has that password. Returns the logins set, in order; raises ``ValueError``
    when a secret names a role that is not a Timekeeper login."""
    done = []
    for arn in settings().login_secret_arns:
        secret = _secret(arn, force_fetch=True)
        set_login_password(conn, secret["username"], secret["password"])
        done.append(secret["username"])
    return done


@cache
def sqs_client() -> Any:
    """The SQS client (boto3 honours ``AWS_ENDPOINT_URL`` for the local stack)."""
    return boto3.client("sqs")


@cache
def publisher(pipeline: str) -> SqsRunPublisher:
    """The run-queue publisher of ``pipeline``; raises ``KeyError`` when its queue URL is unset."""
    if pipeline not in PIPELINES:
        raise KeyError(f"unknown pipeline {pipeline!r}")
    return SqsRunPublisher(sqs_client(), os.environ[f"RUN_QUEUE_URL_{pipeline.upper()}"])


@cache
def notifier() -> SnsNotifier | None:
    """Owner notifications, when a topic is configured."""
    arn = settings().notification_topic_arn
    return SnsNotifier(boto3.client("sns"), arn) if arn else None


@cache
def registry() -> WorkKindRegistry:
    """Every owner's work kinds."""
    from timekeeper.accounting.work_kinds import register as register_accounting

    kinds = WorkKindRegistry()
    register_accounting(kinds)
    return kinds


#: The variable naming the deployment's environment (``development`` or ``production``):
#: which snapshot types are enabled. Unset, it is ``development`` (the local stack); the
#: CDK stacks set ``production``.
ENVIRONMENT_VARIABLE = "TIMEKEEPER_ENVIRONMENT"


@cache
def environment() -> str:
    """The deployment's environment, one of
    :data:`timekeeper.snapshots.registry.ENVIRONMENTS`, read once per execution
    environment; raises ``ValueError`` at cold start for any other value."""
    from timekeeper.snapshots.registry import ENVIRONMENTS

    value = os.environ.get(ENVIRONMENT_VARIABLE, "").strip() or "development"
    if value not in ENVIRONMENTS:
        raise ValueError(f"{ENVIRONMENT_VARIABLE}={value!r}: use one of {', '.join(ENVIRONMENTS)}")
    return value


def build_snapshot_registry(environment_name: str) -> SnapshotRegistry:
    """Every owner's snapshot types, enabled as ``environment_name`` says (``development``
    or ``production``; ``ValueError`` otherwise). The one place types are registered: the
    API, the planner, the dispatcher and the run job all use it."""
    from timekeeper.platform.snapshots import register as register_platform
    from timekeeper.snapshots.registry import SnapshotRegistry

    types = SnapshotRegistry(environment=environment_name)
    register_platform(types)
    return types


@cache
def snapshot_registry() -> SnapshotRegistry:
    """The deployment's snapshot types (:func:`build_snapshot_registry` of :func:`environment`)."""
    return build_snapshot_registry(environment())


def reset() -> None:
    """Forget every cached setting and adapter (closing the connection), so the next call
    reads the environment again. The local stack and tests use it between configurations."""
    if database.cache_info().currsize:
        database().close()
    for cached in (settings, database, sqs_client, publisher, notifier, registry, environment,
                   snapshot_registry):
        cached.cache_clear()


def run_dispatcher(pipeline_name: str) -> DispatchReport:
    """One dispatcher pass of ``pipeline_name`` at the clock's ``now``, then the owner's
    maintenance tasks (:func:`timekeeper.schedules.work.run_maintenance`; their summaries
    are logged, a failing task does not fail the pass)."""
    pipeline: Pipeline = PIPELINES[pipeline_name]
    conn, now = database().get(), clock.now()
    report = dispatch(conn, owner=pipeline.owner, now=now, publisher=publisher(pipeline_name),
                      claim_limit=pipeline.claim_batch, time_budget_s=pipeline.dispatcher_time_budget_s,
                      registry=registry(), notifier=notifier(), metrics=PipelineMetrics(metrics, pipeline_name),
                      limits=OfferLimits(reoffer_after=pipeline.reoffer_after,
                                         max_attempts=pipeline.max_receive_count))
    maintenance = {name: summary for name, summary in run_maintenance(conn, registry(), pipeline.owner, now).items()
                   if summary}
    if maintenance:
        logger.info("owner maintenance", extra={"maintenance": maintenance})
    return report


def consume_batch(pipeline_name: str, event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Process an SQS batch of ``pipeline_name``; return the partial batch response
    (ReportBatchItemFailures): ``{"batchItemFailures": [{"itemIdentifier": message id}, ...]}``.

    Each record is parsed once. The well-formed run messages are processed together
    (:func:`timekeeper.schedules.consumer.process_batch`); a malformed message, a run held
    by another consumer or a retryable fault fails only its own item, and the rest are
    acknowledged. A batch whose every item failed still returns normally (its items come
    back; a poison message alone is not a function error). Raises ``psycopg.Error`` when
    the database is unreachable (the whole batch comes back).
    """
    consumer_settings = ConsumerSettings.from_pipeline(PIPELINES[pipeline_name])
    failures: list[str] = []
    deliveries: list[Delivery] = []
    for record in event.get("Records", []):
        message_id = record.get("messageId", "")
        try:
            message = RunMessage.model_validate_json(record.get("body") or "")
        except ValidationError as error:
            logger.warning("malformed run message; it reaches the dead-letter queue after maxReceiveCount",
                           extra={"message_id": message_id, "error": str(error)[:500]})
            failures.append(message_id)
            continue
        attributes = record.get("attributes") or {}
        try:
            receive_count = int(attributes.get("ApproximateReceiveCount") or 1)
        except ValueError:
            receive_count = 1
        deliveries.append(Delivery(message_id, message, receive_count))
    if deliveries:
        results = process_batch(database().get(), deliveries, now=clock.now(), registry=registry(),
                                settings=consumer_settings, services={},
                                metrics=PipelineMetrics(metrics, pipeline_name))
        for delivery, result in zip(deliveries, results, strict=True):
            if isinstance(result, Exception):
                logger.info("run message fails its batch item", extra={
                    "message_id": delivery.key, "run_id": str(delivery.message.run_id), "reason": str(result)[:500]})
                failures.append(delivery.key)
    return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in failures]}
