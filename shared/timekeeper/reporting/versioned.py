"""Versioned documents: the one repository behind saved queries and reports.

A document of a workspace (a saved query, a report) has a name and a current version;
each version is an immutable definition. Editing appends version n + 1 and moves
``current_version`` under the document's row lock, so versions are numbered without gaps;
a version row is never changed, so whatever pinned version n (a schedule, an export, a
render) runs exactly what was saved. Deleting marks the document (``deleted_at``): it
leaves listings and reads, and its versions stay readable for what pinned them.

Each kind of document names its statements alike in its own ``.sql`` file
(``insert_document``, ``insert_version``, ``bump_version``, ``get_document``,
``get_version``, ``list_versions``, ``delete_document``, ``list_documents_from`` and
``list_documents_where``), and gives its row types (:class:`Document` and
:class:`DocumentVersion` with the kind's own columns added) and its not-found error; the
kind's module checks definitions and keeps its public functions. Creating, appending and
deleting record a ``<area>.created`` / ``.updated`` / ``.deleted`` event in the
workspace's audit log in the same transaction (:func:`timekeeper.platform.audit.record_event`;
``area`` is the kind's, ``query`` or ``report``), with the definition (and name) before and
after. Every call filters by
the caller's workspace, runs in the caller's transaction or its own, and returns frozen
dataclasses with aware UTC instants.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from timekeeper.db.keyset import keyset_rows
from timekeeper.db.rows import execute, fetch_all, fetch_one
from timekeeper.platform import audit


@dataclass(frozen=True)
class Document:
    """A versioned document's row: ``current_version`` >= 1; ``deleted_at`` None unless deleted."""

    id: UUID
    workspace_id: UUID
    name: str
    current_version: int
    created_by: str
    created_at: datetime
    updated_at: datetime
    deleted_at: datetime | None


@dataclass(frozen=True)
class DocumentVersion:
    """One immutable version: ``definition`` as stored (JSON), ``version`` >= 1. A kind
    adds the column naming its document (``query_id``, ``report_id``)."""

    workspace_id: UUID
    version: int
    definition: dict[str, Any]
    created_by: str
    created_at: datetime


D = TypeVar("D", bound=Document)
V = TypeVar("V", bound=DocumentVersion)


@dataclass(frozen=True)
class VersionedDocuments(Generic[D, V]):
    """The repository of one kind of versioned document.

    ``sql`` holds the kind's named statements; ``document`` and ``version`` are its row
    types; ``not_found(id)`` builds the error raised when there is no such (undeleted)
    document or version in the workspace; ``area`` the kind's area of the audit log
    (``query``, ``report``).
    """

    sql: Mapping[str, str]
    document: type[D]
    version: type[V]
    not_found: Callable[[UUID], LookupError]
    area: str

    def _audit(self, conn: psycopg.Connection, document: D, verb: str, actor: str, now: datetime,
               before: dict[str, Any] | None, after: dict[str, Any] | None) -> None:
        audit.record_event(conn, workspace_id=document.workspace_id, actor=actor, kind=f"{self.area}.{verb}",
                           subject_type=self.area, subject_id=document.id, before=before, after=after, now=now)

    def _insert_version(self, conn: psycopg.Connection, document: D, stored: Jsonb, actor: str,
                        now: datetime) -> V:
        row = fetch_one(conn, self.sql["insert_version"],
                        (document.workspace_id, document.id, document.current_version, stored, actor, now),
                        self.version)
        assert row is not None
        return row

    def create(self, conn: psycopg.Connection, *, workspace_id: UUID, fields: tuple[Any, ...], stored: Jsonb,
               actor: str, now: datetime) -> tuple[D, V]:
        """Insert a document with version 1 of ``stored``; ``fields`` are the kind's own
        columns in its ``insert_document`` order after the workspace (name, ...)."""
        with conn.transaction():
            document = fetch_one(conn, self.sql["insert_document"], (workspace_id, *fields, actor, now, now),
                                 self.document)
            assert document is not None
            version = self._insert_version(conn, document, stored, actor, now)
            self._audit(conn, document, "created", actor, now, None,
                        {"name": document.name, "version": 1, "definition": version.definition})
        return document, version

    def append(self, conn: psycopg.Connection, *, workspace_id: UUID, document_id: UUID, changes: tuple[Any, ...],
               stored: Jsonb, actor: str, now: datetime) -> tuple[D, V]:
        """Append a version with ``stored`` and make it current; ``changes`` are the kind's
        ``bump_version`` columns (None keeps a column). Raises ``not_found``."""
        with conn.transaction():
            document = fetch_one(conn, self.sql["bump_version"], (now, *changes, workspace_id, document_id),
                                 self.document)
            if document is None:
                raise self.not_found(document_id)
            previous = fetch_one(conn, self.sql["get_version"], (workspace_id, document_id,
                                                                 document.current_version - 1), self.version)
            version = self._insert_version(conn, document, stored, actor, now)
            before = {"version": document.current_version - 1,
                      "definition": previous.definition if previous is not None else None}
            after = {"version": document.current_version, "definition": version.definition}
            if changes and changes[0] is not None:
                after["name"] = document.name
            self._audit(conn, document, "updated", actor, now, before, after)
        return document, version

    def get(self, conn: psycopg.Connection, *, workspace_id: UUID, document_id: UUID) -> D:
        """The undeleted document; raises ``not_found``."""
        with conn.transaction():
            document = fetch_one(conn, self.sql["get_document"], (workspace_id, document_id), self.document)
        if document is None:
            raise self.not_found(document_id)
        return document

    def get_version(self, conn: psycopg.Connection, *, workspace_id: UUID, document_id: UUID,
                    version: int) -> V:
        """Version ``version`` (readable after the document was deleted: something pinned
        it). Raises ``not_found``."""
        with conn.transaction():
            row = fetch_one(conn, self.sql["get_version"], (workspace_id, document_id, version), self.version)
        if row is None:
            raise self.not_found(document_id)
        return row

    def versions(self, conn: psycopg.Connection, *, workspace_id: UUID, document_id: UUID) -> list[V]:
        """Every version, oldest first (empty when there is no such document)."""
        with conn.transaction():
            return fetch_all(conn, self.sql["list_versions"], (workspace_id, document_id), self.version)

    def page(self, conn: psycopg.Connection, *, workspace_id: UUID, after: tuple[datetime, UUID] | None,
             limit: int) -> list[D]:
        """A page of the workspace's undeleted documents, oldest first, after the keyset
        ``(created_at, id)`` of the previous page's last row
        (:func:`timekeeper.db.keyset.keyset_rows`)."""
        with conn.transaction():
            return keyset_rows(conn, self.document, select=self.sql["list_documents_from"],
                               where=self.sql["list_documents_where"], params={"ws": workspace_id},
                               after=after, limit=limit)

    def delete(self, conn: psycopg.Connection, *, workspace_id: UUID, document_id: UUID, now: datetime,
               actor: str) -> None:
        """Mark the document deleted by ``actor`` (its versions stay). Raises ``not_found``
        when there is no such undeleted document."""
        with conn.transaction():
            document = fetch_one(conn, self.sql["get_document"], (workspace_id, document_id), self.document)
            updated = execute(conn, self.sql["delete_document"], (now, now, workspace_id, document_id))
            if updated != 1 or document is None:
                raise self.not_found(document_id)
            self._audit(conn, document, "deleted", actor, now, {"name": document.name}, None)
