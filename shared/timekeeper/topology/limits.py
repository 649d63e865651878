"""The deployment's fixed numbers and the AWS services its functions may call: the database
logins and their timeouts, the API's and the download route's reserved concurrency, and the
bounds every topology shape is checked against."""

from __future__ import annotations

#: The database logins of the deployment (created by migration ``0005_login_roles.sql``):
#: dispatchers and consumers log in as the workers' role, the HTTP API as its own walled
#: role; the migration function alone uses the schema owner's credentials.
WORKER_LOGIN = "timekeeper_worker"
API_LOGIN = "timekeeper_api"

#: Statement timeout of the workers' database login (dispatchers and consumers), seconds.
#: Set per login role by migration ``0005_login_roles.sql`` (no connection startup option:
#: RDS Proxy refuses them); the migration test compares the role's setting with this.
WORKER_STATEMENT_TIMEOUT_S = 15
#: Statement timeout of the API's database login, seconds: well inside API Gateway's 29 s.
API_STATEMENT_TIMEOUT_S = 20
#: How long a client waits to open a connection (libpq ``connect_timeout``), and at most how
#: long RDS Proxy lets it wait to borrow a database connection (``ConnectionBorrowTimeout``).
CONNECT_TIMEOUT_S = 5
#: The time a dispatcher keeps for the publishes after its last claim (SendMessageBatch
#: calls of one full batch, with the SDK's retries).
DISPATCHER_PUBLISH_ALLOWANCE_S = 5
#: The API function's reserved concurrency: the most API connections at once.
API_RESERVED_CONCURRENCY = 10
#: The public download route's function's reserved concurrency (``GET /downloads/{token}``
#: runs apart from the API, so a flood of link clicks cannot take the API's executions):
#: the most download connections at once.
DOWNLOADS_RESERVED_CONCURRENCY = 3
#: Connections the migration trigger holds while a deploy runs.
MIGRATION_CONNECTIONS = 1
#: RDS Proxy closes a client connection idle this long (seconds); a Lambda execution
#: environment reopens its connection when it was idle for half of it.
PROXY_IDLE_CLIENT_TIMEOUT_S = 900
#: /tmp (MB) of every consumer that writes a saved query's whole result to a file before
#: uploading it (exports, scheduled deliveries of queries): the same unbounded files, so
#: the same room.
QUERY_FILE_STORAGE_MB = 2048

# ------------------------------------------------------------------ the AWS services a function calls

#: The AWS service APIs Timekeeper's functions call, by their boto3 client names. Every
#: function of the topology declares the ones it calls (``services`` of its description);
#: the edge creates clients for those only (``timekeeper.edge.adapters.aws_client``), and
#: infra derives from the same declaration each function's network route (a VPC endpoint,
#: or the NAT route by context) and its IAM grants. The database is not among them: it is
#: reached through RDS Proxy inside the VPC; every function also reads its login secret
#: from Secrets Manager. Lambda's own logs, metrics (embedded in the logs) and traces are
#: sent by the Lambda service, not by the function's code.
SQS, SNS, S3, SECRETS_MANAGER, LAMBDA, SES = "sqs", "sns", "s3", "secretsmanager", "lambda", "ses"
AWS_SERVICES = frozenset({SQS, SNS, S3, SECRETS_MANAGER, LAMBDA, SES})


def calls(*services: str) -> frozenset[str]:
    """A function's declared services: ``services`` plus Secrets Manager (every function
    reads its database login's secret). Raises ``ValueError`` for a name outside
    :data:`AWS_SERVICES`."""
    unknown = set(services) - AWS_SERVICES
    if unknown:
        raise ValueError(f"unknown AWS services {sorted(unknown)}: use names of AWS_SERVICES")
    return frozenset({SECRETS_MANAGER, *services})


def check_services(function: str, services: frozenset[str]) -> None:
    """Raise ``ValueError`` when ``function`` declares a service outside :data:`AWS_SERVICES`."""
    unknown = services - AWS_SERVICES
    if unknown:
        raise ValueError(f"function {function}: unknown AWS services {sorted(unknown)}")

#: A pipeline with capped work kinds has at least this many consumers (its event source's
#: maximum concurrency) per unit of its per-workspace cap: one workspace at its cap c then
#: leaves n - c >= 2c of n consumers to the others, whose capped work drains at most
#: n / (n - c) = 1.5 times slower than alone (a quiet workspace's start delay beside a
#: flood at most twice its delay alone, with room for the rest of the pipeline's work).
CONSUMERS_PER_CAPPED_RUN = 3

#: The most dispatcher partitions a pipeline may have (each is a function, a rule, a
#: reserved concurrency unit and a database connection).
MAX_DISPATCH_PARTITIONS = 16

#: AWS keeps at least this many of an account's concurrent executions unreserved: reserved
#: concurrency can be set only while the rest of the account keeps 100.
LAMBDA_UNRESERVED_MINIMUM = 100

#: SendMessageBatch calls one publish keeps in flight at once (each of 10 messages), and the
#: size of the SQS client's connection pool. 20 sends a full claim batch (200 runs) in one
#: round trip: at 10 ms a call, about 20,000 messages a second instead of 1,000.
PUBLISH_IN_FLIGHT = 20
