"""The network and the database: a VPC whose functions reach exactly the AWS services the
topology declares (interface endpoints in isolated subnets, or by context one NAT), Aurora
PostgreSQL Serverless v2 behind RDS Proxy with one secret per database login in Secrets
Manager (rotated), or an existing database given by context.

Logins: the cluster's master
user owns the schema and is used by the migration function only; the workers
(``timekeeper_worker``) and the API (``timekeeper_api``) each have their own secret,
registered on the proxy and rotated with alternating users (the rotation switches between
``<login>`` and ``<login>_clone``, both created by migration 0005). The migration function
sets each login's password from its secret, so those rotations wait for their first 30
days instead of rotating before the roles exist.

The proxy's pool is sized from
:func:`timekeeper.topology.connection_budget` against the cluster's ``max_connections``,
which Aurora derives from the maximum capacity (:func:`infra.settings.aurora_max_connections`).

Failover: by default a Serverless v2 reader in the other zone (promotion tier 1, scaling
with the writer) which Aurora promotes when the writer or its zone fails; the proxy then
reconnects its pool to the new writer and the functions' broken connections are
re-established at their next use.
"""

from __future__ import annotations

import json

from aws_cdk import Duration, RemovalPolicy
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_logs as logs
from aws_cdk import aws_rds as rds
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra import settings
from infra.functions import DatabaseAccess
from infra.nag import acknowledge
from infra.nat import grant_heartbeat, nat_user_data
from infra.settings import ExistingDatabase
from timekeeper.topology import (
    API_LOGIN,
    CONNECT_TIMEOUT_S,
    LAMBDA,
    PROXY_IDLE_CLIENT_TIMEOUT_S,
    S3,
    SECRETS_MANAGER,
    SES,
    SNS,
    SQS,
    WORKER_LOGIN,
    connection_budget,
    function_services,
)

#: The Aurora PostgreSQL engine. The rule for the SQL it runs: every migration and query
#: sticks to what PostgreSQL 15 already has, so it runs unchanged on this engine and on any
#: server from 15 up that a local stack or a test suite starts.
ENGINE_VERSION = rds.AuroraPostgresEngineVersion.VER_16_11

#: The VPC's address range (CDK's default, stated so rules can name it at synth).
VPC_CIDR = "10.0.0.0/16"
#: The NAT instance of the ``nat-instance`` egress (Graviton, the smallest type: AWS API
#: calls only, no bulk traffic; up to 5 Gbit/s burst).
NAT_INSTANCE_TYPE = "t4g.nano"

#: The logins with their own secret: construct id -> database role.
LOGINS = {"Worker": WORKER_LOGIN, "Api": API_LOGIN}

#: The interface endpoint of each AWS service a function may call (by the topology's
#: boto3 names), with its construct id. The SES API (``ses`` and ``sesv2`` clients alike)
#: is served at ``email.<region>``: the ``email`` endpoint, not ``email-smtp`` (SMTP only).
#: S3 is the gateway endpoint every subnet's route tables get.
INTERFACE_ENDPOINTS = {
    SQS: ("Sqs", ec2.InterfaceVpcEndpointAwsService.SQS),
    SNS: ("Sns", ec2.InterfaceVpcEndpointAwsService.SNS),
    SECRETS_MANAGER: ("SecretsManager", ec2.InterfaceVpcEndpointAwsService.SECRETS_MANAGER),
    LAMBDA: ("Lambda", ec2.InterfaceVpcEndpointAwsService.LAMBDA_),
    SES: ("Email", ec2.InterfaceVpcEndpointAwsService.EMAIL),
}


def interface_endpoints_needed(services: dict[str, frozenset[str]] | None = None) -> list[str]:
    """The services (topology names, sorted) that need an interface endpoint: every service
    some function declares (``services``: default :func:`timekeeper.topology.function_services`),
    less S3 (the gateway). Raises ``KeyError`` for a service :data:`INTERFACE_ENDPOINTS` lacks."""
    declared = function_services() if services is None else services
    needed = sorted({s for calls in declared.values() for s in calls} - {S3})
    for service in needed:
        INTERFACE_ENDPOINTS[service]  # noqa: B018 - a declared service infra cannot route fails synth
    return needed


