"""The console's deployed sign-in end to end: the API function's real handler
(``functions/api``) with a deployment's settings (the session key in a Secrets Manager
secret, moto; the OpenID Connect issuer's variables) against a local issuer made of real
parts: an RSA key made with ``cryptography``, its JWKS, discovery document and token
endpoint served by ``http.server`` in a thread, ID tokens signed with PyJWT.

A person signs in (authorization code with PKCE, state and nonce in the signed flow
cookie), the callback with the right state gives a session that sees only its own
workspace's schedules; a wrong state, a missing flow cookie, a token for another audience,
an expired token, a foreign nonce and a code sent without its verifier are refused without
a session; sign-out clears the session and leads to the issuer's logout. The deployed
answers carry the Content-Security-Policy without ``unsafe-inline``, ``frame-ancestors
'none'``, HSTS and ``HttpOnly; Secure; SameSite=Lax`` cookies under the stage's path."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import threading
import time
import uuid
from http.cookies import SimpleCookie
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import boto3
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from moto import mock_aws

from tests.api.conftest import Caller, new_schedule, proxy_event
from timekeeper import edge
from timekeeper.console.context import CONTENT_SECURITY_POLICY
from timekeeper.console.sessions import SESSION_COOKIE
from timekeeper.console.sign_in import FLOW_COOKIE
from timekeeper.edge import api as api_edge
from timekeeper.local.lambdas import invoke
from timekeeper.settings import (
    CONSOLE_BASE_PATH_VARIABLE,
    CONSOLE_OIDC_CLIENT_ID_VARIABLE,
    CONSOLE_OIDC_ISSUER_VARIABLE,
    CONSOLE_OIDC_REDIRECT_URI_VARIABLE,
    CONSOLE_SESSION_SECRET_VARIABLE,
    JWT_ROLES_CLAIM_VARIABLE,
    JWT_WORKSPACE_CLAIM_VARIABLE,
)

CLIENT_ID = "timekeeper-console"
REDIRECT_URI = "https://console.acme-saas.dev/v1/console/callback"
#: The deployed stage before /console (API Gateway's execute-api address).
STAGE = "/v1"


class FakeIssuer:
    """An OpenID Connect issuer on 127.0.0.1: discovery, JWKS, a token endpoint that checks
    the code, the client, the redirect URI and the PKCE verifier (S256), and ID tokens
    signed by its own RSA key. :meth:`authorize` plays the person signing in at it."""

    def __init__(self) -> None:
        self.key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.codes: dict[str, dict[str, Any]] = {}
        self.token_requests: list[dict[str, str]] = []
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _json(self, status: int, body: Any) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path == "/.well-known/openid-configuration":
                    self._json(200, {"issuer": issuer.url, "authorization_endpoint": f"{issuer.url}/authorize",
                                     "token_endpoint": f"{issuer.url}/token",
                                     "jwks_uri": f"{issuer.url}/.well-known/jwks.json",
                                     "end_session_endpoint": f"{issuer.url}/logout"})
                elif self.path == "/.well-known/jwks.json":
                    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(issuer.key.public_key()))
                    self._json(200, {"keys": [{**public, "kid": "k1", "use": "sig", "alg": "RS256"}]})
                else:
                    self._json(404, {"error": "not_found"})

            def do_POST(self) -> None:  # noqa: N802
                form = {k: v[0] for k, v in parse_qs(self.rfile.read(int(self.headers["Content-Length"])).decode())
                        .items()}
                issuer.token_requests.append(form)
                grant = issuer.codes.pop(form.get("code", ""), None)
                verifier = form.get("code_verifier", "")
                challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
                if (self.path != "/token" or grant is None or form.get("grant_type") != "authorization_code"
                        or form.get("client_id") != CLIENT_ID or form.get("redirect_uri") != grant["redirect_uri"]
                        or challenge != grant["challenge"]):
                    self._json(400, {"error": "invalid_grant"})
                    return
                self._json(200, {"id_token": issuer.sign(grant["claims"]), "token_type": "Bearer",
                                 "access_token": "opaque", "expires_in": 3600})

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/realms/acme"
        # The issuer's paths are under /realms/acme: route them to the handler's own names.
        original = Handler.parse_request

        def parse_request(handler: BaseHTTPRequestHandler) -> bool:
            ok = original(handler)
            handler.path = handler.path.removeprefix("/realms/acme")
            return ok

        Handler.parse_request = parse_request  # type: ignore[method-assign]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def sign(self, claims: dict[str, Any]) -> str:
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": "k1"})

    def authorize(self, location: str, claims: dict[str, Any]) -> dict[str, str]:
        """The person signs in at the authorization endpoint the console sent them to:
        returns the callback's query (``code``, ``state``), the code standing for an ID
        token with ``claims`` (the request's nonce, this issuer, the console's audience,
        valid for an hour, unless ``claims`` says otherwise)."""
        parts = urlsplit(location)
        assert f"{parts.scheme}://{parts.netloc}{parts.path}" == f"{self.url}/authorize"
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        assert query["response_type"] == "code" and query["client_id"] == CLIENT_ID
        assert query["code_challenge_method"] == "S256" and query["redirect_uri"] == REDIRECT_URI
        assert "openid" in query["scope"].split()
        now = int(time.time())
        code = uuid.uuid4().hex
        self.codes[code] = {"redirect_uri": query["redirect_uri"], "challenge": query["code_challenge"],
                            "claims": {"iss": self.url, "aud": CLIENT_ID, "iat": now, "exp": now + 3600,
                                       "nonce": query["nonce"], **claims}}
        return {"code": code, "state": query["state"]}


@pytest.fixture(scope="module")
def issuer():
    fake = FakeIssuer()
    fake.thread.start()
    yield fake
    fake.server.shutdown()
    fake.server.server_close()


@pytest.fixture
def deployed(db_url, issuer, monkeypatch):
    """The API function's environment as the stack sets it, over moto and the database."""
    for key, value in {"AWS_ACCESS_KEY_ID": "t", "AWS_SECRET_ACCESS_KEY": "t", "AWS_DEFAULT_REGION": "us-east-1",
                       "POWERTOOLS_TRACE_DISABLED": "true", "DATABASE_URL": db_url,
                       CONSOLE_OIDC_ISSUER_VARIABLE: issuer.url, CONSOLE_OIDC_CLIENT_ID_VARIABLE: CLIENT_ID,
                       CONSOLE_OIDC_REDIRECT_URI_VARIABLE: REDIRECT_URI, CONSOLE_BASE_PATH_VARIABLE: STAGE,
                       JWT_WORKSPACE_CLAIM_VARIABLE: "tenant", JWT_ROLES_CLAIM_VARIABLE: "groups"}.items():
        monkeypatch.setenv(key, value)
    for key in ("AWS_ENDPOINT_URL", "CONSOLE_SESSION_KEY", "CONSOLE_DEV_SIGN_IN", "TIMEKEEPER_FUNCTION"):
        monkeypatch.delenv(key, raising=False)
    with mock_aws():
        arn = boto3.client("secretsmanager").create_secret(
            Name="timekeeper-console-session", SecretString=json.dumps({"key": "s" * 64}))["ARN"]
        monkeypatch.setenv(CONSOLE_SESSION_SECRET_VARIABLE, arn)
        edge.reset()
        api_edge.reset()
        yield arn
        edge.reset()
        api_edge.reset()


