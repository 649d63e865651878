"""Scheduled delivery's resources beside the ``queries`` pipeline (which
:class:`infra.pipeline.PipelineResources` builds from the topology like every pipeline):
the download links' signing key, the consumer's rights (files under ``deliveries/``, and
listing the bucket so a missing file is a 404, rendered reports, the renderer, SES from
the configured sender only) and variables, the public download route (its own function,
:mod:`infra.downloads`) and its rights.

The download route ``GET /downloads/{token}`` and the opt-out route ``GET``/``POST
/opt-outs/{token}`` (RFC 8058 one-click) are the routes without the authorizer, both
answered by the download route's function:
a recipient follows the link from an e-mail, with no token of the identity provider; the
signed token in the path is the credential (verified, expiry checked, and the access rule
asked again for its recipient by the function). It is an explicit resource beside the
proxy's ``{proxy+}`` (API Gateway matches the more specific path first), its method's
authorization type ``NONE``.
"""

from __future__ import annotations

from aws_cdk import Aws, Fn, RemovalPolicy
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_iam as iam
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra.api import HttpApi
from infra.downloads import DOWNLOAD_PATH, OPT_OUT_PATH
from infra.mail import MailResources
from infra.nag import acknowledge
from infra.pipeline import PipelineResources
from infra.renderer import ReportRendererResources
from timekeeper.settings import (
    DELIVERIES_PREFIX,
    DOWNLOAD_BASE_URL_VARIABLE,
    FILES_BUCKET_VARIABLE,
    LINK_SECRET_VARIABLE,
    MAIL_CONFIGURATION_SET_VARIABLE,
    MAIL_SENDER_VARIABLE,
)


def link_signing_key(scope: Construct, construct_id: str, *, retain: bool) -> secretsmanager.Secret:
    """The secret of the download and opt-out links' signing keys (``{"key": <64 characters>}``
    as generated; ``{"keys": [oldest, ..., newest]}`` once rotated), created in the Data stack
    so that redeploying or recreating the App stack keeps every outstanding link valid;
    ``retain``: kept when its stack is deleted too."""
    secret = secretsmanager.Secret(
        scope, construct_id, description="Timekeeper: the signing key of scheduled deliveries' download links",
        generate_secret_string=secretsmanager.SecretStringGenerator(
            secret_string_template="{}", generate_string_key="key", exclude_punctuation=True, password_length=64),
        removal_policy=RemovalPolicy.RETAIN if retain else RemovalPolicy.DESTROY)
    acknowledge(secret, "AwsSolutions-SMG4",
                "The link signing keys are rotated by hand (docs/operations.md): a new key is appended "
                "and an old one removed only after its links expired, which a scheduled rotation cannot know.")
    return secret


