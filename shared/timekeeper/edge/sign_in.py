"""The console's identity provider at the edge: the HTTP calls of the OpenID Connect
sign-in (the issuer's discovery document, the token endpoint, its JWKS) and the ID token's
verification by the API's own JWT authorizer.

Configured by the ``CONSOLE_OIDC_*`` variables (:mod:`timekeeper.settings`) and the JWT
authorizer's claim names (``JWT_USER_CLAIM``, ``JWT_WORKSPACE_CLAIM``, ``JWT_ROLES_CLAIM``,
``JWT_JWKS_URL``, ``JWT_ALGORITHMS``), so a console session carries exactly the identity
a bearer token of the same person would give the API. The ID token is verified by
:class:`timekeeper.api.authorizer.JwtAuthorizer` with the console's client id as the
audience: signature by a key of the issuer's JWKS, ``iss``, ``aud``, ``exp`` (required),
``nbf``/``iat``, the accepted algorithms, 30 s of clock skew.

These calls leave for the internet (the issuer is not an AWS service API): the API
function needs a route there (``timekeeper:egress`` ``nat`` or ``nat-instance`` in the
created VPC; docs/deploy.md).
"""

from __future__ import annotations

import base64
import json
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote, urlencode

import jwt
from pydantic import ValidationError

from timekeeper.api.authorizer import AuthorizerSettings, JwtAuthorizer, Unauthorized
from timekeeper.console.sign_in import Identity, IdentityProvider, SignInRefused
from timekeeper.settings import (
    CONSOLE_OIDC_AUTHORIZATION_ENDPOINT_VARIABLE,
    CONSOLE_OIDC_CLIENT_ID_VARIABLE,
    CONSOLE_OIDC_ISSUER_VARIABLE,
    CONSOLE_OIDC_LOGOUT_URL_VARIABLE,
    CONSOLE_OIDC_REDIRECT_URI_VARIABLE,
    CONSOLE_OIDC_TOKEN_ENDPOINT_VARIABLE,
    JWT_AUDIENCE_VARIABLE,
    JWT_ISSUER_VARIABLE,
)

#: Seconds an HTTP call to the issuer may take (the API function's timeout is longer).
HTTP_TIMEOUT_S = 5
#: The longest answer read from the issuer (bytes).
MAX_ANSWER_BYTES = 256 * 1024


def _read_json(request: urllib.request.Request, what: str) -> dict[str, Any]:
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as answer:  # noqa: S310 - https by settings
            body = answer.read(MAX_ANSWER_BYTES)
    except urllib.error.HTTPError as error:
        detail = ""
        try:
            detail = str(json.loads(error.read(4096)).get("error") or "")[:100]
        except (ValueError, AttributeError):
            pass
        raise SignInRefused(f"the {what} answered {error.code}" + (f" ({detail})" if detail else "")) from None
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        raise SignInRefused(f"the {what} could not be reached ({type(error).__name__})") from None
    try:
        parsed = json.loads(body)
    except ValueError:
        raise SignInRefused(f"the {what} did not answer JSON") from None
    if not isinstance(parsed, dict):
        raise SignInRefused(f"the {what} did not answer a JSON object")
    return parsed


def discover(issuer: str) -> dict[str, Any]:
    """The issuer's discovery document (``<issuer>/.well-known/openid-configuration``).
    Raises :class:`SignInRefused` when it cannot be read or names another issuer."""
    document = _read_json(urllib.request.Request(f"{issuer.rstrip('/')}/.well-known/openid-configuration",
                                                 headers={"Accept": "application/json"}), "discovery document")
    if document.get("issuer") != issuer:
        raise SignInRefused("the discovery document names another issuer")
    return document