class Browser:
    """A browser at the deployed console: its cookie jar, and requests through the API
    function's handler as API Gateway sends them (no authorizer on the console's paths)."""

    def __init__(self) -> None:
        self.jar: dict[str, str] = {}
        self.set_cookies: list[str] = []

    def request(self, method: str, target: str, form: dict[str, str] | None = None, *,
                decode_query: bool = False) -> dict[str, Any]:
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.jar.items())} if self.jar else {}
        if form is not None:
            headers["Content-Type"] = "application/x-www-form-urlencoded"
        event = proxy_event(method, target, claims=None, body=urlencode(form) if form is not None else None,
                            headers=headers)
        if decode_query:
            params = parse_qs(urlsplit(target).query, keep_blank_values=True)
            event["queryStringParameters"] = {k: v[-1] for k, v in params.items()} or None
            event["multiValueQueryStringParameters"] = params or None
        event["requestContext"]["stage"] = STAGE.strip("/")
        event["requestContext"]["path"] = STAGE + urlsplit(target).path
        response = invoke("api", event)
        self.set_cookies = list(response.get("multiValueHeaders", {}).get("Set-Cookie", [])) + list(
            response.get("cookies") or [])
        for raw in self.set_cookies:
            parsed = SimpleCookie()
            parsed.load(raw)
            for name, morsel in parsed.items():
                if morsel["max-age"] == "0" or not morsel.value:
                    self.jar.pop(name, None)
                else:
                    self.jar[name] = morsel.value
        return response


