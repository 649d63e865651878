"""The Lambda edge: settings validated at cold start, adapters created once per execution
environment, and the handler bodies every pipeline shares (handlers stay thin; domain
code never reads the environment or creates boto3 clients).

Environment (names and ARNs only; secrets come from Secrets Manager):
``RUN_QUEUE_URL_<PIPELINE>`` (e.g. ``RUN_QUEUE_URL_ACCOUNTING``, the pipeline's run queue),
``WORK_QUEUE_URL_<QUEUE>`` (e.g. ``WORK_QUEUE_URL_EXPORTS``, a work queue's URL),
``NOTIFICATION_TOPIC_ARN`` (optional), ``FILES_BUCKET`` (the files bucket: exports and
rendered reports), ``REPORT_RENDERER_FUNCTION`` (the renderer's function name, for the
callers that request renders), and either ``DATABASE_URL`` (local stack) or
``DB_SECRET_ARN`` with ``DB_HOST`` (RDS Proxy endpoint) in AWS. Each function's secret is
its own login's: the workers', the API's, or (migration function only) the owner's, which
also gets ``LOGIN_SECRET_ARNS`` (comma-separated) to set the other logins' passwords.
Each handler names its pipeline from the topology, so one process (the local stack) can
host them all.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar

import boto3
import psycopg
from pydantic import BaseModel, ConfigDict, ValidationError, model_validator

from timekeeper import clock
from timekeeper import observability as obs
from timekeeper.aws.renderer import LambdaRendererClient, RendererClient, RenderRequest
from timekeeper.aws.sns import SnsNotifier
from timekeeper.aws.sqs import SqsMessagePublisher, SqsRunPublisher
from timekeeper.db.connection import ConnectionProvider, connect, login_url, set_login_password
from timekeeper.faults import crash_point
from timekeeper.observability import (
    REPORT_RENDER_FAILED,
    REPORT_RENDERED,
    PipelineMetrics,
    logger,
    metrics,
    pop_log_keys,
    push_log_keys,
)
from timekeeper.queries import rendering
from timekeeper.schedules.consumer import ConsumerSettings, Delivery, process_batch
from timekeeper.schedules.dispatcher import DispatchReport, OfferLimits, dispatch
from timekeeper.schedules.messages import RunMessage
from timekeeper.schedules.work import WorkKindRegistry, run_maintenance
from timekeeper.snapshots.jobs import JobMessage, reconcile_lost_jobs, send_jobs
from timekeeper.snapshots.jobs import run_job as run_snapshot_job
from timekeeper.snapshots.ledger import admit as admit_snapshots
from timekeeper.snapshots.ledger import plan as plan_snapshots
from timekeeper.snapshots.registry import SnapshotRegistry, default_snapshot_registry
from timekeeper.topology import (
    PIPELINES,
    PROXY_IDLE_CLIENT_TIMEOUT_S,
    REPORT_RENDERER,
    SNAPSHOTS,
    WORK_QUEUES,
    Pipeline,
)

M = TypeVar("M", bound=BaseModel)


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
    #: The files bucket (rendered reports under reports/, exports under exports/).
    files_bucket: str | None = None
    #: The report renderer's function name (callers that request renders).
    report_renderer_function: str | None = None
    #: Scheduled delivery: the verified sender address (SES), the public base URL of the
    #: download route (ends with ``/``), and the download links' signing key: the secret
    #: ``LINK_SIGNING_SECRET_ARN`` (JSON ``{"key": ...}``) in AWS, ``LINK_SIGNING_KEY`` locally.
    mail_sender: str | None = None
    download_base_url: str | None = None
    link_signing_secret_arn: str | None = None
    link_signing_key: str | None = None

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
        files_bucket=env.get("FILES_BUCKET") or None,
        report_renderer_function=env.get("REPORT_RENDERER_FUNCTION") or None,
        mail_sender=env.get("MAIL_SENDER") or None, download_base_url=env.get("DOWNLOAD_BASE_URL") or None,
        link_signing_secret_arn=env.get("LINK_SIGNING_SECRET_ARN") or None,
        link_signing_key=env.get("LINK_SIGNING_KEY") or None,
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
def export_publisher() -> SqsMessagePublisher:
    """The exports queue's publisher; raises ``KeyError`` when its URL variable is unset."""
    from timekeeper.queries.exports import ExportMessage

    queue = WORK_QUEUES["exports"]

    def export_id(message: ExportMessage) -> Any:
        return message.export_id

    return SqsMessagePublisher(sqs_client(), os.environ[queue.queue_url_variable], key=export_id)