class Network(Construct):
    """A two-AZ VPC with flow logs and the S3 gateway endpoint, and a route to every AWS
    service the topology's functions declare (:func:`timekeeper.topology.function_services`).

    ``egress`` ``endpoints`` (the default): private isolated subnets only, no NAT, and one
    interface endpoint per declared service (:func:`interface_endpoints_needed`), private
    DNS on, reachable on 443 from the groups :meth:`allow_endpoints_from` admits.
    ``nat``: public subnets with one NAT gateway and private subnets routed through it; no
    interface endpoint. ``nat-instance``: the same with one NAT instance
    (:data:`NAT_INSTANCE_TYPE`, Amazon Linux 2023 for arm64, HTTPS in from the VPC only)
    instead of the gateway. ``subnets`` selects where the database and the functions run."""

    def __init__(self, scope: Construct, construct_id: str, *, log_retention: logs.RetentionDays,
                 egress: str = "endpoints"):
        super().__init__(scope, construct_id)
        self.egress = egress
        nat = egress in ("nat", "nat-instance")
        self.nat_instance: ec2.NatInstanceProviderV2 | None = None
        if egress == "nat-instance":
            # The image is the SSM parameter of the latest AL2023 (resolved at deploy, no
            # lookup at synth); our user data (infra.nat) turns on forwarding and
            # masquerading at every boot without depending on a package install, and
            # publishes the forwarding heartbeat.
            self.nat_instance = ec2.NatProvider.instance_v2(
                instance_type=ec2.InstanceType(NAT_INSTANCE_TYPE),
                machine_image=ec2.MachineImage.latest_amazon_linux2023(cpu_type=ec2.AmazonLinuxCpuType.ARM_64),
                default_allowed_traffic=ec2.NatTrafficDirection.OUTBOUND_ONLY, user_data=nat_user_data())
        if nat:
            subnet_type = ec2.SubnetType.PRIVATE_WITH_EGRESS
            configuration = [
                ec2.SubnetConfiguration(name="public", subnet_type=ec2.SubnetType.PUBLIC, cidr_mask=24),
                ec2.SubnetConfiguration(name="private", subnet_type=subnet_type, cidr_mask=24)]
        else:
            subnet_type = ec2.SubnetType.PRIVATE_ISOLATED
            configuration = [ec2.SubnetConfiguration(name="isolated", subnet_type=subnet_type, cidr_mask=24)]
        self.vpc = ec2.Vpc(
            self, "Vpc", max_azs=2, nat_gateways=1 if nat else 0, nat_gateway_provider=self.nat_instance,
            ip_addresses=ec2.IpAddresses.cidr(VPC_CIDR),
            subnet_configuration=configuration,
            gateway_endpoints={"S3": ec2.GatewayVpcEndpointOptions(service=ec2.GatewayVpcEndpointAwsService.S3)},
        )
        self.subnets = ec2.SubnetSelection(subnet_type=subnet_type)
        if self.nat_instance is not None:
            self._harden_nat_instance(self.nat_instance)
        self.vpc.add_flow_log("FlowLog", destination=ec2.FlowLogDestination.to_cloud_watch_logs(
            logs.LogGroup(self, "FlowLogs", retention=log_retention)))
        self.endpoint_security_group = ec2.SecurityGroup(
            self, "EndpointSecurityGroup", vpc=self.vpc, allow_all_outbound=False,
            description="Timekeeper interface endpoints (HTTPS from the groups allowed in)")
        self.interface_endpoints: dict[str, ec2.InterfaceVpcEndpoint] = {}
        if not nat:
            for service in interface_endpoints_needed():
                name, endpoint_service = INTERFACE_ENDPOINTS[service]
                self.interface_endpoints[service] = self.vpc.add_interface_endpoint(
                    name, service=endpoint_service, subnets=self.subnets, private_dns_enabled=True, open=False,
                    security_groups=[self.endpoint_security_group])

    def _harden_nat_instance(self, provider: ec2.NatInstanceProviderV2) -> None:
        """HTTPS in from the VPC only (every AWS API the functions call is HTTPS), an
        encrypted root volume; the acknowledgments of what a stateless NAT instance does
        without."""
        provider.security_group.add_ingress_rule(ec2.Peer.ipv4(VPC_CIDR), ec2.Port.tcp(443),
                                                 "HTTPS from the VPC to AWS APIs")
        [instance] = provider.gateway_instances
        grant_heartbeat(instance.role)
        acknowledge(instance.role, "AwsSolutions-IAM5[Resource::*]",
                    "cloudwatch:PutMetricData takes no resource but *; the NAT instance's heartbeat may publish in "
                    "the Timekeeper namespace only (a condition on cloudwatch:namespace).")
        cfn: ec2.CfnInstance = instance.node.default_child  # type: ignore[assignment]
        cfn.block_device_mappings = [ec2.CfnInstance.BlockDeviceMappingProperty(
            device_name="/dev/xvda", ebs=ec2.CfnInstance.EbsProperty(
                encrypted=True, volume_type="gp3", delete_on_termination=True))]
        acknowledge(instance, "AwsSolutions-EC28",
                    "The NAT instance of the lean profile forwards AWS API calls only; basic monitoring, the "
                    "status-check and forwarding-heartbeat alarms (infra/monitoring.py) cover it; detailed "
                    "monitoring would cost more than it.")
        acknowledge(instance, "AwsSolutions-EC29",
                    "The NAT instance holds no state: CloudFormation replaces it when its image changes, which "
                    "termination protection would block.")

    def allow_endpoints_from(self, peer: ec2.ISecurityGroup, description: str) -> None:
        """Let ``peer`` reach every interface endpoint on HTTPS."""
        self.endpoint_security_group.add_ingress_rule(peer, ec2.Port.tcp(443), description)


