"""Lambda functions: one per folder under functions/, each a thin handler on the layer.

:class:`TimekeeperFunction` gives every function the same shape: Python 3.12 on the
deployment's architecture (arm64 unless the context ``timekeeper:architecture`` says x86_64),
the shared layer, its own role (least privilege: logs to its own log group, VPC network
interfaces when in a VPC, X-Ray, and only the grants its construct adds), its own log
group with a retention, active tracing, and the database settings the edge reads.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from aws_cdk import Duration, Size, Tags
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra import settings
from infra.nag import acknowledge
from timekeeper.settings import DB_HOST_VARIABLE, DB_NAME_VARIABLE, DB_SECRET_ARN_VARIABLE, FUNCTION_VARIABLE
from timekeeper.topology import function_services, reserved_per_function


def function_folders(functions_dir: Path = settings.FUNCTIONS_DIR) -> list[str]:
    """Names of the folders under functions/ that hold a ``handler.py``."""
    return sorted(p.name for p in functions_dir.iterdir() if (p / "handler.py").is_file())


def reserved_concurrency_of(scope: Construct, folder: str) -> int | None:
    """The reserved concurrency of one function of ``functions/<folder>``: the topology's
    (:func:`timekeeper.topology.reserved_per_function`; None for a function that reserves
    none), or None for every function when the context ``timekeeper:reservedConcurrency``
    visible from ``scope`` is false (an account whose concurrency quota is still below
    :func:`timekeeper.topology.required_account_concurrency`)."""
    if not settings.parse_bool(scope.node.try_get_context(settings.DeploymentConfig.KEY_RESERVED_CONCURRENCY), True):
        return None
    return reserved_per_function().get(folder)


def lambda_architecture(name: str) -> lambda_.Architecture:
    """CDK's architecture for ``name`` (``arm64`` or ``x86_64``)."""
    return {settings.ARM64: lambda_.Architecture.ARM_64, settings.X86_64: lambda_.Architecture.X86_64}[name]


#: Services of a role's grants every function has whatever it calls: its log group,
#: Lambda's VPC networking, X-Ray, and KMS, which SNS asks of a publisher to an encrypted
#: topic on its behalf.
BASELINE_GRANTS = frozenset({"logs", "ec2", "xray", "kms"})


def granted_services(function: TimekeeperFunction) -> set[str]:
    """The service prefixes of every action the function's role is granted (its default
    policy), less :data:`BASELINE_GRANTS`."""
    policy = function.role.node.try_find_child("DefaultPolicy")
    document = policy.document.to_json() if isinstance(policy, iam.Policy) else {}
    found: set[str] = set()
    for statement in (document or {}).get("Statement", []):
        actions = statement["Action"] if isinstance(statement["Action"], list) else [statement["Action"]]
        found |= {action.split(":")[0] for action in actions}
    return found - BASELINE_GRANTS


def check_grants(scope: Construct) -> None:
    """Compare every :class:`TimekeeperFunction` under ``scope`` with its declaration: each
    declared service must be granted, and nothing else may be (besides
    :data:`BASELINE_GRANTS` and the function's ``lambda_services``). Raises ``ValueError``
    naming the function and the services, so ``cdk synth`` fails on a grant that the
    topology does not declare (the edge would refuse the client, the VPC has no route) or
    a declared service nothing grants."""
    problems = []
    for function in [c for c in scope.node.find_all() if isinstance(c, TimekeeperFunction)]:
        granted = granted_services(function)
        extra = granted - set(function.services) - function.lambda_services
        missing = set(function.services) - granted
        if extra:
            problems.append(f"functions/{function.folder} is granted {sorted(extra)}, which its topology entry "
                            "does not declare")
        if missing:
            problems.append(f"functions/{function.folder} declares {sorted(missing)}, but nothing grants it")
    if problems:
        raise ValueError("; ".join(problems))


#: The database logins a function may use: the schema owner's (migration function only),
#: the workers' (dispatchers, consumers) and the API's (row-level security applies).
OWNER, WORKER, API = "owner", "worker", "api"


@dataclass(frozen=True, kw_only=True)
class DatabaseAccess:
    """What a function needs to reach PostgreSQL: the endpoint (RDS Proxy), the database
    name, one secret per login (``secret``: the owner's; ``worker_secret``, ``api_secret``),
    and the network placement (``vpc`` None: no VPC)."""

    host: str
    name: str
    secret: secretsmanager.ISecret
    worker_secret: secretsmanager.ISecret
    api_secret: secretsmanager.ISecret
    vpc: ec2.IVpc | None = None
    subnets: ec2.SubnetSelection | None = None
    security_groups: list[ec2.ISecurityGroup] = field(default_factory=list)

    def secret_for(self, login: str) -> secretsmanager.ISecret:
        """The secret of ``login`` (:data:`OWNER`, :data:`WORKER` or :data:`API`); raises
        ``KeyError`` for another name."""
        return {OWNER: self.secret, WORKER: self.worker_secret, API: self.api_secret}[login]

    def environment(self, login: str) -> dict[str, str]:
        """The variables the edge reads for the database (:mod:`timekeeper.settings`), as ``login``."""
        return {DB_HOST_VARIABLE: self.host, DB_NAME_VARIABLE: self.name,
                DB_SECRET_ARN_VARIABLE: self.secret_for(login).secret_arn}