@cache
def notifier() -> SnsNotifier | None:
    """Owner notifications, when a topic is configured."""
    arn = settings().notification_topic_arn
    return SnsNotifier(boto3.client("sns"), arn) if arn else None


@cache
def registry() -> WorkKindRegistry:
    """Every owner's work kinds."""
    from timekeeper.accounting.work_kinds import register as register_accounting
    from timekeeper.queries.work_kinds import register as register_queries

    kinds = WorkKindRegistry()
    register_accounting(kinds)
    register_queries(kinds)
    return kinds


@cache
def renderer_database() -> ConnectionProvider:
    """The report renderer's lazy connection. In Lambda the renderer is a function of its
    own, so this is its only connection; in the local stack, which runs the renderer in
    the requesting process, it keeps a render requested by a delivery run (whose run
    transaction holds :func:`database`) on a connection of its own."""
    return ConnectionProvider(lambda: open_with_rotation(connect), max_idle_s=CONNECTION_MAX_IDLE_S)


@cache
def journal_database() -> ConnectionProvider:
    """A second lazy connection of the execution environment, for work that must commit
    beside a run's transaction (scheduled delivery's journal). Only the pipelines whose
    ``consumer_connections`` is 2 open it."""
    return ConnectionProvider(lambda: open_with_rotation(connect), max_idle_s=CONNECTION_MAX_IDLE_S)


@cache
def link_signer() -> Any:
    """The download links' signer (:class:`timekeeper.queries.links.LinkSigner`): its key
    from ``LINK_SIGNING_SECRET_ARN`` (Secrets Manager, JSON ``{"key": ...}``) or
    ``LINK_SIGNING_KEY``; raises ``RuntimeError`` when neither is set."""
    from timekeeper.queries.links import LinkSigner

    s = settings()
    if s.link_signing_secret_arn:
        return LinkSigner(str(_secret(s.link_signing_secret_arn)["key"]))
    if s.link_signing_key:
        return LinkSigner(s.link_signing_key)
    raise RuntimeError("set LINK_SIGNING_SECRET_ARN or LINK_SIGNING_KEY")


_mailer_override: Any = None


def install_mailer(mailer_adapter: Any) -> None:
    """Replace the communications adapter (``None``: SES again). The local stack uses it to
    keep a copy of every message on disk."""
    global _mailer_override
    _mailer_override = mailer_adapter
    mailer.cache_clear()


@cache
def mailer() -> Any:
    """The communications adapter: the installed one, or SES ``send_email`` from
    ``MAIL_SENDER`` (boto3 honours ``AWS_ENDPOINT_URL``: moto locally). Raises
    ``RuntimeError`` when it is unset."""
    from timekeeper.aws.ses import SesMailer

    if _mailer_override is not None:
        return _mailer_override
    sender = settings().mail_sender
    if not sender:
        raise RuntimeError("MAIL_SENDER is not set")
    return SesMailer(boto3.client("ses"), sender)


