"""Amazon SES for scheduled delivery: the sending identity, the configuration set every
message is sent with, and the configuration set's event destination.

- **Identity.** With ``timekeeper:mailDomain`` the stack creates a domain identity with
  Easy DKIM (SES answers three CNAME records to publish in the domain's DNS; the stack
  outputs nothing to publish by itself: read them in the SES console or with
  ``aws sesv2 get-email-identity``). Without it, the stack creates an address identity for
  ``timekeeper:mailSender`` (SES e-mails that address a confirmation link). With
  ``timekeeper:mailIdentityExists=true`` the stack creates none and sends from an identity
  verified already (its default configuration set is then the operator's to set; the
  functions name the stack's set on every message anyway).
- **Configuration set.** Reputation metrics on (the bounce and complaint rates SES
  suspends accounts by), account-level suppression of bounces and complaints kept, and
  an event destination that publishes every message's later states (delivery, bounce,
  complaint, reject, delivery delay) to an SNS topic encrypted with its own key, which
  the message-events consumer reads through its queue (:class:`MessageEventsResources`).
- **Sandbox.** A new account's SES sends only to verified addresses, at most 200 a day;
  production access is a request to AWS (docs/deploy.md).
"""

from __future__ import annotations

from aws_cdk import Aws, RemovalPolicy
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from aws_cdk import aws_ses as ses
from aws_cdk import aws_sns as sns
from constructs import Construct

from infra.functions import DatabaseAccess
from infra.pipeline import JobQueue
from infra.settings import MailSettings
from timekeeper import topology

#: The message states SES publishes to the event destination.
MESSAGE_EVENTS = (ses.EmailSendingEvent.DELIVERY, ses.EmailSendingEvent.BOUNCE, ses.EmailSendingEvent.COMPLAINT,
                  ses.EmailSendingEvent.REJECT, ses.EmailSendingEvent.DELIVERY_DELAY)


class MailResources(Construct):
    """The SES side of delivery for ``mail`` (the deployment's mail settings):
    ``identity`` (None when the identity exists already; ``retain``: kept when the stack is
    deleted, so its DKIM records stay valid for the next one), ``configuration_set`` and
    ``events`` (the SNS topic of message states)."""

    def __init__(self, scope: Construct, construct_id: str, *, mail: MailSettings, name_prefix: str,
                 retain: bool = True):
        super().__init__(scope, construct_id)
        self.mail = mail
        self.configuration_set = ses.ConfigurationSet(
            self, "ConfigurationSet", configuration_set_name=f"{name_prefix}-deliveries",
            reputation_metrics=True, sending_enabled=True,
            suppression_reasons=ses.SuppressionReasons.BOUNCES_AND_COMPLAINTS)
        #: The configuration set's ARN (SES authorizes sending with a set against it).
        self.configuration_set_arn = (f"arn:{Aws.PARTITION}:ses:{Aws.REGION}:{Aws.ACCOUNT_ID}:configuration-set/"
                                      f"{self.configuration_set.configuration_set_name}")
        from_ses = {"StringEquals": {"aws:SourceAccount": Aws.ACCOUNT_ID},
                    "ArnLike": {"aws:SourceArn": self.configuration_set_arn}}
        self.key = kms.Key(self, "EventsKey", enable_key_rotation=True, removal_policy=RemovalPolicy.DESTROY,
                           description="Timekeeper: SES message events")
        self.key.add_to_resource_policy(iam.PolicyStatement(
            sid="SesEncrypts", principals=[iam.ServicePrincipal("ses.amazonaws.com")],
            actions=["kms:Decrypt", "kms:GenerateDataKey*"], resources=["*"], conditions=from_ses))
        self.events = sns.Topic(self, "Events", display_name="Timekeeper message events", master_key=self.key,
                                enforce_ssl=True)
        # (The destination adds the topic policy that lets SES publish for this set only.)
        self.configuration_set.add_event_destination(
            "Events", destination=ses.EventDestination.sns_topic(self.events), events=list(MESSAGE_EVENTS))

        self.identity: ses.EmailIdentity | None = None
        if not mail.identity_exists:
            chosen = ses.Identity.domain(mail.domain) if mail.domain else ses.Identity.email(mail.sender)
            self.identity = ses.EmailIdentity(self, "Identity", identity=chosen,
                                              configuration_set=self.configuration_set)
            self.identity.apply_removal_policy(RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY)

    @property
    def identity_arn(self) -> str:
        """The ARN of the identity messages are sent from (the domain's, or the address's)."""
        name = self.mail.domain or self.mail.sender
        return f"arn:{Aws.PARTITION}:ses:{Aws.REGION}:{Aws.ACCOUNT_ID}:identity/{name}"


class MessageEventsResources(Construct):
    """The consumer of the configuration set's events: the queue and dead-letter queue of
    :data:`timekeeper.topology.MESSAGE_EVENTS` (the consumer) subscribed to ``mail.events`` with raw
    message delivery (each record's body is the SES event's JSON, no SNS envelope), and
    the consumer function reading it (the workers' login; its only other right is the
    visibility change of its own messages, which the event source grants)."""

    def __init__(self, scope: Construct, construct_id: str, *, mail: MailResources, layer: lambda_.ILayerVersion,
                 database: DatabaseAccess, log_retention: logs.RetentionDays, name_prefix: str = "timekeeper"):
        super().__init__(scope, construct_id)
        self.queues = JobQueue(self, "Queues", consumer=topology.MESSAGE_EVENTS, name_prefix=name_prefix)
        self.subscription = sns.Subscription(
            self, "Subscription", topic=mail.events, protocol=sns.SubscriptionProtocol.SQS,
            endpoint=self.queues.queue.queue_arn, raw_message_delivery=True)
        self.queues.queue.add_to_resource_policy(iam.PolicyStatement(
            sid="MessageEventsTopic", principals=[iam.ServicePrincipal("sns.amazonaws.com")],
            actions=["sqs:SendMessage"], resources=[self.queues.queue.queue_arn],
            conditions={"ArnEquals": {"aws:SourceArn": mail.events.topic_arn}}))
        self.consumer = self.queues.built.build_consumer(
            self, "Consumer", layer=layer, database=database, log_retention=log_retention,
            description="Timekeeper message-events consumer")
        self.event_source = self.queues.built.event_source
