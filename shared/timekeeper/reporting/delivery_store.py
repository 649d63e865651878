"""The repository of scheduled delivery: a query schedule's settings (``query_schedules``
with its schedule's name), its recipients, and what each run delivered (the file in
``query_delivery_sources``, each recipient's outcome in ``query_deliveries``).

Readers only: they run on any connection (the run's transaction, the journal, the API's)
and never commit. The journal's fenced writes are :mod:`timekeeper.reporting.delivery_journal`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from timekeeper.db import load_queries
from timekeeper.db.rows import fetch_all, fetch_one, fetch_rows, fetch_value

SQL = load_queries("timekeeper.reporting", "delivery_store.sql")


@dataclass(frozen=True)
class QuerySchedule:
    """A query schedule's delivery settings (``query_schedules``) with its schedule's name."""

    schedule_id: UUID
    workspace_id: UUID
    name: str
    owner_user_id: str
    source_kind: str
    query_id: UUID | None
    query_version: int | None
    report_id: UUID | None
    format: str
    skip_when_empty: bool
    subject_template: str
    body_template: str
    link_ttl_hours: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class DeliverySource:
    """What a run delivered (``query_delivery_sources``)."""

    run_id: UUID
    workspace_id: UUID
    schedule_id: UUID
    source_kind: str
    format: str
    object_key: str
    byte_size: int
    sha256: str
    row_count: int | None
    query_id: UUID | None
    query_version: int | None
    report_id: UUID | None
    report_version: int | None
    render_id: UUID | None
    version_changed: bool
    acted_for: str
    created_at: datetime
    #: A report's rows per section, in section order (None: a query, or not recorded).
    section_row_counts: list[int] | None = None
    #: The render's snapshot versions per section (see ``ReportRender.snapshot_basis``).
    snapshot_basis: list[dict[str, Any] | None] | None = None
    #: A snapshot period this run showed was shown by the schedule's previous run in
    #: another version: a newer version was published in between.
    snapshot_version_changed: bool = False

    @property
    def empty(self) -> bool:
        """Whether the delivered data is empty: a query file without rows, or a report whose
        every section returned no rows (``row_count`` is their sum). Unknown counts are not
        empty."""
        return self.row_count == 0


@dataclass(frozen=True)
class Delivery:
    """One recipient's outcome of a run (``query_deliveries``): ``status`` sent | skipped |
    failed, ``skip_reason`` when skipped."""

    run_id: UUID
    user_id: str
    workspace_id: UUID
    schedule_id: UUID
    status: str
    skip_reason: str | None
    address: str | None
    provider_message_id: str | None
    link_expires_at: datetime | None
    error: str | None
    attempt: int
    updated_at: datetime
    #: A failed recipient's reason (:data:`PERMANENT_REFUSALS` values are permanent).
    error_code: str | None = None


@dataclass(frozen=True)
class DeliveryAttempt:
    """One attempt's outcome for one recipient (``query_delivery_attempts``): ``status``
    sent (``provider_message_id``) | failed (``error_code``); ``at`` the attempt's instant
    (aware UTC)."""

    run_id: UUID
    user_id: str
    attempt: int
    status: str
    error_code: str | None
    provider_message_id: str | None
    at: datetime


def list_attempts(conn: psycopg.Connection, *, workspace_id: UUID, run_id: UUID) -> dict[str, list[DeliveryAttempt]]:
    """Each attempt's outcome per recipient of run ``run_id``: ``{user id: [attempt, ...]}``,
    oldest attempt first (recipients skipped without a submission have none)."""
    out: dict[str, list[DeliveryAttempt]] = {}
    for attempt in fetch_all(conn, SQL["list_attempts"], (workspace_id, run_id), DeliveryAttempt):
        out.setdefault(attempt.user_id, []).append(attempt)
    return out


def get_query_schedule(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID) -> QuerySchedule | None:
    """The delivery settings of ``schedule_id`` in ``workspace_id`` (None when it has none)."""
    return fetch_one(conn, SQL["get_query_schedule"], (workspace_id, schedule_id), QuerySchedule)


def list_recipients(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID) -> list[str]:
    """The recipients' user ids of a query schedule, sorted."""
    return [row["user_id"] for row in fetch_rows(conn, SQL["list_recipients"], (workspace_id, schedule_id))]


def get_source(conn: psycopg.Connection, *, workspace_id: UUID, run_id: UUID) -> DeliverySource | None:
    """The file run ``run_id`` delivered, or None."""
    return fetch_one(conn, SQL["get_source"], (workspace_id, run_id), DeliverySource)


def list_deliveries(conn: psycopg.Connection, *, workspace_id: UUID, run_id: UUID) -> list[Delivery]:
    """The recipients' outcomes of run ``run_id``, by user id."""
    return fetch_all(conn, SQL["list_deliveries"], (workspace_id, run_id), Delivery)


def get_delivery(conn: psycopg.Connection, *, workspace_id: UUID, run_id: UUID, user_id: str) -> Delivery | None:
    """One recipient's outcome of a run, or None."""
    return fetch_one(conn, SQL["get_delivery"], (workspace_id, run_id, user_id), Delivery)


def outbox_claimed(conn: psycopg.Connection, *, run_id: UUID) -> bool:
    """Whether any recipient of run ``run_id`` was claimed in the outbox (a message may
    link to the run's file)."""
    return bool(fetch_value(conn, SQL["outbox_claimed"], (run_id,)))


def previous_report_version(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID,
                            run_id: UUID) -> int | None:
    """The report version the schedule's latest other run delivered (None: no such run)."""
    return fetch_value(conn, SQL["previous_report_version"], (workspace_id, schedule_id, run_id))


def previous_snapshot_basis(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID,
                            run_id: UUID) -> list[dict[str, Any] | None] | None:
    """The snapshot versions per section the schedule's latest other report run delivered
    (None: no such run, or it showed no snapshot)."""
    return fetch_value(conn, SQL["previous_snapshot_basis"], (workspace_id, schedule_id, run_id))


def snapshot_version_changed(current: list[dict[str, Any] | None] | None,
                             previous: list[dict[str, Any] | None] | None) -> bool:
    """Whether a snapshot period shown in ``current`` was shown in ``previous`` in another
    version (both: per-section bases, ``ReportRender.snapshot_basis``). A period the
    previous delivery did not show (the latest month moved on) is not a change."""
    before = {(b["owner"], b["snapshot_type"], b["period"]): b["version"] for b in previous or () if b}
    return any(before.get((b["owner"], b["snapshot_type"], b["period"]), b["version"]) != b["version"]
               for b in current or () if b)


def contacts(conn: psycopg.Connection, user_ids: list[str]) -> dict[str, dict[str, Any]]:
    """``{user id: {"id", "display_name", "email"}}`` of the known users among ``user_ids``."""
    return {row["id"]: row for row in fetch_rows(conn, SQL["contacts"], (user_ids,))}


def workspace_facts(conn: psycopg.Connection, workspace_id: UUID) -> dict[str, str]:
    """``{"name", "timezone"}`` of the workspace (its IANA zone); a workspace the platform
    has no row of yields ``{"name": "", "timezone": "UTC"}``."""
    row = fetch_rows(conn, SQL["workspace_facts"], (workspace_id,))
    return row[0] if row else {"name": "", "timezone": "UTC"}
