"""Adapters of a Lambda execution environment, created once and cached: the database
connections, the SQS, SNS, S3, SES, Lambda and Secrets Manager clients, the publishers, the
mailer, the renderer client and the link signer. Domain code never creates them; the
pipeline modules of :mod:`timekeeper.edge` pass them in.

Every AWS client is made by :func:`aws_client`, which creates one only for a service the
running function declares in the topology (:func:`timekeeper.topology.function_services`,
the function named by ``TIMEKEEPER_FUNCTION``); :func:`cold_start` builds a function's
clients when its handler is imported, so a function whose code calls an undeclared
service fails before its first event, naming the service (:class:`UndeclaredService`).

Every variable read here is named in :mod:`timekeeper.settings`. :func:`reset` forgets
every cached adapter (the local stack and tests, after the environment changed).

The database connections are the execution environment's, and an environment is a thread:
in Lambda one thread runs the function, so there is one of each per environment; the
local stack runs several invocations of one function at once on threads of their own (an
event source mapping's concurrency, the renderer's), each with its own connections, as
separate environments have (a psycopg connection is never shared by two threads). The
AWS clients, the publishers and the settings are shared (boto3 clients are thread-safe).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from functools import cache
from typing import Any

import boto3
import psycopg

from timekeeper.aws.dead_letters import DeadLetterQueue, DeadLetterQueues, ReceivingDeadLetterQueues
from timekeeper.aws.renderer import LambdaRendererClient, RendererClient
from timekeeper.aws.s3 import ManagedUploads
from timekeeper.aws.sns import SnsNotifier
from timekeeper.aws.sqs import SqsMessagePublisher, SqsRunPublisher
from timekeeper.db.connection import ConnectionProvider, connect, login_url, set_login_password, tls_parameters
from timekeeper.settings import (
    FUNCTION_VARIABLE,
    SNAPSHOT_JOB_QUEUE_URL_VARIABLE,
    dead_letter_queue_arn_variable,
    run_queue_url_variable,
    settings,
)
from timekeeper.topology import (
    EXPORTS,
    LAMBDA,
    PIPELINES,
    PROXY_IDLE_CLIENT_TIMEOUT_S,
    PUBLISH_IN_FLIGHT,
    S3,
    SECRETS_MANAGER,
    SES,
    SNS,
    SQS,
    function_services,
)
from timekeeper.topology import dead_letter_queues as dead_letter_queues_of_topology


class UndeclaredService(RuntimeError):
    """The running function asked for a client of an AWS service its topology entry does
    not declare: infra gave it no route (VPC endpoint or NAT) and no grant for it, so the
    call could only stall on the connect timeout or be refused."""


def running_function() -> str | None:
    """The ``functions/<folder>`` this process runs (``TIMEKEEPER_FUNCTION``); None when
    unset (the local stack and tests, where one process hosts every function)."""
    return os.environ.get(FUNCTION_VARIABLE) or None


def declared_services(function: str | None = None) -> frozenset[str] | None:
    """The AWS services ``function`` (default: :func:`running_function`) declares in the
    topology; None when no function is named. Raises :class:`UndeclaredService` when the
    name is no function of the topology."""
    name = function or running_function()
    if name is None:
        return None
    try:
        return function_services()[name]
    except KeyError:
        raise UndeclaredService(f"{FUNCTION_VARIABLE}={name!r} names no function of timekeeper.topology") from None


_requested: set[str] = set()


def requested_services() -> frozenset[str]:
    """The services :func:`aws_client` was asked for since the last :func:`reset`."""
    return frozenset(_requested)


def aws_client(service: str, **kwargs: Any) -> Any:
    """A new boto3 client of ``service`` (a :data:`timekeeper.topology.AWS_SERVICES` name;
    ``kwargs`` go to ``boto3.client``; boto3 honours ``AWS_ENDPOINT_URL`` for the local
    stack). Raises :class:`UndeclaredService` when the running function does not declare
    ``service``. The callers below cache what they build."""
    allowed = declared_services()
    _requested.add(service)
    if allowed is not None and service not in allowed:
        raise UndeclaredService(
            f"function {running_function()} asked for a {service} client, but its entry in timekeeper.topology "
            f"declares only {sorted(allowed)}: declare {service!r} there, so that infra gives the function a route "
            f"to it (VPC endpoint or NAT) and the grant, or stop calling it")
    return boto3.client(service, **kwargs)


@cache
def secrets_provider() -> Any:
    """Powertools' Secrets Manager provider on the edge's own client (:func:`aws_client`)."""
    from aws_lambda_powertools.utilities.parameters import SecretsProvider

    return SecretsProvider(boto3_client=aws_client(SECRETS_MANAGER))


def _secret(arn: str, *, force_fetch: bool = False) -> dict[str, Any]:
    """A JSON secret (``username``, ``password``, ...) from Secrets Manager, cached 300 s."""
    return secrets_provider().get(arn, transform="json", max_age=300, force_fetch=force_fetch)


def json_secret(arn: str) -> dict[str, Any]:
    """The JSON object of the Secrets Manager secret ``arn`` (the console's session keys, its
    client secret), through the same cached provider as the database logins (300 s).
    Raises Powertools' ``GetParameterError`` / ``TransformParameterError`` when it cannot be
    read or is not JSON."""
    return _secret(arn)


def database_url(*, force_fetch: bool = False, login: str | None = None) -> str:
    """The libpq URL of the database. In AWS: the RDS Proxy host and this function's own
    secret (its login; cached 300 s, ``force_fetch`` bypasses the cache), over TLS that
    verifies the server's certificate and host name
    (:func:`timekeeper.db.connection.tls_parameters`, ``DB_SSL_ROOT_CERT`` or certifi's
    bundle). Locally:
    ``DATABASE_URL``, switched to the login role ``login`` when one is given (the local
    server trusts local logins; see :func:`timekeeper.db.connection.login_url`)."""
    s = settings()
    if s.database_url:
        return login_url(s.database_url, login) if login else s.database_url
    from psycopg.conninfo import make_conninfo

    secret = _secret(s.db_secret_arn, force_fetch=force_fetch)
    return make_conninfo(host=s.db_host, port=secret.get("port", 5432), dbname=s.db_name,
                         user=secret["username"], password=secret["password"], **tls_parameters(s.db_ssl_root_cert))


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


_environment = threading.local()
_providers_lock = threading.Lock()
_providers: list[ConnectionProvider] = []  # every environment's connections, closed by reset()
_generation = 0  # bumped by reset(): environments of an older generation open new connections


def _environment_connection(name: str) -> ConnectionProvider:
    """This thread's (execution environment's) lazy connection ``name``, made on first use
    (recreated when broken or idle for :data:`CONNECTION_MAX_IDLE_S`)."""
    if getattr(_environment, "generation", None) != _generation:
        _environment.__dict__.clear()
        _environment.generation = _generation
    provider = getattr(_environment, name, None)
    if provider is None:
        provider = ConnectionProvider(lambda: open_with_rotation(connect), max_idle_s=CONNECTION_MAX_IDLE_S)
        setattr(_environment, name, provider)
        with _providers_lock:
            _providers.append(provider)
    return provider


def database() -> ConnectionProvider:
    """The execution environment's lazy database connection (recreated when broken or
    idle for :data:`CONNECTION_MAX_IDLE_S`); one per thread (see the module docstring)."""
    return _environment_connection("database")


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
    """The SQS client (boto3 honours ``AWS_ENDPOINT_URL`` for the local stack), its
    connection pool as large as the calls a publish keeps in flight
    (:data:`timekeeper.topology.PUBLISH_IN_FLIGHT`; botocore's default is 10)."""
    from botocore.config import Config

    return aws_client(SQS, config=Config(max_pool_connections=PUBLISH_IN_FLIGHT))


@cache
def _queue_url(queue_arn: str) -> str:
    """The URL of the queue ``arn:aws:sqs:<region>:<account>:<name>`` (one GetQueueUrl, cached)."""
    parts = queue_arn.split(":")
    if len(parts) != 6 or parts[2] != "sqs":
        raise ValueError(f"not an SQS queue ARN: {queue_arn!r}")
    return sqs_client().get_queue_url(QueueName=parts[5], QueueOwnerAWSAccountId=parts[4])["QueueUrl"]


_visibility_override: Callable[[str, str, int], None] | None = None


def install_visibility_changer(changer: Callable[[str, str, int], None] | None) -> None:
    """Replace :func:`change_visibility` (``None``: SQS again). The local stack uses it to
    keep a retried message's backoff in its simulated time."""
    global _visibility_override
    _visibility_override = changer


def change_visibility(queue_arn: str, receipt_handle: str, seconds: int) -> None:
    """Set the visibility timeout of a received message of ``queue_arn`` to ``seconds``
    from now (SQS ``ChangeMessageVisibility``; the event source mapping's consume rights
    include it): the backoff of :class:`timekeeper.edge.batch.Retry`. Raises the client's
    error (e.g. an expired receipt handle)."""
    if _visibility_override is not None:
        _visibility_override(queue_arn, receipt_handle, seconds)
        return
    sqs_client().change_message_visibility(QueueUrl=_queue_url(queue_arn), ReceiptHandle=receipt_handle,
                                           VisibilityTimeout=seconds)


_release_override: Callable[[str, Any, int], bool] | None = None


def install_run_releaser(releaser: Callable[[str, Any, int], bool] | None) -> None:
    """Replace :func:`release_run` (``None``: SQS again). The local stack uses it to keep a
    released run's delay in its simulated time."""
    global _release_override
    _release_override = releaser


def release_run(pipeline: str, message: Any, delay_s: int) -> bool:
    """Send a new copy of run ``message`` to ``pipeline``'s run queue, receivable in
    ``delay_s`` seconds (0..900; SQS ``DelaySeconds``; with the message's workspace as its
    ``MessageGroupId``): a run the per-workspace cap released. True when the queue took it
    (the received message may then be acknowledged), False when it did not."""
    if _release_override is not None:
        return _release_override(pipeline, message, delay_s)
    return publisher(pipeline).send_delayed(message, delay_s)


_redrive_by_receiving = False


def install_redrive_by_receiving(enabled: bool) -> None:
    """Make :func:`dead_letter_queues` move messages itself (True) rather than start SQS's
    message move task: the local stack's moto has no move task."""
    global _redrive_by_receiving
    _redrive_by_receiving = enabled
    dead_letter_queues.cache_clear()


@cache
def dead_letter_queues() -> DeadLetterQueues | None:
    """The topology's dead-letter queues whose ARNs the environment names
    (``DEAD_LETTER_QUEUE_ARN_<NAME>``, :func:`timekeeper.topology.dead_letter_queues`);
    each one's source queue is its ARN without the ``-dlq`` suffix (the topology's naming
    rule). None when the environment names none."""
    queues = {}
    for name in dead_letter_queues_of_topology():
        arn = os.environ.get(dead_letter_queue_arn_variable(name))
        if arn:
            queues[name] = DeadLetterQueue(name=name, arn=arn, source_arn=arn.removesuffix("-dlq"))
    if not queues:
        return None
    kind = ReceivingDeadLetterQueues if _redrive_by_receiving else DeadLetterQueues
    return kind(sqs_client(), queues)


@cache
def publisher(pipeline: str) -> SqsRunPublisher:
    """The run-queue publisher of ``pipeline``; raises ``KeyError`` when its queue URL is unset."""
    if pipeline not in PIPELINES:
        raise KeyError(f"unknown pipeline {pipeline!r}")
    return SqsRunPublisher(sqs_client(), os.environ[run_queue_url_variable(pipeline)])


@cache
def export_publisher() -> SqsMessagePublisher:
    """The exports queue's publisher; raises ``KeyError`` when its URL variable is unset."""
    def export_id(message: Any) -> Any:
        return message.export_id

    return SqsMessagePublisher(sqs_client(), os.environ[EXPORTS.queue_url_variable], key=export_id)


@cache
def snapshot_job_publisher() -> SqsMessagePublisher:
    """The snapshot job queue's publisher (``SNAPSHOT_JOB_QUEUE_URL``; messages keyed by
    their run id); raises ``KeyError`` when the variable is unset."""
    def run_id(message: Any) -> Any:
        return message.run_id

    return SqsMessagePublisher(sqs_client(), os.environ[SNAPSHOT_JOB_QUEUE_URL_VARIABLE], key=run_id)


@cache
def notifier() -> SnsNotifier | None:
    """Owner notifications, when a topic is configured."""
    arn = settings().notification_topic_arn
    return SnsNotifier(aws_client(SNS), arn) if arn else None


def renderer_database() -> ConnectionProvider:
    """The report renderer's lazy connection. In Lambda the renderer is a function of its
    own, so this is its only connection; in the local stack, which runs the renderer in
    the requesting process, it keeps a render requested by a delivery run (whose run
    transaction holds :func:`database`) on a connection of its own; one per thread."""
    return _environment_connection("renderer_database")


def journal_database() -> ConnectionProvider:
    """A second lazy connection of the execution environment: for work that must commit
    beside a run's transaction (scheduled delivery's journal; only the pipelines whose
    consumer's ``connections`` is 2 open it), and for a dispatcher pass's second claim
    worker (``claim_workers`` 2; opened when a pass's first batch comes back full); one per thread."""
    return _environment_connection("journal_database")


@cache
def link_signer() -> Any:
    """The download links' signer: from ``LINK_SIGNING_SECRET_ARN`` (Secrets Manager, JSON
    ``{"keys": [oldest, ..., newest]}`` or ``{"key": k}``; read through the 300 s cache, so a
    rotation reaches every function within five minutes, and reread at once when a token
    does not verify: :class:`timekeeper.reporting.links.RotatingLinkSigner`), or
    ``LINK_SIGNING_KEY`` (one key, locally); raises ``RuntimeError`` when neither is set."""
    from timekeeper.reporting.links import LinkSigner, RotatingLinkSigner, keys_of_secret

    s = settings()
    if s.link_signing_secret_arn:
        arn = s.link_signing_secret_arn
        return RotatingLinkSigner(lambda force: keys_of_secret(_secret(arn, force_fetch=force)))
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
    ``MAIL_SENDER`` under ``MAIL_CONFIGURATION_SET`` when set (boto3 honours ``AWS_ENDPOINT_URL``: moto locally). Raises
    ``RuntimeError`` when it is unset."""
    from timekeeper.aws.ses import SesMailer

    if _mailer_override is not None:
        return _mailer_override
    sender = settings().mail_sender
    if not sender:
        raise RuntimeError("MAIL_SENDER is not set")
    return SesMailer(aws_client(SES), sender, settings().mail_configuration_set)


@cache
def s3_client() -> Any:
    """The S3 client (boto3 honours ``AWS_ENDPOINT_URL`` for the local stack); Signature
    Version 4, so presigned links carry their own expiry (``X-Amz-Expires``); uploads are
    managed transfers with the product's multipart settings (:class:`ManagedUploads`)."""
    from botocore.config import Config

    return ManagedUploads(aws_client(S3, config=Config(signature_version="s3v4")))


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
    return LambdaRendererClient(lambda_client(), name)


@cache
def lambda_client() -> Any:
    """The Lambda client (renders requested, the planner's nudge of the snapshot dispatcher)."""
    return aws_client(LAMBDA)


def reset() -> None:
    """Forget every cached setting and adapter (closing the connections), so the next call
    reads the environment again."""
    global _generation
    with _providers_lock:
        providers, _providers[:] = list(_providers), []
        _generation += 1
    for provider in providers:
        provider.close()
    _forget_cached()


def drop_environment() -> None:
    """Drop what a crashed execution environment leaves behind: this thread's connections
    (closed and forgotten) and every cached setting and adapter, so the next invocation on
    this thread starts as a new environment would. Other threads' connections are other
    environments', possibly in the middle of an invocation: they stay open and theirs
    (:func:`reset` closes every thread's)."""
    mine = [value for value in vars(_environment).values() if isinstance(value, ConnectionProvider)]
    _environment.__dict__.clear()
    with _providers_lock:
        _providers[:] = [p for p in _providers if all(p is not m for m in mine)]
    for provider in mine:
        provider.close()
    _forget_cached()


def _forget_cached() -> None:
    for cached in (settings, sqs_client, _queue_url, publisher, notifier, s3_client, renderer_client,
                   dead_letter_queues, export_publisher, snapshot_job_publisher, link_signer,
                   mailer, lambda_client, secrets_provider):
        cached.cache_clear()
    _requested.clear()
