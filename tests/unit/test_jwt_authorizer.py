"""The JWT authorizer against an issuer these tests play: keys they mint, a JWKS document a
local HTTP server serves (fetched by the authorizer as from a real issuer), tokens they
sign. Accepted: a valid token, whose claims become the identity the API reads; a token
signed with a key the issuer rotated in after the authorizer cached its JWKS. Refused (401
``Unauthorized``): expired, not yet valid, wrong audience, wrong issuer, ``alg: none``, an
HMAC token keyed with the public key, an unknown key id, a tampered signature, a key the
issuer removed, a token without the workspace claim, no bearer token, and any token while
the issuer's JWKS document holds no usable key or is no JWKS at all."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import jwt
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa

from timekeeper.api.auth import identity_from_event
from timekeeper.api.authorizer import AuthorizerSettings, JwtAuthorizer, Unauthorized
from timekeeper.edge import authorizer as edge_authorizer

AUDIENCE = "timekeeper-api"
WORKSPACE = "6f1c2a1e-1111-4c1d-9a55-3a4c9d7e0b10"
METHOD_ARN = "arn:aws:execute-api:eu-west-1:123456789012:abc123/v1/GET/schedules"


class Issuer:
    """An OpenID Connect issuer: its signing keys (kid -> private key) and a JWKS endpoint."""

    def __init__(self) -> None:
        self.keys: dict[str, object] = {}
        self.fetches = 0
        #: The JWKS endpoint's body as served instead of :meth:`jwks` (bytes), when set.
        self.raw: bytes | None = None
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                issuer.fetches += 1
                body = issuer.raw if issuer.raw is not None else json.dumps(issuer.jwks()).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def add_key(self, kid: str, kind: str = "rsa") -> None:
        self.keys[kid] = rsa.generate_private_key(public_exponent=65537, key_size=2048) if kind == "rsa" \
            else ec.generate_private_key(ec.SECP256R1())

    def jwks(self) -> dict:
        out = []
        for kid, key in self.keys.items():
            if isinstance(key, rsa.RSAPrivateKey):
                jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
                jwk.update(alg="RS256")
            else:
                jwk = json.loads(jwt.algorithms.ECAlgorithm.to_jwk(key.public_key()))
                jwk.update(alg="ES256")
            out.append({**jwk, "kid": kid, "use": "sig"})
        return {"keys": out}

    def token(self, kid: str, *, lifetime_s: int = 300, not_before_s: int | None = None, **claims) -> str:
        now = int(time.time())
        payload = {"iss": self.url, "aud": AUDIENCE, "sub": "user-1", "workspace_id": WORKSPACE,
                   "roles": ["schedules:read", "queries:read"], "iat": now, "exp": now + lifetime_s}
        if not_before_s is not None:
            payload["nbf"] = now + not_before_s
        payload.update(claims)
        payload = {k: v for k, v in payload.items() if v is not None}
        key = self.keys[kid]
        algorithm = "RS256" if isinstance(key, rsa.RSAPrivateKey) else "ES256"
        return jwt.encode(payload, key, algorithm=algorithm, headers={"kid": kid})


@pytest.fixture
def issuer():
    it = Issuer()
    it.add_key("k1")
    yield it
    it.server.shutdown()


def _settings(issuer: Issuer, **overrides) -> AuthorizerSettings:
    return AuthorizerSettings(issuer=issuer.url, audience=AUDIENCE, jwks_url=f"{issuer.url}/jwks.json",
                              **{"refresh_cooldown_s": 0, **overrides})


def _event(token: str | None) -> dict:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    return {"type": "REQUEST", "methodArn": METHOD_ARN, "headers": headers}


def _refused(auth: JwtAuthorizer, token: str | None, reason: str) -> None:
    with pytest.raises(Unauthorized, match="^Unauthorized$") as caught:
        auth.authorize(_event(token))
    assert reason in caught.value.reason, caught.value.reason


def test_a_valid_token_becomes_the_identity_the_api_reads(issuer):
    auth = JwtAuthorizer(_settings(issuer))
    answer = auth.authorize(_event(issuer.token("k1")))
    statement = answer["policyDocument"]["Statement"][0]
    assert statement["Effect"] == "Allow" and statement["Resource"] == \
        "arn:aws:execute-api:eu-west-1:123456789012:abc123/v1/*"
    # What API Gateway hands the API function as requestContext.authorizer
    identity = identity_from_event({"requestContext": {"authorizer": {
        **answer["context"], "principalId": answer["principalId"]}}})
    assert (identity.user_id, str(identity.workspace_id), identity.roles) == (
        "user-1", WORKSPACE, frozenset({"schedules:read", "queries:read"}))


def test_claim_names_are_mapped_as_configured(issuer):
    # A Cognito user pool's ID token: the workspace in a custom attribute, roles as groups
    auth = JwtAuthorizer(_settings(issuer, workspace_claim="custom:workspace_id", roles_claim="cognito:groups"))
    token = issuer.token("k1", workspace_id=None, roles=None, **{"custom:workspace_id": WORKSPACE,
                                                                   "cognito:groups": ["reports:read"]})
    context = auth.authorize(_event(token))["context"]
    assert context == {"user_id": "user-1", "workspace_id": WORKSPACE, "roles": "reports:read"}


def test_an_ec_key_verifies_too(issuer):
    issuer.add_key("ec1", kind="ec")
    assert JwtAuthorizer(_settings(issuer)).authorize(_event(issuer.token("ec1")))["principalId"] == "user-1"


def test_expired_and_not_yet_valid_tokens_are_refused(issuer):
    auth = JwtAuthorizer(_settings(issuer))
    _refused(auth, issuer.token("k1", lifetime_s=-120), "ExpiredSignatureError")
    _refused(auth, issuer.token("k1", not_before_s=600), "ImmatureSignatureError")
    _refused(auth, issuer.token("k1", exp=None), "MissingRequiredClaimError")


def test_another_audience_or_issuer_is_refused(issuer):
    auth = JwtAuthorizer(_settings(issuer))
    _refused(auth, issuer.token("k1", aud="another-client"), "InvalidAudienceError")
    _refused(auth, issuer.token("k1", iss="https://evil.example"), "InvalidIssuerError")


def test_alg_none_and_a_public_key_hmac_token_are_refused(issuer):
    auth = JwtAuthorizer(_settings(issuer))
    claims = jwt.decode(issuer.token("k1"), options={"verify_signature": False})
    unsigned = jwt.encode(claims, None, algorithm="none", headers={"kid": "k1"})
    _refused(auth, unsigned, "algorithm 'none' is not accepted")
    public_pem = issuer.keys["k1"].public_key().public_bytes(serialization.Encoding.PEM,
                                                              serialization.PublicFormat.SubjectPublicKeyInfo)
    import hashlib
    import hmac

    # HS256 keyed with the issuer's public key (the classic confusion attack), built by hand
    header = jwt.utils.base64url_encode(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
    body = jwt.utils.base64url_encode(json.dumps(claims).encode())
    signature = jwt.utils.base64url_encode(hmac.new(public_pem, header + b"." + body, hashlib.sha256).digest())
    _refused(auth, (header + b"." + body + b"." + signature).decode(), "algorithm 'HS256' is not accepted")


def test_an_unknown_key_id_and_a_tampered_signature_are_refused(issuer):
    auth = JwtAuthorizer(_settings(issuer))
    other = Issuer()
    other.add_key("k9")
    forged = other.token("k9", iss=issuer.url)
    other.server.shutdown()
    _refused(auth, forged, "signing key 'k9'")
    # A token of another key under a key id the issuer does have
    other_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    claims = jwt.decode(issuer.token("k1"), options={"verify_signature": False})
    _refused(auth, jwt.encode(claims, other_key, algorithm="RS256", headers={"kid": "k1"}), "InvalidSignatureError")


def test_a_rotated_key_verifies_at_once_and_a_removed_one_stops_when_the_cache_expires(issuer):
    auth = JwtAuthorizer(_settings(issuer, jwks_cache_s=1))
    assert auth.authorize(_event(issuer.token("k1")))  # the JWKS {k1} is now cached
    old = issuer.token("k1")
    # When the issuer rotates: k2 signs from now on, k1 is retired
    issuer.add_key("k2")
    fresh = issuer.token("k2")
    del issuer.keys["k1"]
    # Then a token of the new key verifies at once (its unknown kid refetches the JWKS)
    assert auth.authorize(_event(fresh))["principalId"] == "user-1"
    # And a token of the removed key is refused once the cached JWKS was replaced
    _refused(auth, old, "signing key 'k1'")


@pytest.mark.parametrize("document, reason", [
    (b'{"keys": []}', "signing key 'k1'"),  # no key at all
    # A symmetric key under the token's key id: a key, but never one for an RS256 token
    (b'{"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "k1"}]}', "InvalidAlgorithmError"),
    (b'{"keys": [{"kty": "XYZ", "kid": "k1"}]}', "signing key 'k1'"),  # a key type PyJWT does not know
    (b'{"keys": [{"kty": "RSA", "kid": "k1", "n": "!!", "e": "AQAB"}]}', "signing key 'k1'"),  # malformed
    (b'{"keys": "k1"}', "signing key 'k1'"), (b'{}', "signing key 'k1'"), (b'[]', "signing key 'k1'"),
    (b'null', "signing key 'k1'"), (b'not json', "signing key 'k1'"), (b'', "signing key 'k1'"),
])
def test_a_jwks_document_without_a_usable_key_refuses_the_token_not_the_authorizer(issuer, document, reason):
    # PyJWT raises PyJWKSetError ("The JWK Set did not contain any usable keys") for such a
    # document; past the authorizer that is a failed invocation (API Gateway: 500), where
    # a refusal (401) is what a token that cannot be verified gets.
    auth = JwtAuthorizer(_settings(issuer))
    token = issuer.token("k1")
    issuer.raw = document
    _refused(auth, token, reason)
    if reason.startswith("signing key"):
        # A document without usable keys is not kept: once the issuer serves its keys
        # again, its tokens verify
        issuer.raw = None
        assert auth.authorize(_event(token))["principalId"] == "user-1"


def test_tampered_claims_under_the_original_signature_are_refused(issuer):
    auth = JwtAuthorizer(_settings(issuer))
    header, _, signature = issuer.token("k1").split(".")
    claims = jwt.decode(issuer.token("k1"), options={"verify_signature": False})
    claims["workspace_id"] = "0f0f0f0f-2222-4c1d-9a55-3a4c9d7e0b10"  # another tenant's workspace
    body = jwt.utils.base64url_encode(json.dumps(claims).encode()).decode()
    _refused(auth, f"{header}.{body}.{signature}", "InvalidSignatureError")


def test_unknown_key_ids_do_not_refetch_the_jwks_more_than_once_per_cooldown(issuer):
    auth = JwtAuthorizer(_settings(issuer, refresh_cooldown_s=30))
    assert auth.authorize(_event(issuer.token("k1")))
    stranger = Issuer()
    for n in range(10):
        stranger.add_key(f"unknown-{n}")
        _refused(auth, stranger.token(f"unknown-{n}", iss=issuer.url), f"signing key 'unknown-{n}'")
    stranger.server.shutdown()
    assert issuer.fetches <= 2


def test_the_jwks_is_cached_between_requests(issuer):
    auth = JwtAuthorizer(_settings(issuer, refresh_cooldown_s=30))
    for _ in range(5):
        auth.authorize(_event(issuer.token("k1")))
    assert issuer.fetches == 1


def test_missing_claims_and_headers_are_refused(issuer):
    auth = JwtAuthorizer(_settings(issuer))
    _refused(auth, issuer.token("k1", workspace_id=None), "no 'workspace_id' claim")
    _refused(auth, issuer.token("k1", sub=None), "no 'sub' claim")
    _refused(auth, None, "no Authorization header")
    with pytest.raises(Unauthorized):
        auth.authorize({"methodArn": METHOD_ARN, "headers": {"authorization": "Basic dXNlcjpwdw=="}})
    _refused(auth, "not.a.jwt", "malformed token")
    _refused(auth, "\x00garbage\u202e", "malformed token")
    for empty in ("Bearer", "Bearer ", "Bearer    ", ""):
        with pytest.raises(Unauthorized, match="^Unauthorized$"):
            auth.authorize({"methodArn": METHOD_ARN, "headers": {"Authorization": empty}})


def test_the_settings_come_from_the_environment_and_refuse_symmetric_algorithms(monkeypatch, issuer):
    with pytest.raises(ValueError):
        AuthorizerSettings(issuer=issuer.url, audience=AUDIENCE, algorithms=("HS256",))
    with pytest.raises(ValueError):
        AuthorizerSettings.from_environment({"JWT_AUDIENCE": AUDIENCE})
    monkeypatch.setenv("JWT_ISSUER", issuer.url)
    monkeypatch.setenv("JWT_AUDIENCE", AUDIENCE)
    monkeypatch.setenv("JWT_JWKS_URL", f"{issuer.url}/jwks.json")
    edge_authorizer.reset()
    try:
        settings = edge_authorizer.jwt_authorizer().settings
        assert (settings.user_claim, settings.workspace_claim, settings.roles_claim, settings.algorithms) == (
            "sub", "workspace_id", "roles", ("RS256", "ES256"))
        assert AuthorizerSettings(issuer="https://i.example/", audience="a").jwks_document == \
            "https://i.example/.well-known/jwks.json"
        with pytest.raises(Unauthorized):
            edge_authorizer.authorize(_event("not.a.jwt"))
    finally:
        edge_authorizer.reset()