#: The promotion tier of the reader: Aurora promotes the reader of the lowest tier, and a
#: Serverless v2 reader of tier 0 or 1 scales with the writer, so it can take the writer's
#: load at once.
READER_PROMOTION_TIER = 1


class AuroraDatabase(Construct):
    """Aurora PostgreSQL Serverless v2 in ``network``'s subnets, reached only through an RDS
    Proxy that requires TLS: a writer in the first zone and, with ``reader``, a reader in
    the second (:data:`READER_PROMOTION_TIER`) that Aurora promotes on failover.

    ``clients`` is the security group to attach to every function: the proxy admits it on
    the PostgreSQL port and nothing else. ``deletion_protection`` also decides whether a
    stack deletion snapshots the cluster and retains the login secrets (True) or destroys
    them (False).
    """

    def __init__(self, scope: Construct, construct_id: str, *, network: Network, deletion_protection: bool,
                 log_retention: logs.RetentionDays, name_prefix: str = "timekeeper",
                 database_name: str = "timekeeper", reader: bool = True):
        super().__init__(scope, construct_id)
        self.cluster_identifier = name_prefix
        vpc, subnets = network.vpc, network.subnets
        self._subnets = subnets
        self.database_name = database_name
        self.clients = ec2.SecurityGroup(self, "ClientSecurityGroup", vpc=vpc,
                                         description="Timekeeper functions (database clients)")
        proxy_group = ec2.SecurityGroup(self, "ProxySecurityGroup", vpc=vpc, description="Timekeeper RDS Proxy")
        cluster_group = ec2.SecurityGroup(self, "ClusterSecurityGroup", vpc=vpc, description="Timekeeper Aurora")
        rotation_group = ec2.SecurityGroup(self, "RotationSecurityGroup", vpc=vpc,
                                           description="Timekeeper credentials rotation")

        self.cluster = rds.DatabaseCluster(
            self, "Cluster",
            engine=rds.DatabaseClusterEngine.aurora_postgres(version=ENGINE_VERSION),
            writer=rds.ClusterInstance.serverless_v2("Writer", auto_minor_version_upgrade=True),
            readers=[rds.ClusterInstance.serverless_v2("Reader", auto_minor_version_upgrade=True,
                                                       scale_with_writer=True)] if reader else [],
            serverless_v2_min_capacity=settings.AURORA_MIN_ACU,
            serverless_v2_max_capacity=settings.AURORA_MAX_ACU,
            credentials=rds.Credentials.from_generated_secret(settings.DB_ADMIN_USER),
            default_database_name=database_name,
            port=settings.DB_PORT,
            vpc=vpc, vpc_subnets=subnets, security_groups=[cluster_group],
            storage_encrypted=True,
            iam_authentication=True,
            deletion_protection=deletion_protection,
            removal_policy=RemovalPolicy.SNAPSHOT if deletion_protection else RemovalPolicy.DESTROY,
            backup=rds.BackupProps(retention=Duration.days(settings.AURORA_BACKUP_DAYS)),
            cluster_identifier=self.cluster_identifier,
            cloudwatch_logs_exports=["postgresql"],
        )
        # The export's log group, created here (with a retention) before RDS would create it,
        # and deleted with the cluster so that it never blocks re-creating the stack.
        self.cluster.node.add_dependency(logs.LogGroup(
            self, "PostgresqlLogs", log_group_name=f"/aws/rds/cluster/{self.cluster_identifier}/postgresql",
            retention=log_retention, removal_policy=RemovalPolicy.DESTROY))
        #: The writer instance (the cluster resource exists before any instance can answer).
        self.writer_instance = self.cluster.node.find_child("Writer")
        #: The reader Aurora promotes on failover (None: one instance, the lean profile).
        self.reader_instance = self.cluster.node.try_find_child("Reader")
        self._place_instances(vpc.select_subnets(subnet_type=subnets.subnet_type).subnets)
        keep = RemovalPolicy.RETAIN if deletion_protection else RemovalPolicy.DESTROY
        self.secret: secretsmanager.ISecret = self.cluster.secret  # type: ignore[assignment]
        self.cluster.node.find_child("Secret").apply_removal_policy(keep)  # the owner's generated secret
        self.login_secrets: dict[str, secretsmanager.ISecret] = {}
        for login_id, username in LOGINS.items():
            secret = rds.DatabaseSecret(self, f"{login_id}Secret", username=username, master_secret=self.secret,
                                        dbname=database_name)
            secret.apply_removal_policy(keep)
            self.login_secrets[username] = secret.attach(self.cluster)
        budget = connection_budget()
        self.proxy = rds.DatabaseProxy(
            self, "Proxy",
            proxy_target=rds.ProxyTarget.from_cluster(self.cluster),
            secrets=[self.secret, *self.login_secrets.values()],
            vpc=vpc, vpc_subnets=subnets, security_groups=[proxy_group],
            require_tls=True,
            debug_logging=False,
            max_connections_percent=settings.proxy_max_connections_percent(budget.total),
            max_idle_connections_percent=settings.PROXY_MAX_IDLE_CONNECTIONS_PERCENT,
            borrow_timeout=Duration.seconds(CONNECT_TIMEOUT_S),
            idle_client_timeout=Duration.seconds(PROXY_IDLE_CLIENT_TIMEOUT_S),
        )
        rotation_network = {"vpc": vpc, "vpc_subnets": subnets, "security_groups": [rotation_group]}
        self._rotate(self.secret, "Rotation", function_name=f"{name_prefix}-rotate-owner", log_retention=log_retention,
                     hosted=lambda name: secretsmanager.HostedRotation.postgre_sql_single_user(
                         function_name=name, **rotation_network), immediately=True,
                     after=[self.writer_instance])
        for login_id, username in LOGINS.items():
            self._rotate(self.login_secrets[username], f"{login_id}Rotation",
                         function_name=f"{name_prefix}-rotate-{login_id.lower()}", log_retention=log_retention,
                         hosted=lambda name: secretsmanager.HostedRotation.postgre_sql_multi_user(
                             master_secret=self.secret, function_name=name, **rotation_network), immediately=False)
        port = ec2.Port.tcp(settings.DB_PORT)
        proxy_group.add_ingress_rule(self.clients, port, "functions to the proxy")
        cluster_group.add_ingress_rule(proxy_group, port, "proxy to the cluster")
        cluster_group.add_ingress_rule(rotation_group, port, "credentials rotation to the cluster")
        network.allow_endpoints_from(self.clients, "functions to AWS APIs")
        network.allow_endpoints_from(rotation_group, "credentials rotation to Secrets Manager")

        if not deletion_protection:
            acknowledge(self.cluster, "AwsSolutions-RDS10",
                        "Deletion protection was switched off by the operator (timekeeper:deletionProtection"
                        "=false) to tear the deployment down; see README.md.")

    def _place_instances(self, subnets: list[ec2.ISubnet]) -> None:
        """The writer in the first subnet's zone, the reader (if any) in the second's, so
        losing one zone leaves an instance to promote. Raises ``ValueError`` with fewer
        than two subnets and a reader."""
        instances = [i for i in (self.writer_instance, self.reader_instance) if i is not None]
        if len(instances) > len(subnets):
            raise ValueError("a reader in another zone needs the database's subnets in two zones")
        for instance, subnet in zip(instances, subnets, strict=False):
            cfn: rds.CfnDBInstance = instance.node.default_child  # type: ignore[union-attr,assignment]
            cfn.availability_zone = subnet.availability_zone

    def _rotate(self, secret: secretsmanager.ISecret, construct_id: str, *, function_name: str,
                log_retention: logs.RetentionDays, hosted, immediately: bool,
                after: list[Construct] | None = None) -> None:
        """Rotate ``secret`` every SECRET_ROTATION_DAYS with the hosted function
        ``hosted(function_name)``, whose log group is created first with ``log_retention``.
        ``immediately``: also rotate when the schedule is created or changed, so the
        schedule is created only after ``after`` too (the owner's: the writer instance,
        without which the first rotation finds no database to log in to)."""
        log_group = logs.LogGroup(self, f"{construct_id}Logs", log_group_name=f"/aws/lambda/{function_name}",
                                  retention=log_retention, removal_policy=RemovalPolicy.DESTROY)
        schedule = secret.add_rotation_schedule(
            construct_id, automatically_after=Duration.days(settings.SECRET_ROTATION_DAYS),
            hosted_rotation=hosted(function_name), rotate_immediately_on_update=immediately)
        schedule.node.add_dependency(log_group)
        for dependency in after or []:
            schedule.node.add_dependency(dependency)

    def access(self) -> DatabaseAccess:
        """How functions reach this database: the proxy endpoint, in the isolated subnets."""
        return DatabaseAccess(host=self.proxy.endpoint, name=self.database_name, secret=self.secret,
                              worker_secret=self.login_secrets[WORKER_LOGIN], api_secret=self.login_secrets[API_LOGIN],
                              vpc=self.cluster.vpc, subnets=self._subnets, security_groups=[self.clients])


