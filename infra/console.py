"""The console deployed (``timekeeper:console=true``; :class:`infra.settings.ConsoleDeployment`).

The API function serves the console's pages (``/console`` and below); API Gateway sends
them to it WITHOUT the API's authorizer (a browser carries a session cookie, not a bearer
token): the console's own session, signed with a key from the stack's Secrets Manager
secret, is what lets a person in, and every API request a page makes carries that
session's claims in-process. Every other path keeps the authorizer.

People sign in with the JWT authorizer's issuer (OpenID Connect, authorization code with
PKCE; :mod:`timekeeper.console.sign_in`): with ``timekeeper:cognitoUserPool``, the stack
gives the user pool a hosted sign-in domain (``timekeeper:cognitoDomainPrefix``) and an
app client for the console whose callback is the API's ``/v1/console/callback``; with the
operator's issuer, the console's client there (``timekeeper:consoleClientId``, its secret
by ``timekeeper:consoleClientSecretArn``), the endpoints read from the issuer's discovery
document at the first sign-in.

The session key secret (``{"key": <64 characters>}``) is read by the API function at its
cold start; it is rotated by writing ``{"keys": [old, new]}`` (docs/operations.md).
"""

from __future__ import annotations

from aws_cdk import Aws, Duration, Fn
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_cognito as cognito
from aws_cdk import aws_secretsmanager as secretsmanager
from constructs import Construct

from infra.api import API_STAGE, HttpApi
from infra.authorizer import client_write_attributes
from infra.nag import acknowledge
from infra.settings import ConsoleDeployment, JwtSettings
from timekeeper.settings import (
    CONSOLE_BASE_PATH_VARIABLE,
    CONSOLE_FAVICON_PATH,
    CONSOLE_OIDC_AUTHORIZATION_ENDPOINT_VARIABLE,
    CONSOLE_OIDC_CLIENT_ID_VARIABLE,
    CONSOLE_OIDC_CLIENT_SECRET_VARIABLE,
    CONSOLE_OIDC_ISSUER_VARIABLE,
    CONSOLE_OIDC_LOGOUT_URL_VARIABLE,
    CONSOLE_OIDC_REDIRECT_URI_VARIABLE,
    CONSOLE_OIDC_TOKEN_ENDPOINT_VARIABLE,
    CONSOLE_SESSION_SECRET_VARIABLE,
    JWT_JWKS_URL_VARIABLE,
    JWT_ROLES_CLAIM_VARIABLE,
    JWT_USER_CLAIM_VARIABLE,
    JWT_WORKSPACE_CLAIM_VARIABLE,
)

#: The console's first path segment (timekeeper.console.paths.PREFIX without its slash).
CONSOLE_PATH = "console"
#: How long the console's ID tokens from the user pool live: only the sign-in reads one.
CONSOLE_ID_TOKEN_VALIDITY = Duration.minutes(5)


