"""Saved queries and their immutable versions.

A saved query has a name, a description and a current version; each version is a
definition checked against the catalogue when it was saved. Editing the definition
appends version n + 1 and moves ``current_version``; a version row is never changed, so a
schedule or export pinned to version n runs exactly what was saved. Deleting marks the
query (``deleted_at``): it disappears from listings and reads, and its versions stay for
the exports and schedules that pinned them and for audit.

Every function takes the caller's workspace and filters by it (the API's connection adds
row-level security below), runs in the caller's transaction or its own savepoint, and
returns frozen dataclasses. Instants are aware UTC.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from timekeeper.db import load_queries
from timekeeper.db.keyset import keyset_rows
from timekeeper.db.rows import execute, fetch_all, fetch_one
from timekeeper.reporting.definition import QueryDefinition, check_definition, parse_definition


class QueryNotFound(LookupError):
    """No such (undeleted) saved query, or version, in the workspace."""


@dataclass(frozen=True)
class SavedQuery:
    """A saved query: ``current_version`` >= 1; ``deleted_at`` None unless deleted."""

    id: UUID
    workspace_id: UUID
    name: str
    description: str
    current_version: int
    created_by: str
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None


@dataclass(frozen=True)
class QueryVersion:
    """One immutable version: ``definition`` as stored (JSON), ``version`` >= 1."""

    workspace_id: UUID
    query_id: UUID
    version: int
    definition: dict[str, Any]
    created_by: str
    created_at: datetime

    def parsed(self) -> QueryDefinition:
        """The stored definition checked against today's catalogue; raises
        :class:`~timekeeper.reporting.definition.InvalidDefinition` when it no longer checks."""
        return check_definition(self.definition)



SQL = load_queries("timekeeper.reporting", "store.sql")


def _stored(definition: QueryDefinition | dict[str, Any]) -> Jsonb:
    """The JSON to store for ``definition``: shape-normalized by the model, checked against
    the catalogue (raises ``InvalidDefinition``); filter values are stored as written."""
    parsed = definition if isinstance(definition, QueryDefinition) else parse_definition(definition)
    check_definition(parsed)
    return Jsonb(parsed.model_dump(mode="json"))


def create_query(conn: psycopg.Connection, *, workspace_id: UUID, name: str, definition: QueryDefinition | dict,
                 actor: str, now: datetime, description: str = "") -> tuple[SavedQuery, QueryVersion]:
    """Save a new query with version 1. Raises
    :class:`~timekeeper.reporting.definition.InvalidDefinition` naming the field."""
    stored = _stored(definition)
    with conn.transaction():
        query = fetch_one(conn, SQL["insert_query"], (workspace_id, name, description, actor, now, now), SavedQuery)
        assert query is not None
        version = _insert_version(conn, query, 1, stored, actor, now)
    return query, version


def _insert_version(conn: psycopg.Connection, query: SavedQuery, number: int, stored: Jsonb, actor: str,
                    now: datetime) -> QueryVersion:
    row = fetch_one(conn, SQL["insert_version"], (query.workspace_id, query.id, number, stored, actor, now),
                    QueryVersion)
    assert row is not None
    return row


def add_version(conn: psycopg.Connection, *, workspace_id: UUID, query_id: UUID, definition: QueryDefinition | dict,
                actor: str, now: datetime, name: str | None = None,
                description: str | None = None) -> tuple[SavedQuery, QueryVersion]:
    """Append a version with ``definition`` and make it current (``name``/``description``
    change too when given). Concurrent edits are serialized by a row lock, so versions are
    numbered without gaps. Raises :class:`QueryNotFound`, ``InvalidDefinition``."""
    stored = _stored(definition)
    with conn.transaction():
        query = fetch_one(conn, SQL["bump_version"], (now, name, description, workspace_id, query_id), SavedQuery)
        if query is None:
            raise QueryNotFound(query_id)
        version = _insert_version(conn, query, query.current_version, stored, actor, now)
    return query, version


def get_query(conn: psycopg.Connection, *, workspace_id: UUID, query_id: UUID) -> SavedQuery:
    """The undeleted query ``query_id``; raises :class:`QueryNotFound`."""
    with conn.transaction():
        query = fetch_one(conn, SQL["get_query"], (workspace_id, query_id), SavedQuery)
    if query is None:
        raise QueryNotFound(query_id)
    return query


def get_version(conn: psycopg.Connection, *, workspace_id: UUID, query_id: UUID,
                version: int | None = None) -> QueryVersion:
    """Version ``version`` of the query (None: its current version). A pinned version of a
    deleted query stays readable when ``version`` is given; the current version of a
    deleted query is not. Raises :class:`QueryNotFound`."""
    with conn.transaction():
        if version is None:
            row = fetch_one(conn, SQL["get_current_version"], (workspace_id, query_id), QueryVersion)
        else:
            row = fetch_one(conn, SQL["get_version"], (workspace_id, query_id, version), QueryVersion)
    if row is None:
        raise QueryNotFound(query_id)
    return row


def list_versions(conn: psycopg.Connection, *, workspace_id: UUID, query_id: UUID) -> list[QueryVersion]:
    """Every version of the query, oldest first (empty when there is no such query)."""
    with conn.transaction():
        return fetch_all(conn, SQL["list_versions"], (workspace_id, query_id), QueryVersion)


def list_queries(conn: psycopg.Connection, *, workspace_id: UUID, after: tuple[datetime, UUID] | None = None,
                 limit: int = 50) -> list[SavedQuery]:
    """A page of the workspace's undeleted queries, oldest first, after the keyset
    ``(created_at, id)`` of the previous page's last row (:func:`timekeeper.db.keyset.keyset_rows`)."""
    with conn.transaction():
        return keyset_rows(conn, SavedQuery, select=SQL["list_queries_from"], where=SQL["list_queries_where"],
                           params={"ws": workspace_id}, after=after, limit=limit)


def delete_query(conn: psycopg.Connection, *, workspace_id: UUID, query_id: UUID, now: datetime) -> None:
    """Mark the query deleted (its versions stay). Raises :class:`QueryNotFound` when there
    is no such undeleted query."""
    with conn.transaction():
        updated = execute(conn, SQL["delete_query"], (now, now, workspace_id, query_id))
    if updated != 1:
        raise QueryNotFound(query_id)
