"""The API as the console calls it: one person's REST proxy events, resolved by the API
resolver of the same execution environment (no network, no SQL)."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


class SessionUnknown(Exception):
    """The API could not say whether a session was signed out (its ``reply``)."""

    def __init__(self, reply: ApiReply) -> None:
        super().__init__(reply.status)
        self.reply = reply


@dataclass(frozen=True)
class ApiReply:
    """An API answer: HTTP ``status`` and the parsed JSON ``body`` (None when empty)."""

    status: int
    body: Any


class ApiClient:
    """The API as one person calls it: REST proxy events with ``claims`` as the authorizer's
    context, resolved by ``resolve(event, context)`` in this execution environment."""

    def __init__(self, resolve: Callable[[dict[str, Any], Any], dict[str, Any]], claims: dict[str, str],
                 context: Any = None) -> None:
        self._resolve, self._claims, self._context = resolve, claims, context

    def call(self, method: str, path: str, *, query: dict[str, str] | None = None, body: Any = None,
             headers: dict[str, str] | None = None) -> ApiReply:
        """``method path`` with ``query`` parameters and a JSON ``body``; the API's answer."""
        query = {k: v for k, v in (query or {}).items() if v not in (None, "")}
        event = {
            "resource": "/{proxy+}", "path": path, "httpMethod": method,
            "headers": {"Content-Type": "application/json", **(headers or {})},
            "multiValueHeaders": {}, "queryStringParameters": query or None,
            "multiValueQueryStringParameters": {k: [v] for k, v in query.items()} or None,
            "pathParameters": {"proxy": path.lstrip("/")}, "stageVariables": None,
            "requestContext": {"resourcePath": "/{proxy+}", "httpMethod": method, "path": path,
                               "requestId": str(uuid.uuid4()), "authorizer": self._claims,
                               "identity": {"sourceIp": "127.0.0.1"}},
            "body": None if body is None else json.dumps(body), "isBase64Encoded": False,
        }
        # (the API's resolver answers in a context of its own: the console's event stays)
        response = self._resolve(event, self._context)
        raw = response.get("body")
        try:
            parsed = json.loads(raw) if raw else None
        except ValueError:
            parsed = None
        return ApiReply(int(response["statusCode"]), parsed)
