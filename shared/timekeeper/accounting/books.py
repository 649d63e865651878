"""The books: calendars, periods, recurring batches, batches and ledger entries.

Service functions used by the sample data, the tests and the ``batch.*`` work kinds
(rolling a recurring batch, closing a batch, refusing dates outside calendar coverage). Each
takes an open psycopg connection inside the CALLER's transaction and never commits or
rolls back; every statement is scoped by ``workspace_id``. Instants are aware UTC
datetimes; calendar days are ``date``; amounts are ``Decimal`` with two places.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Literal
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import psycopg
from dateutil.relativedelta import relativedelta

from timekeeper.accounting.models import (
    AccountingError,
    BankLine,
    Batch,
    BatchNotOpen,
    BillingPlan,
    Calendar,
    LedgerEntry,
    NotFound,
    OutsideCalendarCoverage,
    Period,
    RecurringBatch,
)
from timekeeper.accounting.values import instant, money
from timekeeper.db import load_queries
from timekeeper.db.rows import execute, fetch_all, fetch_one

FREQUENCIES = ("weekly", "monthly", "quarterly")


SQL = load_queries("timekeeper.accounting", "books.sql")


# --------------------------------------------------------------------------- calendars


def period_bounds(frequency: str, anchor: date, seq: int) -> tuple[date, date, str]:
    """Return ``(starts_on, ends_on inclusive, name)`` of period number ``seq`` (0-based).

    Starts are ``anchor + seq * step`` computed from the anchor each time, so a calendar
    anchored on the 31st clamps to shorter months and returns to the 31st afterwards.
    Names: monthly ``2027-03``, quarterly ``2027-Q1`` (the start's calendar quarter),
    weekly ``2027-W09`` (ISO week of the start). Raises ``ValueError`` on an unknown frequency.
    """
    if frequency == "monthly":
        start, following = anchor + relativedelta(months=seq), anchor + relativedelta(months=seq + 1)
        name = f"{start:%Y-%m}"
    elif frequency == "quarterly":
        start, following = anchor + relativedelta(months=3 * seq), anchor + relativedelta(months=3 * seq + 3)
        name = f"{start.year}-Q{(start.month - 1) // 3 + 1}"
    elif frequency == "weekly":
        start, following = anchor + timedelta(weeks=seq), anchor + timedelta(weeks=seq + 1)
        iso = start.isocalendar()
        name = f"{iso.year}-W{iso.week:02d}"
    else:
        raise ValueError(f"frequency must be one of {FREQUENCIES}, not {frequency!r}")
    return start, following - timedelta(days=1), name


def _generate_periods(conn: psycopg.Connection, calendar: Calendar, first_seq: int, count: int) -> list[Period]:
    periods = []
    for seq in range(first_seq, first_seq + count):
        starts_on, ends_on, name = period_bounds(calendar.frequency, calendar.anchor_date, seq)
        period = fetch_one(conn, SQL["insert_period"], {
            "workspace_id": calendar.workspace_id, "calendar_id": calendar.id, "seq": seq, "name": name,
            "starts_on": starts_on, "ends_on": ends_on}, Period)
        assert period is not None
        periods.append(period)
    return periods


def create_calendar(conn: psycopg.Connection, *, workspace_id: UUID, name: str, timezone: str,
                    first_period_start: date, periods: int, frequency: str = "monthly") -> Calendar:
    """Create an accounting calendar and generate its first ``periods`` periods.

    The calendar's coverage is exactly its generated periods (extend it with
    :func:`extend_calendar`; handlers never generate periods). ``timezone`` is an IANA
    name. Raises ``ValueError`` for an unknown timezone or frequency or ``periods < 1``.
    """
    if periods < 1:
        raise ValueError("a calendar needs at least one period")
    if frequency not in FREQUENCIES:
        raise ValueError(f"frequency must be one of {FREQUENCIES}, not {frequency!r}")
    try:
        ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise ValueError(f"unknown timezone {timezone!r}") from error
    calendar = fetch_one(conn, SQL["insert_calendar"], {
        "workspace_id": workspace_id, "name": name, "timezone": timezone, "frequency": frequency,
        "anchor_date": first_period_start}, Calendar)
    assert calendar is not None
    _generate_periods(conn, calendar, 0, periods)
    return calendar


def extend_calendar(conn: psycopg.Connection, *, workspace_id: UUID, calendar_id: UUID, periods: int) -> list[Period]:
    """Append ``periods`` periods after the calendar's last one; return the new periods.

    The only way coverage grows: ``batch.roll`` refuses uncovered dates instead of
    generating periods.

    Raises :class:`NotFound` when the calendar is not in ``workspace_id`` and ``ValueError``
    when ``periods < 1``. Locks the calendar row so two extensions serialize.
    """
    if periods < 1:
        raise ValueError("extend by at least one period")
    calendar = fetch_one(conn, SQL["lock_calendar"], {"workspace_id": workspace_id, "calendar_id": calendar_id},
                         Calendar)
    if calendar is None:
        raise NotFound(f"calendar {calendar_id} not found")
    last = fetch_one(conn, SQL["last_period"], {"workspace_id": workspace_id, "calendar_id": calendar_id}, Period)
    return _generate_periods(conn, calendar, 0 if last is None else last.seq + 1, periods)


def get_calendar(conn: psycopg.Connection, *, workspace_id: UUID, calendar_id: UUID) -> Calendar:
    """Return the calendar; raises :class:`NotFound`."""
    calendar = fetch_one(conn, SQL["get_calendar"], {"workspace_id": workspace_id, "calendar_id": calendar_id},
                         Calendar)
    if calendar is None:
        raise NotFound(f"calendar {calendar_id} not found")
    return calendar


def list_periods(conn: psycopg.Connection, *, workspace_id: UUID, calendar_id: UUID) -> list[Period]:
    """Return the calendar's periods in date order (its whole coverage)."""
    return fetch_all(conn, SQL["list_periods"], {"workspace_id": workspace_id, "calendar_id": calendar_id}, Period)


