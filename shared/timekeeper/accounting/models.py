"""Accounting rows as frozen dataclasses, and the module's domain errors.

Instants are aware UTC datetimes (``timestamptz``); calendar days are ``date``; money is
``Decimal`` with two places (``numeric(18,2)``). Column names match the fields, so a
repository function builds a model with ``Model(**row)`` from a dict row.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from uuid import UUID


class AccountingError(Exception):
    """Base of the accounting module's expected (domain) errors."""


class NotFound(AccountingError):
    """The row does not exist in the caller's workspace (other workspaces are invisible)."""


class OutsideCalendarCoverage(AccountingError):
    """A date lies outside the calendar's generated periods (``batch.roll`` refuses it)."""

    def __init__(self, message: str, *, calendar_id: UUID, on: date, coverage_ends_on: date | None):
        super().__init__(message)
        self.calendar_id = calendar_id
        self.on = on
        self.coverage_ends_on = coverage_ends_on


class BatchNotOpen(AccountingError):
    """Entries can only be added to an open batch."""


class BatchNotClosed(AccountingError):
    """Only a closed (or already posted) batch can have a posting job."""


class PostingError(AccountingError):
    """A batch cannot be posted (e.g. its entries do not balance); the posting job fails."""


@dataclass(frozen=True, slots=True)
class Calendar:
    """An accounting calendar; ``frequency`` is weekly | monthly | quarterly."""

    id: UUID
    workspace_id: UUID
    name: str
    timezone: str
    frequency: str
    anchor_date: date


@dataclass(frozen=True, slots=True)
class Period:
    """One generated period: ``starts_on`` .. ``ends_on`` inclusive, ``name`` like ``2027-03``."""

    id: UUID
    workspace_id: UUID
    calendar_id: UUID
    seq: int
    name: str
    starts_on: date
    ends_on: date

    def covers(self, day: date) -> bool:
        return self.starts_on <= day <= self.ends_on


@dataclass(frozen=True, slots=True)
class RecurringBatch:
    """A recurring batch: the batch series rolled by ``batch.roll``; ``active_batch_id`` may be None."""

    id: UUID
    workspace_id: UUID
    calendar_id: UUID
    name: str
    active_batch_id: UUID | None
    auto_post: bool


@dataclass(frozen=True, slots=True)
class Batch:
    """A batch of ledger entries; ``status`` is open | closed | posted."""

    id: UUID
    workspace_id: UUID
    recurring_batch_id: UUID | None
    period_id: UUID | None
    name: str
    status: str
    auto_post: bool
    opened_at: datetime
    close_at: datetime | None
    closed_at: datetime | None
    posted_at: datetime | None
    opened_by_run_id: UUID | None
    closed_by_run_id: UUID | None


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    """One ledger line of a batch: a signed ``amount`` on ``account`` dated ``entry_date``."""

    id: UUID
    workspace_id: UUID
    batch_id: UUID
    account: str
    amount: Decimal
    entry_date: date
    reference: str | None
    posted: bool
    posted_at: datetime | None
    reconciled_by_bank_line_id: UUID | None
    reconciled_at: datetime | None


@dataclass(frozen=True, slots=True)
class PostingJob:
    """The posting job of one batch; ``status`` is pending | running | succeeded | failed."""

    id: UUID
    workspace_id: UUID
    batch_id: UUID
    status: str
    error: str | None
    attempts: int
    requested_by_run_id: UUID | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


@dataclass(frozen=True, slots=True)
class BankLine:
    """A bank statement line; reconciled when ``matched_entry_id`` is set."""

    id: UUID
    workspace_id: UUID
    bank_account: str
    amount: Decimal
    booked_on: date
    reference: str | None
    matched_entry_id: UUID | None
    reconciled_at: datetime | None
    reconciled_by_run_id: UUID | None


@dataclass(frozen=True, slots=True)
class BillingPlan:
    """Recurring billing: ``amount`` every ``interval_months`` months on ``anchor_day`` (clamped)."""

    id: UUID
    workspace_id: UUID
    customer: str
    amount: Decimal
    currency: str
    interval_months: int
    anchor_day: int
    next_bill_date: date
    active: bool


@dataclass(frozen=True, slots=True)
class DraftInvoice:
    """A draft invoice prepared by ``billing.prepare``; unique per (plan, billing_date)."""

    id: UUID
    workspace_id: UUID
    billing_plan_id: UUID
    billing_date: date
    amount: Decimal
    currency: str
    status: str
    prepared_at: datetime
    prepared_by_run_id: UUID | None