def delivery_services() -> Any:
    """The adapters of a delivery run (:class:`timekeeper.queries.delivery.DeliveryServices`):
    the journal connection, the files bucket, the renderer, the mailer, the link signer
    and the download base URL (``DOWNLOAD_BASE_URL``), and the ``DeliveryFailed`` metric."""
    from timekeeper.queries.delivery import DeliveryServices

    def failed(count: int) -> None:
        metrics.add_metric(name=obs.DELIVERY_FAILED, unit="Count", value=count)

    base = settings().download_base_url or ""
    return DeliveryServices(journal=journal_database().get, s3=s3_client(), bucket=files_bucket(),
                            renderer=renderer_client(), mailer=mailer(), links=link_signer(),
                            download_base_url=base if base.endswith("/") else base + "/", on_failed=failed)


def pipeline_services(pipeline_name: str) -> dict[str, Any]:
    """The ``services`` a pipeline's work kinds get (by name): ``{"delivery": ...}`` for
    the queries pipeline, none for the others."""
    if pipeline_name == "queries":
        return {"delivery": delivery_services()}
    return {}


@cache
def s3_client() -> Any:
    """The S3 client (boto3 honours ``AWS_ENDPOINT_URL`` for the local stack); Signature
    Version 4, so presigned links carry their own expiry (``X-Amz-Expires``)."""
    from botocore.config import Config

    return boto3.client("s3", config=Config(signature_version="s3v4"))


def files_bucket() -> str:
    """The files bucket's name; raises ``RuntimeError`` when ``FILES_BUCKET`` is unset."""
    name = settings().files_bucket
    if not name:
        raise RuntimeError("FILES_BUCKET is not set")
    return name


_renderer_override: RendererClient | None = None


def install_renderer_client(client: RendererClient | None) -> None:
    """Replace the renderer client (``None``: the Lambda one again). The local stack uses
    it to run the renderer's real handler itself, since moto does not run functions."""
    global _renderer_override
    _renderer_override = client
    renderer_client.cache_clear()


@cache
def renderer_client() -> RendererClient:
    """How callers ask for a render: the installed client, or asynchronous Lambda invokes
    of ``REPORT_RENDERER_FUNCTION`` (raises ``RuntimeError`` when it is unset)."""
    if _renderer_override is not None:
        return _renderer_override
    name = settings().report_renderer_function
    if not name:
        raise RuntimeError("REPORT_RENDERER_FUNCTION is not set")
    return LambdaRendererClient(boto3.client("lambda"), name)


def run_renderer(event: Any) -> dict[str, Any]:
    """Run the render an asynchronous invocation names (:class:`RenderRequest`); return a
    summary (``render_id``, ``state``, ``error_code``, ``attempts``).

    A malformed event, or one naming no render, is logged and dropped (``{"dropped":
    reason}``): retrying it cannot help. Expected failures are recorded on the render and
    returned; an unexpected fault below the attempt limit raises, so Lambda retries.
    """
    try:
        request = RenderRequest.model_validate(event)
    except ValidationError as error:
        logger.warning("malformed render request dropped", extra={"error": str(error)[:500]})
        return {"dropped": "malformed"}
    keys = push_log_keys(workspace_id=request.workspace_id, render_id=request.render_id)
    try:
        try:
            row = rendering.render(renderer_database().get(), s3_client(), files_bucket(),
                                   workspace_id=request.workspace_id, render_id=request.render_id, now=clock.now(),
                                   max_attempts=REPORT_RENDERER.max_attempts)
        except rendering.RenderNotFound:
            logger.warning("render request names no render; dropped")
            return {"dropped": "render_not_found"}
        summary = {"render_id": str(row.id), "state": row.state, "error_code": row.error_code, "attempts": row.attempts}
        if row.state == "succeeded":
            metrics.add_metric(name=REPORT_RENDERED, unit="Count", value=1)
        elif row.state == "failed":
            metrics.add_metric(name=REPORT_RENDER_FAILED, unit="Count", value=1)
        logger.info("render", extra=summary)
        return summary
    finally:
        pop_log_keys(keys)