def period_covering(conn: psycopg.Connection, *, workspace_id: UUID, calendar: Calendar, on: date) -> Period:
    """Return the period of ``calendar`` that contains ``on``.

    Raises :class:`OutsideCalendarCoverage` when no generated period contains it.
    """
    params = {"workspace_id": workspace_id, "calendar_id": calendar.id}
    period = fetch_one(conn, SQL["period_covering"], {**params, "on": on}, Period)
    if period is None:
        last = fetch_one(conn, SQL["last_period"], params, Period)
        ends = last.ends_on if last else None
        raise OutsideCalendarCoverage(
            f"{on.isoformat()} is outside the coverage of calendar {calendar.name!r}"
            + (f" (generated periods end on {ends.isoformat()})" if ends else " (no periods)"),
            calendar_id=calendar.id, on=on, coverage_ends_on=ends)
    return period


# --------------------------------------------------------------------------- batches


def batch_name(recurring_name: str, period: Period) -> str:
    """The name a recurring batch's batch for ``period`` gets: ``"<recurring name> <period name>"``."""
    return f"{recurring_name} {period.name}"


def create_recurring_batch(conn: psycopg.Connection, *, workspace_id: UUID, calendar_id: UUID, name: str,
                           opens_on: date, auto_post: bool = True, now: datetime) -> RecurringBatch:
    """Create a recurring batch and open its first batch for the period covering ``opens_on``.

    Sets up the subject of a ``batch.roll`` schedule.

    ``now`` (aware UTC, passed in) stamps the first batch's ``opened_at``.
    Raises :class:`NotFound` for an unknown calendar and :class:`OutsideCalendarCoverage`
    when ``opens_on`` is uncovered (nothing is created then, within the caller's
    transaction). Returns the recurring batch with ``active_batch_id`` set.
    """
    calendar = get_calendar(conn, workspace_id=workspace_id, calendar_id=calendar_id)
    period = period_covering(conn, workspace_id=workspace_id, calendar=calendar, on=opens_on)
    recurring = fetch_one(conn, SQL["insert_recurring_batch"], {
        "workspace_id": workspace_id, "calendar_id": calendar_id, "name": name, "auto_post": auto_post},
        RecurringBatch)
    assert recurring is not None
    batch = _insert_batch(conn, workspace_id=workspace_id, recurring_batch_id=recurring.id, period_id=period.id,
                          name=batch_name(name, period), auto_post=auto_post, opened_at=instant(now))
    execute(conn, SQL["set_active_batch"], {"workspace_id": workspace_id, "recurring_batch_id": recurring.id,
                                           "batch_id": batch.id})
    return get_recurring_batch(conn, workspace_id=workspace_id, recurring_batch_id=recurring.id)


