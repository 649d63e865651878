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
from timekeeper.db.rows import fetch_all, fetch_one
from timekeeper.reporting.definition import QueryDefinition, check_definition, parse_definition
from timekeeper.reporting.versioned import Document, DocumentVersion, VersionedDocuments


class QueryNotFound(LookupError):
    """No such (undeleted) saved query, or version, in the workspace."""


@dataclass(frozen=True)
class SavedQuery(Document):
    """A saved query: a :class:`~timekeeper.reporting.versioned.Document` with a description."""

    description: str


@dataclass(frozen=True)
class QueryVersion(DocumentVersion):
    """One immutable version of the saved query ``query_id``."""

    query_id: UUID

    def parsed(self) -> QueryDefinition:
        """The stored definition checked against today's catalogue; raises
        :class:`~timekeeper.reporting.definition.InvalidDefinition` when it no longer checks."""
        return check_definition(self.definition)


SQL = load_queries("timekeeper.reporting", "store.sql")
_QUERIES = VersionedDocuments(SQL, SavedQuery, QueryVersion, QueryNotFound, "query")


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
    return _QUERIES.create(conn, workspace_id=workspace_id, fields=(name, description), stored=_stored(definition),
                           actor=actor, now=now)


def add_version(conn: psycopg.Connection, *, workspace_id: UUID, query_id: UUID, definition: QueryDefinition | dict,
                actor: str, now: datetime, name: str | None = None,
                description: str | None = None) -> tuple[SavedQuery, QueryVersion]:
    """Append a version with ``definition`` and make it current (``name``/``description``
    change too when given). Concurrent edits are serialized by a row lock, so versions are
    numbered without gaps. Raises :class:`QueryNotFound`, ``InvalidDefinition``."""
    return _QUERIES.append(conn, workspace_id=workspace_id, document_id=query_id, changes=(name, description),
                           stored=_stored(definition), actor=actor, now=now)


def get_query(conn: psycopg.Connection, *, workspace_id: UUID, query_id: UUID) -> SavedQuery:
    """The undeleted query ``query_id``; raises :class:`QueryNotFound`."""
    return _QUERIES.get(conn, workspace_id=workspace_id, document_id=query_id)


def get_version(conn: psycopg.Connection, *, workspace_id: UUID, query_id: UUID,
                version: int | None = None) -> QueryVersion:
    """Version ``version`` of the query (None: its current version). A pinned version of a
    deleted query stays readable when ``version`` is given; the current version of a
    deleted query is not. Raises :class:`QueryNotFound`."""
    if version is not None:
        return _QUERIES.get_version(conn, workspace_id=workspace_id, document_id=query_id, version=version)
    with conn.transaction():
        row = fetch_one(conn, SQL["get_current_version"], (workspace_id, query_id), QueryVersion)
    if row is None:
        raise QueryNotFound(query_id)
    return row


def list_versions(conn: psycopg.Connection, *, workspace_id: UUID, query_id: UUID) -> list[QueryVersion]:
    """Every version of the query, oldest first (empty when there is no such query)."""
    return _QUERIES.versions(conn, workspace_id=workspace_id, document_id=query_id)


def list_queries(conn: psycopg.Connection, *, workspace_id: UUID, after: tuple[datetime, UUID] | None = None,
                 limit: int = 50) -> list[SavedQuery]:
    """A page of the workspace's undeleted queries, oldest first, after the keyset
    ``(created_at, id)`` of the previous page's last row (:func:`timekeeper.db.keyset.keyset_rows`)."""
    return _QUERIES.page(conn, workspace_id=workspace_id, after=after, limit=limit)


def delete_query(conn: psycopg.Connection, *, workspace_id: UUID, query_id: UUID, now: datetime,
                 actor: str = "timekeeper") -> None:
    """Mark the query deleted by ``actor`` (its versions stay; a ``query.deleted`` audit
    event). Raises :class:`QueryNotFound` when there is no such undeleted query."""
    _QUERIES.delete(conn, workspace_id=workspace_id, document_id=query_id, now=now, actor=actor)


@dataclass(frozen=True)
class QuerySummary:
    """What a listing shows of a query beside its row: ``entity`` of its current version
    and ``updated_by``, who saved that version (the last change)."""

    id: UUID
    entity: str
    updated_by: str


@dataclass(frozen=True)
class PinningDelivery:
    """A live delivery of the workspace whose source is the query: ``schedule_id``, its
    ``name`` and the ``version`` of the query it pins."""

    schedule_id: UUID
    name: str
    version: int


def current_summaries(conn: psycopg.Connection, *, workspace_id: UUID,
                      query_ids: list[UUID]) -> dict[UUID, QuerySummary]:
    """Query id -> :class:`QuerySummary` for each of ``query_ids`` in the workspace (ids of
    other workspaces are simply absent)."""
    if not query_ids:
        return {}
    with conn.transaction():
        rows = fetch_all(conn, SQL["current_summaries"], (workspace_id, list(query_ids)), QuerySummary)
    return {row.id: row for row in rows}


def pinned_by(conn: psycopg.Connection, *, workspace_id: UUID, query_id: UUID) -> list[PinningDelivery]:
    """The workspace's undeleted deliveries whose source is ``query_id``, by name, each
    with the version it pins (empty when none, or no such query)."""
    with conn.transaction():
        return fetch_all(conn, SQL["pinned_by"], (workspace_id, query_id), PinningDelivery)