def header(response: dict[str, Any], name: str) -> str | None:
    for key, values in (response.get("multiValueHeaders") or {}).items():
        if key.lower() == name.lower():
            return values[-1]
    for key, value in (response.get("headers") or {}).items():
        if key.lower() == name.lower():
            return value
    return None


def start(browser: Browser) -> str:
    """The person opens the sign-in page: the console sends them to the issuer."""
    response = browser.request("GET", "/console/sign-in")
    assert response["statusCode"] == 303
    assert FLOW_COOKIE in browser.jar
    return header(response, "Location")


def callback(browser: Browser, query: dict[str, str]) -> dict[str, Any]:
    return browser.request("GET", "/console/callback?" + urlencode(query))


@pytest.fixture
def workspaces(call):
    """Two workspaces with one schedule each (created through the API)."""
    mine, theirs = Caller(user_id="ana"), Caller(user_id="ben")
    assert call("POST", "/schedules", new_schedule(name="ana's sweep"), as_=mine).status == 201
    assert call("POST", "/schedules", new_schedule(name="ben's sweep"), as_=theirs).status == 201
    return mine, theirs


def test_sign_in_through_the_issuer_gives_a_session_that_sees_only_its_workspace(deployed, issuer, workspaces):
    mine, theirs = workspaces
    browser = Browser()
    # Given a person sent to the issuer, with the state, nonce and PKCE challenge
    location = start(browser)
    query = issuer.authorize(location, {"sub": mine.user_id, "tenant": str(mine.workspace_id),
                                        "groups": ["schedules:read", "schedules:write"]})
    # When the issuer sends them back with the code and the right state
    response = callback(browser, query)
    # Then the console exchanged the code with the verifier and opened a session
    assert response["statusCode"] == 303, response.get("body")
    assert header(response, "Location") == f"{STAGE}/console/schedules"
    assert SESSION_COOKIE in browser.jar and FLOW_COOKIE not in browser.jar
    [exchange] = issuer.token_requests[-1:]
    assert exchange["code"] == query["code"] and exchange["redirect_uri"] == REDIRECT_URI
    # And the session sees its own workspace's schedule, not the other's
    page = browser.request("GET", "/console/schedules")
    assert page["statusCode"] == 200
    assert "ana&#39;s sweep" in page["body"] and "ben&#39;s sweep" not in page["body"]
    assert f'href="{STAGE}/console/static/console.css"' in page["body"]
    # (its own icon too: a browser that finds none asks for /favicon.ico, which the API refuses)
    assert f'<link rel="icon" href="{STAGE}/console/static/favicon.svg"' in page["body"]