def get_recurring_batch(conn: psycopg.Connection, *, workspace_id: UUID, recurring_batch_id: UUID) -> RecurringBatch:
    """Return the recurring batch; raises :class:`NotFound`."""
    recurring = fetch_one(conn, SQL["get_recurring_batch"],
                          {"workspace_id": workspace_id, "recurring_batch_id": recurring_batch_id}, RecurringBatch)
    if recurring is None:
        raise NotFound(f"recurring batch {recurring_batch_id} not found")
    return recurring


def _insert_batch(conn: psycopg.Connection, *, workspace_id: UUID, recurring_batch_id: UUID | None,
                  period_id: UUID | None, name: str, auto_post: bool, opened_at: datetime,
                  close_at: datetime | None = None, opened_by_run_id: UUID | None = None) -> Batch:
    batch = fetch_one(conn, SQL["insert_batch"], {
        "workspace_id": workspace_id, "recurring_batch_id": recurring_batch_id, "period_id": period_id,
        "name": name, "auto_post": auto_post, "opened_at": opened_at, "close_at": close_at,
        "opened_by_run_id": opened_by_run_id}, Batch)
    assert batch is not None
    return batch


def create_batch(conn: psycopg.Connection, *, workspace_id: UUID, name: str, close_at: datetime | None = None,
                 period_id: UUID | None = None, auto_post: bool = True, now: datetime) -> Batch:
    """Open a standalone batch (no recurring batch), optionally with a scheduled close.

    The subject of a ``batch.auto_close`` schedule.

    ``close_at`` is the aware UTC instant at which ``batch.auto_close`` may close it;
    ``period_id`` optionally ties it to a calendar period of the same workspace (a foreign
    key error otherwise). ``now`` (aware UTC, passed in) stamps ``opened_at``.
    """
    if close_at is not None and close_at.tzinfo is None:
        raise ValueError("close_at must be an aware UTC datetime")
    return _insert_batch(conn, workspace_id=workspace_id, recurring_batch_id=None, period_id=period_id, name=name,
                         auto_post=auto_post, opened_at=instant(now), close_at=close_at)


def lock_batch(conn: psycopg.Connection, *, workspace_id: UUID, batch_id: UUID) -> Batch | None:
    """Return the batch locked ``FOR UPDATE`` in the caller's transaction, or None."""
    return fetch_one(conn, SQL["lock_batch"], {"workspace_id": workspace_id, "batch_id": batch_id}, Batch)


def get_batch(conn: psycopg.Connection, *, workspace_id: UUID, batch_id: UUID) -> Batch:
    """Return the batch; raises :class:`NotFound`."""
    batch = fetch_one(conn, SQL["get_batch"], {"workspace_id": workspace_id, "batch_id": batch_id}, Batch)
    if batch is None:
        raise NotFound(f"batch {batch_id} not found")
    return batch


def close_batch(conn: psycopg.Connection, *, workspace_id: UUID, batch_id: UUID, now: datetime,
                run_id: UUID | None = None) -> Batch:
    """Close an open batch at ``now`` (aware UTC): a user's close, or a handler's with ``run_id``.

    Raises :class:`NotFound`, or :class:`BatchNotOpen` when it is closed or posted already.
    Does not request posting (the ``batch.*`` work kinds do that).
    """
    closed = fetch_one(conn, SQL["close_batch"], {"workspace_id": workspace_id, "batch_id": batch_id,
                                                 "now": instant(now), "run_id": run_id}, Batch)
    if closed is None:
        batch = get_batch(conn, workspace_id=workspace_id, batch_id=batch_id)
        raise BatchNotOpen(f"batch {batch.name!r} is {batch.status}")
    return closed


