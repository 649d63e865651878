"""Builders for the accounting work-kind tests: runs through the real consumer, sample books.

:func:`execute` goes the production way: it creates the run's schedule (owner
``accounting``, the work kind and subject, a UTC cron rule firing at the occurrence), lets
the real dispatcher claim the occurrence, and hands the run message to the real consumer
(:func:`~timekeeper.schedules.consumer.process_batch` with accounting's registry and the
accounting pipeline's settings from the topology), which runs the handler and the
settlement in one transaction and then the after-commit callbacks (posting). The test
reads the settled run back.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any, TypeVar
from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from tests.support import ListPublisher, dispatch_settings
from timekeeper.accounting import books
from timekeeper.accounting.posting import request_posting, run_posting_job
from timekeeper.accounting.work_kinds import OWNER, register
from timekeeper.schedules import service
from timekeeper.schedules.consumer import ConsumerSettings, Delivery, Result, process_batch
from timekeeper.schedules.dispatcher import dispatch
from timekeeper.schedules.messages import RunMessage
from timekeeper.schedules.work import WorkKindRegistry
from timekeeper.topology import ACCOUNTING

T = TypeVar("T")

ACCOUNTING_TABLES = ("accounting_calendars", "accounting_periods", "recurring_batches", "batches",
                     "ledger_entries", "posting_jobs", "bank_lines", "billing_plans", "draft_invoices")

#: The accounting consumer's settings, as the Lambda edge builds them.
SETTINGS = ConsumerSettings.from_pipeline(ACCOUNTING)


def accounting_registry() -> WorkKindRegistry:
    """A registry holding accounting's work kinds (as the Lambda edge registers them)."""
    registry = WorkKindRegistry()
    register(registry)
    return registry


@dataclass(frozen=True)
class RunSpec:
    """One scheduled run: its work kind, workspace, subject, local occurrence (the schedule's
    zone is UTC, so it is also the UTC instant), the consumer's ``now`` and the services
    the edge passes to the consumer."""

    work_kind: str
    workspace_id: UUID
    subject_id: UUID | None
    occurrence_local: datetime
    now: datetime
    services: Mapping[str, Any] = field(default_factory=dict)

    @property
    def occurrence_at(self) -> datetime:
        return self.occurrence_local.replace(tzinfo=UTC)


def spec(work_kind: str, workspace_id: UUID, subject_id: UUID | None, occurrence_local: datetime,
         **kwargs: Any) -> RunSpec:
    """A run spec whose ``now`` defaults to the occurrence (read as UTC) plus one minute."""
    kwargs.setdefault("now", occurrence_local.replace(tzinfo=UTC) + timedelta(minutes=1))
    return RunSpec(work_kind, workspace_id, subject_id, occurrence_local, **kwargs)


@dataclass(frozen=True)
class SettledRun:
    """A run as the consumer recorded it: ``state`` (succeeded | skipped | failed),
    ``outcome_code``, ``detail`` (the stored JSON), ``error`` and ``attempts``."""

    run_id: UUID
    state: str
    outcome_code: str | None
    detail: dict[str, Any] | None
    error: str | None
    attempts: int


def schedule_run(conn: psycopg.Connection, run: RunSpec) -> RunMessage:
    """Create the run's schedule and let the real dispatcher claim and publish its occurrence.

    Returns the run message the dispatcher published. Raises ``ValueError`` when ``now``
    is before the occurrence (the dispatcher would not claim it yet).
    """
    at = run.occurrence_at
    if run.now < at:
        raise ValueError(f"now {run.now} is before the occurrence {at}")
    schedule = service.create_schedule(
        conn, workspace_id=run.workspace_id, owner=OWNER, work_kind=run.work_kind, subject_id=run.subject_id,
        recurrence={"cron": f"{at.minute} {at.hour} {at.day} {at.month} *", "timezone": "UTC"}, actor="tester",
        now=at - timedelta(minutes=1))
    publisher = ListPublisher()
    dispatch(conn, dispatch_settings(OWNER), now=run.now, publisher=publisher, registry=accounting_registry())
    (message,) = [m for m in publisher.sent if m.schedule_id == schedule.id]
    return message


