"""Builders for the accounting work-kind tests: run specs, committed execution, sample books.

``execute`` runs a handler the way the consumer does: one committed transaction with the
tenant applied, then the after-commit callbacks on the (now idle) connection.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar
from uuid import UUID, uuid4

import psycopg
from psycopg.rows import dict_row

from timekeeper.accounting import books
from timekeeper.accounting.posting import request_posting, run_posting_job
from timekeeper.db import UnitOfWork, set_tenant
from timekeeper.schedules.work import Outcome, RunContext, WorkHandler

T = TypeVar("T")

ACCOUNTING_TABLES = ("accounting_calendars", "accounting_periods", "recurring_batches", "batches",
                     "ledger_entries", "posting_jobs", "bank_lines", "billing_plans", "draft_invoices")


@dataclass(frozen=True)
class RunSpec:
    """The data of one run; every :func:`execute` builds a fresh RunContext from it."""

    work_kind: str
    workspace_id: UUID
    subject_id: UUID | None
    occurrence_local: datetime
    now: datetime
    run_id: UUID = field(default_factory=uuid4)
    schedule_id: UUID = field(default_factory=uuid4)
    trigger: str = "scheduled"
    services: Mapping[str, Any] = field(default_factory=dict)

    def context(self, conn: psycopg.Connection) -> RunContext:
        return RunContext(
            run_id=self.run_id, schedule_id=self.schedule_id, workspace_id=self.workspace_id, owner="accounting",
            work_kind=self.work_kind, subject_id=self.subject_id,
            occurrence_at=self.occurrence_local.replace(tzinfo=UTC), occurrence_local=self.occurrence_local,
            trigger=self.trigger, requested_by=None, attempt=1, now=self.now, conn=conn, services=self.services)


def spec(work_kind: str, workspace_id: UUID, subject_id: UUID | None, occurrence_local: datetime,
         **kwargs: Any) -> RunSpec:
    """A run spec whose ``now`` defaults to the occurrence (read as UTC) plus one minute."""
    kwargs.setdefault("now", occurrence_local.replace(tzinfo=UTC) + timedelta(minutes=1))
    return RunSpec(work_kind, workspace_id, subject_id, occurrence_local, **kwargs)


def execute(conn: psycopg.Connection, handler: WorkHandler, run: RunSpec) -> Outcome:
    """Run ``handler`` in one committed transaction, then its after-commit callbacks."""
    ctx = run.context(conn)
    with UnitOfWork(conn) as uow:
        set_tenant(conn, run.workspace_id)
        outcome = handler(ctx)
        uow.commit()
    for callback in ctx._after_commit:
        callback()
    return outcome


def committed(conn: psycopg.Connection, build: Callable[[], T]) -> T:
    """Run ``build()`` (setup service calls on ``conn``) in one committed transaction."""
    with UnitOfWork(conn) as uow:
        result = build()
        uow.commit()
    return result


def rows(conn: psycopg.Connection, sql: str, params: Any = None) -> list[dict[str, Any]]:
    """Read rows as dicts in a transaction of their own (rolled back afterwards)."""
    with conn.cursor(row_factory=dict_row) as cur:
        found = cur.execute(sql, params).fetchall()
    conn.rollback()
    return found


def one(conn: psycopg.Connection, sql: str, params: Any = None) -> dict[str, Any]:
    found = rows(conn, sql, params)
    assert len(found) == 1, found
    return found[0]


def workspace_snapshot(conn: psycopg.Connection, workspace_id: UUID) -> dict[str, list[dict[str, Any]]]:
    """Every accounting row of one workspace, by table, ordered by id."""
    return {table: rows(conn, f"SELECT * FROM {table} WHERE workspace_id = %s ORDER BY id", (workspace_id,))
            for table in ACCOUNTING_TABLES}


@dataclass(frozen=True)
class Books:
    """A monthly calendar and a recurring batch whose first batch is open."""

    workspace_id: UUID
    calendar: Any
    recurring: Any


def monthly_books(conn: psycopg.Connection, workspace_id: UUID, *, first: date = date(2027, 1, 1), periods: int = 6,
                  opens_on: date | None = None, name: str = "Accruals", auto_post: bool = True) -> Books:
    """Create (committed) a monthly calendar from ``first`` and a recurring batch opened on ``opens_on``."""
    def build() -> Books:
        calendar = books.create_calendar(conn, workspace_id=workspace_id, name="FY", timezone="Europe/Berlin",
                                         first_period_start=first, periods=periods)
        recurring = books.create_recurring_batch(
            conn, workspace_id=workspace_id, calendar_id=calendar.id, name=name, opens_on=opens_on or first,
            auto_post=auto_post, now=datetime.combine(opens_on or first, datetime.min.time(), UTC))
        return Books(workspace_id, calendar, recurring)
    return committed(conn, build)


def add_balanced(conn: psycopg.Connection, workspace_id: UUID, batch_id: UUID, amount: str, on: date, *,
                 account: str = "bank", reference: str | None = None, offset_account: str = "revenue") -> Any:
    """Add (committed) ``amount`` on ``account`` and its opposite on ``offset_account``; return the first entry."""
    def build() -> Any:
        entry = books.add_entry(conn, workspace_id=workspace_id, batch_id=batch_id, account=account, amount=amount,
                                entry_date=on, reference=reference)
        books.add_entry(conn, workspace_id=workspace_id, batch_id=batch_id, account=offset_account,
                        amount=-Decimal(amount), entry_date=on, reference=reference)
        return entry
    return committed(conn, build)


def posted_batch(conn: psycopg.Connection, workspace_id: UUID, entries: list[tuple[str, str, date, str | None]],
                 *, now: datetime) -> list[Any]:
    """A standalone batch holding balanced entries ``(account, amount, date, reference)``, closed and posted.

    Returns the ``account`` side entries (the ones a bank line can match).
    """
    batch = committed(conn, lambda: books.create_batch(conn, workspace_id=workspace_id, name="Receipts", now=now))
    made = [add_balanced(conn, workspace_id, batch.id, amount, on, account=account, reference=ref)
            for account, amount, on, ref in entries]

    def close_and_request() -> UUID:
        books.close_batch(conn, workspace_id=workspace_id, batch_id=batch.id, now=now)
        return request_posting(conn, workspace_id, batch.id, None, now=now)

    job_id = committed(conn, close_and_request)
    assert run_posting_job(conn, job_id, now, workspace_id=workspace_id) == "succeeded"
    return made
