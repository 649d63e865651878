"""Accounting's work kinds: handlers, their registration and the posting sweep.

Each handler receives a :class:`~timekeeper.schedules.work.RunContext` whose connection is
inside the run's transaction with the tenant applied, calls one service function of this
package with ``ctx.workspace_id`` (every query is scoped by it) and maps the result to
``Succeeded`` / ``Skipped`` / ``Refused``. Handlers never commit.

Posting of a closed batch is at least once: the job row is committed ``pending`` in the
run's transaction, and started after its commit through ``ctx.after_commit``: by
``ctx.services["posting"]`` when the edge passes a starter (``starter(job_id=...,
workspace_id=...)``, e.g. an asynchronous invoke), else inline with
:func:`~timekeeper.accounting.posting.start_posting_job` on the (then idle) run
connection, with ``ctx.services.get("posting_hook")`` as its posting hook. The callback is
lost if the process dies right after the commit; the ``posting.sweep`` maintenance task
(after the accounting pipeline's dispatcher pass every five minutes) starts such jobs, and
starting is idempotent by job id.

Registered under owner ``"accounting"`` with no staleness bound (late is better than never).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from timekeeper import observability as obs
from timekeeper.accounting.billing import LOOKAHEAD_DAYS, prepare_invoices
from timekeeper.accounting.books import (
    PeriodBatchExists,
    RollResult,
    auto_close_batch,
    batch_name,
    get_batch,
    get_billing_plan,
    get_recurring_batch,
    roll_recurring_batch,
    subject_choices,
)
from timekeeper.accounting.models import Batch, NotFound, OutsideCalendarCoverage, Period
from timekeeper.accounting.posting import count_failed_jobs, request_posting, start_posting_job, sweep_posting_jobs
from timekeeper.accounting.reconciliation import DEFAULT_WINDOW_DAYS, sweep
from timekeeper.schedules.work import (
    Outcome,
    Refused,
    RunContext,
    Skipped,
    SubjectCandidates,
    SubjectChoice,
    SubjectRequirement,
    Succeeded,
    WorkKindRegistry,
)

OWNER = "accounting"
BATCH_ROLL = "batch.roll"
BATCH_AUTO_CLOSE = "batch.auto_close"
RECONCILIATION_SWEEP = "reconciliation.sweep"
BILLING_PREPARE = "billing.prepare"
POSTING_SWEEP = "posting.sweep"

#: Invoices listed in a billing run's detail (the count is always complete).
MAX_INVOICES_IN_DETAIL = 100


def _schedule_posting(ctx: RunContext, batch: Batch) -> str | None:
    """Request the closed batch's posting job (idempotent, committed with the run) and start
    it after commit (the posting sweep starts it if this callback is lost).

    Returns the job id as text, or None when the batch does not auto-post.
    """
    if not batch.auto_post:
        return None
    job_id = request_posting(ctx.conn, ctx.workspace_id, batch.id, ctx.run_id, now=ctx.now)
    starter = ctx.services.get("posting")
    workspace_id, conn, now = ctx.workspace_id, ctx.conn, ctx.now
    if starter is not None:
        ctx.after_commit(lambda: starter(job_id=job_id, workspace_id=workspace_id))
    else:
        hook = ctx.services.get("posting_hook")
        ctx.after_commit(lambda: start_posting_job(conn, job_id, now, workspace_id=workspace_id, hook=hook))
    return str(job_id)


def _period(period: Period) -> dict[str, Any]:
    return {"id": str(period.id), "name": period.name, "starts_on": period.starts_on.isoformat(),
            "ends_on": period.ends_on.isoformat()}


def _batch(batch: Batch, period: Period | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"id": str(batch.id), "name": batch.name}
    if period is not None:
        out["period"] = period.name
    if batch.closed_at is not None:
        out["closed_at"] = batch.closed_at.isoformat()
    return out


def _missing_subject(ctx: RunContext, what: str) -> Refused:
    return Refused("subject_missing", f"{ctx.work_kind} needs a {what} as the schedule's subject")


def _roll_detail(ctx: RunContext, result: RollResult, posting_job: str | None) -> dict[str, Any]:
    recurring = result.recurring
    detail: dict[str, Any] = {
        "recurring_batch": {"id": str(recurring.id), "name": recurring.name},
        "occurrence_date": ctx.occurrence_local.date().isoformat(),
        "period": _period(result.target),
        "active_batch": str(recurring.active_batch_id) if recurring.active_batch_id else None,
        "coverage_ends_on": result.coverage_ends_on.isoformat(),
        "plan": [{"period": p.name, "starts_on": p.starts_on.isoformat(), "ends_on": p.ends_on.isoformat(),
                  "batch_name": batch_name(recurring.name, p)} for p in result.plan],
    }
    if result.opened is not None:
        detail["opened_batch"] = _batch(result.opened, result.target)
        detail["closed_batch"] = _batch(result.closed, result.closed_period) if result.closed else None
        detail["posting_job"] = posting_job
    elif result.active is not None:
        detail["active_batch_status"] = result.active.status
    return detail


def roll_batch(ctx: RunContext) -> Outcome:
    """``batch.roll``: close a recurring batch's active batch and open the next (subject: recurring batch id).

    The new batch belongs to the calendar period CONTAINING the run's occurrence local date
    (``ctx.occurrence_local.date()``); see :func:`~timekeeper.accounting.books.roll_recurring_batch`.
    Outcomes: ``Succeeded`` with detail ``opened_batch`` {id, name, period},
    ``closed_batch`` (the batch this run closed, or null), ``active_batch`` (the recurring
    batch's active batch id after the roll), ``period``, ``posting_job`` (id or null),
    ``coverage_ends_on`` and ``plan`` (every covered period after the opened one:
    {period, starts_on, ends_on, batch_name}); ``Refused("outside_calendar_coverage")``
    when the date has no period (nothing changes, no calendar is generated);
    ``Skipped("active_batch_current")`` when the active batch's period is already
    the target period or later; ``Refused("recurring_batch_not_found" | "period_batch_exists"
    | "subject_missing")``. When the recurring batch auto-posts, the closed batch's posting
    job is requested in the run's transaction and started after commit.

    Idempotency: a second execution for the same run finds the batch it opened
    (``opened_by_run_id`` = run id), closes and opens nothing, re-requests the same posting
    job (one job per batch) and returns the same detail.
    """
    if ctx.subject_id is None:
        return _missing_subject(ctx, "recurring batch")
    try:
        result = roll_recurring_batch(ctx.conn, workspace_id=ctx.workspace_id, recurring_batch_id=ctx.subject_id,
                                      on=ctx.occurrence_local.date(), run_id=ctx.run_id, now=ctx.now)
    except NotFound as error:
        return Refused("recurring_batch_not_found", str(error))
    except OutsideCalendarCoverage as error:
        return Refused("outside_calendar_coverage", str(error), detail={
            "calendar_id": str(error.calendar_id), "date": error.on.isoformat(),
            "coverage_ends_on": error.coverage_ends_on.isoformat() if error.coverage_ends_on else None})
    except PeriodBatchExists as error:
        return Refused("period_batch_exists", str(error))
    if result.outcome == "active_batch_current":
        return Skipped("active_batch_current", detail=_roll_detail(ctx, result, None))
    posting_job = _schedule_posting(ctx, result.closed) if result.closed is not None else None
    return Succeeded(_roll_detail(ctx, result, posting_job))


def auto_close(ctx: RunContext) -> Outcome:
    """``batch.auto_close``: close a batch at its scheduled time (subject: batch id).

    A scheduled run closes the batch when its ``close_at`` (UTC) is unset or not after
    ``ctx.now``; a manual run closes it regardless. Outcomes: ``Succeeded`` with
    ``closed_batch`` {id, name, closed_at} and ``posting_job`` (id, or null when the
    batch does not auto-post); ``Skipped("already_closed")`` when someone else closed (or
    posted) it; ``Skipped("close_not_due")``; ``Refused("batch_not_found" | "subject_missing")``.
    The posting job is requested in the run's transaction and started after commit.

    Idempotency: a second execution for the same run finds the batch closed by this run
    (``closed_by_run_id`` = run id), closes nothing, re-requests the same posting job and
    returns the same detail.
    """
    if ctx.subject_id is None:
        return _missing_subject(ctx, "batch")
    try:
        result = auto_close_batch(ctx.conn, workspace_id=ctx.workspace_id, batch_id=ctx.subject_id,
                                  run_id=ctx.run_id, now=ctx.now, manual=ctx.trigger == "manual")
    except NotFound as error:
        return Refused("batch_not_found", str(error))
    batch = result.batch
    if result.outcome == "already_closed":
        return Skipped("already_closed", detail={"batch": _batch(batch), "status": batch.status})
    if result.outcome == "not_due":
        return Skipped("close_not_due", detail={"batch": _batch(batch),
                                                "close_at": batch.close_at.isoformat() if batch.close_at else None})
    return Succeeded({"closed_batch": _batch(batch), "posting_job": _schedule_posting(ctx, batch)})


def reconciliation_sweep(ctx: RunContext) -> Outcome:
    """``reconciliation.sweep``: match the workspace's unreconciled bank lines to posted entries.

    The subject is not used: a sweep covers every unreconciled bank line of
    ``ctx.workspace_id`` (oldest first, bounded per run). Matching rule: see
    :mod:`timekeeper.accounting.reconciliation`. Outcomes: ``Succeeded`` with ``matched``
    (lines reconciled by this run) and ``unmatched`` (lines still unreconciled);
    ``Skipped("nothing_to_reconcile")`` when the workspace has no unreconciled line.

    Idempotency: a matched line and entry are marked on both sides, so a second execution
    for the same run finds them reconciled and matches nothing new; its detail counts the
    run's matches (``reconciled_by_run_id`` = run id), so it equals the first detail.
    """
    result = sweep(ctx.conn, workspace_id=ctx.workspace_id, run_id=ctx.run_id, now=ctx.now)
    if result.examined == 0 and result.matched_by_run == 0:
        return Skipped("nothing_to_reconcile", detail={"matched": 0, "unmatched": 0})
    return Succeeded({"matched": result.matched_by_run, "unmatched": result.unmatched,
                      "window_days": DEFAULT_WINDOW_DAYS})


def billing_prepare(ctx: RunContext) -> Outcome:
    """``billing.prepare``: draft invoices for plans billing within 7 days (subject: plan id or null).

    With a subject, only that plan; without, every active plan of the workspace. A plan is
    due when its ``next_bill_date`` is at most ``LOOKAHEAD_DAYS`` (7) after the occurrence's
    local date; each due billing date gets one draft and the plan's ``next_bill_date``
    advances by ``interval_months`` (month ends clamp, then return to the anchor day).
    Outcomes: ``Succeeded`` with ``prepared`` (count), ``through`` (horizon date) and
    ``invoices``; ``Skipped("nothing_due")``; ``Skipped("plan_inactive")``;
    ``Refused("billing_plan_not_found")``.

    Idempotency: UNIQUE (billing_plan_id, billing_date) with ``ON CONFLICT DO NOTHING`` and
    the advanced ``next_bill_date``: a second execution for the same run prepares nothing
    new and reports the drafts the run prepared (``prepared_by_run_id`` = run id).
    """
    try:
        result = prepare_invoices(ctx.conn, workspace_id=ctx.workspace_id, on=ctx.occurrence_local.date(),
                                  run_id=ctx.run_id, now=ctx.now, plan_id=ctx.subject_id)
    except NotFound as error:
        return Refused("billing_plan_not_found", str(error))
    if not result.prepared_by_run:
        reason = "plan_inactive" if result.plan_inactive else "nothing_due"
        return Skipped(reason, detail={"through": result.through.isoformat()})
    invoices = result.prepared_by_run
    return Succeeded({
        "prepared": len(invoices),
        "through": result.through.isoformat(),
        "invoices": [{"id": str(i.id), "billing_plan_id": str(i.billing_plan_id),
                      "billing_date": i.billing_date.isoformat(), "amount": str(i.amount), "currency": i.currency}
                     for i in invoices[:MAX_INVOICES_IN_DETAIL]],
    })


#: The posting sweep runs on the dispatcher passes whose UTC minute is a multiple of this:
#: a lost posting start waits at most this many minutes, and the minute passes in between
#: cost nothing (one indexed query each would add about 0.2 ms to every pass).
POSTING_SWEEP_EVERY_MINUTES = 5
#: The sweep summary's count of failed, unretried posting jobs.
FAILED_WAITING = "failed_waiting"


def posting_sweep(conn: psycopg.Connection, now: datetime) -> dict[str, int] | None:
    """``posting.sweep`` maintenance task: start every posting job committed with its run but
    never started (its after-commit callback was lost), and restart stale running ones.

    Runs when ``now``'s minute is a multiple of ``POSTING_SWEEP_EVERY_MINUTES`` and returns
    None on the other passes. ``conn`` is idle and sees every workspace; ``now`` is aware
    UTC. Returns the counts of :func:`~timekeeper.accounting.posting.sweep_posting_jobs`
    (``started`` and the status of each examined job) and ``failed_waiting``: the failed
    jobs of every workspace that nobody retried yet (the edge emits it as the
    ``PostingJobsFailed`` metric, which the alarm of the same name watches).
    """
    if now.minute % POSTING_SWEEP_EVERY_MINUTES:
        return None
    counts = sweep_posting_jobs(conn, now)
    return {**counts, FAILED_WAITING: count_failed_jobs(conn)}


def _found(lookup: Callable[..., Any], id_keyword: str) -> Callable[[psycopg.Connection, UUID, UUID], bool]:
    """A subject check: whether ``lookup(conn, workspace_id=..., <id_keyword>=subject_id)``
    finds the subject in the schedule's workspace (``NotFound`` means it does not)."""

    def exists(conn: psycopg.Connection, workspace_id: UUID, subject_id: UUID) -> bool:
        try:
            lookup(conn, workspace_id=workspace_id, **{id_keyword: subject_id})
        except NotFound:
            return False
        return True

    return exists


def _choices(of: str) -> SubjectCandidates:
    """The subjects of kind ``of`` (see :func:`~timekeeper.accounting.books.subject_choices`)
    a schedule may name, as :class:`SubjectChoice` rows."""

    def candidates(conn: psycopg.Connection, workspace_id: UUID, limit: int) -> list[SubjectChoice]:
        return [SubjectChoice(id, name) for id, name in subject_choices(conn, workspace_id=workspace_id, of=of,
                                                                        limit=limit)]

    return candidates


#: ``batch.roll``'s subject is a recurring batch, ``batch.auto_close``'s a batch, and
#: ``billing.prepare``'s (optional) a billing plan, of the workspace.
_recurring_batch_exists = _found(get_recurring_batch, "recurring_batch_id")
_batch_exists = _found(get_batch, "batch_id")
_billing_plan_exists = _found(get_billing_plan, "plan_id")


def register(registry: WorkKindRegistry) -> None:
    """Register the four accounting work kinds under owner ``"accounting"`` (no staleness
    bound; ``batch.roll`` needs a recurring batch and ``batch.auto_close`` a batch of the
    schedule's workspace as its subject; ``billing.prepare`` takes a billing plan of the
    workspace or no subject) and the ``posting.sweep`` maintenance task, whose summary's
    ``failed_waiting`` is the ``PostingJobsFailed`` metric.

    Raises ``ValueError`` when one of them is registered already.
    """
    registry.register(OWNER, BATCH_ROLL, roll_batch, staleness=None,
                      subject=SubjectRequirement("recurring batch", _recurring_batch_exists,
                                                 candidates=_choices("recurring_batch")))
    registry.register(OWNER, BATCH_AUTO_CLOSE, auto_close, staleness=None,
                      subject=SubjectRequirement("batch", _batch_exists, candidates=_choices("batch")))
    registry.register(OWNER, RECONCILIATION_SWEEP, reconciliation_sweep, staleness=None)
    registry.register(OWNER, BILLING_PREPARE, billing_prepare, staleness=None,
                      subject=SubjectRequirement("billing plan", _billing_plan_exists, required=False,
                                                 candidates=_choices("billing_plan")))
    registry.register_maintenance(OWNER, POSTING_SWEEP, posting_sweep,
                                  metrics={FAILED_WAITING: obs.POSTING_JOBS_FAILED})


__all__ = ["BATCH_AUTO_CLOSE", "BATCH_ROLL", "BILLING_PREPARE", "LOOKAHEAD_DAYS", "OWNER", "POSTING_SWEEP",
           "POSTING_SWEEP_EVERY_MINUTES",
           "RECONCILIATION_SWEEP", "auto_close", "billing_prepare", "posting_sweep", "reconciliation_sweep", "register",
           "roll_batch"]