class TimekeeperFunction(Construct):
    """A Lambda built from ``functions/<folder>/handler.py`` with entry ``lambda_handler``.

    ``timeout_s``, ``memory_mb`` and ``ephemeral_storage_mb`` (/tmp; None: Lambda's 512 MB)
    come from the caller (the topology for pipeline functions); ``environment`` is added to
    the database settings and ``TIMEKEEPER_FUNCTION`` (the folder: the edge creates clients
    only for the services the topology declares for it, :attr:`services`). A folder
    without a declaration in the topology is refused (``ValueError``). Its reserved
    concurrency is the topology's (:func:`reserved_concurrency_of`). The function can
    read the secret of its database ``login`` only (``database`` None: no database, no VPC,
    as the JWT authorizer); every other permission is granted by
    the caller.
    """

    def __init__(self, scope: Construct, construct_id: str, *, folder: str, layer: lambda_.ILayerVersion,
                 database: DatabaseAccess | None, login: str | None, timeout_s: int, memory_mb: int,
                 log_retention: logs.RetentionDays, environment: dict[str, str] | None = None,
                 description: str = "",
                 functions_dir: Path = settings.FUNCTIONS_DIR, ephemeral_storage_mb: int | None = None):
        super().__init__(scope, construct_id)
        if not (functions_dir / folder / "handler.py").is_file():
            raise ValueError(f"functions/{folder}/handler.py does not exist")
        if folder not in function_services():
            raise ValueError(f"functions/{folder} has no entry in timekeeper.topology declaring the AWS services "
                             "it calls")
        self.folder = folder
        #: The timeout (seconds) it was built with: the topology's number for its kind.
        self.timeout_s = timeout_s
        #: The AWS services the function calls (the topology's declaration).
        self.services = function_services()[folder]
        #: Services Lambda itself calls with the function's role (an SQS event source polls
        #: its queue, an on-failure destination receives the events): granted, not called
        #: by the code. The constructs that wire them add the service here.
        self.lambda_services: set[str] = set()
        self.log_group = logs.LogGroup(self, "Logs", retention=log_retention)
        self.role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"),
                             description=f"Timekeeper function {folder}")
        self.log_group.grant_write(self.role)
        vpc = database.vpc if database is not None else None
        if vpc is not None:
            self.role.add_to_policy(iam.PolicyStatement(
                actions=["ec2:CreateNetworkInterface", "ec2:DescribeNetworkInterfaces", "ec2:DescribeSubnets",
                         "ec2:DeleteNetworkInterface", "ec2:AssignPrivateIpAddresses",
                         "ec2:UnassignPrivateIpAddresses"],
                resources=["*"]))
        self.function = lambda_.Function(
            self, "Function",
            code=lambda_.Code.from_asset(str(functions_dir / folder), exclude=["__pycache__", "*.pyc"]),
            handler="handler.lambda_handler",
            runtime=lambda_.Runtime.PYTHON_3_12,
            architecture=lambda_architecture(settings.architecture_of(self.node)),
            layers=[layer],
            role=self.role,
            log_group=self.log_group,
            timeout=Duration.seconds(timeout_s),
            memory_size=memory_mb,
            tracing=lambda_.Tracing.ACTIVE,
            reserved_concurrent_executions=reserved_concurrency_of(self, folder),
            ephemeral_storage_size=Size.mebibytes(ephemeral_storage_mb) if ephemeral_storage_mb else None,
            environment={**(database.environment(login) if database is not None and login else {}),
                         "POWERTOOLS_LOG_LEVEL": "INFO",
                         # Traces never record a handler's response (it can carry addresses);
                         # the handlers' decorators say so too (tests/unit/test_tracer_capture.py).
                         "POWERTOOLS_TRACER_CAPTURE_RESPONSE": "false",
                         FUNCTION_VARIABLE: folder, **(environment or {})},
            vpc=vpc,
            vpc_subnets=database.subnets if vpc is not None else None,
            security_groups=database.security_groups if vpc is not None else None,
            description=description or f"Timekeeper {folder}",
        )
        if database is not None and login:
            database.secret_for(login).grant_read(self.role)
        Tags.of(self.function).add(settings.FUNCTION_TAG, folder)
        acknowledge(self.role, "AwsSolutions-IAM5[Resource::*]",
                    "Lambda's VPC networking (ec2:*NetworkInterface*, DescribeSubnets) and X-Ray "
                    "(PutTraceSegments, PutTelemetryRecords) accept no resource narrower than *.")
        acknowledge(self.function, "AwsSolutions-L1",
                    "The layer's wheels (psycopg-binary, pydantic-core) are built for CPython 3.12; the "
                    "runtime moves together with infra.settings.PYTHON_VERSION and the layer, not alone.")
