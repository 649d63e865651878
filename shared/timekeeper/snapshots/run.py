"""One run of the snapshot ledger: the row every part of the snapshots package passes around.

A :class:`SnapshotRun` is one ``snapshot_runs`` row (one version of one period of one
snapshot type in one workspace). The registry's generators receive it, the ledger plans
and admits it, the run job drives its attempts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any
from uuid import UUID

import psycopg

from timekeeper.db.rows import fetch_all


@dataclass(frozen=True)
class SnapshotRun:
    """One row of the ledger (see migration ``0009_snapshots.sql`` for each column)."""

    id: UUID
    owner: str
    snapshot_type: str
    workspace_id: UUID
    period: date
    version: int
    mode: str
    reason: str | None
    requested_by: str | None
    state: str
    skip_reason: str | None
    generation_mode: str | None
    cursor: dict[str, Any] | None
    chunks_committed: int
    rows_written: int
    attempts: int
    retryable_failures: int
    retry_due_at: datetime | None
    job_id: UUID | None
    offered_at: datetime | None
    started_at: datetime | None
    heartbeat_at: datetime | None
    basis: dict[str, Any] | None
    published_at: datetime | None
    is_current: bool
    protection: str | None
    failure_code: str | None
    failure_message: str | None
    created_at: datetime
    updated_at: datetime
    #: A failed run whose generated rows history retention removed: when (``0036``).
    rows_pruned_at: datetime | None = None
    #: A cancelled run: when, by whom and why (``0067``); None otherwise.
    cancelled_at: datetime | None = None
    cancelled_by: str | None = None
    cancel_reason: str | None = None
    #: A finalized version: when, by whom and why (``0067``); None otherwise.
    finalized_at: datetime | None = None
    finalized_by: str | None = None
    finalize_reason: str | None = None
    #: The range request the run was planned by (``0067``); None otherwise.
    request_group: UUID | None = None

    @property
    def period_end(self) -> date:
        """The last day of the period (the month end the snapshot is "as of")."""
        return next_month(self.period) - timedelta(days=1)


def fetch_runs(conn: psycopg.Connection, statement: str, params: dict[str, Any]) -> list[SnapshotRun]:
    """Run a ``SELECT *``/``RETURNING *`` statement of ``snapshot_runs`` and return its rows
    (through :func:`timekeeper.db.rows.fetch_all`: the table's columns are the fields)."""
    return fetch_all(conn, statement, params, SnapshotRun)


def next_month(period: date) -> date:
    """The first day of the month after ``period``'s."""
    return date(period.year + period.month // 12, period.month % 12 + 1, 1)