def add_entry(conn: psycopg.Connection, *, workspace_id: UUID, batch_id: UUID, account: str,
              amount: Decimal | int | str, entry_date: date, reference: str | None = None) -> LedgerEntry:
    """Add a ledger entry (signed ``amount``, two decimals, non-zero) to an open batch.

    A batch posts only when its entries sum to zero (double entry; see
    :mod:`timekeeper.accounting.posting`). Raises :class:`NotFound`, :class:`BatchNotOpen`
    or ``ValueError`` for an amount with more than two decimals or equal to zero.
    """
    value = money(amount)
    if value == 0:
        raise ValueError("a ledger entry amount cannot be zero")
    batch = fetch_one(conn, SQL["lock_batch"], {"workspace_id": workspace_id, "batch_id": batch_id}, Batch)
    if batch is None:
        raise NotFound(f"batch {batch_id} not found")
    if batch.status != "open":
        raise BatchNotOpen(f"batch {batch.name!r} is {batch.status}; entries go into open batches")
    entry = fetch_one(conn, SQL["insert_entry"], {
        "workspace_id": workspace_id, "batch_id": batch_id, "account": account, "amount": value,
        "entry_date": entry_date, "reference": reference}, LedgerEntry)
    assert entry is not None
    return entry


def list_entries(conn: psycopg.Connection, *, workspace_id: UUID, batch_id: UUID) -> list[LedgerEntry]:
    """Return the batch's ledger entries by date."""
    return fetch_all(conn, SQL["list_entries"], {"workspace_id": workspace_id, "batch_id": batch_id}, LedgerEntry)


def add_bank_line(conn: psycopg.Connection, *, workspace_id: UUID, bank_account: str, amount: Decimal | int | str,
                  booked_on: date, reference: str | None = None) -> BankLine:
    """Record an unreconciled bank statement line (signed ``amount``; deposits positive).

    Input of ``reconciliation.sweep``; returns the :class:`BankLine`.

    ``reconciliation.sweep`` matches it to a posted ledger entry whose ``account`` equals
    ``bank_account``. Raises ``ValueError`` for a zero amount or more than two decimals.
    """
    value = money(amount)
    if value == 0:
        raise ValueError("a bank line amount cannot be zero")
    line = fetch_one(conn, SQL["insert_bank_line"], {
        "workspace_id": workspace_id, "bank_account": bank_account, "amount": value, "booked_on": booked_on,
        "reference": reference}, BankLine)
    assert line is not None
    return line


def get_billing_plan(conn: psycopg.Connection, *, workspace_id: UUID, plan_id: UUID) -> BillingPlan:
    """Return the workspace's billing plan (active or not); raises :class:`NotFound`."""
    plan = fetch_one(conn, SQL["get_billing_plan"], {"workspace_id": workspace_id, "plan_id": plan_id}, BillingPlan)
    if plan is None:
        raise NotFound(f"billing plan {plan_id} not found")
    return plan


def create_billing_plan(conn: psycopg.Connection, *, workspace_id: UUID, customer: str, amount: Decimal | int | str,
                        currency: str, interval_months: int, first_bill_date: date,
                        active: bool = True) -> BillingPlan:
    """Create a recurring billing plan first billing on ``first_bill_date`` (``billing.prepare``).

    Its day of month is the plan's anchor: billing dates clamp to shorter months and return
    to the anchor afterwards (31 Jan, 28 Feb, 31 Mar). ``currency`` is an ISO 4217 code.
    Raises ``ValueError`` for a non-positive amount, interval outside 1..120 or a bad currency.
    """
    value = money(amount)
    if value <= 0:
        raise ValueError("a billing plan amount must be positive")
    if not 1 <= interval_months <= 120:
        raise ValueError("interval_months must be between 1 and 120")
    if len(currency) != 3 or not currency.isalpha():
        raise ValueError(f"currency must be an ISO 4217 code, not {currency!r}")
    plan = fetch_one(conn, SQL["insert_billing_plan"], {
        "workspace_id": workspace_id, "customer": customer, "amount": value, "currency": currency.upper(),
        "interval_months": interval_months, "anchor_day": first_bill_date.day, "next_bill_date": first_bill_date,
        "active": active}, BillingPlan)
    assert plan is not None
    return plan