def deliver(conn: psycopg.Connection, messages: list[RunMessage], now: datetime, *,
            registry: WorkKindRegistry | None = None, services: Mapping[str, Any] | None = None,
            receive_count: int = 1) -> list[Result]:
    """Hand ``messages`` to the real consumer as one SQS batch at ``now``; return its results."""
    deliveries = [Delivery(f"m{index}", message, receive_count) for index, message in enumerate(messages)]
    return process_batch(conn, deliveries, now=now, registry=registry or accounting_registry(), settings=SETTINGS,
                         services=dict(services or {}))


def settled_run(conn: psycopg.Connection, run_id: UUID) -> SettledRun:
    """Read the run as the consumer left it."""
    row = one(conn, "SELECT id AS run_id, state, outcome_code, detail, error, attempts FROM schedule_runs "
                    "WHERE id = %s", (run_id,))
    return SettledRun(**row)


def execute(conn: psycopg.Connection, run: RunSpec) -> SettledRun:
    """Schedule the run, claim it with the dispatcher, deliver it to the consumer once, and
    return the settled run."""
    message = schedule_run(conn, run)
    deliver(conn, [message], run.now, services=run.services)
    return settled_run(conn, message.run_id)


class Crash(BaseException):
    """The consumer's process died here: nothing in the product catches a BaseException, so the
    open batch transaction rolls back as a dropped connection would and nothing is acknowledged."""


def counting_registry(executions: list[UUID], *, crash_first: int = 0) -> WorkKindRegistry:
    """Accounting's real handlers, each execution's run id appended to ``executions``; the first
    ``crash_first`` executions die (:class:`Crash`) after the handler returned, before the
    batch commits."""
    real = accounting_registry()

    def counted(ctx):
        outcome = real.get(ctx.owner, ctx.work_kind).handler(ctx)
        executions.append(ctx.run_id)
        if len(executions) <= crash_first:
            raise Crash("after the handler wrote its effects, before the batch committed")
        return outcome

    registry = WorkKindRegistry()
    for name in real.names(OWNER):
        registry.register(OWNER, name, counted)
    return registry


@dataclass(frozen=True)
class DuplicateDelivery:
    """What :func:`deliver_with_duplicates` saw: the settled run, the handler's executions
    (run ids) and each committed batch's result actions."""

    run: SettledRun
    executions: list[UUID]
    actions: list[list[str]]


def deliver_with_duplicates(conn: psycopg.Connection, run: RunSpec) -> DuplicateDelivery:
    """Deliver one run the ways SQS duplicates it, through the real consumer: first twice in a
    batch whose process dies after the handler ran (the batch rolls back), then twice in the
    redelivered batch, then once more after the run settled."""
    message = schedule_run(conn, run)
    executions: list[UUID] = []
    registry = counting_registry(executions, crash_first=1)
    try:
        deliver(conn, [message, message], run.now, registry=registry, services=run.services)
    except Crash:
        pass
    else:
        raise AssertionError("the first batch was expected to die mid-handler")
    later = run.now + timedelta(minutes=12)  # the visibility timeout elapsed
    actions = [[result.action for result in deliver(conn, [message, message], later, registry=registry,
                                                    services=run.services, receive_count=2)]]
    actions.append([result.action for result in deliver(conn, [message], later + timedelta(minutes=12),
                                                        registry=registry, services=run.services,
                                                        receive_count=3)])
    return DuplicateDelivery(settled_run(conn, message.run_id), executions, actions)


def committed(conn: psycopg.Connection, build: Callable[[], T]) -> T:
    """Run ``build()`` (setup service calls on ``conn``) in one committed transaction."""
    with conn.transaction():
        return build()


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
