"""Infrastructure-only settings and the deployment's context keys.

Pipeline numbers (rates, timeouts, batch sizes, concurrency, receive counts, alarm
thresholds) live in :mod:`timekeeper.topology` and nowhere else. What is here has no
meaning for the code that runs: paths, memory sizes, database capacity, retention periods,
and the context keys an operator passes to ``cdk deploy -c key=value`` (see
README.md for the table).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aws_cdk import aws_logs as logs
from constructs import Node

from infra.storage import (
    DELIVERY_RETENTION_DAYS,
    DELIVERY_RETENTION_MARGIN_DAYS,
    LINK_MAX_LIFETIME_DAYS,
    REPORT_RETENTION_DAYS,
)
from timekeeper.topology import API, HISTORY

#: Repository root (the folder holding app.py).
ROOT = Path(__file__).resolve().parent.parent
#: One folder per Lambda, each with ``handler.py`` exposing ``lambda_handler``.
FUNCTIONS_DIR = ROOT / "functions"
#: The layer package (``shared/timekeeper``).
SHARED_DIR = ROOT / "shared"
#: The layer's third-party dependencies, fully pinned, installed with ``--no-deps``.
LAYER_REQUIREMENTS = Path(__file__).resolve().parent / "layer-requirements.txt"

#: The Lambda runtime's Python version; the layer's wheels are chosen for it.
PYTHON_VERSION = "3.12"
#: The Lambda architectures a deployment may choose (context ``timekeeper:architecture``),
#: and the default: Graviton (arm64) costs about 20 % less per GB-second than x86_64, and
#: every pinned binary package of the layer has manylinux aarch64 wheels.
ARM64, X86_64 = "arm64", "x86_64"
DEFAULT_ARCHITECTURE = ARM64
#: pip platform tags for each Lambda architecture (Amazon Linux 2023, glibc 2.34).
LAYER_PLATFORMS_BY_ARCHITECTURE = {
    ARM64: ("manylinux2014_aarch64", "manylinux_2_28_aarch64"),
    X86_64: ("manylinux2014_x86_64", "manylinux_2_28_x86_64"),
}
#: The platform tags of the default architecture.
LAYER_PLATFORMS = LAYER_PLATFORMS_BY_ARCHITECTURE[DEFAULT_ARCHITECTURE]
#: Paths of ``shared/timekeeper`` left out of the layer, because Lambda never runs them: the
#: local stack (``local/``: moto, the embedded PostgreSQL, the simulation, the chaos
#: campaigns and the sample-data generators) and the command line (``__main__.py``).
LAYER_EXCLUDED = ("local", "__main__.py")

#: Memory of each kind of function (MB). Not in the topology: it does not change behaviour.
DISPATCHER_MEMORY_MB = 512
CONSUMER_MEMORY_MB = 512
MIGRATE_MEMORY_MB = 512
API_MEMORY_MB = 512
#: The API function's timeout: API Gateway's integration limit is 29 s.
API_TIMEOUT_S = 29
#: The API stage's throttle (every method): steady requests per second and burst. The API's
#: 10 reserved executions at about 0.2 s a request serve some 50 a second.
API_THROTTLE_RATE_RPS = 50
API_THROTTLE_BURST = 100
#: The public download route's own, tighter method throttle: its 3 reserved executions
#: serve about 15 downloads a second (a token check, one read, a presign).
DOWNLOAD_THROTTLE_RATE_RPS = 10
DOWNLOAD_THROTTLE_BURST = 20
#: The WAF rate rule's default limit: requests to the public link routes (downloads and
#: opt-outs together) one IP address may make in five minutes (one a second) before WAF
#: blocks it; a recipient opens a handful of links, a scraper hundreds.
DOWNLOAD_RATE_LIMIT = 300
#: The download function's timeout and memory.
DOWNLOAD_TIMEOUT_S = 10
DOWNLOAD_MEMORY_MB = 512
#: The migration trigger's function timeout (seconds); it runs once per deploy.
MIGRATE_TIMEOUT_S = 300
#: The migration function's folder under functions/.
MIGRATE_FUNCTION = "migrate"

#: Aurora PostgreSQL Serverless v2 capacity (ACUs) and backup retention.
AURORA_MIN_ACU = 0.5
AURORA_MAX_ACU = 4
AURORA_BACKUP_DAYS = 7
#: Secrets Manager rotation of the database credentials.
SECRET_ROTATION_DAYS = 30
#: The master user of the created cluster (the secret holds its password): the owner of
#: the schema, used by the migration function only.
DB_ADMIN_USER = "timekeeper_admin"
DB_PORT = 5432

#: Aurora PostgreSQL's default ``max_connections`` of a Serverless v2 instance, by the
#: cluster's MAXIMUM capacity (ACUs): AWS derives it from the memory of the maximum ACU, not
#: of the capacity the instance runs at, and publishes these values ("Maximum connections
#: for Aurora Serverless v2" in the Aurora User Guide). Other maximums are not in AWS's
#: table: choose one of these, or read ``SHOW max_connections`` and add it here.
AURORA_POSTGRES_MAX_CONNECTIONS = {1: 189, 4: 823, 8: 1669, 16: 3360, 32: 5000, 64: 5000, 128: 5000,
                                   192: 5000, 256: 5000}
#: With a minimum capacity of 0.5 ACU or less, Aurora PostgreSQL caps ``max_connections``
#: at this value whatever the maximum.
AURORA_LOW_MINIMUM_CONNECTION_CAP = 2000
#: Connections kept out of the proxy's share: the rotation functions, an operator's psql,
#: RDS's own reserved superuser connections.
DB_RESERVED_CONNECTIONS = 10
#: Idle connections the proxy keeps open, as a percent of its maximum.
PROXY_MAX_IDLE_CONNECTIONS_PERCENT = 50


def aurora_max_connections(*, max_acu: float = AURORA_MAX_ACU, min_acu: float = AURORA_MIN_ACU) -> int:
    """Aurora PostgreSQL's ``max_connections`` of every Serverless v2 instance of a cluster
    whose capacity ranges from ``min_acu`` to ``max_acu`` (ACUs): the value AWS derives
    from the maximum (:data:`AURORA_POSTGRES_MAX_CONNECTIONS`), capped at
    :data:`AURORA_LOW_MINIMUM_CONNECTION_CAP` when the minimum is 0.5 ACU or less. It does
    not change as the instance scales. Raises ``ValueError`` for a maximum AWS publishes no
    value for."""
    try:
        derived = AURORA_POSTGRES_MAX_CONNECTIONS[max_acu]  # type: ignore[index]
    except KeyError:
        raise ValueError(f"AURORA_MAX_ACU {max_acu}: AWS publishes max_connections for a maximum of "
                         f"{', '.join(map(str, AURORA_POSTGRES_MAX_CONNECTIONS))} ACUs only") from None
    return min(derived, AURORA_LOW_MINIMUM_CONNECTION_CAP) if min_acu <= 0.5 else derived


def proxy_max_connections_percent(budget_total: int, *, max_connections: int | None = None) -> int:
    """RDS Proxy's ``MaxConnectionsPercent``: the smallest whole percent of the cluster's
    ``max_connections`` (default :func:`aurora_max_connections`) that holds
    ``budget_total`` connections, so the proxy opens at most the budget plus under one
    percent of ``max_connections``. Raises ``ValueError`` when the budget plus
    :data:`DB_RESERVED_CONNECTIONS` does not fit."""
    capacity = aurora_max_connections() if max_connections is None else max_connections
    if budget_total + DB_RESERVED_CONNECTIONS > capacity:
        raise ValueError(f"the connection budget ({budget_total}) plus {DB_RESERVED_CONNECTIONS} reserved exceeds "
                         f"max_connections {capacity}: raise AURORA_MAX_ACU or lower concurrency")
    return max(1, math.ceil(100 * budget_total / capacity))

#: Period of every alarm except dispatcher silence (whose window is in the topology).
ALARM_PERIOD_MINUTES = 5

#: The API's latency alarm: API Gateway's p95 ``Latency`` (milliseconds, request to
#: response) above this over one alarm period. The integration limit is 29 s; a route
#: answers in well under a second, so 3 s means the database or a caller waits.
API_LATENCY_ALARM_MS = 3000
#: Aurora capacity alarm: the writer's ``ACUUtilization`` (percent of AURORA_MAX_ACU)
#: above this at any time of an alarm period: the cluster is at its ceiling.
AURORA_ACU_ALARM_PERCENT = 90
#: RDS Proxy borrow latency alarm: ``DatabaseConnectionsBorrowLatency`` (microseconds)
#: above this share of the borrow timeout (the connect timeout): functions nearly time out
#: waiting for a pooled connection.
PROXY_BORROW_ALARM_SHARE = 0.5
#: SES reputation alarms, as the fractions SES publishes (``Reputation.BounceRate``,
#: ``Reputation.ComplaintRate`` of the configuration set): AWS's advice is to stay below 2 %
#: bounces and 0.1 % complaints; it reviews an account at 5 % / 0.1 % and may pause it at
#: 10 % / 0.5 %.
SES_BOUNCE_RATE_ALARM = 0.02
SES_COMPLAINT_RATE_ALARM = 0.001
#: The period of the SES reputation alarms: SES updates the rates over its own window, not
#: per message.
SES_REPUTATION_PERIOD_MINUTES = 60

#: Tag naming the functions/ folder a Lambda was built from (the infra tests read it).
FUNCTION_TAG = "timekeeper:function"


#: The retention periods CloudWatch Logs accepts (days), as CDK's enum.
_RETENTION = {
    1: logs.RetentionDays.ONE_DAY, 3: logs.RetentionDays.THREE_DAYS, 5: logs.RetentionDays.FIVE_DAYS,
    7: logs.RetentionDays.ONE_WEEK, 14: logs.RetentionDays.TWO_WEEKS, 30: logs.RetentionDays.ONE_MONTH,
    60: logs.RetentionDays.TWO_MONTHS, 90: logs.RetentionDays.THREE_MONTHS, 120: logs.RetentionDays.FOUR_MONTHS,
    150: logs.RetentionDays.FIVE_MONTHS, 180: logs.RetentionDays.SIX_MONTHS, 365: logs.RetentionDays.ONE_YEAR,
    400: logs.RetentionDays.THIRTEEN_MONTHS, 545: logs.RetentionDays.EIGHTEEN_MONTHS,
    731: logs.RetentionDays.TWO_YEARS, 1827: logs.RetentionDays.FIVE_YEARS, 3653: logs.RetentionDays.TEN_YEARS,
}


def _parse_list(value: Any) -> list[str]:
    """A context list: a JSON list, a JSON string of a list, or comma-separated text."""
    if value is None:
        return []
    if isinstance(value, list):
        return [str(v) for v in value]
    text = str(value).strip()
    if text.startswith("["):
        return [str(v) for v in json.loads(text)]
    return [part.strip() for part in text.split(",") if part.strip()]


def architecture_of(node: Node) -> str:
    """The Lambda architecture the context ``timekeeper:architecture`` visible from ``node``
    chooses (``arm64`` or ``x86_64``; default :data:`DEFAULT_ARCHITECTURE`). Raises
    ``ValueError`` for another value."""
    value = str(node.try_get_context("timekeeper:architecture") or DEFAULT_ARCHITECTURE).strip().lower()
    if value not in LAYER_PLATFORMS_BY_ARCHITECTURE:
        raise ValueError(f"timekeeper:architecture={value!r}: use {ARM64} or {X86_64}")
    return value


def parse_bool(value: Any, default: bool) -> bool:
    """A context boolean: a bool, or text ``1``/``true``/``yes``/``on`` (any case); None: ``default``."""
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    return str(value).strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True, kw_only=True)
class ExistingDatabase:
    """An existing PostgreSQL (or its RDS Proxy) the functions use instead of a created one.

    ``host``: the endpoint (preferably an RDS Proxy); ``secret_arn``: a Secrets Manager
    secret with ``username``, ``password`` and optionally ``port``; ``vpc_id`` and
    ``subnet_ids``: where the functions run (empty: outside any VPC); ``security_group_id``:
    a group the database admits, attached to every function.
    """

    host: str
    secret_arn: str
    name: str
    vpc_id: str | None
    subnet_ids: tuple[str, ...]
    security_group_id: str | None


#: Domains that can never receive mail (RFC 2606 and RFC 6761): a sender there is a
#: placeholder left in, not a choice.
RESERVED_MAIL_DOMAINS = ("example.com", "example.net", "example.org")
RESERVED_MAIL_TOP_LEVEL = ("example", "test", "invalid", "localhost")
_ADDRESS = re.compile(r"[^@\s]+@([A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)+)")


@dataclass(frozen=True, kw_only=True)
class JwtSettings:
    """The JWT authorizer's trust: an OpenID Connect ``issuer`` and the ``audience`` its
    tokens name, or ``cognito`` (a user pool and app client the stack creates: issuer and
    audience are theirs); ``jwks_url`` (None: ``<issuer>/.well-known/jwks.json``) and the
    claims mapped to the user, the workspace and the roles."""

    issuer: str | None = None
    audience: str | None = None
    cognito: bool = False
    jwks_url: str | None = None
    user_claim: str = "sub"
    workspace_claim: str = "workspace_id"
    roles_claim: str = "roles"


@dataclass(frozen=True, kw_only=True)
class ConsoleDeployment:
    """The console deployed (``timekeeper:console=true``): people sign in with the JWT
    authorizer's issuer and its claim names. With the stack's Cognito user pool,
    ``cognito_domain_prefix`` names its hosted sign-in domain
    (``https://<prefix>.auth.<region>.amazoncognito.com``) and the stack creates the
    console's app client; with the operator's issuer, ``client_id`` is the console's
    client there and ``client_secret_arn`` (optional) a Secrets Manager secret holding
    its ``client_secret`` (none: a public client, PKCE only)."""

    cognito_domain_prefix: str | None = None
    client_id: str | None = None
    client_secret_arn: str | None = None


@dataclass(frozen=True, kw_only=True)
class MailSettings:
    """Where delivery e-mail comes from: ``sender`` (the From address), ``domain`` (when
    set, a domain identity with DKIM is created for it; the sender is at it or below it),
    ``identity_exists`` (the identity is verified already: create none)."""

    sender: str
    domain: str | None = None
    identity_exists: bool = False

    def __post_init__(self) -> None:
        match = _ADDRESS.fullmatch(self.sender)
        if match is None:
            raise ValueError(f"{DeploymentConfig.KEY_MAIL_SENDER}={self.sender!r} is not an e-mail address")
        domain = match.group(1).lower()
        if reserved_mail_domain(domain):
            raise ValueError(
                f"{DeploymentConfig.KEY_MAIL_SENDER}={self.sender!r}: {domain} can receive no mail and SES "
                "verifies no identity there; deliveries would fail. Pass the address deliveries come from.")
        if self.domain is not None:
            own = self.domain.lower()
            if reserved_mail_domain(own):
                raise ValueError(f"{DeploymentConfig.KEY_MAIL_DOMAIN}={self.domain!r} is a reserved domain")
            if domain != own and not domain.endswith("." + own):
                raise ValueError(f"{DeploymentConfig.KEY_MAIL_SENDER}={self.sender!r} is not at "
                                 f"{DeploymentConfig.KEY_MAIL_DOMAIN}={self.domain!r}")


def reserved_mail_domain(domain: str) -> bool:
    """Whether ``domain`` can never receive mail: ``example.com`` (``.net``, ``.org``) or
    below it, or under the ``example``, ``test``, ``invalid`` or ``localhost`` top level."""
    domain = domain.lower().rstrip(".")
    return (any(domain == d or domain.endswith("." + d) for d in RESERVED_MAIL_DOMAINS)
            or domain.rsplit(".", 1)[-1] in RESERVED_MAIL_TOP_LEVEL)


@dataclass(frozen=True, kw_only=True)
class DeploymentConfig:
    """The deployment's choices, read from CDK context (``-c key=value`` or cdk.json).

    Raises ``ValueError`` when the context is inconsistent (for example an existing
    database without its secret), so a wrong deploy fails at synth, not halfway through.
    """

    bundle_layer: bool = True
    deletion_protection: bool = True
    alarm_email: str | None = None
    export_retention_days: int = 30
    #: Days before a delivered file (``deliveries/``) expires: longer than a link lives.
    delivery_retention_days: int = DELIVERY_RETENTION_DAYS
    #: Days before a rendered report (``reports/``) expires: longer than a link lives (a
    #: delivered report's links point at its render).
    report_retention_days: int = REPORT_RETENTION_DAYS
    log_retention_days: int = 30
    existing_database: ExistingDatabase | None = None
    authorizer_function_arn: str | None = None
    #: The WAF web ACL's rate-based rule on the public link routes: requests one IP address
    #: may make in five minutes before it is blocked (None: no web ACL, ``timekeeper:waf=false``).
    download_rate_limit: int | None = DOWNLOAD_RATE_LIMIT
    #: The JWT authorizer for an OpenID Connect issuer (None: not configured).
    jwt: JwtSettings | None = None
    #: The console deployed with its OpenID Connect sign-in (None: not deployed).
    console: ConsoleDeployment | None = None
    stage: str | None = None
    manage_api_gateway_account: bool = False
    #: Which snapshot types are enabled: ``production`` (the default) or ``development``
    #: (adds the Platform self-test type).
    environment: str = "production"
    #: Where delivery e-mail comes from (required: there is no address to assume).
    mail: MailSettings
    #: How the functions in the created VPC reach the AWS services they call:
    #: ``endpoints`` (interface endpoints for exactly the declared services, no NAT),
    #: ``nat`` (one NAT gateway; no interface endpoint) or ``nat-instance`` (one NAT
    #: instance instead of the gateway: the lean profile).
    egress: str = "endpoints"
    #: Whether functions reserve concurrency (dispatchers, planner, renderer, API). False
    #: lets an account whose concurrency quota is still the default (10) deploy.
    reserved_concurrency: bool = True
    #: The functions' and the layer's architecture: ``arm64`` (the default) or ``x86_64``.
    architecture: str = DEFAULT_ARCHITECTURE
    #: Whether the created Aurora cluster has a Serverless v2 reader in the other zone,
    #: which Aurora promotes when the writer or its zone fails. Default: yes, except in the
    #: lean profile (``nat-instance`` egress), which keeps one instance.
    database_reader: bool = True

    #: Context keys, documented in README.md.
    KEY_BUNDLE = "timekeeper:bundleLayer"
    KEY_DELETION_PROTECTION = "timekeeper:deletionProtection"
    KEY_ALARM_EMAIL = "timekeeper:alarmEmail"
    KEY_EXPORT_RETENTION = "timekeeper:exportRetentionDays"
    KEY_DELIVERY_RETENTION = "timekeeper:deliveryRetentionDays"
    KEY_REPORT_RETENTION = "timekeeper:reportRetentionDays"
    KEY_LOG_RETENTION = "timekeeper:logRetentionDays"
    KEY_DB_HOST = "timekeeper:dbHost"
    KEY_DB_SECRET_ARN = "timekeeper:dbSecretArn"
    KEY_DB_NAME = "timekeeper:dbName"
    KEY_VPC_ID = "timekeeper:vpcId"
    KEY_SUBNET_IDS = "timekeeper:subnetIds"
    KEY_DB_SECURITY_GROUP = "timekeeper:dbSecurityGroupId"
    KEY_AUTHORIZER = "timekeeper:authorizerFunctionArn"
    KEY_DOWNLOAD_RATE_LIMIT = "timekeeper:downloadRateLimit"
    KEY_WAF = "timekeeper:waf"
    KEY_JWT_ISSUER = "timekeeper:jwtIssuer"
    KEY_JWT_AUDIENCE = "timekeeper:jwtAudience"
    KEY_JWT_JWKS_URL = "timekeeper:jwtJwksUrl"
    KEY_JWT_USER_CLAIM = "timekeeper:jwtUserClaim"
    KEY_JWT_WORKSPACE_CLAIM = "timekeeper:jwtWorkspaceClaim"
    KEY_JWT_ROLES_CLAIM = "timekeeper:jwtRolesClaim"
    KEY_COGNITO = "timekeeper:cognitoUserPool"
    KEY_CONSOLE = "timekeeper:console"
    KEY_COGNITO_DOMAIN_PREFIX = "timekeeper:cognitoDomainPrefix"
    KEY_CONSOLE_CLIENT_ID = "timekeeper:consoleClientId"
    KEY_CONSOLE_CLIENT_SECRET_ARN = "timekeeper:consoleClientSecretArn"
    KEY_STAGE = "timekeeper:stage"
    KEY_API_GATEWAY_ACCOUNT = "timekeeper:manageApiGatewayAccount"
    KEY_ENVIRONMENT = "timekeeper:environment"
    KEY_MAIL_SENDER = "timekeeper:mailSender"
    KEY_MAIL_DOMAIN = "timekeeper:mailDomain"
    KEY_MAIL_IDENTITY_EXISTS = "timekeeper:mailIdentityExists"
    KEY_EGRESS = "timekeeper:egress"
    KEY_RESERVED_CONCURRENCY = "timekeeper:reservedConcurrency"
    KEY_ARCHITECTURE = "timekeeper:architecture"
    KEY_DATABASE_READER = "timekeeper:databaseReader"
    #: The values of ``timekeeper:egress``.
    EGRESS_ENDPOINTS, EGRESS_NAT, EGRESS_NAT_INSTANCE = "endpoints", "nat", "nat-instance"

    @property
    def mail_sender(self) -> str:
        """The From address of delivery e-mail."""
        return self.mail.sender

    @property
    def name_prefix(self) -> str:
        """The prefix of every physical name: ``timekeeper``, or ``timekeeper-<stage>``."""
        return f"timekeeper-{self.stage}" if self.stage else "timekeeper"

    def stack_name(self, base: str) -> str:
        """``base`` (e.g. ``TimekeeperData``), or ``base-<stage>`` when a stage is set."""
        return f"{base}-{self.stage}" if self.stage else base

    @property
    def log_retention(self) -> logs.RetentionDays:
        """The log groups' retention as CDK's enum (only CloudWatch's allowed values)."""
        try:
            return _RETENTION[self.log_retention_days]
        except KeyError:
            raise ValueError(
                f"{self.KEY_LOG_RETENTION}={self.log_retention_days} is not a CloudWatch retention") from None

    @classmethod
    def _mail(cls, get: Any) -> MailSettings:
        sender = get(cls.KEY_MAIL_SENDER)
        if not sender:
            raise ValueError(
                f"scheduled delivery needs the address its e-mail comes from: deploy with "
                f"-c {cls.KEY_MAIL_SENDER}=reports@your-domain (and -c {cls.KEY_MAIL_DOMAIN}=your-domain to "
                f"create a DKIM-signed domain identity; see docs/deploy.md)")
        domain = str(get(cls.KEY_MAIL_DOMAIN) or "").strip()
        return MailSettings(sender=str(sender).strip(), domain=domain or None,
                            identity_exists=parse_bool(get(cls.KEY_MAIL_IDENTITY_EXISTS), False))

    @classmethod
    def _jwt(cls, get: Any) -> JwtSettings | None:
        def text(key: str) -> str | None:
            value = get(key)
            return str(value).strip() or None if value is not None else None

        issuer, audience, cognito = text(cls.KEY_JWT_ISSUER), text(cls.KEY_JWT_AUDIENCE), \
            parse_bool(get(cls.KEY_COGNITO), False)
        claims = {name: text(key) for name, key in (("user_claim", cls.KEY_JWT_USER_CLAIM),
                                                    ("workspace_claim", cls.KEY_JWT_WORKSPACE_CLAIM),
                                                    ("roles_claim", cls.KEY_JWT_ROLES_CLAIM))}
        if cognito:
            if issuer or audience:
                raise ValueError(f"{cls.KEY_COGNITO} creates the issuer and the audience: drop {cls.KEY_JWT_ISSUER} "
                                 f"and {cls.KEY_JWT_AUDIENCE}")
            defaults = {"user_claim": "sub", "workspace_claim": "custom:workspace_id", "roles_claim": "cognito:groups"}
            return JwtSettings(cognito=True, jwks_url=text(cls.KEY_JWT_JWKS_URL),
                               **{k: v or defaults[k] for k, v in claims.items()})
        if not (issuer or audience):
            return None
        if not (issuer and audience):
            raise ValueError(f"the JWT authorizer needs both {cls.KEY_JWT_ISSUER} and {cls.KEY_JWT_AUDIENCE}")
        if not issuer.startswith("https://"):
            raise ValueError(f"{cls.KEY_JWT_ISSUER}={issuer!r}: an OpenID Connect issuer is an https URL")
        defaults = {"user_claim": "sub", "workspace_claim": "workspace_id", "roles_claim": "roles"}
        return JwtSettings(issuer=issuer, audience=audience, jwks_url=text(cls.KEY_JWT_JWKS_URL),
                           **{k: v or defaults[k] for k, v in claims.items()})

    @classmethod
    def _console(cls, get: Any, jwt: JwtSettings | None) -> ConsoleDeployment | None:
        def text(key: str) -> str | None:
            value = get(key)
            return str(value).strip() or None if value is not None else None

        named = [key for key in (cls.KEY_COGNITO_DOMAIN_PREFIX, cls.KEY_CONSOLE_CLIENT_ID,
                                 cls.KEY_CONSOLE_CLIENT_SECRET_ARN) if text(key)]
        if not parse_bool(get(cls.KEY_CONSOLE), False):
            if named:
                raise ValueError(f"{', '.join(named)} configure the console's sign-in: add {cls.KEY_CONSOLE}=true")
            return None
        if jwt is None:
            raise ValueError(f"{cls.KEY_CONSOLE} signs people in with the JWT authorizer's issuer: deploy with "
                             f"{cls.KEY_COGNITO}=true or {cls.KEY_JWT_ISSUER} and {cls.KEY_JWT_AUDIENCE}")
        prefix, client_id = text(cls.KEY_COGNITO_DOMAIN_PREFIX), text(cls.KEY_CONSOLE_CLIENT_ID)
        secret_arn = text(cls.KEY_CONSOLE_CLIENT_SECRET_ARN)
        if jwt.cognito:
            if client_id or secret_arn:
                raise ValueError(f"{cls.KEY_COGNITO} creates the console's app client: drop "
                                 f"{cls.KEY_CONSOLE_CLIENT_ID} and {cls.KEY_CONSOLE_CLIENT_SECRET_ARN}")
            # Cognito's rule for a hosted domain prefix (no reserved words).
            if not prefix or not re.fullmatch(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?", prefix) or any(
                    word in prefix for word in ("aws", "amazon", "cognito")):
                raise ValueError(f"the console's sign-in needs the user pool's hosted domain: "
                                 f"{cls.KEY_COGNITO_DOMAIN_PREFIX}=<1-63 lowercase letters, digits and hyphens, "
                                 "unique in the region, without aws, amazon or cognito>")
            return ConsoleDeployment(cognito_domain_prefix=prefix)
        if prefix:
            raise ValueError(f"{cls.KEY_COGNITO_DOMAIN_PREFIX} is the stack's user pool's domain: with "
                             f"{cls.KEY_JWT_ISSUER} name the console's client with {cls.KEY_CONSOLE_CLIENT_ID}")
        if not client_id:
            raise ValueError(f"the console's sign-in at {jwt.issuer} needs its client id there: "
                             f"{cls.KEY_CONSOLE_CLIENT_ID}=<id> (and {cls.KEY_CONSOLE_CLIENT_SECRET_ARN} for a "
                             "confidential client)")
        if secret_arn and not re.fullmatch(r"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:.+-[A-Za-z0-9]{6}",
                                           secret_arn):
            raise ValueError(f"{cls.KEY_CONSOLE_CLIENT_SECRET_ARN}={secret_arn!r} is not a complete Secrets Manager "
                             "secret ARN (with its six-character suffix)")
        return ConsoleDeployment(client_id=client_id, client_secret_arn=secret_arn)

    @classmethod
    def _rate_limit(cls, get: Any) -> int | None:
        """The WAF rate rule's limit; None when the deployment opts out of the web ACL."""
        limit = get(cls.KEY_DOWNLOAD_RATE_LIMIT)
        if parse_bool(get(cls.KEY_WAF), True):
            return int(limit) if limit else DOWNLOAD_RATE_LIMIT
        if limit:
            raise ValueError(f"{cls.KEY_DOWNLOAD_RATE_LIMIT} is the WAF web ACL's rule: drop it, or drop "
                             f"{cls.KEY_WAF}=false")
        return None

    @classmethod
    def from_node(cls, node: Node) -> DeploymentConfig:
        """Read the context visible from ``node`` (the app's)."""
        get = node.try_get_context
        host = get(cls.KEY_DB_HOST)
        secret_arn = get(cls.KEY_DB_SECRET_ARN)
        existing = None
        if host or secret_arn:
            if not (host and secret_arn):
                raise ValueError(f"an existing database needs both {cls.KEY_DB_HOST} and {cls.KEY_DB_SECRET_ARN}")
            vpc_id = get(cls.KEY_VPC_ID) or None
            subnet_ids = tuple(_parse_list(get(cls.KEY_SUBNET_IDS)))
            security_group = get(cls.KEY_DB_SECURITY_GROUP) or None
            if vpc_id and not (subnet_ids and security_group):
                raise ValueError(f"{cls.KEY_VPC_ID} needs {cls.KEY_SUBNET_IDS} and {cls.KEY_DB_SECURITY_GROUP}")
            if (subnet_ids or security_group) and not vpc_id:
                raise ValueError(f"{cls.KEY_SUBNET_IDS} and {cls.KEY_DB_SECURITY_GROUP} need {cls.KEY_VPC_ID}")
            existing = ExistingDatabase(host=str(host), secret_arn=str(secret_arn),
                                        name=str(get(cls.KEY_DB_NAME) or "timekeeper"), vpc_id=vpc_id,
                                        subnet_ids=subnet_ids, security_group_id=security_group)
        config = cls(
            bundle_layer=parse_bool(get(cls.KEY_BUNDLE), True),
            deletion_protection=parse_bool(get(cls.KEY_DELETION_PROTECTION), True),
            alarm_email=get(cls.KEY_ALARM_EMAIL) or None,
            export_retention_days=int(get(cls.KEY_EXPORT_RETENTION) or 30),
            delivery_retention_days=int(get(cls.KEY_DELIVERY_RETENTION) or DELIVERY_RETENTION_DAYS),
            report_retention_days=int(get(cls.KEY_REPORT_RETENTION) or REPORT_RETENTION_DAYS),
            log_retention_days=int(get(cls.KEY_LOG_RETENTION) or 30),
            existing_database=existing,
            authorizer_function_arn=get(cls.KEY_AUTHORIZER) or None,
            jwt=(jwt := cls._jwt(get)),
            console=cls._console(get, jwt),
            download_rate_limit=cls._rate_limit(get),
            stage=str(get(cls.KEY_STAGE)).strip() or None if get(cls.KEY_STAGE) is not None else None,
            manage_api_gateway_account=parse_bool(get(cls.KEY_API_GATEWAY_ACCOUNT), False),
            environment=str(get(cls.KEY_ENVIRONMENT) or "production"),
            mail=cls._mail(get),
            egress=(egress := str(get(cls.KEY_EGRESS) or cls.EGRESS_ENDPOINTS)),
            database_reader=parse_bool(get(cls.KEY_DATABASE_READER), egress != cls.EGRESS_NAT_INSTANCE),
            reserved_concurrency=parse_bool(get(cls.KEY_RESERVED_CONCURRENCY), True),
            architecture=architecture_of(node),
        )
        if config.jwt is not None and config.authorizer_function_arn:
            raise ValueError(f"{cls.KEY_AUTHORIZER} and the JWT authorizer ({cls.KEY_JWT_ISSUER}, {cls.KEY_COGNITO}) "
                             "exclude each other: pick one")
        if config.download_rate_limit is not None and not 10 <= config.download_rate_limit <= 2_000_000_000:
            raise ValueError(f"{cls.KEY_DOWNLOAD_RATE_LIMIT}={config.download_rate_limit}: WAF's rate limit is "
                             "10..2,000,000,000 requests per IP address in five minutes")
        if config.egress not in (cls.EGRESS_ENDPOINTS, cls.EGRESS_NAT, cls.EGRESS_NAT_INSTANCE):
            raise ValueError(f"{cls.KEY_EGRESS}={config.egress!r}: use {cls.EGRESS_ENDPOINTS}, {cls.EGRESS_NAT} "
                             f"or {cls.EGRESS_NAT_INSTANCE}")
        if (config.console is not None and config.existing_database is None
                and config.egress == cls.EGRESS_ENDPOINTS):
            raise ValueError(f"{cls.KEY_CONSOLE}: the API function, in the created VPC, calls {API.internet}; "
                             f"the {cls.EGRESS_ENDPOINTS} profile has no route to the internet: deploy with "
                             f"{cls.KEY_EGRESS}={cls.EGRESS_NAT} or {cls.EGRESS_NAT_INSTANCE}")
        if config.environment not in ("production", "development"):
            raise ValueError(f"{cls.KEY_ENVIRONMENT}={config.environment!r}: use production or development")
        if config.stage is not None and not re.fullmatch(r"[a-z][a-z0-9]{0,11}", config.stage):
            raise ValueError(f"{cls.KEY_STAGE}={config.stage!r}: use 1-12 lowercase letters and digits, "
                             "starting with a letter")
        config.log_retention  # noqa: B018 - validates the value at synth
        if config.export_retention_days < 1:
            raise ValueError(f"{cls.KEY_EXPORT_RETENTION} must be at least 1")
        if config.export_retention_days > HISTORY.exports_days:
            raise ValueError(f"{cls.KEY_EXPORT_RETENTION} must be at most {HISTORY.exports_days} (the export rows' "
                             "retention, timekeeper.topology.HISTORY): an export's row must outlive its file")
        shortest = LINK_MAX_LIFETIME_DAYS + DELIVERY_RETENTION_MARGIN_DAYS
        if config.delivery_retention_days < shortest:
            raise ValueError(f"{cls.KEY_DELIVERY_RETENTION} must be at least {shortest}: delivered files must "
                             f"outlive their links (at most {LINK_MAX_LIFETIME_DAYS} days)")
        if config.report_retention_days < shortest:
            raise ValueError(f"{cls.KEY_REPORT_RETENTION} must be at least {shortest}: a delivered report's links "
                             f"point at its render, which must outlive them (at most {LINK_MAX_LIFETIME_DAYS} days)")
        return config