class ConsoleResources(Construct):
    """The deployed console: its session key secret (:attr:`session_secret`), the API
    Gateway resources ``/console`` and ``/console/{proxy+}`` without the authorizer
    (:attr:`methods`), and with the stack's user pool its hosted domain and app client
    (:attr:`domain`, :attr:`client`). ``api`` is the HTTP API whose function serves the
    console."""

    def __init__(self, scope: Construct, construct_id: str, *, api: HttpApi, console: ConsoleDeployment,
                 jwt: JwtSettings):
        super().__init__(scope, construct_id)
        function = api.function
        self.session_secret = secretsmanager.Secret(
            self, "SessionKey", description="Timekeeper: the key the console's session cookies are signed with",
            generate_secret_string=secretsmanager.SecretStringGenerator(
                secret_string_template="{}", generate_string_key="key", exclude_punctuation=True,
                password_length=64))
        acknowledge(self.session_secret, "AwsSolutions-SMG4",
                    "The session key is rotated by hand (docs/operations.md): the new key is appended to the "
                    "secret's keys, so sessions signed with the old one stay valid until they expire.")
        self.session_secret.grant_read(function.role)
        variables = {CONSOLE_SESSION_SECRET_VARIABLE: self.session_secret.secret_arn,
                     CONSOLE_BASE_PATH_VARIABLE: f"/{API_STAGE}",
                     JWT_USER_CLAIM_VARIABLE: jwt.user_claim, JWT_WORKSPACE_CLAIM_VARIABLE: jwt.workspace_claim,
                     JWT_ROLES_CLAIM_VARIABLE: jwt.roles_claim}
        if jwt.jwks_url:
            variables[JWT_JWKS_URL_VARIABLE] = jwt.jwks_url
        # The console's address, from the REST API's id (not its stage: no dependency cycle
        # through the deployment, whose methods need the function that gets these values).
        base = Fn.join("", ["https://", api.api.rest_api_id, ".execute-api.", Aws.REGION, ".", Aws.URL_SUFFIX,
                            f"/{API_STAGE}/{CONSOLE_PATH}"])
        #: The callback registered with the issuer, and the page sign-out ends on.
        self.redirect_uri = Fn.join("", [base, "/callback"])
        signed_out = Fn.join("", [base, "/signed-out"])
        variables[CONSOLE_OIDC_REDIRECT_URI_VARIABLE] = self.redirect_uri

        self.domain: cognito.UserPoolDomain | None = None
        self.client: cognito.UserPoolClient | None = None
        resources = api.jwt_authorizer
        assert resources is not None, "the console signs in with the JWT authorizer's issuer"
        if jwt.cognito:
            pool = resources.user_pool
            assert pool is not None and console.cognito_domain_prefix
            self.domain = pool.add_domain("ConsoleDomain", cognito_domain=cognito.CognitoDomainOptions(
                domain_prefix=console.cognito_domain_prefix))
            self.client = pool.add_client(
                "ConsoleClient", generate_secret=False, prevent_user_existence_errors=True,
                write_attributes=client_write_attributes(),
                supported_identity_providers=[cognito.UserPoolClientIdentityProvider.COGNITO],
                id_token_validity=CONSOLE_ID_TOKEN_VALIDITY, access_token_validity=CONSOLE_ID_TOKEN_VALIDITY,
                o_auth=cognito.OAuthSettings(
                    flows=cognito.OAuthFlows(authorization_code_grant=True),
                    scopes=[cognito.OAuthScope.OPENID, cognito.OAuthScope.EMAIL, cognito.OAuthScope.PROFILE],
                    callback_urls=[self.redirect_uri], logout_urls=[signed_out]))
            hosted = self.domain.base_url()
            variables.update({
                CONSOLE_OIDC_ISSUER_VARIABLE: resources.issuer,
                CONSOLE_OIDC_CLIENT_ID_VARIABLE: self.client.user_pool_client_id,
                CONSOLE_OIDC_AUTHORIZATION_ENDPOINT_VARIABLE: Fn.join("", [hosted, "/oauth2/authorize"]),
                CONSOLE_OIDC_TOKEN_ENDPOINT_VARIABLE: Fn.join("", [hosted, "/oauth2/token"]),
                # Cognito's logout ends the hosted domain's session and returns to signed-out.
                CONSOLE_OIDC_LOGOUT_URL_VARIABLE: Fn.join("", [hosted, "/logout?client_id=",
                                                               self.client.user_pool_client_id,
                                                               "&logout_uri=", signed_out]),
            })
        else:
            assert jwt.issuer and console.client_id
            variables.update({CONSOLE_OIDC_ISSUER_VARIABLE: jwt.issuer,
                              CONSOLE_OIDC_CLIENT_ID_VARIABLE: console.client_id})
            if console.client_secret_arn:
                client_secret = secretsmanager.Secret.from_secret_complete_arn(
                    self, "ClientSecret", console.client_secret_arn)
                client_secret.grant_read(function.role)
                variables[CONSOLE_OIDC_CLIENT_SECRET_VARIABLE] = console.client_secret_arn
        for name, value in variables.items():
            function.function.add_environment(name, value)

        # /console and /console/{proxy+}: the API function without the authorizer (a
        # plain Resource under the proxying API's root, as the download route does).
        integration = apigw.LambdaIntegration(function.function)
        root = apigw.Resource(self, "Console", parent=api.api.root, path_part=CONSOLE_PATH)
        proxy = root.add_resource("{proxy+}")
        # /favicon.ico: what a browser asks for by itself; the console redirects it to its icon.
        favicon = apigw.Resource(self, "Favicon", parent=api.api.root, path_part=CONSOLE_FAVICON_PATH.lstrip("/"))
        #: The console's methods (no authorizer).
        self.methods = [root.add_method("ANY", integration), proxy.add_method("ANY", integration),
                        favicon.add_method("GET", integration)]
        for method in self.methods:
            cfn = method.node.default_child
            cfn.add_property_override("AuthorizationType", "NONE")  # type: ignore[union-attr]
            cfn.add_property_deletion_override("AuthorizerId")  # type: ignore[union-attr]
            acknowledge(method, "AwsSolutions-APIG4",
                        "The console's pages are reached by a browser with the console's signed session cookie, "
                        "not a bearer token: the function refuses every page without a valid session and calls "
                        "the API with the session's claims; sign-in and its callback must be open.")
            acknowledge(method, "AwsSolutions-COG4",
                        "The console signs people in with the identity provider itself (OpenID Connect, "
                        "authorization code with PKCE) and keeps their identity in its signed session.")