def token_exchange(token_endpoint: str, client_id: str,
                   client_secret: Callable[[], str | None]) -> Callable[[str, str, str], str]:
    """``exchange(code, code_verifier, redirect_uri) -> ID token``: a POST of the
    ``authorization_code`` grant to ``token_endpoint`` (the client authenticates with
    HTTP Basic when ``client_secret()`` gives a secret, else sends its ``client_id`` as a
    public client). Raises :class:`SignInRefused` for a refusal, an unreachable endpoint
    or an answer without ``id_token``."""

    def exchange(code: str, code_verifier: str, redirect_uri: str) -> str:
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
                "code_verifier": code_verifier, "client_id": client_id}
        headers = {"Content-Type": "application/x-www-form-urlencoded", "Accept": "application/json"}
        secret = client_secret()
        if secret:
            pair = f"{quote(client_id, safe='')}:{quote(secret, safe='')}"
            headers["Authorization"] = "Basic " + base64.b64encode(pair.encode("utf-8")).decode("ascii")
        answer = _read_json(urllib.request.Request(token_endpoint, data=urlencode(form).encode("ascii"),
                                                   headers=headers, method="POST"), "token endpoint")
        token = answer.get("id_token")
        if not isinstance(token, str) or not token:
            raise SignInRefused("the token endpoint returned no ID token")
        return token

    return exchange


def id_token_verifier(authorizer: JwtAuthorizer) -> Callable[[str], tuple[dict[str, Any], Identity]]:
    """``verify(id_token) -> (claims, identity)`` by ``authorizer`` (the API's JWT
    verification and claim mapping, its audience the console's client id). Raises
    :class:`SignInRefused` with the authorizer's reason."""

    def verify(id_token: str) -> tuple[dict[str, Any], Identity]:
        try:
            claims = authorizer.claims(id_token)
            context = authorizer.identity(claims)
        except Unauthorized as refused:
            raise SignInRefused(f"the ID token was refused ({refused.reason})") from None
        return claims, Identity(user_id=context["user_id"], workspace_id=context["workspace_id"],
                                roles=context["roles"])

    return verify


def configured(env: Mapping[str, str]) -> bool:
    """Whether ``env`` configures the console's OpenID Connect sign-in (an issuer and a
    client id)."""
    return bool(env.get(CONSOLE_OIDC_ISSUER_VARIABLE) and env.get(CONSOLE_OIDC_CLIENT_ID_VARIABLE))


def identity_provider(env: Mapping[str, str], client_secret: Callable[[], str | None]) -> IdentityProvider:
    """The console's identity provider from ``env``: the endpoints named there or, when
    unset, the issuer's discovery document (fetched now), and its ``end_session_endpoint``
    as the logout address when none is named. Raises :class:`SignInRefused` when the
    discovery document cannot be read or the settings are not usable (e.g. an algorithm
    not accepted, a JWKS address that is no http(s) URL), ``KeyError`` when the issuer,
    client id or redirect URI is unset."""
    issuer, client_id = env[CONSOLE_OIDC_ISSUER_VARIABLE], env[CONSOLE_OIDC_CLIENT_ID_VARIABLE]
    redirect_uri = env[CONSOLE_OIDC_REDIRECT_URI_VARIABLE]
    authorization = env.get(CONSOLE_OIDC_AUTHORIZATION_ENDPOINT_VARIABLE) or ""
    token = env.get(CONSOLE_OIDC_TOKEN_ENDPOINT_VARIABLE) or ""
    logout = env.get(CONSOLE_OIDC_LOGOUT_URL_VARIABLE) or None
    if not (authorization and token):
        document = discover(issuer)
        authorization = authorization or str(document.get("authorization_endpoint") or "")
        token = token or str(document.get("token_endpoint") or "")
        end_session = document.get("end_session_endpoint")
        if logout is None and isinstance(end_session, str) and end_session:
            logout = f"{end_session}{'&' if '?' in end_session else '?'}" + urlencode({"client_id": client_id})
        if not (authorization and token):
            raise SignInRefused("the discovery document names no authorization or token endpoint")
    # The API's verification, the audience being the console's client (its ID tokens' aud).
    try:
        verifier = JwtAuthorizer(AuthorizerSettings.from_environment({**env, JWT_ISSUER_VARIABLE: issuer,
                                                                      JWT_AUDIENCE_VARIABLE: client_id}))
    except (ValidationError, jwt.PyJWKClientError) as error:
        raise SignInRefused(f"the console's issuer settings are not usable ({type(error).__name__})") from None
    return IdentityProvider(client_id=client_id, redirect_uri=redirect_uri, authorization_endpoint=authorization,
                            exchange=token_exchange(token, client_id, client_secret),
                            verify=id_token_verifier(verifier), logout_url=logout)