# --------------------------------------------------------------------------- roll and close


class PeriodBatchExists(AccountingError):
    """The target period already has a batch of this recurring batch that is not its active one."""


@dataclass(frozen=True)
class RollResult:
    """What :func:`roll_recurring_batch` did.

    ``outcome``: ``rolled`` (closed the active batch if open, opened ``opened``),
    ``repeated`` (this run had already rolled: the same batches, nothing changed) or
    ``active_batch_current`` (the active batch's period is the target period or later:
    nothing changed, ``opened`` is None). ``closed`` is the batch THIS run closed, if any.
    ``plan`` lists the covered periods after the opened one; ``coverage_ends_on`` is the
    last covered day.
    """

    outcome: Literal["rolled", "repeated", "active_batch_current"]
    recurring: RecurringBatch
    target: Period
    opened: Batch | None
    closed: Batch | None
    closed_period: Period | None
    plan: list[Period]
    coverage_ends_on: date
    active: Batch | None = None


def roll_recurring_batch(conn: psycopg.Connection, *, workspace_id: UUID, recurring_batch_id: UUID, on: date,
                         run_id: UUID, now: datetime) -> RollResult:
    """Close the recurring batch's active batch and open the batch for the period containing ``on``.

    The rule of ``batch.roll``: the new batch belongs to
    the calendar period CONTAINING ``on`` (the run's occurrence local date), so a roll
    delayed past a whole period (backlog collapsed by the dispatcher) lands in the current
    period rather than a stale one. When ``on`` is uncovered raise
    :class:`OutsideCalendarCoverage` having changed nothing (no period is generated). When
    the active batch's period already starts on or after the target period, nothing
    changes (``active_batch_current``). A batch opened earlier by ``run_id`` makes this a
    ``repeated`` call that changes nothing. Raises :class:`NotFound` for an unknown
    recurring batch and :class:`PeriodBatchExists` when the target period has a batch that
    is not the active one. ``now`` (aware UTC) stamps closed_at / opened_at.
    """
    key = {"workspace_id": workspace_id, "recurring_batch_id": recurring_batch_id}
    recurring = fetch_one(conn, SQL["lock_recurring_batch"], key, RecurringBatch)
    if recurring is None:
        raise NotFound(f"recurring batch {recurring_batch_id} not found")
    calendar = get_calendar(conn, workspace_id=workspace_id, calendar_id=recurring.calendar_id)

    def plan_after(period: Period) -> tuple[list[Period], date]:
        later = fetch_all(conn, SQL["periods_after"], {"workspace_id": workspace_id, "calendar_id": calendar.id,
                                                      "after": period.starts_on}, Period)
        return later, (later[-1].ends_on if later else period.ends_on)

    def period_of(batch: Batch | None) -> Period | None:
        if batch is None or batch.period_id is None:
            return None
        return fetch_one(conn, SQL["get_period"], {"workspace_id": workspace_id, "period_id": batch.period_id}, Period)

    already = fetch_one(conn, SQL["batch_opened_by_run"], {**key, "run_id": run_id}, Batch)
    if already is not None:
        target = period_of(already)
        assert target is not None
        closed = fetch_one(conn, SQL["batch_closed_by_run"], {**key, "run_id": run_id}, Batch)
        plan, ends = plan_after(target)
        return RollResult("repeated", recurring, target, already, closed, period_of(closed), plan, ends)

    target = period_covering(conn, workspace_id=workspace_id, calendar=calendar, on=on)
    active = None
    if recurring.active_batch_id is not None:
        active = fetch_one(conn, SQL["lock_batch"], {"workspace_id": workspace_id,
                                                    "batch_id": recurring.active_batch_id}, Batch)
    active_period = period_of(active)
    if active_period is not None and active_period.starts_on >= target.starts_on:
        plan, ends = plan_after(target)
        return RollResult("active_batch_current", recurring, target, None, None, None, plan, ends, active=active)
    existing = fetch_one(conn, SQL["batch_for_period"], {**key, "period_id": target.id}, Batch)
    if existing is not None:
        raise PeriodBatchExists(f"period {target.name} already has batch {existing.name!r} ({existing.status}),"
                                " which is not the active batch")

    closed = None
    if active is not None and active.status == "open":
        closed = close_batch(conn, workspace_id=workspace_id, batch_id=active.id, now=now, run_id=run_id)
    opened = _insert_batch(conn, workspace_id=workspace_id, recurring_batch_id=recurring.id, period_id=target.id,
                           name=batch_name(recurring.name, target), auto_post=recurring.auto_post,
                           opened_at=now, opened_by_run_id=run_id)
    execute(conn, SQL["set_active_batch"], {**key, "batch_id": opened.id})
    recurring = fetch_one(conn, SQL["get_recurring_batch"], key, RecurringBatch)
    assert recurring is not None
    plan, ends = plan_after(target)
    return RollResult("rolled", recurring, target, opened, closed, active_period if closed else None, plan, ends)


