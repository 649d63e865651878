"""The API's one Idempotency-Key mechanism: a key bound to its request, and a creating
request's answer recorded under it and replayed.

:func:`claim_key` binds a caller's key to one request (method, path, body) in the caller's
own workspace (:mod:`timekeeper.db.idempotency`), so the same key with another request is
a 409 ``idempotency_key_reused`` naming the header. :func:`create_once` answers a creating
request once per key: a repeat gets the first answer again (its status, body and
``Location``) with ``Idempotent-Replayed: true``. The key's row, its recorded answer and the
requester are always the CALLER's (their workspace's row-level security), also for staff
acting on another workspace.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from aws_lambda_powertools.event_handler import Response, content_types

from timekeeper.api.auth import Identity
from timekeeper.api.db import TenantConnection
from timekeeper.api.errors import IDEMPOTENCY_KEY_REUSED, ApiError
from timekeeper.db import idempotency

#: The header a replayed answer carries (its value ``"true"``).
REPLAYED_HEADER = "Idempotent-Replayed"


def claim_key(conn: TenantConnection, identity: Identity, *, method: str, path: str, key: str | None, body: Any,
              now: datetime) -> str | None:
    """Bind ``identity``'s Idempotency-Key ``key`` to this request (``method``, ``path``, and
    ``body``: a pydantic model, a JSON-ready value or None) at ``now`` (aware UTC), in the
    caller's workspace, before the route does its work; return the key the owner's rows
    are deduplicated by (:func:`timekeeper.db.idempotency.scoped_key`: the requester's
    alone), or None without a key.

    Raises a 409 :class:`ApiError` ``idempotency_key_reused`` naming the header when the
    caller used ``key`` for another method, path or body: a repeat must be the same request."""
    if key is None:
        return None
    if hasattr(body, "model_dump"):
        body = body.model_dump(mode="json")
    try:
        with conn.entered(identity.workspace_id):
            idempotency.claim(conn, workspace_id=identity.workspace_id, requester=identity.user_id, key=key,
                              method=method, path=path, body=body, now=now)
    except idempotency.KeyReused:
        raise ApiError(409, IDEMPOTENCY_KEY_REUSED, "this Idempotency-Key was used for another request (method, "
                       "path or body); send a new key for a new request", "Idempotency-Key") from None
    return idempotency.scoped_key(identity.user_id, key)


def replay(stored: idempotency.StoredResponse) -> Response:
    """The answer recorded under a key, again, marked ``Idempotent-Replayed: true``."""
    headers = {REPLAYED_HEADER: "true"}
    if stored.response_location:
        headers["Location"] = stored.response_location
    return Response(status_code=stored.response_status, content_type=content_types.APPLICATION_JSON,
                    body=stored.response_body, headers=headers)


def _payload(response: Response) -> Any:
    return response.body.model_dump(mode="json") if hasattr(response.body, "model_dump") else response.body


def create_once(conn: TenantConnection, identity: Identity, *, method: str, path: str, now: datetime,
                key: str | None, body: Any, create: Callable[[], Response], one_transaction: bool = True) -> Response:
    """Answer a creating request once per Idempotency-Key ``key`` of ``identity``: bind the
    key to this request (:func:`claim_key`: a 409 when it named another), then either
    replay the response recorded under it (:func:`replay`) or call ``create()`` (the route's
    work) and record its response (any status ``create()`` answers; a ``create()`` that
    raises records nothing, so a repeat tries again). Without a key, just ``create()``.

    ``one_transaction`` (a workspace route): ``create()`` runs inside the transaction that
    locks the key's row in the caller's workspace (its services' transactions nest as
    savepoints), so a twin request sent at once waits for the first and replays it. Staff
    work that enters other workspaces opens transactions of its own, so with
    ``one_transaction`` False the key is held on the connection's session instead
    (:func:`timekeeper.db.idempotency.held`) while the answer is looked for, ``create()``
    runs outside any transaction and its answer is recorded: a twin sent at once waits
    for the first and replays its answer too (one range, one group, one answer)."""
    if key is None:
        return create()
    claim_key(conn, identity, method=method, path=path, key=key, body=body, now=now)
    who = {"workspace_id": identity.workspace_id, "requester": identity.user_id, "key": key}
    if one_transaction:
        with conn.entered(identity.workspace_id), conn.transaction():
            stored = idempotency.stored_response(conn, **who)
            if stored is not None:
                return replay(stored)
            response = create()
            idempotency.record_response(conn, **who, status=response.status_code, body=_payload(response),
                                        location=(response.headers or {}).get("Location"))
            return response
    with idempotency.held(conn, **who):  # a twin sent at once waits here, then replays this answer
        with conn.entered(identity.workspace_id), conn.transaction():
            stored = idempotency.stored_response(conn, **who)
        if stored is not None:
            return replay(stored)
        response = create()
        with conn.entered(identity.workspace_id), conn.transaction():
            idempotency.record_response(conn, **who, status=response.status_code, body=_payload(response),
                                        location=(response.headers or {}).get("Location"))
        return response
