"""The console's OpenID Connect sign-in: the authorization-code flow with PKCE.

``GET /console/sign-in`` makes a fresh ``state``, ``nonce`` and PKCE ``code_verifier``
(:func:`new_flow`), keeps them in a signed cookie that lives :data:`FLOW_MAX_AGE_S`
seconds (:class:`FlowCookies`), and sends the browser to the issuer's authorization
endpoint with the verifier's S256 challenge (:func:`authorization_url`). The issuer sends
it back to ``/console/callback?code=...&state=...``; the callback accepts it only when
the cookie verifies and its state equals the query's (:func:`check_callback`), exchanges
the code and the verifier at the token endpoint, verifies the ID token exactly as the
API's JWT authorizer verifies a bearer token (signature by the issuer's JWKS, ``iss``,
``aud`` = the console's client id, ``exp``), checks its ``nonce``, and maps its claims to
the identity the authorizer gives the API (user id, workspace, roles).

The console holds the flow only; the HTTP call to the token endpoint and the token's
verification are the edge's (:class:`IdentityProvider`), since the console may not import
the API's authorizer or make network calls of its own.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from itsdangerous import BadSignature, URLSafeTimedSerializer

#: The cookie that carries a sign-in under way (state, nonce, PKCE verifier).
FLOW_COOKIE = "tk_console_flow"
#: How long a sign-in may take between leaving for the issuer and coming back (seconds).
FLOW_MAX_AGE_S = 600


class SignInRefused(Exception):
    """A sign-in the console refuses; ``reason`` says why (shown to the person and logged,
    never with a token or a code)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Identity:
    """Who an ID token names, as the API's authorizer maps a token: ``user_id``,
    ``workspace_id`` and ``roles`` (names joined by spaces)."""

    user_id: str
    workspace_id: str
    roles: str


@dataclass(frozen=True)
class IdentityProvider:
    """The issuer the console signs people in with.

    ``client_id``: the console's client at the issuer; ``redirect_uri``: the callback
    registered there (exactly); ``authorization_endpoint``: where the browser is sent;
    ``scopes``: the scopes asked for (``openid`` first); ``logout_url``: where sign-out
    sends the browser (None: the issuer offers none; the console's own signed-out page).
    ``exchange(code, code_verifier, redirect_uri)`` posts the code to the token endpoint and
    returns the ID token (raises :class:`SignInRefused`); ``verify(id_token)`` returns
    the token's verified claims and the identity they map to (raises
    :class:`SignInRefused`).
    """

    client_id: str
    redirect_uri: str
    authorization_endpoint: str
    exchange: Callable[[str, str, str], str]
    verify: Callable[[str], tuple[dict[str, Any], Identity]]
    scopes: str = "openid email profile"
    logout_url: str | None = None


@dataclass(frozen=True)
class Flow:
    """One sign-in under way: the ``state`` the callback must bring back, the ``nonce``
    the ID token must carry, and the PKCE ``verifier`` (43-128 characters, RFC 7636)."""

    state: str
    nonce: str
    verifier: str
    #: The console page asked for before signing in (a path under ``/console``; empty: none).
    next: str = ""

    @property
    def challenge(self) -> str:
        """The verifier's S256 code challenge: base64url(SHA-256(verifier)), unpadded."""
        digest = hashlib.sha256(self.verifier.encode("ascii")).digest()
        return base64.urlsafe_b64encode(digest).rstrip(b"=").decode("ascii")


def new_flow(next_page: str = "") -> Flow:
    """A fresh flow: 256 random bits each for the state and the nonce, 384 for the verifier;
    ``next_page`` is the console page to return to once signed in (checked by the caller)."""
    return Flow(state=secrets.token_urlsafe(32), nonce=secrets.token_urlsafe(32), verifier=secrets.token_urlsafe(48),
                next=next_page)


def authorization_url(provider: IdentityProvider, flow: Flow) -> str:
    """Where the browser is sent to sign in: the authorization endpoint with
    ``response_type=code``, the client id, the redirect URI, the scopes, the state, the
    nonce and the S256 challenge."""
    query = urlencode({"response_type": "code", "client_id": provider.client_id,
                       "redirect_uri": provider.redirect_uri, "scope": provider.scopes, "state": flow.state,
                       "nonce": flow.nonce, "code_challenge": flow.challenge, "code_challenge_method": "S256"})
    separator = "&" if "?" in provider.authorization_endpoint else "?"
    return f"{provider.authorization_endpoint}{separator}{query}"


class FlowCookies:
    """Signs and reads the flow cookie's value (itsdangerous, HMAC-SHA-256, the session
    key's own salt); ``secret_keys``: the session keys, newest last."""

    def __init__(self, secret_keys: list[str]) -> None:
        self._serializer = URLSafeTimedSerializer(secret_keys, salt="timekeeper-console-sign-in",
                                                  signer_kwargs={"digest_method": hashlib.sha256})

    def issue(self, flow: Flow) -> str:
        """The cookie value of ``flow``."""
        return self._serializer.dumps({"s": flow.state, "n": flow.nonce, "v": flow.verifier, "x": flow.next})

    def read(self, value: str | None) -> Flow | None:
        """The flow a cookie value holds, or None (absent, tampered with, older than
        :data:`FLOW_MAX_AGE_S` seconds, or not what :meth:`issue` writes)."""
        if not value:
            return None
        try:
            data = self._serializer.loads(value, max_age=FLOW_MAX_AGE_S)
            flow = Flow(state=data["s"], nonce=data["n"], verifier=data["v"], next=str(data.get("x") or ""))
        except (BadSignature, KeyError, TypeError, ValueError):
            return None
        if not all(isinstance(v, str) and v for v in (flow.state, flow.nonce, flow.verifier)):
            return None
        return flow


def check_callback(flow: Flow | None, params: dict[str, str]) -> str:
    """The authorization code of a callback's query ``params`` for the sign-in ``flow``
    (from its cookie). Raises :class:`SignInRefused` when the issuer reports an error, no
    sign-in is under way in this browser (no valid flow cookie), the state is missing or
    is not the flow's (compared in constant time), or there is no code."""
    if params.get("error"):
        raise SignInRefused(f"the identity provider refused the sign-in ({params['error'][:100]})")
    if flow is None:
        raise SignInRefused("no sign-in is under way in this browser, or it took too long")
    state = params.get("state") or ""
    if not hmac.compare_digest(state.encode("utf-8", "replace"), flow.state.encode("ascii")):
        raise SignInRefused("the sign-in's state does not match this browser's")
    code = params.get("code") or ""
    if not code or len(code) > 2048:
        raise SignInRefused("the identity provider sent no authorization code")
    return code


def finish(provider: IdentityProvider, flow: Flow, code: str) -> Identity:
    """Exchange ``code`` with ``flow``'s verifier, verify the ID token and its nonce, and
    return the identity it maps to. Raises :class:`SignInRefused` (the exchange failed,
    the token does not verify or names no user or workspace, or its nonce is not the
    flow's)."""
    id_token = provider.exchange(code, flow.verifier, provider.redirect_uri)
    claims, identity = provider.verify(id_token)
    nonce = claims.get("nonce")
    if not isinstance(nonce, str) or not hmac.compare_digest(nonce.encode("utf-8", "replace"),
                                                             flow.nonce.encode("ascii")):
        raise SignInRefused("the ID token's nonce is not this sign-in's")
    return identity