def reset() -> None:
    """Forget every cached setting and adapter (closing the connection), so the next call
    reads the environment again. The local stack and tests use it between configurations."""
    if database.cache_info().currsize:
        database().close()
    for provider in (journal_database, renderer_database):
        if provider.cache_info().currsize:
            provider().close()
    for cached in (settings, database, sqs_client, publisher, notifier, registry, s3_client, renderer_client,
                   snapshot_registry, export_publisher, journal_database, renderer_database, link_signer, mailer):
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
    parsed, failures = parse_records(event, RunMessage, what="run message")
    deliveries = [Delivery(message_id, message, receive_count) for message_id, message, receive_count in parsed]
    if deliveries:
        results = process_batch(database().get(), deliveries, now=clock.now(), registry=registry(),
                                settings=consumer_settings, services=pipeline_services(pipeline_name),
                                metrics=PipelineMetrics(metrics, pipeline_name))
        for delivery, result in zip(deliveries, results, strict=True):
            if isinstance(result, Exception):
                logger.info("run message fails its batch item", extra={
                    "message_id": delivery.key, "run_id": str(delivery.message.run_id), "reason": str(result)[:500]})
                failures.append(delivery.key)
    crash_point("consumer.before_acknowledge")
    return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in failures]}


def parse_records(event: dict[str, Any], model: type[M], *,
                  what: str) -> tuple[list[tuple[str, M, int]], list[str]]:
    """Parse each SQS record's body of ``event`` as ``model`` (JSON). Returns
    ``([(message id, message, receive count), ...], [malformed message ids])``: a malformed
    record is logged (``what`` names it) and listed, so its caller fails only that batch
    item and it reaches the dead-letter queue after maxReceiveCount. The receive count is
    ``ApproximateReceiveCount`` (1 when missing or not a number)."""
    parsed: list[tuple[str, M, int]] = []
    failures: list[str] = []
    for record in event.get("Records", []):
        message_id = record.get("messageId", "")
        try:
            message = model.model_validate_json(record.get("body") or "")
        except ValidationError as error:
            logger.warning(f"malformed {what}; it reaches the dead-letter queue after maxReceiveCount",
                           extra={"message_id": message_id, "error": str(error)[:500]})
            failures.append(message_id)
            continue
        attributes = record.get("attributes") or {}
        try:
            receive_count = int(attributes.get("ApproximateReceiveCount") or 1)
        except ValueError:
            receive_count = 1
        parsed.append((message_id, message, receive_count))
    return parsed, failures


#: How many stale unpublished exports one consumer invocation offers again after its batch.
EXPORT_SWEEP_LIMIT = 10


