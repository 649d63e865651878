"""Recurring billing preparation: draft invoices for plans billing soon.

The rule behind ``billing.prepare``: a plan bills ``amount`` every ``interval_months``
months on its anchor day of month, clamped to shorter months and returning to the anchor
afterwards (31 Jan, 28 Feb, 31 Mar; never "add 30 days").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from uuid import UUID

import psycopg
from dateutil.relativedelta import relativedelta

from timekeeper.accounting.models import BillingPlan, DraftInvoice, NotFound
from timekeeper.db import load_queries
from timekeeper.db.rows import execute, fetch_all, fetch_one

#: A plan is prepared when its next billing date is at most this many days after the
#: occurrence's local date.
LOOKAHEAD_DAYS = 7


SQL = load_queries("timekeeper.accounting", "billing.sql")


def next_billing_date(current: date, *, anchor_day: int, interval_months: int) -> date:
    """The billing date after ``current``: ``interval_months`` later on ``anchor_day`` (clamped)."""
    return current + relativedelta(months=interval_months, day=anchor_day)


def billing_dates(plan: BillingPlan, through: date) -> tuple[list[date], date]:
    """Return the plan's billing dates ``<= through`` from its next one, and the date after them.

    A plan billing before ``through`` several times (a late preparation) yields every
    missed date: late is better than never for accounting work.
    """
    dates, current = [], plan.next_bill_date
    while current <= through:
        dates.append(current)
        current = next_billing_date(current, anchor_day=plan.anchor_day, interval_months=plan.interval_months)
    return dates, current


@dataclass(frozen=True)
class PrepareResult:
    """Outcome of :func:`prepare_invoices`.

    ``prepared_now``: drafts inserted by this call; ``prepared_by_run``: every draft the run
    has prepared (this call and earlier executions of the same run); ``plans_advanced``:
    plans whose ``next_bill_date`` this call moved; ``through``: the horizon (inclusive).
    ``plan_inactive`` is True when the one requested plan is inactive.
    """

    prepared_now: list[DraftInvoice]
    prepared_by_run: list[DraftInvoice]
    plans_advanced: int
    through: date
    plan_inactive: bool = False


def prepare_invoices(conn: psycopg.Connection, *, workspace_id: UUID, on: date, run_id: UUID, now: datetime,
                     plan_id: UUID | None = None, lookahead_days: int = LOOKAHEAD_DAYS) -> PrepareResult:
    """Prepare draft invoices for plans billing within ``lookahead_days`` of ``on``.

    ``on`` is the occurrence's local date; ``plan_id`` limits it to one plan (else every
    active plan of ``workspace_id``). For each due plan: one draft per billing date up to
    the horizon (``INSERT ... ON CONFLICT DO NOTHING`` on (plan, billing_date)) and the
    plan's ``next_bill_date`` advanced past the horizon, in the caller's transaction.
    ``now`` (aware UTC) stamps ``prepared_at``. Raises :class:`NotFound` for an unknown plan.
    """
    through = on + timedelta(days=lookahead_days)
    scope = {"workspace_id": workspace_id}
    if plan_id is not None:
        plan = fetch_one(conn, SQL["lock_plan"], {**scope, "plan_id": plan_id}, BillingPlan)
        if plan is None:
            raise NotFound(f"billing plan {plan_id} not found")
        plans = [plan] if plan.active and plan.next_bill_date <= through else []
        inactive = not plan.active
    else:
        plans = fetch_all(conn, SQL["lock_due_plans"], {**scope, "through": through}, BillingPlan)
        inactive = False
    prepared_now: list[DraftInvoice] = []
    for plan in plans:
        dates, following = billing_dates(plan, through)
        for billing_date in dates:
            invoice = fetch_one(conn, SQL["insert_invoice"], {
                **scope, "plan_id": plan.id, "billing_date": billing_date, "amount": plan.amount,
                "currency": plan.currency, "now": now, "run_id": run_id}, DraftInvoice)
            if invoice is not None:
                prepared_now.append(invoice)
        execute(conn, SQL["advance_plan"], {**scope, "plan_id": plan.id, "next_bill_date": following})
    prepared_by_run = fetch_all(conn, SQL["invoices_by_run"], {**scope, "run_id": run_id}, DraftInvoice)
    return PrepareResult(prepared_now, prepared_by_run, len(plans), through, inactive)
