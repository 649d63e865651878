"""The API's JWT authorizer: API Gateway REQUEST authorizer events in, IAM policies with the
caller's identity out, for the tokens of any OpenID Connect issuer.

A request carries ``Authorization: Bearer <JWT>``. The token is accepted when its header
names an accepted algorithm (never ``none``, never HMAC: the keys are the issuer's public
keys) and a key id (``kid``) of the issuer's JWKS document, its signature verifies with that
key, its ``iss`` is the configured issuer exactly, its ``aud`` names the configured
audience, it has not expired (``exp``, required) and is already valid (``nbf``, ``iat``
when present), with :data:`LEEWAY_S` seconds of clock skew allowed. The JWKS document is
fetched with PyJWT's ``PyJWKClient`` and cached (:attr:`AuthorizerSettings.jwks_cache_s`);
a key id not in the cached set refetches it (at most once per
:attr:`AuthorizerSettings.refresh_cooldown_s`), so an issuer's key rotation is picked up at
once and a removed key stops verifying when the cache expires.

The identity goes to the API the way :func:`timekeeper.api.auth.identity_from_event` reads
it: the policy's ``context`` holds ``user_id``, ``workspace_id`` and ``roles`` (names joined
by spaces), taken from the claims the deployment names (``sub``, ``workspace_id``,
``roles`` by default; e.g. ``custom:workspace_id`` and ``cognito:groups`` for a Cognito user
pool). A token that does not verify, or lacks the user or workspace claim, is refused with
``Unauthorized`` (API Gateway answers 401); the reason is logged, never the token.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jwt
from pydantic import BaseModel, ConfigDict, Field, field_validator

from timekeeper.settings import (
    JWT_ALGORITHMS_VARIABLE,
    JWT_AUDIENCE_VARIABLE,
    JWT_ISSUER_VARIABLE,
    JWT_JWKS_URL_VARIABLE,
    JWT_ROLES_CLAIM_VARIABLE,
    JWT_USER_CLAIM_VARIABLE,
    JWT_WORKSPACE_CLAIM_VARIABLE,
)

#: Clock skew tolerated on ``exp``, ``nbf`` and ``iat`` (seconds).
LEEWAY_S = 30
#: The asymmetric algorithms a deployment may accept (``none`` and HMAC never).
SUPPORTED_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384",
                                  "ES512", "EdDSA"})
#: The longest bearer token read (characters); longer headers are refused unread.
MAX_TOKEN_CHARS = 8192


class Unauthorized(Exception):
    """The request is not authenticated. Raised with the message ``Unauthorized``, which
    API Gateway turns into a 401 answer; ``reason`` says why, for the log."""

    def __init__(self, reason: str) -> None:
        super().__init__("Unauthorized")
        self.reason = reason


class AuthorizerSettings(BaseModel):
    """What the authorizer trusts: ``issuer`` and ``audience`` (exact strings), the JWKS
    document ``jwks_url`` (default ``<issuer>/.well-known/jwks.json``), the claim names,
    the accepted ``algorithms``, the JWKS cache lifetime and the least time between two
    refetches for an unknown key id (seconds). Raises ``pydantic.ValidationError`` for an
    empty issuer or audience or an algorithm outside :data:`SUPPORTED_ALGORITHMS`."""

    model_config = ConfigDict(frozen=True)

    issuer: str = Field(min_length=1)
    audience: str = Field(min_length=1)
    jwks_url: str = ""
    user_claim: str = "sub"
    workspace_claim: str = "workspace_id"
    roles_claim: str = "roles"
    algorithms: tuple[str, ...] = ("RS256", "ES256")
    jwks_cache_s: float = 300
    refresh_cooldown_s: float = 30

    @field_validator("algorithms")
    @classmethod
    def _asymmetric(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        refused = set(value) - SUPPORTED_ALGORITHMS
        if refused or not value:
            raise ValueError(f"algorithms must be among {sorted(SUPPORTED_ALGORITHMS)}, not {sorted(refused)}")
        return value

    @property
    def jwks_document(self) -> str:
        """The JWKS URL to fetch."""
        return self.jwks_url or f"{self.issuer.rstrip('/')}/.well-known/jwks.json"

    @classmethod
    def from_environment(cls, env: Mapping[str, str]) -> AuthorizerSettings:
        """The settings the variables of :mod:`timekeeper.settings` (``JWT_*``) name; unset
        ones take the defaults. Raises ``pydantic.ValidationError`` (e.g. no issuer)."""
        def get(name: str, default: str) -> str:
            return (env.get(name) or "").strip() or default

        return cls(issuer=get(JWT_ISSUER_VARIABLE, ""), audience=get(JWT_AUDIENCE_VARIABLE, ""),
                   jwks_url=get(JWT_JWKS_URL_VARIABLE, ""), user_claim=get(JWT_USER_CLAIM_VARIABLE, "sub"),
                   workspace_claim=get(JWT_WORKSPACE_CLAIM_VARIABLE, "workspace_id"),
                   roles_claim=get(JWT_ROLES_CLAIM_VARIABLE, "roles"),
                   algorithms=tuple(a.strip() for a in get(JWT_ALGORITHMS_VARIABLE, "RS256,ES256").split(",")
                                    if a.strip()))


def _bearer(event: Mapping[str, Any]) -> str:
    headers = event.get("headers") or {}
    value = next((v for k, v in headers.items() if isinstance(k, str) and k.lower() == "authorization"), None)
    if not isinstance(value, str):
        raise Unauthorized("no Authorization header")
    scheme, _, token = value.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("the Authorization header is not a bearer token")
    if len(token) > MAX_TOKEN_CHARS:
        raise Unauthorized("the bearer token is too long")
    return token.strip()


def _roles(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return " ".join(value.replace(",", " ").split())
    if isinstance(value, list | tuple):
        return " ".join(str(v).strip() for v in value if isinstance(v, str | int) and str(v).strip())
    return ""


def _policy_resource(method_arn: str) -> str:
    """Every method of the stage the request came to: ``arn:...:<api>/<stage>/*`` (the
    answer is cached per token and must hold for the caller's other routes too)."""
    parts = method_arn.split("/")
    if len(parts) < 2 or not method_arn.startswith("arn:"):
        raise Unauthorized("the event names no method ARN")
    return f"{parts[0]}/{parts[1]}/*"


class JwtAuthorizer:
    """Verifies bearer tokens per :class:`AuthorizerSettings` (see the module docstring).
    One instance lives per execution environment: it holds the JWKS cache."""

    def __init__(self, settings: AuthorizerSettings) -> None:
        self.settings = settings
        self._jwks = jwt.PyJWKClient(settings.jwks_document, cache_keys=False, cache_jwk_set=True,
                                     lifespan=settings.jwks_cache_s, timeout=5,
                                     cooldown_duration=settings.refresh_cooldown_s)

    def claims(self, token: str) -> dict[str, Any]:
        """The verified claims of ``token``. Raises :class:`Unauthorized` for an algorithm
        not accepted (``none`` included), a key id the JWKS does not hold, a bad signature,
        another issuer or audience, an expired or not yet valid token, or a JWKS document
        that could not be fetched or holds no usable key."""
        s = self.settings
        try:
            header = jwt.get_unverified_header(token)
        except jwt.InvalidTokenError as error:
            raise Unauthorized(f"malformed token: {error}") from None
        algorithm = header.get("alg")
        if algorithm not in s.algorithms:
            raise Unauthorized(f"algorithm {algorithm!r} is not accepted")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise Unauthorized("the token names no key id")
        try:
            key = self._jwks.get_signing_key(kid)
        except (jwt.PyJWTError, ValueError, TypeError, AttributeError) as error:
            # Not fetched, not JSON, no JWKS, or no usable key in it (PyJWKSetError): the
            # token cannot be verified, so it is refused like any other (401, not a fault).
            raise Unauthorized(f"signing key {kid!r}: {type(error).__name__}: {error}") from None
        try:
            return jwt.decode(token, key=key, algorithms=list(s.algorithms), audience=s.audience, issuer=s.issuer,
                              leeway=LEEWAY_S, options={"require": ["exp", "iss", "aud"]})
        except jwt.InvalidTokenError as error:
            raise Unauthorized(f"{type(error).__name__}: {error}") from None

    def authorize(self, event: Mapping[str, Any]) -> dict[str, Any]:
        """The REQUEST authorizer answer for ``event`` (``headers``, ``methodArn``): an Allow
        policy for the stage and ``context`` = ``user_id``, ``workspace_id``, ``roles``.
        Raises :class:`Unauthorized` (see :meth:`claims`; also without the user or the
        workspace claim)."""
        context = self.identity(self.claims(_bearer(event)))
        return {
            "principalId": context["user_id"],
            "policyDocument": {"Version": "2012-10-17", "Statement": [
                {"Action": "execute-api:Invoke", "Effect": "Allow",
                 "Resource": _policy_resource(str(event.get("methodArn") or ""))}]},
            "context": context,
        }

    def identity(self, claims: Mapping[str, Any]) -> dict[str, str]:
        """The identity verified ``claims`` carry, as the API reads it: ``user_id``,
        ``workspace_id`` and ``roles`` (names joined by spaces) from the claims the settings
        name. The authorizer's policy context and the console's sign-in both map a token
        this way. Raises :class:`Unauthorized` without the user or the workspace claim."""
        s = self.settings
        user, workspace = claims.get(s.user_claim), claims.get(s.workspace_claim)
        if not isinstance(user, str) or not user.strip():
            raise Unauthorized(f"the token has no {s.user_claim!r} claim")
        if not isinstance(workspace, str) or not workspace.strip():
            raise Unauthorized(f"the token has no {s.workspace_claim!r} claim")
        return {"user_id": user.strip(), "workspace_id": workspace.strip(),
                "roles": _roles(claims.get(s.roles_claim))}
