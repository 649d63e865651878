"""The API's JWT authorizer: ``functions/authorizer`` (a Lambda REQUEST authorizer that
verifies bearer tokens of an OpenID Connect issuer; :mod:`timekeeper.api.authorizer`), and
optionally the Cognito user pool that issues them.

Configured by context (``infra.settings.JwtSettings``): ``timekeeper:jwtIssuer`` and
``timekeeper:jwtAudience`` (any OpenID Connect issuer; ``timekeeper:jwtJwksUrl`` when its
keys are not at ``<issuer>/.well-known/jwks.json``), or ``timekeeper:cognitoUserPool=true``
(a user pool with a ``custom:workspace_id`` attribute and groups as roles, and an app
client whose ID tokens the API accepts; no app client may write the workspace attribute:
only an administrator sets it). The claim names map by
``timekeeper:jwtUserClaim``, ``timekeeper:jwtWorkspaceClaim`` and ``timekeeper:jwtRolesClaim``.
The function runs outside the VPC (it reaches the issuer's JWKS over the internet) and
calls no AWS service.
"""

from __future__ import annotations

from aws_cdk import Aws, Duration, Fn, RemovalPolicy
from aws_cdk import aws_cognito as cognito
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.functions import TimekeeperFunction
from infra.nag import acknowledge
from infra.settings import JwtSettings
from timekeeper.settings import (
    JWT_AUDIENCE_VARIABLE,
    JWT_ISSUER_VARIABLE,
    JWT_JWKS_URL_VARIABLE,
    JWT_ROLES_CLAIM_VARIABLE,
    JWT_USER_CLAIM_VARIABLE,
    JWT_WORKSPACE_CLAIM_VARIABLE,
)
from timekeeper.topology import AUTHORIZER

#: The Cognito attribute that names a user's workspace (the token's workspace claim).
WORKSPACE_ATTRIBUTE = "workspace_id"


def client_write_attributes() -> cognito.ClientAttributes:
    """What a person may change about themselves through an app client (Cognito's
    ``UpdateUserAttributes`` with their own access token): their name, locale and time
    zone, never ``custom:workspace_id``. Every app client of the pool names these
    explicitly, because an app client without ``WriteAttributes`` lets its users write
    every attribute, custom ones included; the workspace is set and changed only by an
    administrator (``AdminCreateUser``, ``AdminUpdateUserAttributes``: IAM)."""
    return cognito.ClientAttributes().with_standard_attributes(fullname=True, given_name=True, family_name=True,
                                                               locale=True, timezone=True)


#: The authorizer's timeout (seconds): a JWKS fetch (5 s client timeout) and a verification.
AUTHORIZER_TIMEOUT_S = 10
AUTHORIZER_MEMORY_MB = 256


class JwtAuthorizerResources(Construct):
    """The authorizer function (:attr:`function`) for ``jwt``, the issuer it trusts
    (:attr:`issuer`), and the Cognito user pool (:attr:`user_pool`, :attr:`client`) when
    ``jwt.cognito``."""

    def __init__(self, scope: Construct, construct_id: str, *, jwt: JwtSettings, layer: lambda_.ILayerVersion,
                 log_retention: logs.RetentionDays, name_prefix: str):
        super().__init__(scope, construct_id)
        self.user_pool: cognito.UserPool | None = None
        self.client: cognito.UserPoolClient | None = None
        issuer, audience = jwt.issuer, jwt.audience
        if jwt.cognito:
            self.user_pool = cognito.UserPool(
                self, "UserPool", user_pool_name=name_prefix, self_sign_up_enabled=False,
                sign_in_aliases=cognito.SignInAliases(email=True),
                # Mutable only for an administrator: no app client may write it (see
                # client_write_attributes), so a user cannot move themselves to another workspace.
                custom_attributes={WORKSPACE_ATTRIBUTE: cognito.StringAttribute(min_len=36, max_len=36,
                                                                                mutable=True)},
                password_policy=cognito.PasswordPolicy(min_length=12, require_digits=True, require_lowercase=True,
                                                       require_uppercase=True, require_symbols=True),
                mfa=cognito.Mfa.OPTIONAL, mfa_second_factor=cognito.MfaSecondFactor(otp=True, sms=False),
                account_recovery=cognito.AccountRecovery.EMAIL_ONLY,
                removal_policy=RemovalPolicy.RETAIN)
            self.client = self.user_pool.add_client(
                # No OAuth flows: the API's client signs in by SRP; with the console's hosted
                # domain CDK's default (implicit and code grants, https://example.com as the
                # callback) would be live for it.
                "ApiClient", generate_secret=False, auth_flows=cognito.AuthFlow(user_srp=True), disable_o_auth=True,
                id_token_validity=Duration.hours(1), access_token_validity=Duration.hours(1),
                prevent_user_existence_errors=True, write_attributes=client_write_attributes())
            # The ID tokens' iss (the ProviderURL attribute lacks the https:// scheme)
            issuer = Fn.join("", ["https://cognito-idp.", Aws.REGION, ".", Aws.URL_SUFFIX, "/",
                                  self.user_pool.user_pool_id])
            audience = self.client.user_pool_client_id
            acknowledge(self.user_pool, "AwsSolutions-COG2",
                        "MFA is offered (TOTP) and enforced per user by the operator; requiring it for every "
                        "user would block the first sign-in of users the operator creates.")
            for rule in ("AwsSolutions-COG3", "AwsSolutions-COG8"):
                acknowledge(self.user_pool, rule,
                            "Threat protection (advanced security, the Plus feature plan) is paid per user; the "
                            "operator moves the pool to it when wanted, without changing the authorizer.")
        assert issuer and audience
        #: The issuer the authorizer trusts (a token for the user pool's when ``jwt.cognito``).
        self.issuer: str = issuer
        variables = {JWT_ISSUER_VARIABLE: issuer, JWT_AUDIENCE_VARIABLE: audience,
                     JWT_USER_CLAIM_VARIABLE: jwt.user_claim, JWT_WORKSPACE_CLAIM_VARIABLE: jwt.workspace_claim,
                     JWT_ROLES_CLAIM_VARIABLE: jwt.roles_claim}
        if jwt.jwks_url:
            variables[JWT_JWKS_URL_VARIABLE] = jwt.jwks_url
        self.function = TimekeeperFunction(
            self, "Function", folder=AUTHORIZER.function, layer=layer, database=None, login=None,
            timeout_s=AUTHORIZER_TIMEOUT_S, memory_mb=AUTHORIZER_MEMORY_MB, log_retention=log_retention,
            environment=variables, description="Timekeeper API authorizer: JWTs of an OpenID Connect issuer")