@dataclass(frozen=True)
class AutoCloseResult:
    """What :func:`auto_close_batch` did.

    ``outcome``: ``closed`` (this call closed it), ``repeated`` (closed earlier by the same
    run), ``already_closed`` (closed or posted by someone else) or ``not_due`` (its
    ``close_at`` is still in the future for a scheduled run). ``batch`` is the row after.
    """

    outcome: Literal["closed", "repeated", "already_closed", "not_due"]
    batch: Batch


def auto_close_batch(conn: psycopg.Connection, *, workspace_id: UUID, batch_id: UUID, run_id: UUID, now: datetime,
                     manual: bool = False) -> AutoCloseResult:
    """Close a batch at its scheduled time (``batch.auto_close``).

    A scheduled run closes the batch when ``close_at`` is unset or ``<= now`` (aware UTC);
    a manual run (Run now) closes it regardless. Locks the batch row. Raises
    :class:`NotFound` when the batch is not in ``workspace_id``.
    """
    batch = fetch_one(conn, SQL["lock_batch"], {"workspace_id": workspace_id, "batch_id": batch_id}, Batch)
    if batch is None:
        raise NotFound(f"batch {batch_id} not found")
    if batch.status != "open":
        return AutoCloseResult("repeated" if batch.closed_by_run_id == run_id else "already_closed", batch)
    if not manual and batch.close_at is not None and batch.close_at > now:
        return AutoCloseResult("not_due", batch)
    return AutoCloseResult("closed", close_batch(conn, workspace_id=workspace_id, batch_id=batch_id, now=now,
                                                 run_id=run_id))


#: What :func:`subject_choices` lists: the named statement of each kind of subject.
_CHOICES = {"recurring_batch": "choose_recurring_batch", "batch": "choose_batch",
            "billing_plan": "choose_billing_plan"}


def subject_choices(conn: psycopg.Connection, *, workspace_id: UUID, of: str, limit: int) -> list[tuple[UUID, str]]:
    """At most ``limit`` of the workspace's subjects a schedule may name, as ``(id, name)``
    by name: ``of`` is ``recurring_batch`` (every recurring batch), ``batch`` (the open
    batches) or ``billing_plan`` (the active plans, named by customer and amount). Raises
    ``KeyError`` for another ``of``."""
    rows = conn.execute(SQL[_CHOICES[of]], {"workspace_id": workspace_id, "limit": limit}).fetchall()
    return [(row["id"], row["name"]) if isinstance(row, dict) else (row[0], row[1]) for row in rows]