def login_secret(scope: Construct, construct_id: str, username: str) -> secretsmanager.Secret:
    """A generated secret for the database login ``username`` (``username``, ``password``);
    the migration function sets the role's password from it."""
    secret = secretsmanager.Secret(
        scope, construct_id, description=f"Timekeeper database login {username}",
        generate_secret_string=secretsmanager.SecretStringGenerator(
            secret_string_template=json.dumps({"username": username}), generate_string_key="password",
            exclude_punctuation=True, password_length=32))
    acknowledge(secret, "AwsSolutions-SMG4",
                "An existing database's network is the operator's: rotation needs a function that reaches it. "
                "Redeploying after changing this secret's value sets the new password (README.md).")
    return secret


def existing_access(scope: Construct, existing: ExistingDatabase) -> DatabaseAccess:
    """:class:`DatabaseAccess` for a database given by context (no network is created); the
    workers' and the API's login secrets are generated here."""
    secret = secretsmanager.Secret.from_secret_complete_arn(scope, "ExistingDatabaseSecret", existing.secret_arn)
    logins = {"worker_secret": login_secret(scope, "WorkerLoginSecret", WORKER_LOGIN),
              "api_secret": login_secret(scope, "ApiLoginSecret", API_LOGIN)}
    if existing.vpc_id is None:
        return DatabaseAccess(host=existing.host, name=existing.name, secret=secret, **logins)
    # The zones are never rendered: the functions name their subnets explicitly below.
    vpc = ec2.Vpc.from_vpc_attributes(scope, "ExistingVpc", vpc_id=existing.vpc_id,
                                      availability_zones=[f"zone-of-{subnet}" for subnet in existing.subnet_ids])
    subnets = ec2.SubnetSelection(subnets=[
        ec2.Subnet.from_subnet_id(scope, f"ExistingSubnet{i}", subnet_id) for i, subnet_id in
        enumerate(existing.subnet_ids)])
    group = ec2.SecurityGroup.from_security_group_id(scope, "ExistingDatabaseClients", existing.security_group_id or "")
    return DatabaseAccess(host=existing.host, name=existing.name, secret=secret, vpc=vpc, subnets=subnets,
                          security_groups=[group], **logins)