def test_the_deployed_answers_carry_the_security_headers_and_cookie_flags(deployed, issuer, workspaces):
    mine, _ = workspaces
    browser = Browser()
    location = start(browser)
    [flow_cookie] = browser.set_cookies
    query = issuer.authorize(location, {"sub": mine.user_id, "tenant": str(mine.workspace_id), "groups": []})
    response = callback(browser, query)
    cookies = {c.split("=", 1)[0]: c for c in browser.set_cookies}
    for raw in (flow_cookie, cookies[SESSION_COOKIE], cookies[FLOW_COOKIE]):
        flags = [part.strip() for part in raw.split(";")]
        assert {"HttpOnly", "Secure", "SameSite=Lax", f"Path={STAGE}/console"} <= set(flags), raw
    page = browser.request("GET", "/console/schedules")
    for answer in (response, page):
        policy = header(answer, "Content-Security-Policy")
        assert policy == CONTENT_SECURITY_POLICY and "unsafe-inline" not in policy
        assert "frame-ancestors 'none'" in policy
        assert header(answer, "Strict-Transport-Security").startswith("max-age=")
        assert header(answer, "X-Frame-Options") == "DENY"


def test_a_wrong_state_is_refused_without_a_session(deployed, issuer, workspaces):
    mine, _ = workspaces
    browser = Browser()
    query = issuer.authorize(start(browser), {"sub": mine.user_id, "tenant": str(mine.workspace_id)})
    response = callback(browser, {**query, "state": "someone-elses-state"})
    assert response["statusCode"] == 403
    assert "state does not match" in response["body"]
    assert SESSION_COOKIE not in browser.jar
    # The code was never sent to the token endpoint
    assert all(r.get("code") != query["code"] for r in issuer.token_requests)


def test_a_callback_without_the_flow_cookie_is_refused(deployed, issuer, workspaces):
    mine, _ = workspaces
    browser = Browser()
    query = issuer.authorize(start(browser), {"sub": mine.user_id, "tenant": str(mine.workspace_id)})
    other = Browser()  # the code and state arrive in a browser that did not start the sign-in
    response = callback(other, query)
    assert response["statusCode"] == 403 and "no sign-in is under way" in response["body"]
    assert SESSION_COOKIE not in other.jar