def consume_exports(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Process an SQS batch of the exports queue; return the partial batch response
    (``{"batchItemFailures": [{"itemIdentifier": message id}, ...]}``).

    A malformed message fails only its own item (it reaches the dead-letter queue after
    maxReceiveCount); each well-formed one is run by
    :func:`timekeeper.queries.exports.consume_export` (a fault fails its item for a retry;
    the final receive settles the export failed). Afterwards, up to
    :data:`EXPORT_SWEEP_LIMIT` queued exports that were never published are offered again
    (a failure there is logged, never fails the batch). Raises ``psycopg.Error`` only when
    the database cannot be reached at all (the whole batch comes back).
    """
    from datetime import timedelta

    from timekeeper.queries.exports import ExportMessage, consume_export, reoffer_exports

    queue = WORK_QUEUES["exports"]
    parsed, failures = parse_records(event, ExportMessage, what="export message")
    conn = database().get()
    for message_id, message, receive_count in parsed:
        keys = push_log_keys(export_id=message.export_id, workspace_id=message.workspace_id)
        try:
            if not consume_export(conn, s3_client(), files_bucket(), message, receive_count=receive_count,
                                  max_receive_count=queue.max_receive_count, now=clock.now(),
                                  lease=timedelta(seconds=queue.consumer_timeout_s)):
                failures.append(message_id)
        finally:
            pop_log_keys(keys)
    try:
        reoffered = reoffer_exports(conn, export_publisher(), now=clock.now(), older_than=queue.reoffer_after,
                                    limit=EXPORT_SWEEP_LIMIT)
        if reoffered:
            logger.info("unpublished exports offered again", extra={"reoffered": reoffered})
    except Exception as error:  # noqa: BLE001 - the sweep is best effort; the next batch tries again
        logger.warning("export sweep failed", extra={"error_type": type(error).__name__})
    return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in failures]}


# ------------------------------------------------------------------ monthly snapshots

#: Environment variables of the snapshot functions: the job queue (dispatcher, run job),
#: the dispatcher to nudge after planning (planner; unset: no nudge), and the environment
#: whose snapshot types are enabled (``development`` | ``production``).
SNAPSHOT_JOB_QUEUE_URL = "SNAPSHOT_JOB_QUEUE_URL"
SNAPSHOT_NUDGE_FUNCTION = "SNAPSHOT_DISPATCHER_FUNCTION"
ENVIRONMENT_VARIABLE = "TIMEKEEPER_ENVIRONMENT"
#: Self-test drills (development): ``<workspace id>/<YYYY-MM>`` periods, comma-separated,
#: whose version 1 of the self-test type fails validation.
SELFTEST_DRILLS_VARIABLE = "TIMEKEEPER_SELFTEST_DRILLS"


@cache
def snapshot_registry() -> SnapshotRegistry:
    """The snapshot types of this deployment, enabled per ``TIMEKEEPER_ENVIRONMENT``
    (default ``development``; the deployed stacks set ``production``)."""
    drills = frozenset(tuple(item.strip().split("/", 1)) for item in
                       os.environ.get(SELFTEST_DRILLS_VARIABLE, "").split(",") if "/" in item)
    return default_snapshot_registry(os.environ.get(ENVIRONMENT_VARIABLE, "development"),
                                     selftest_drills=drills)  # type: ignore[arg-type]


def run_snapshot_planner() -> dict[str, Any]:
    """One planner pass at the clock's ``now`` (commits), the SnapshotOverdue metric, then a
    nudge of the dispatcher (an asynchronous invoke; skipped when none is configured).
    Returns the pass summary (counts, overdue periods)."""
    conn, now = database().get(), clock.now()
    with conn.transaction():
        result = plan_snapshots(conn, snapshot_registry(), now=now, horizon_months=SNAPSHOTS.horizon_months)
    metrics.add_metric(name=obs.SNAPSHOTS_PLANNED, unit="Count", value=result.planned)
    metrics.add_metric(name=obs.SNAPSHOT_OVERDUE, unit="Count", value=len(result.overdue))
    nudge = os.environ.get(SNAPSHOT_NUDGE_FUNCTION)
    if nudge and result.planned:
        boto3.client("lambda").invoke(FunctionName=nudge, InvocationType="Event", Payload=b"{}")
    summary = {"planned": result.planned, "skipped": result.skipped, "overdue": len(result.overdue),
               "overdue_periods": [f"{w}/{o}/{t}/{p:%Y-%m}" for w, o, t, p in result.overdue[:20]]}
    if result.overdue:
        logger.warning("snapshot periods overdue", extra=summary)
    return summary


def _job_run_id(job: JobMessage) -> Any:
    return job.run_id


def send_snapshot_jobs(jobs: list[JobMessage]) -> int:
    """Send job messages to the job queue (batches of 10); returns how many the queue
    accepted. A refused message, or a whole call that fails, is not retried here (and
    fails nothing): its run stays queued and the dispatcher offers it a new job after
    ``reoffer_after``."""
    publisher = SqsMessagePublisher(sqs_client(), os.environ[SNAPSHOT_JOB_QUEUE_URL], key=_job_run_id)
    return len(jobs) - len(publisher.publish(jobs))


def run_snapshot_dispatcher() -> dict[str, Any]:
    """One snapshot dispatcher pass per owner of an enabled type: settle lost jobs, admit
    under the cap and reoffer stale offers (one committed transaction under the owner's
    lock), then send the jobs. Returns counts."""
    conn, now = database().get(), clock.now()
    owners = sorted({t.owner for t in snapshot_registry().enabled()})
    admitted: list[JobMessage] = []
    lost = 0
    for owner in owners:
        with conn.transaction():
            lost += len(reconcile_lost_jobs(conn, owner=owner, now=now, after=SNAPSHOTS.job_lost_after))
            admitted += [JobMessage(run_id=a.run_id, workspace_id=a.workspace_id, job_id=a.job_id)
                         for a in admit_snapshots(conn, owner=owner, now=now, cap=SNAPSHOTS.admission_cap,
                                                  backfill_lane=SNAPSHOTS.backfill_lane,
                                                  reoffer_after=SNAPSHOTS.reoffer_after)]
    if admitted:
        crash_point("snapshots.after_admit_commit")
    sent = send_jobs(conn, SqsMessagePublisher(sqs_client(), os.environ[SNAPSHOT_JOB_QUEUE_URL], key=_job_run_id),
                     admitted, now=now) if admitted else 0
    metrics.add_metric(name=obs.SNAPSHOTS_ADMITTED, unit="Count", value=len(admitted))
    metrics.add_metric(name=obs.SNAPSHOT_DISPATCHER_HEARTBEAT, unit="Count", value=1)
    return {"owners": owners, "admitted": len(admitted), "sent": sent, "lost_jobs": lost}


def run_snapshot_jobs(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Run the job messages of an SQS batch (the event source gives one at a time); return
    the partial batch response. A malformed message fails only its own item (it reaches
    the DLQ after ``max_receive_count``); a job that must hand over sends its message again
    and is acknowledged; an unexpected fault before the last receive fails its item (the
    queue redelivers it); on the last receive it is recorded as a retryable failure."""
    failures: list[str] = []
    remaining = getattr(context, "get_remaining_time_in_millis", None)

    def time_left_s() -> float:
        return remaining() / 1000 if remaining else float("inf")

    for record in event.get("Records", []):
        message_id = record.get("messageId", "")
        try:
            message = JobMessage.model_validate_json(record.get("body") or "")
        except ValidationError as error:
            logger.warning("malformed snapshot job message", extra={"message_id": message_id,
                                                                    "error": str(error)[:500]})
            failures.append(message_id)
            continue
        try:
            receive_count = int((record.get("attributes") or {}).get("ApproximateReceiveCount") or 1)
        except ValueError:
            receive_count = 1
        try:
            result = run_snapshot_job(database().get(), snapshot_registry(), message, now=clock.now,
                                      receive_count=receive_count, max_receives=SNAPSHOTS.max_receive_count,
                                      time_left_s=time_left_s, handover_margin_s=SNAPSHOTS.handover_margin_s)
        except Exception as error:  # noqa: BLE001 - the queue redelivers it; logged by type only
            logger.warning("snapshot job receive failed; the queue redelivers it",
                           extra={"run_id": str(message.run_id), "error_type": type(error).__name__})
            failures.append(message_id)
            continue
        if result.status == "handed_over":
            send_snapshot_jobs([message])
        elif result.status == "published":
            metrics.add_metric(name=obs.SNAPSHOT_PUBLISHED, unit="Count", value=1)
        elif result.status == "failed":
            metrics.add_metric(name=obs.SNAPSHOT_FAILED, unit="Count", value=1)
        logger.info("snapshot job", extra={"run_id": str(message.run_id), "status": result.status})
    return {"batchItemFailures": [{"itemIdentifier": message_id} for message_id in failures]}
