"""API Gateway on a laptop: HTTP requests as REST proxy events for the API function.

:func:`proxy_event_from_wsgi` turns a WSGI request into the API Gateway REST proxy event
(``{proxy+}`` integration) the deployed API function receives, with a local stand-in for
the Lambda authorizer (:func:`dev_claims`: the claims of a development token
``Bearer dev:<user id>:<workspace uuid>:<role,role,...>``, checked by nothing: for a
laptop, never for a deployment). :class:`ApiGatewayProxy` is the WSGI application
``serve`` runs in front of the REAL API handler; the fault campaign's API driver and the
simulation's one-click opt-out build their events with the same function.
"""

from __future__ import annotations

import base64
import json
import sys
import time
import uuid
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs

API_FUNCTION = "api"
DEV_TOKEN_PREFIX = "dev:"

_HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
               "transfer-encoding", "upgrade"}
#: The WSGI environ key under which the server passes the pool of API execution
#: environments (a :class:`~concurrent.futures.Executor`) to :class:`ApiGatewayProxy`.
ENVIRONMENTS_KEY = "timekeeper.api_environments"


# --------------------------------------------------------------------- authorizer stand-in


def dev_claims(authorization: str | None) -> dict[str, str] | None:
    """The claims of a development token (``Bearer dev:<user>:<workspace>:<roles>``), as a
    Lambda authorizer's context map; None when the header holds no dev token. The values
    are passed through unchecked: the API validates them (a bad workspace id is a 401)."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.startswith(DEV_TOKEN_PREFIX):
        return None
    parts = token.strip().split(":", 3)
    if len(parts) < 3 or not parts[1]:
        return None
    return {"principalId": parts[1], "workspace_id": parts[2], "roles": parts[3] if len(parts) > 3 else ""}


# --------------------------------------------------------------- HTTP <-> API Gateway proxy


def _header_name(environ_key: str) -> str:
    return "-".join(part.capitalize() for part in environ_key.split("_"))


def proxy_event_from_wsgi(environ: dict[str, Any], *, stage: str = "local") -> dict[str, Any]:
    """The API Gateway REST proxy event (``{proxy+}`` integration, Lambda authorizer) for a
    WSGI request: method, path, headers, query string, body (base64 when not UTF-8) and
    ``requestContext`` with the dev token's claims as ``authorizer``."""
    method = environ["REQUEST_METHOD"].upper()
    path = environ.get("PATH_INFO", "/").encode("latin-1").decode("utf-8", "replace") or "/"
    headers: dict[str, str] = {}
    for key, value in environ.items():
        if key.startswith("HTTP_"):
            headers[_header_name(key[5:])] = value
    if environ.get("CONTENT_TYPE"):
        headers["Content-Type"] = environ["CONTENT_TYPE"]
    length = int(environ.get("CONTENT_LENGTH") or 0)
    raw = environ["wsgi.input"].read(length) if length > 0 else b""
    body: str | None = None
    is_base64 = False
    if raw:
        try:
            body = raw.decode("utf-8")
        except UnicodeDecodeError:
            body, is_base64 = base64.b64encode(raw).decode("ascii"), True
    query = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
    context: dict[str, Any] = {
        "accountId": "000000000000", "apiId": "local", "stage": stage, "requestId": str(uuid.uuid4()),
        "httpMethod": method, "path": path, "resourcePath": "/{proxy+}", "protocol": "HTTP/1.1",
        "requestTimeEpoch": int(time.time() * 1000),
        "identity": {"sourceIp": environ.get("REMOTE_ADDR", "127.0.0.1"), "userAgent": headers.get("User-Agent")}}
    claims = dev_claims(headers.get("Authorization"))
    if claims is not None:
        context["authorizer"] = claims
    return {
        "resource": "/{proxy+}", "path": path, "httpMethod": method,
        "headers": headers or None, "multiValueHeaders": {k: [v] for k, v in headers.items()} or None,
        "queryStringParameters": {k: v[-1] for k, v in query.items()} or None,
        "multiValueQueryStringParameters": query or None,
        "pathParameters": {"proxy": path.lstrip("/")}, "stageVariables": None,
        "requestContext": context, "body": body, "isBase64Encoded": is_base64}


class ApiGatewayProxy:
    """A WSGI application that plays API Gateway in front of the API function: request ->
    proxy event -> ``invoke(function, event)`` -> proxy response -> HTTP response. An
    invocation that raises is a 502, as API Gateway answers a failed integration."""

    def __init__(self, function: str = API_FUNCTION) -> None:
        self.function = function

    def __call__(self, environ: dict[str, Any], start_response: Any) -> list[bytes]:
        from timekeeper.local.lambdas import invoke

        event = proxy_event_from_wsgi(environ)
        environments = environ.get(ENVIRONMENTS_KEY)
        try:
            if environments is not None:  # on one of the server's API execution environments
                result = environments.submit(invoke, self.function, event, timeout_s=29).result()
            else:
                result = invoke(self.function, event, timeout_s=29)
        except Exception as error:  # noqa: BLE001 - the integration failed: a 502 like API Gateway
            print(f"API function failed: {type(error).__name__}", file=sys.stderr)
            body = json.dumps({"message": "Internal server error"}).encode()
            start_response("502 Bad Gateway", [("Content-Type", "application/json"),
                                               ("Content-Length", str(len(body)))])
            return [body]
        status = int(result.get("statusCode", 200))
        headers: dict[str, str] = {}
        for key, values in (result.get("multiValueHeaders") or {}).items():
            headers[key] = ", ".join(str(v) for v in values)
        for key, value in (result.get("headers") or {}).items():
            headers[key] = str(value)
        payload = result.get("body") or ""
        data = base64.b64decode(payload) if result.get("isBase64Encoded") else payload.encode("utf-8")
        out = [(k, v) for k, v in headers.items() if k.lower() not in _HOP_BY_HOP | {"content-length"}]
        out.append(("Content-Length", str(len(data))))
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "Status"
        start_response(f"{status} {phrase}", out)
        return [data]
