"""The sample tenant set the local stack loads (``simulate`` and ``serve``).

Four workspaces across timezones with different DST behaviour, each with accounting
calendars, recurring batches, entries, bank lines, billing plans and schedules of the four
accounting work kinds. Chosen so that a simulation across 2027-03-01..2027-04-10 shows:
- a spring-forward gap: New York's 02:30 daily roll on 2027-03-14 runs at 03:30 local
  (the default choice); London's 01:30 daily sweep, whose owner chose to skip a gap day,
  is recorded as skipped on 2027-03-28 (``dst: {"gap": "skip"}``);
- a fall-back overlap: Lord Howe's 01:45 daily sweep, whose owner chose both instants,
  runs twice on 2027-04-04 (30 minutes apart: ``dst: {"overlap": "both"}``), and Lord
  Howe's hourly sweep runs at each real instant;
- a flexible window: New York's six-hourly sweep runs at a stable instant within 45
  minutes of each occurrence (``window_minutes``);
- no DST at all: Kolkata;
- calendar coverage running out: London's weekly calendar ends on 2027-03-21, so its
  daily roll is refused from 2027-03-22 and the fifth refusal in a row pauses it. London's
  schedules belong to a person, its accountant (:data:`LONDON_ACCOUNTANT`, a member of
  London's workspace in the directory, snapshots off), who is told of the roll's first
  refusal and of its pause.
All amounts come from a seeded random generator (``--seed``).
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from decimal import Decimal
from uuid import UUID

import psycopg

from timekeeper.accounting import books
from timekeeper.platform import directory
from timekeeper.schedules import service

OWNER = "accounting"
#: London's accountant: (user id, display name, e-mail); owns London's schedules.
LONDON_ACCOUNTANT = ("sample-london-accountant", "Lena Ledger", "lena@people.example.com")


@dataclass
class SampleSet:
    """What was loaded: workspace ids by label and schedule ids by label."""

    workspaces: dict[str, UUID] = field(default_factory=dict)
    schedules: dict[str, UUID] = field(default_factory=dict)


def _money(rng: random.Random) -> Decimal:
    return Decimal(rng.randrange(10_00, 5_000_00)) / 100


def _ledger_with_bank_lines(conn, rng: random.Random, ws: UUID, batch_id: UUID, start: date, lines: int) -> None:
    """Balanced entries in an open batch (cash vs revenue) plus bank lines matching the cash side."""
    for i in range(lines):
        amount = _money(rng)
        day = start + timedelta(days=i % 20)
        books.add_entry(conn, workspace_id=ws, batch_id=batch_id, account="bank:operating", amount=amount,
                        entry_date=day, reference=f"DEP-{i:04d}")
        books.add_entry(conn, workspace_id=ws, batch_id=batch_id, account="revenue", amount=-amount,
                        entry_date=day, reference=f"DEP-{i:04d}")
        books.add_bank_line(conn, workspace_id=ws, bank_account="bank:operating", amount=amount,
                            booked_on=day + timedelta(days=1), reference=f"DEP-{i:04d}")


def _monthly_journal(conn, rng: random.Random, ws: UUID, timezone: str, name: str, start: datetime, *,
                     lines: int):
    """A two-year monthly calendar, a recurring journal opened at ``start`` and entries with
    matching bank lines; returns the recurring batch."""
    first_day = start.date()
    calendar = books.create_calendar(conn, workspace_id=ws, name="Months", timezone=timezone,
                                     first_period_start=date(first_day.year, 1, 1), periods=24)
    journal = books.create_recurring_batch(conn, workspace_id=ws, calendar_id=calendar.id, name=name,
                                           opens_on=first_day, now=start)
    _ledger_with_bank_lines(conn, rng, ws, journal.active_batch_id, first_day - timedelta(days=28), lines)
    return journal


def load_sample(conn: psycopg.Connection, *, start: datetime, seed: int = 7) -> SampleSet:
    """Load the sample tenant set as of ``start`` (aware UTC); returns the ids created.

    Runs in its own transaction on an autocommit connection.
    """
    rng = random.Random(seed)
    out = SampleSet()
    first_day = start.date()

    def schedule(label: str, ws: UUID, kind: str, rule: dict, subject: UUID | None = None,
                 actor: str = "sample-loader") -> None:
        # A schedule's id follows its workspace and label, so a seed loads the same ids every
        # time (a flexible window's given instants derive from the id).
        row = service.create_schedule(conn, workspace_id=ws, owner=OWNER, work_kind=kind, recurrence=rule,
                                      actor=actor, now=start, subject_id=subject, name=label,
                                      schedule_id=uuid.uuid5(ws, label))
        out.schedules[label] = row.id

    with conn.transaction():
        # --- New York: monthly books, a weekly AP batch rolled daily at 02:30 (spring gap 2027-03-14)
        ny = out.workspaces["new_york"] = uuid.UUID(int=rng.getrandbits(128))
        monthly = books.create_calendar(conn, workspace_id=ny, name="Fiscal months", timezone="America/New_York",
                                        first_period_start=date(first_day.year, 1, 1), periods=24)
        weekly = books.create_calendar(conn, workspace_id=ny, name="AP weeks", timezone="America/New_York",
                                       first_period_start=first_day - timedelta(days=first_day.weekday()),
                                       periods=30, frequency="weekly")
        gl = books.create_recurring_batch(conn, workspace_id=ny, calendar_id=monthly.id, name="General journal",
                                          opens_on=first_day, now=start)
        ap = books.create_recurring_batch(conn, workspace_id=ny, calendar_id=weekly.id, name="Payables",
                                          opens_on=first_day, now=start)
        _ledger_with_bank_lines(conn, rng, ny, gl.active_batch_id, first_day - timedelta(days=25), 12)
        books.create_billing_plan(conn, workspace_id=ny, customer="Northwind", amount=_money(rng), currency="USD",
                                  interval_months=1, first_bill_date=date(first_day.year, 3, 31))
    with conn.transaction():
        schedule("ny.payables.roll", ny, "batch.roll",
                 {"calendar": {"frequency": "daily", "times": ["02:30"]}, "timezone": "America/New_York"}, ap.id)
        schedule("ny.journal.roll", ny, "batch.roll",
                 {"calendar": {"frequency": "monthly", "month_day": 1, "times": ["00:10"]},
                  "timezone": "America/New_York"}, gl.id)
        schedule("ny.reconciliation", ny, "reconciliation.sweep",
                 {"cron": "15 */6 * * *", "timezone": "America/New_York", "window_minutes": 45})
        schedule("ny.billing", ny, "billing.prepare",
                 {"calendar": {"frequency": "daily", "times": ["06:00"]}, "timezone": "America/New_York"})

    with conn.transaction():
        # --- London: a weekly calendar whose coverage ends 2027-03-21; rolled daily
        ldn = out.workspaces["london"] = uuid.UUID(int=rng.getrandbits(128))
        # London is in the directory, with its accountant as a member: the owner of its
        # schedules, who hears of their failures (snapshots are off: no monthly snapshot)
        accountant, display_name, email = LONDON_ACCOUNTANT
        directory.create_workspace(conn, name="London books", timezone="Europe/London", currency="GBP",
                                   snapshots_enabled=False, workspace_id=ldn, now=start)
        directory.upsert_user(conn, user_id=accountant, display_name=display_name, email=email, now=start)
        directory.add_member(conn, workspace_id=ldn, user_id=accountant,
                             roles=["schedules:read", "schedules:write", "schedules:run"], now=start)
        short = books.create_calendar(conn, workspace_id=ldn, name="Trading weeks", timezone="Europe/London",
                                      first_period_start=first_day - timedelta(days=first_day.weekday()),
                                      periods=3, frequency="weekly")
        sales = books.create_recurring_batch(conn, workspace_id=ldn, calendar_id=short.id, name="Sales ledger",
                                             opens_on=first_day, now=start)
        _ledger_with_bank_lines(conn, rng, ldn, sales.active_batch_id, first_day, 6)
        close_me = books.create_batch(conn, workspace_id=ldn, name="Quarter-end accruals",
                                      close_at=datetime(2027, 3, 31, 17, 0, tzinfo=start.tzinfo), now=start)
        books.create_billing_plan(conn, workspace_id=ldn, customer="Contoso UK", amount=_money(rng), currency="GBP",
                                  interval_months=3, first_bill_date=date(first_day.year, 3, 29))
    with conn.transaction():
        schedule("london.sales.roll", ldn, "batch.roll",
                 {"calendar": {"frequency": "daily", "times": ["07:00"]}, "timezone": "Europe/London"}, sales.id,
                 actor=accountant)
        schedule("london.accruals.close", ldn, "batch.auto_close",
                 {"calendar": {"frequency": "monthly", "month_day": "last", "times": ["18:00"]},
                  "timezone": "Europe/London"}, close_me.id, actor=accountant)
        schedule("london.reconciliation", ldn, "reconciliation.sweep",
                 {"calendar": {"frequency": "daily", "times": ["01:30"]}, "timezone": "Europe/London",
                  "dst": {"gap": "skip"}}, actor=accountant)
        schedule("london.billing", ldn, "billing.prepare",
                 {"cron": "0 5 * * 1-5", "timezone": "Europe/London"}, actor=accountant)

    with conn.transaction():
        # --- Lord Howe: 30-minute DST; clocks go back 02:00 -> 01:30 on 2027-04-04
        lhi = out.workspaces["lord_howe"] = uuid.UUID(int=rng.getrandbits(128))
        journal = _monthly_journal(conn, rng, lhi, "Australia/Lord_Howe", "Island journal", start, lines=5)
    with conn.transaction():
        schedule("lord_howe.journal.roll", lhi, "batch.roll",
                 {"calendar": {"frequency": "monthly", "month_day": 1, "times": ["01:45"]},
                  "timezone": "Australia/Lord_Howe"}, journal.id)
        schedule("lord_howe.reconciliation.daily", lhi, "reconciliation.sweep",
                 {"calendar": {"frequency": "daily", "times": ["01:45"]}, "timezone": "Australia/Lord_Howe",
                  "dst": {"overlap": "both"}})
        schedule("lord_howe.reconciliation.hourly", lhi, "reconciliation.sweep",
                 {"cron": "40 * * * *", "timezone": "Australia/Lord_Howe"})

    with conn.transaction():
        # --- Kolkata: no DST; month-end billing on the 31st clamps to shorter months
        kol = out.workspaces["kolkata"] = uuid.UUID(int=rng.getrandbits(128))
        journal = _monthly_journal(conn, rng, kol, "Asia/Kolkata", "Sales journal", start, lines=8)
        books.create_billing_plan(conn, workspace_id=kol, customer="Tata Retail", amount=_money(rng), currency="INR",
                                  interval_months=1, first_bill_date=date(first_day.year, 1, 31))
    with conn.transaction():
        schedule("kolkata.journal.roll", kol, "batch.roll",
                 {"calendar": {"frequency": "monthly", "month_day": 1, "times": ["00:05"]},
                  "timezone": "Asia/Kolkata"}, journal.id)
        schedule("kolkata.billing", kol, "billing.prepare",
                 {"calendar": {"frequency": "monthly", "month_day": 31, "times": ["09:00"]},
                  "timezone": "Asia/Kolkata"})
        schedule("kolkata.reconciliation", kol, "reconciliation.sweep",
                 {"interval": {"hours": 4}, "anchor": "2027-01-01T00:00:00Z"})
    return out