@pytest.mark.parametrize("claims, reason", [
    ({"aud": "another-client"}, "InvalidAudienceError"),
    ({"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200}, "ExpiredSignatureError"),
    ({"nonce": "a-replayed-nonce"}, "nonce is not this sign-in"),
    ({"tenant": None}, "no 'tenant' claim"),
    ({"tenant": "acme"}, "workspace claim is not a workspace id"),
    ({"sub": "ana\x00admin"}, "user claim is not a user id"),
], ids=["foreign-audience", "expired", "foreign-nonce", "no-workspace", "workspace-not-a-uuid", "nul-in-user"])
def test_a_token_that_does_not_verify_is_refused(deployed, issuer, workspaces, claims, reason):
    mine, _ = workspaces
    browser = Browser()
    base = {"sub": mine.user_id, "tenant": str(mine.workspace_id)}
    query = issuer.authorize(start(browser), {k: v for k, v in {**base, **claims}.items() if v is not None})
    response = callback(browser, query)
    assert response["statusCode"] == 403
    assert reason in html.unescape(response["body"])
    assert SESSION_COOKIE not in browser.jar
    assert browser.request("GET", "/console/schedules")["statusCode"] == 303  # still signed out


def test_a_code_without_its_verifier_is_refused_by_the_issuer(deployed, issuer, workspaces):
    mine, _ = workspaces
    first, second = Browser(), Browser()
    # The code is issued for the first browser's challenge; the second brings it back with
    # its own (valid) state and its own verifier
    query = issuer.authorize(start(first), {"sub": mine.user_id, "tenant": str(mine.workspace_id)})
    second_state = issuer.authorize(start(second), {"sub": mine.user_id})["state"]
    response = callback(second, {"code": query["code"], "state": second_state})
    assert response["statusCode"] == 403 and "invalid_grant" in response["body"]
    assert SESSION_COOKIE not in second.jar


def test_sign_out_clears_the_session_and_leads_to_the_issuers_logout(deployed, issuer, workspaces):
    mine, _ = workspaces
    browser = Browser()
    callback(browser, issuer.authorize(start(browser), {"sub": mine.user_id, "tenant": str(mine.workspace_id)}))
    page = browser.request("GET", "/console/schedules")
    csrf = page["body"].split('name="csrf" value="', 1)[1].split('"', 1)[0]
    copied = dict(browser.jar)
    response = browser.request("POST", "/console/sign-out", {"csrf": csrf})
    assert response["statusCode"] == 303
    assert header(response, "Location").startswith(f"{issuer.url}/logout?client_id={CLIENT_ID}")
    assert SESSION_COOKIE not in browser.jar
    assert browser.request("GET", "/console/schedules")["statusCode"] == 303
    # A copy of the cookie is signed out on the server too: no page, no POST with the old token
    thief = Browser()
    thief.jar = copied
    assert thief.request("GET", "/console/schedules")["statusCode"] == 303
    assert thief.request("POST", "/console/notices/read", {"csrf": csrf})["statusCode"] == 303


def test_the_development_sign_in_is_not_offered_deployed(deployed, workspaces):
    mine, _ = workspaces
    browser = Browser()
    response = browser.request("POST", "/console/sign-in", {"user_id": "mallory",
                                                           "workspace_id": str(mine.workspace_id)})
    assert response["statusCode"] == 404
    assert SESSION_COOKIE not in browser.jar


def test_a_rotated_session_key_keeps_older_sessions_until_the_old_key_is_removed(deployed, issuer, workspaces):
    mine, _ = workspaces
    secrets = boto3.client("secretsmanager")
    browser = Browser()
    callback(browser, issuer.authorize(start(browser), {"sub": mine.user_id, "tenant": str(mine.workspace_id),
                                                        "groups": "schedules:read"}))
    signed_with_first = dict(browser.jar)
    assert browser.request("GET", "/console/schedules")["statusCode"] == 200
    # Given the secret rotated to a new signing key, the first one still listed, read by a
    # new execution environment
    secrets.put_secret_value(SecretId=deployed, SecretString=json.dumps({"keys": ["s" * 64, "n" * 64]}))
    edge.reset()
    api_edge.reset()
    # Then the session signed with the first key still opens the pages
    page = browser.request("GET", "/console/schedules")
    assert page["statusCode"] == 200, page["body"]
    # And once the first key is removed, it no longer does
    secrets.put_secret_value(SecretId=deployed, SecretString=json.dumps({"keys": ["n" * 64]}))
    edge.reset()
    api_edge.reset()
    browser.jar = signed_with_first
    assert browser.request("GET", "/console/schedules")["statusCode"] == 303


def test_a_deep_link_is_returned_to_after_signing_in_through_the_issuer(deployed, issuer, workspaces):
    mine, _ = workspaces
    browser = Browser()
    # Given a person who opens a schedule's page before signing in
    asked = f"/console/schedules/{uuid.uuid4()}?done=pause"
    sent = browser.request("GET", asked)
    assert sent["statusCode"] == 303
    to_sign_in = header(sent, "Location")
    assert to_sign_in == f"{STAGE}/console/sign-in?" + urlencode({"next": asked})
    # When they sign in through the issuer
    location = start_at(browser, to_sign_in.removeprefix(STAGE))
    query = issuer.authorize(location, {"sub": mine.user_id, "tenant": str(mine.workspace_id),
                                        "groups": ["schedules:read"]})
    response = callback(browser, query)
    # Then they land on the page they asked for, under the stage
    assert response["statusCode"] == 303 and header(response, "Location") == STAGE + asked
    # and a sign-in asked to return elsewhere lands on the schedules
    other = Browser()
    location = start_at(other, "/console/sign-in?" + urlencode({"next": "https://evil.example/console/x"}))
    query = issuer.authorize(location, {"sub": mine.user_id, "tenant": str(mine.workspace_id),
                                        "groups": ["schedules:read"]})
    assert header(callback(other, query), "Location") == f"{STAGE}/console/schedules"


def start_at(browser: Browser, target: str) -> str:
    """Open the sign-in ``target`` (its query decoded, as API Gateway passes it on): the
    console sends the browser to the issuer."""
    response = browser.request("GET", target, decode_query=True)
    assert response["statusCode"] == 303 and FLOW_COOKIE in browser.jar
    return header(response, "Location")