class DeliveryResources(Construct):
    """Wire scheduled delivery: ``pipeline`` is the queries pipeline's resources, ``api``
    the HTTP API (None: no download route), ``mail`` the SES identity and configuration
    set the messages are sent with, ``link_secret`` the links' signing keys
    (:func:`link_signing_key`, in the Data stack)."""

    def __init__(self, scope: Construct, construct_id: str, *, pipeline: PipelineResources,
                 renderer: ReportRendererResources, api: HttpApi | None, files_bucket_name: str,
                 files_bucket_arn_export: str, mail: MailResources, link_secret: secretsmanager.ISecret):
        super().__init__(scope, construct_id)
        self.link_secret = link_secret
        deliveries_arn = Fn.join("", [Fn.import_value(files_bucket_arn_export), f"/{DELIVERIES_PREFIX}*"])
        finding = f"AwsSolutions-IAM5[Resource::{files_bucket_arn_export}/{DELIVERIES_PREFIX}*]"

        consumer = pipeline.consumer
        self.consumer = consumer
        renderer.connect_caller(consumer, downloads=False)
        consumer.role.add_to_policy(iam.PolicyStatement(
            sid="DeliveryFiles", actions=["s3:PutObject", "s3:AbortMultipartUpload", "s3:GetObject"],
            resources=[deliveries_arn]))
        acknowledge(consumer.role, finding,
                    "Delivered files are named by their run's id at run time; the grant is limited to the "
                    "deliveries/ prefix of the files bucket and to the actions named beside it.")
        # S3 answers a HEAD of a missing key 404 only to a caller that may list the bucket
        # (403 otherwise): with it, a delivered file gone from deliveries/ ends the run
        # file_lost instead of an access error retried into the dead-letter queue. (A
        # condition on s3:prefix would not apply: a HEAD request carries no prefix.)
        consumer.role.add_to_policy(iam.PolicyStatement(
            sid="DeliveryFilesMissing", actions=["s3:ListBucket"],
            resources=[Fn.import_value(files_bucket_arn_export)]))
        mail_sender = mail.mail.sender
        consumer.role.add_to_policy(iam.PolicyStatement(
            sid="SendDeliveries", actions=["ses:SendEmail", "ses:SendRawEmail"],
            resources=[f"arn:{Aws.PARTITION}:ses:{Aws.REGION}:{Aws.ACCOUNT_ID}:identity/*",
                       mail.configuration_set_arn],
            conditions={"StringEquals": {"ses:FromAddress": mail_sender}}))
        acknowledge(consumer.role, "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ses:<AWS::Region>:"
                                   "<AWS::AccountId>:identity/*]",
                    "SES checks sending against the sender's and each recipient's identity; the statement "
                    "allows only messages whose From address is the configured sender.")
        # The sender paces itself to the account's sending rate, read from SES (GetSendQuota
        # takes no resource: it is granted on "*").
        consumer.role.add_to_policy(iam.PolicyStatement(sid="ReadSendQuota", actions=["ses:GetSendQuota"],
                                                        resources=["*"]))
        acknowledge(consumer.role, "AwsSolutions-IAM5[Resource::*]",
                    "ses:GetSendQuota reads the account's sending rate and supports no resource-level permission.")
        # The queries dispatcher's partition 0 pass is followed by the people pass, which mails
        # owner notices through the same outbox: the same sending grant, the same sender. The
        # topology declares SES for the dispatcher's code, so every partition's function gets
        # it (only partition 0 sends: the people pass is owner-wide work).
        for dispatcher in pipeline.dispatchers:
            dispatcher.role.add_to_policy(iam.PolicyStatement(
                sid="SendNotices", actions=["ses:SendEmail"],
                resources=[f"arn:{Aws.PARTITION}:ses:{Aws.REGION}:{Aws.ACCOUNT_ID}:identity/*",
                           mail.configuration_set_arn],
                conditions={"StringEquals": {"ses:FromAddress": mail_sender}}))
            acknowledge(dispatcher.role, "AwsSolutions-IAM5[Resource::arn:<AWS::Partition>:ses:<AWS::Region>:"
                                         "<AWS::AccountId>:identity/*]",
                        "Owner notices: SES checks sending against the sender's and each recipient's identity; "
                        "the statement allows only messages whose From address is the configured sender.")
            dispatcher.function.add_environment(MAIL_SENDER_VARIABLE, mail_sender)
            dispatcher.function.add_environment(MAIL_CONFIGURATION_SET_VARIABLE,
                                                mail.configuration_set.configuration_set_name)
            # Every notice e-mail carries a signed one-click opt-out link: the same signer.
            self.link_secret.grant_read(dispatcher.role)
            dispatcher.function.add_environment(LINK_SECRET_VARIABLE, self.link_secret.secret_arn)
        self.link_secret.grant_read(consumer.role)
        consumer.function.add_environment(FILES_BUCKET_VARIABLE, files_bucket_name)
        consumer.function.add_environment(MAIL_SENDER_VARIABLE, mail_sender)
        consumer.function.add_environment(MAIL_CONFIGURATION_SET_VARIABLE,
                                          mail.configuration_set.configuration_set_name)
        consumer.function.add_environment(LINK_SECRET_VARIABLE, self.link_secret.secret_arn)

        self.download_method: apigw.Method | None = None
        self.fresh_link_method: apigw.Method | None = None
        self.opt_out_methods: list[apigw.Method] = []
        if api is not None:
            consumer.function.add_environment(DOWNLOAD_BASE_URL_VARIABLE, api.api.url)
            for dispatcher in pipeline.dispatchers:  # the notice e-mails' opt-out links
                dispatcher.function.add_environment(DOWNLOAD_BASE_URL_VARIABLE, api.api.url)
            downloader = api.downloads
            self.link_secret.grant_read(downloader.role)
            downloader.function.add_environment(LINK_SECRET_VARIABLE, self.link_secret.secret_arn)
            downloader.role.add_to_policy(iam.PolicyStatement(
                sid="DeliveryDownloads", actions=["s3:GetObject"], resources=[deliveries_arn]))
            acknowledge(downloader.role, finding,
                        "Download links of delivered files are presigned with this role: reading under "
                        "deliveries/ only (one object per run, keys unknown in advance).")
            # A plain Resource under the proxying API's root (LambdaRestApi refuses add_resource
            # on its root); the method inherits the authorizer, which the L1 override removes.
            downloads = apigw.Resource(self, "Downloads", parent=api.api.root, path_part=DOWNLOAD_PATH[0])
            token = downloads.add_resource(DOWNLOAD_PATH[1])
            # Its own function (reserved concurrency apart from the API's; infra.downloads)
            self.download_method = token.add_method("GET", apigw.LambdaIntegration(downloader.function))
            cfn = self.download_method.node.default_child
            cfn.add_property_override("AuthorizationType", "NONE")  # type: ignore[union-attr]
            cfn.add_property_deletion_override("AuthorizerId")  # type: ignore[union-attr]
            acknowledge(self.download_method, "AwsSolutions-APIG4",
                        "The download route is public by design: the signed, expiring token in its path is the "
                        "credential, and the function asks the access rule again for the token's recipient.")
            acknowledge(self.download_method, "AwsSolutions-COG4",
                        "The download route is reached from an e-mail link without the identity provider's "
                        "token; the signed link token is checked by the function instead.")
            # "Send me a fresh link": the expired link's page posts to the link itself.
            self.fresh_link_method = token.add_method("POST", apigw.LambdaIntegration(downloader.function))
            cfn = self.fresh_link_method.node.default_child
            cfn.add_property_override("AuthorizationType", "NONE")  # type: ignore[union-attr]
            cfn.add_property_deletion_override("AuthorizerId")  # type: ignore[union-attr]
            acknowledge(self.fresh_link_method, "AwsSolutions-APIG4",
                        "The fresh-link request is public by design: the link's signed token (expired or not) "
                        "is the credential; the function asks the access rule again and limits the requests.")
            acknowledge(self.fresh_link_method, "AwsSolutions-COG4",
                        "The fresh-link request comes from the expired link's page without the identity "
                        "provider's token; the signed link token is checked by the function instead.")
            # The one-click opt-out (RFC 8058): GET shows the confirmation page, POST records it.
            # The download route's function answers it (it holds the link keys, its reserved
            # concurrency keeps link traffic off the API's), throttled like the download route.
            opt_outs = apigw.Resource(self, "OptOuts", parent=api.api.root, path_part=OPT_OUT_PATH[0])
            opt_out_token = opt_outs.add_resource(OPT_OUT_PATH[1])
            self.opt_out_methods = [opt_out_token.add_method(verb, apigw.LambdaIntegration(downloader.function))
                                    for verb in ("GET", "POST")]
            for method in self.opt_out_methods:
                cfn = method.node.default_child
                cfn.add_property_override("AuthorizationType", "NONE")  # type: ignore[union-attr]
                cfn.add_property_deletion_override("AuthorizerId")  # type: ignore[union-attr]
                acknowledge(method, "AwsSolutions-APIG4",
                            "The opt-out route is public by design (RFC 8058: a mailbox provider posts to it "
                            "without any credential): the signed, expiring token in its path is the credential.")
                acknowledge(method, "AwsSolutions-COG4",
                            "The opt-out route is reached from an e-mail without the identity provider's token; "
                            "the signed link token is checked by the function instead.")
