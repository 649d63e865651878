"""Idempotency keys: which request of which requester a key names.

A caller repeats a request safely by sending the same ``Idempotency-Key``; the key then
belongs to that requester and that request (its method, path and body, as a SHA-256
fingerprint). :func:`claim` records the first use and tells a repeat of the same request
(replay it) from another request sent with the same key (refuse it,
:class:`KeyReused`). Another requester's same key is a key of their own.

A creating request (:func:`stored_response` and :func:`record_response`) keeps its
response under the key, so a repeat answers what the first one answered without creating
a second resource.

The owners' rows keep their own deduplication (an export per requester and key, a render
per key, a manual run per schedule and key): :func:`scoped_key` gives them a key that is
the requester's alone, so one person's key can never answer another person's request. An
owner that finds its key naming another request raises the same :class:`KeyReused`.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from timekeeper.db.rows import execute, fetch_one
from timekeeper.db.sql import load_queries

SQL = load_queries("timekeeper.db", "idempotency.sql")


@dataclass(frozen=True)
class RecordedKey:
    """A key as recorded: the request it names (``fingerprint``, ``method``, ``path``) and
    when it was first used (aware UTC)."""

    fingerprint: str
    method: str
    path: str
    created_at: datetime


class KeyReused(ValueError):
    """The product's one "key reused" refusal: an idempotency key already names another
    request, so repeating it cannot mean this one. ``first`` says what the key names (``an
    earlier POST /queries request``, ``a render of another report or month``); the API
    answers it 409 ``idempotency_key_reused`` naming the ``Idempotency-Key`` header."""

    def __init__(self, first: str) -> None:
        super().__init__(f"the key names {first}")
        self.first = first


@dataclass(frozen=True)
class Claim:
    """A recorded key: ``created`` True when this request used it first."""

    created: bool
    fingerprint: str


def fingerprint(method: str, path: str, body: Any = None) -> str:
    """The hex SHA-256 of a request: the upper-cased ``method``, the ``path`` (as routed,
    without the query string) and ``body`` as canonical JSON (sorted keys, no spaces; None
    for a route without a body). Equal requests have equal fingerprints whatever the
    order of the body's keys."""
    canonical = json.dumps([method.upper(), path, body], sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                           default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def claim(conn: psycopg.Connection, *, workspace_id: UUID, requester: str, key: str, method: str, path: str,
          body: Any, now: datetime) -> Claim:
    """Record that ``requester``'s ``key`` names this request (``method``, ``path``, JSON-ready
    ``body``; see :func:`fingerprint`) at instant ``now`` (aware UTC), in one transaction of
    its own, so the key is bound before the request's work starts and stays bound whatever
    the work's outcome. A repeat of the same request returns ``Claim(created=False)``.

    Raises :class:`KeyReused` when the requester used ``key`` for a different request
    (method, path or body). Two different requests racing with one new key: one records
    it, the other is refused."""
    print_ = fingerprint(method, path, body)
    params = {"workspace_id": workspace_id, "requester": requester, "key": key, "fingerprint": print_,
              "method": method.upper(), "path": path, "now": now}
    with conn.transaction():
        created = execute(conn, SQL["record_key"], params) == 1
        recorded = fetch_one(conn, SQL["get_key"], params, RecordedKey)
    if recorded is None or recorded.fingerprint != print_:
        first = f"{recorded.method} {recorded.path}" if recorded else f"{method.upper()} {path}"
        raise KeyReused(f"an earlier {first} request")
    return Claim(created=created, fingerprint=print_)


@dataclass(frozen=True)
class StoredResponse:
    """What a creating request answered under its key: HTTP ``response_status`` (2xx),
    the JSON ``response_body`` and its ``Location`` header (or None)."""

    response_status: int | None
    response_body: Any
    response_location: str | None


def stored_response(conn: psycopg.Connection, *, workspace_id: UUID, requester: str,
                    key: str) -> StoredResponse | None:
    """The response recorded under ``requester``'s claimed ``key`` (None when none is yet),
    locking the key's row until the caller's transaction ends: call it inside the
    transaction that creates the resource, after :func:`claim`, so that a twin of the
    request sent at once waits for this one and then finds its response."""
    found = fetch_one(conn, SQL["lock_response"], {"workspace_id": workspace_id, "requester": requester, "key": key},
                      StoredResponse)
    return found if found is not None and found.response_status is not None else None


def record_response(conn: psycopg.Connection, *, workspace_id: UUID, requester: str, key: str, status: int,
                    body: Any, location: str | None) -> None:
    """Record what the creating request answered (``status`` 2xx, JSON-ready ``body``,
    ``location`` or None) under its key, in the creation's transaction."""
    execute(conn, SQL["record_response"], {"workspace_id": workspace_id, "requester": requester, "key": key,
                                           "status": status, "body": Jsonb(body), "location": location})


@contextmanager
def held(conn: psycopg.Connection, *, workspace_id: UUID, requester: str, key: str) -> Iterator[None]:
    """Hold ``requester``'s ``key`` (of ``workspace_id``) on the session of ``conn`` while the
    block runs, across the transactions of its work: a twin request sent at once with the
    same key waits here until the first's block ends (its answer recorded), then finds that
    answer. For work that cannot run in the one transaction that locks the key's row (staff
    work entering other workspaces in transactions of their own). A session-level advisory
    lock: released when the block ends, however it ends, or when the connection closes;
    waiting longer than the login's statement timeout raises ``psycopg.errors.QueryCanceled``
    (an ``OperationalError``: the API's 503, try again)."""
    params = {"lock": json.dumps(["idempotency", str(workspace_id), requester, key])}
    execute(conn, SQL["hold_key"], params)
    try:
        yield
    finally:
        if not conn.closed and not conn.broken:
            try:
                execute(conn, SQL["release_key"], params)
            except psycopg.Error:
                conn.close()  # the session, and the lock with it, ends: never left held


def scoped_key(requester: str, key: str) -> str:
    """The key an owner's row is deduplicated by for ``requester``'s ``key``: ``"k:"`` and
    the hex SHA-256 of both (66 characters), so equal keys of two requesters never meet."""
    return "k:" + hashlib.sha256(f"{requester}\x00{key}".encode()).hexdigest()
