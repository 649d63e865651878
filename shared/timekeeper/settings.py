"""Every environment-variable name the functions read, the files bucket's object prefixes,
and the validated settings object of an execution environment.

The one place these names live: the Lambda edge (:mod:`timekeeper.edge`) reads the
variables, infra (``infra/``) sets them on the functions and grants access under the
prefixes, and the local stack sets them for its in-process functions. Domain code imports
only the prefixes (to name its objects); it never calls :func:`settings`, and this module
imports nothing of Timekeeper, so every layer may read it.

Environment (names and ARNs only; secrets come from Secrets Manager):
``RUN_QUEUE_URL_<PIPELINE>`` (a pipeline's run queue, :func:`run_queue_url_variable`),
``WORK_QUEUE_URL_<QUEUE>`` (a work queue, :func:`work_queue_url_variable`),
``SNAPSHOT_JOB_QUEUE_URL``, ``NOTIFICATION_TOPIC_ARN`` (optional), ``FILES_BUCKET``,
``REPORT_RENDERER_FUNCTION``, ``SNAPSHOT_DISPATCHER_FUNCTION`` (the planner's nudge),
``TIMEKEEPER_ENVIRONMENT``, ``TIMEKEEPER_SELFTEST_DRILLS``, ``TIMEKEEPER_FUNCTION``, the delivery variables
(``MAIL_SENDER``, ``DOWNLOAD_BASE_URL``, ``LINK_SIGNING_SECRET_ARN`` or
``LINK_SIGNING_KEY``), the JWT authorizer's (``JWT_ISSUER``, ``JWT_AUDIENCE``,
``JWT_JWKS_URL``, ``JWT_USER_CLAIM``, ``JWT_WORKSPACE_CLAIM``, ``JWT_ROLES_CLAIM``,
``JWT_ALGORITHMS``: :mod:`timekeeper.api.authorizer` reads them), and either
``DATABASE_URL`` (local stack) or ``DB_SECRET_ARN`` with ``DB_HOST`` (RDS Proxy endpoint;
``DB_NAME``; ``DB_SSL_ROOT_CERT`` optional) in AWS. Each function's secret is its own
login's; the migration function (the owner's login) also gets ``LOGIN_SECRET_ARNS``
(comma-separated) to set the other logins' passwords.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from functools import cache

from pydantic import BaseModel, ConfigDict, Field, model_validator

# ------------------------------------------------------------------ the database

#: The libpq URL of the database (local stack and tests); wins over the AWS variables.
DATABASE_URL_VARIABLE = "DATABASE_URL"
#: The function's own login secret (Secrets Manager ARN; JSON ``username``, ``password``).
DB_SECRET_ARN_VARIABLE = "DB_SECRET_ARN"
#: The RDS Proxy endpoint.
DB_HOST_VARIABLE = "DB_HOST"
#: The database name (default ``timekeeper``).
DB_NAME_VARIABLE = "DB_NAME"
#: The CA bundle (a file path) that verifies the database server's certificate; unset:
#: certifi's bundle (Mozilla's roots, which hold the Amazon roots RDS Proxy chains to).
DB_SSL_ROOT_CERT_VARIABLE = "DB_SSL_ROOT_CERT"
#: The migration function only: the secrets of the logins whose passwords it sets.
LOGIN_SECRET_ARNS_VARIABLE = "LOGIN_SECRET_ARNS"

# ------------------------------------------------------------------ queues, topics, functions

#: The function's ``functions/<folder>`` name, set by infra on every function: the edge
#: looks up the AWS services it declares in the topology and creates clients for those
#: only. Unset (the local stack, which hosts every function in one process): no check.
FUNCTION_VARIABLE = "TIMEKEEPER_FUNCTION"

#: The owner notifications topic (optional).
NOTIFICATION_TOPIC_VARIABLE = "NOTIFICATION_TOPIC_ARN"
#: The snapshot job queue's URL (snapshot dispatcher and run job).
SNAPSHOT_JOB_QUEUE_URL_VARIABLE = "SNAPSHOT_JOB_QUEUE_URL"
#: The snapshot dispatcher's function name, nudged by the planner after planning (unset: no nudge).
SNAPSHOT_NUDGE_FUNCTION_VARIABLE = "SNAPSHOT_DISPATCHER_FUNCTION"
#: The report renderer's function name (the callers that request renders).
RENDERER_FUNCTION_VARIABLE = "REPORT_RENDERER_FUNCTION"


def run_queue_url_variable(pipeline_name: str) -> str:
    """The variable naming the run queue of the pipeline ``pipeline_name``
    (``RUN_QUEUE_URL_ACCOUNTING`` for ``accounting``)."""
    return f"RUN_QUEUE_URL_{pipeline_name.upper()}"


def dead_letter_queue_arn_variable(queue_name: str) -> str:
    """The variable naming the dead-letter queue of the topology's queue ``queue_name``
    (:func:`timekeeper.topology.dead_letter_queues`), as the API reads it for the operations
    overview and redrive (``DEAD_LETTER_QUEUE_ARN_ACCOUNTING`` for ``accounting``)."""
    return f"DEAD_LETTER_QUEUE_ARN_{queue_name.upper()}"


def work_queue_url_variable(queue_name: str) -> str:
    """The variable naming the work queue ``queue_name`` (``WORK_QUEUE_URL_EXPORTS`` for ``exports``)."""
    return f"WORK_QUEUE_URL_{queue_name.upper()}"


# ------------------------------------------------------------------ snapshots

#: The environment whose snapshot types are enabled (``development`` | ``production``).
ENVIRONMENT_VARIABLE = "TIMEKEEPER_ENVIRONMENT"
#: Self-test drills (development): ``<workspace id>/<YYYY-MM>`` periods, comma-separated,
#: whose version 1 of the self-test type fails validation.
SELFTEST_DRILLS_VARIABLE = "TIMEKEEPER_SELFTEST_DRILLS"

# ------------------------------------------------------------------ files and delivery

#: The files bucket (exports, rendered reports, delivered files).
FILES_BUCKET_VARIABLE = "FILES_BUCKET"
#: Scheduled delivery: the verified SES sender address.
MAIL_SENDER_VARIABLE = "MAIL_SENDER"
#: Scheduled delivery: the SES configuration set every message is sent with (its event
#: destination publishes the messages' later states; unset locally).
MAIL_CONFIGURATION_SET_VARIABLE = "MAIL_CONFIGURATION_SET"
#: Scheduled delivery's sender: submissions in flight at once (1-16; 4 when unset).
MAIL_SEND_CONCURRENCY_VARIABLE = "MAIL_SEND_CONCURRENCY"
#: Scheduled delivery's sender: messages per second (overrides the rate read from SES's
#: ``GetSendQuota``; unset: the account's quota).
MAIL_SEND_RATE_VARIABLE = "MAIL_SEND_RATE"
#: Scheduled delivery's sender: seconds a sending rate read from SES is reused (300 when unset).
MAIL_QUOTA_TTL_VARIABLE = "MAIL_QUOTA_TTL_S"
#: Scheduled delivery: the public base URL of the download route.
DOWNLOAD_BASE_URL_VARIABLE = "DOWNLOAD_BASE_URL"
#: The download links' signing key: a Secrets Manager ARN (JSON ``{"key": ...}``) in AWS ...
LINK_SECRET_VARIABLE = "LINK_SIGNING_SECRET_ARN"
#: ... or the key itself, locally.
LINK_KEY_VARIABLE = "LINK_SIGNING_KEY"

#: The console (served by the API function): the key its session cookies are signed with
#: (unset: the console answers that it is not configured).
CONSOLE_SESSION_KEY_VARIABLE = "CONSOLE_SESSION_KEY"
#: ``1``: the console offers the development sign-in (the local stack only, never a deployment).
CONSOLE_DEV_SIGN_IN_VARIABLE = "CONSOLE_DEV_SIGN_IN"
#: The development sign-in's suggested people (JSON list of label, user_id, workspace_id, roles).
CONSOLE_SAMPLES_VARIABLE = "CONSOLE_SAMPLES"
#: The icon path a browser asks for by itself (a bookmark, a page without a ``<link
#: rel="icon">``): the console answers it, signed in or not, with a redirect to its icon
#: (deployed, API Gateway routes it to the API function without the authorizer).
CONSOLE_FAVICON_PATH = "/favicon.ico"
#: A deployment's session key: a Secrets Manager ARN (JSON ``{"key": ...}`` or
#: ``{"keys": [older, ..., newest]}``), read at cold start; the key itself is never in the
#: environment of a deployed function.
CONSOLE_SESSION_SECRET_VARIABLE = "CONSOLE_SESSION_KEY_SECRET_ARN"
#: The path before ``/console`` in the browser's address (the API stage, ``/v1``; empty
#: behind a custom domain or locally).
CONSOLE_BASE_PATH_VARIABLE = "CONSOLE_BASE_PATH"
#: The console's OpenID Connect sign-in: the issuer (the ID tokens' ``iss``), the console's
#: client id (their ``aud``), the client secret's Secrets Manager ARN (JSON
#: ``{"client_secret": ...}``; unset: a public client, PKCE only), the redirect URI
#: registered with the issuer (``https://.../console/callback``), and optionally the
#: authorization and token endpoints (unset: the issuer's discovery document) and the
#: issuer's logout address sign-out sends the browser to. The claim names are the JWT
#: authorizer's (``JWT_USER_CLAIM``, ``JWT_WORKSPACE_CLAIM``, ``JWT_ROLES_CLAIM``,
#: ``JWT_JWKS_URL``).
CONSOLE_OIDC_ISSUER_VARIABLE = "CONSOLE_OIDC_ISSUER"
CONSOLE_OIDC_CLIENT_ID_VARIABLE = "CONSOLE_OIDC_CLIENT_ID"
CONSOLE_OIDC_CLIENT_SECRET_VARIABLE = "CONSOLE_OIDC_CLIENT_SECRET_ARN"
CONSOLE_OIDC_REDIRECT_URI_VARIABLE = "CONSOLE_OIDC_REDIRECT_URI"
CONSOLE_OIDC_AUTHORIZATION_ENDPOINT_VARIABLE = "CONSOLE_OIDC_AUTHORIZATION_ENDPOINT"
CONSOLE_OIDC_TOKEN_ENDPOINT_VARIABLE = "CONSOLE_OIDC_TOKEN_ENDPOINT"
CONSOLE_OIDC_LOGOUT_URL_VARIABLE = "CONSOLE_OIDC_LOGOUT_URL"

# ------------------------------------------------------------------ the JWT authorizer

#: The OpenID Connect issuer the authorizer trusts (the tokens' ``iss``, exactly).
JWT_ISSUER_VARIABLE = "JWT_ISSUER"
#: The audience the tokens must name (``aud``: the client id of the API's app client).
JWT_AUDIENCE_VARIABLE = "JWT_AUDIENCE"
#: The issuer's JWKS document (default: ``<issuer>/.well-known/jwks.json``).
JWT_JWKS_URL_VARIABLE = "JWT_JWKS_URL"
#: The claims that carry the user id, the workspace id and the roles (comma-separated
#: names, defaults ``sub``, ``workspace_id``, ``roles``), and the signing algorithms
#: accepted (comma-separated, default ``RS256,ES256``).
JWT_USER_CLAIM_VARIABLE = "JWT_USER_CLAIM"
JWT_WORKSPACE_CLAIM_VARIABLE = "JWT_WORKSPACE_CLAIM"
JWT_ROLES_CLAIM_VARIABLE = "JWT_ROLES_CLAIM"
JWT_ALGORITHMS_VARIABLE = "JWT_ALGORITHMS"

#: Object prefixes of the files bucket: one per kind of object, each with its own grants
#: and lifecycle rule (infra) and its own key scheme (the domain module writing it).
EXPORTS_PREFIX = "exports/"
DELIVERIES_PREFIX = "deliveries/"
REPORTS_PREFIX = "reports/"
#: Rendered reports' retention (days): the files bucket's lifecycle rule removes an object
#: under :data:`REPORTS_PREFIX` this long after it was written (``timekeeper:reportRetentionDays``;
#: the API tells a render past it as expired instead of signing a link S3 refuses).
REPORT_RETENTION_DAYS_VARIABLE = "REPORT_RETENTION_DAYS"
#: Its default (days).
DEFAULT_REPORT_RETENTION_DAYS = 35


def report_retention_days(environ: Mapping[str, str] | None = None) -> int:
    """The rendered reports' retention in days from ``environ`` (``os.environ`` when None):
    :data:`REPORT_RETENTION_DAYS_VARIABLE`, or :data:`DEFAULT_REPORT_RETENTION_DAYS` when
    unset or not a positive whole number."""
    text = (os.environ if environ is None else environ).get(REPORT_RETENTION_DAYS_VARIABLE, "")
    return int(text) if text.strip().isdigit() and int(text) > 0 else DEFAULT_REPORT_RETENTION_DAYS

#: The languages whose CLDR data (Babel's ``locale-data``) the Lambda layer ships: a
#: workspace's locale must be one of them (``timekeeper.platform.directory.check_locale``),
#: and the layer's build (``infra/layer.py``) drops every other language's data, about
#: 23 MiB of the 31, and Babel's message-catalogue tooling (the layer stays under its
#: 100 MiB budget).
FILE_LOCALE_LANGUAGES = frozenset(
    "en de fr es it nl pt sv da nb fi is pl cs sk sl hr hu ro bg el tr ru uk et lv lt ca ja zh he ar".split())


class RuntimeSettings(BaseModel):
    """Validated process settings; raises ``pydantic.ValidationError`` at cold start when
    the environment is incomplete, so a misconfigured function fails loudly at once."""

    model_config = ConfigDict(frozen=True)

    notification_topic_arn: str | None = None
    database_url: str | None = None
    db_secret_arn: str | None = None
    db_host: str | None = None
    db_name: str = "timekeeper"
    #: The CA bundle verifying the database server (None: certifi's).
    db_ssl_root_cert: str | None = None
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
    mail_configuration_set: str | None = None
    download_base_url: str | None = None
    link_signing_secret_arn: str | None = None
    link_signing_key: str | None = None
    #: The delivery sender's pace: submissions in flight, messages per second (None: the
    #: account's SES quota) and how long a read quota is reused (seconds).
    mail_send_concurrency: int = Field(default=4, ge=1, le=16)
    mail_send_rate: float | None = Field(default=None, gt=0)
    mail_quota_ttl_s: float = Field(default=300.0, gt=0)

    @model_validator(mode="after")
    def _database_named(self) -> RuntimeSettings:
        if not self.database_url and not (self.db_secret_arn and self.db_host):
            raise ValueError(f"set {DATABASE_URL_VARIABLE}, or {DB_SECRET_ARN_VARIABLE} and {DB_HOST_VARIABLE}")
        return self

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> RuntimeSettings:
        """Settings from ``env`` (an ``os.environ``-like mapping); empty values count as unset.
        (The queue URLs and the snapshot variables are read where they are used, by name.)
        Raises ``pydantic.ValidationError`` when no database is named."""
        def get(name: str) -> str | None:
            return env.get(name) or None
        return cls(
            notification_topic_arn=get(NOTIFICATION_TOPIC_VARIABLE), database_url=get(DATABASE_URL_VARIABLE),
            db_secret_arn=get(DB_SECRET_ARN_VARIABLE), db_host=get(DB_HOST_VARIABLE),
            db_name=env.get(DB_NAME_VARIABLE, "timekeeper"), db_ssl_root_cert=get(DB_SSL_ROOT_CERT_VARIABLE),
            login_secret_arns=tuple(a.strip() for a in env.get(LOGIN_SECRET_ARNS_VARIABLE, "").split(",")
                                    if a.strip()),
            files_bucket=get(FILES_BUCKET_VARIABLE), report_renderer_function=get(RENDERER_FUNCTION_VARIABLE),
            mail_sender=get(MAIL_SENDER_VARIABLE), mail_configuration_set=get(MAIL_CONFIGURATION_SET_VARIABLE),
            download_base_url=get(DOWNLOAD_BASE_URL_VARIABLE),
            link_signing_secret_arn=get(LINK_SECRET_VARIABLE), link_signing_key=get(LINK_KEY_VARIABLE),
            mail_send_concurrency=get(MAIL_SEND_CONCURRENCY_VARIABLE) or 4,
            mail_send_rate=get(MAIL_SEND_RATE_VARIABLE), mail_quota_ttl_s=get(MAIL_QUOTA_TTL_VARIABLE) or 300.0,
        )


@cache
def settings() -> RuntimeSettings:
    """The execution environment's settings, read from ``os.environ`` once (the edge's
    ``reset()`` forgets them). Raises ``pydantic.ValidationError`` as
    :meth:`RuntimeSettings.from_environment`."""
    return RuntimeSettings.from_environment(os.environ)
