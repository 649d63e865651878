"""Posting jobs: post a closed batch's ledger entries after the batch's run committed.

``batch.roll`` and ``batch.auto_close`` call :func:`request_posting` inside the run's
transaction, so the job row (``pending``, one per batch, idempotent) commits together with
the close. They register an after-commit callback that calls :func:`start_posting_job`.
An after-commit callback is lost when the process dies between the commit and the
callback, so the durable record is the ``pending`` row: :func:`sweep_posting_jobs` (the
accounting pipeline's maintenance task, after a dispatcher pass every few minutes)
starts every committed job that was never started, and restarts one whose starter died
while it was ``running`` (its start older than ``STALE_RUNNING_AFTER``). Together they give
at-least-once starts; starting is idempotent by job id (the job row is locked and only a
``pending`` or stale ``running`` job is taken), so a callback and a sweep racing for the
same job start it once.

A started job owns its transactions: it marks the job running, then posts (entries
``posted``/``posted_at``, batch ``posted``) and marks the job succeeded in one
transaction; any failure rolls the posting back and marks the job failed with the error,
leaving the batch closed and unposted, visible by the job's status, and tells the owner
of the schedule whose run requested it (a ``posting_failed`` notice). Failed jobs are not
retried automatically: :func:`request_retry` (the API's retry route) puts one back to
``pending`` for the sweep, and :func:`run_posting_job` retries one at once.

Posting rule: a batch posts only when its entries sum to zero (double entry); an
optional ``hook`` (``PostingHook``) runs inside the posting transaction before the rows
are marked posted, e.g. to hand the entries to a general ledger; raising fails the job.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from uuid import UUID

import psycopg

from timekeeper.accounting.books import get_batch, list_entries, lock_batch
from timekeeper.accounting.models import Batch, BatchNotClosed, LedgerEntry, NotFound, PostingError, PostingJob
from timekeeper.accounting.values import instant
from timekeeper.db import load_queries, set_tenant
from timekeeper.db.rows import execute, fetch_all, fetch_one, fetch_rows, fetch_value
from timekeeper.schedules.notifications import POSTING_FAILED, enqueue_notification

#: ``hook(conn, batch, entries)`` runs in the posting transaction; raising fails the job.
PostingHook = Callable[[psycopg.Connection, Batch, list[LedgerEntry]], None]

#: Longest error text stored on a failed job.
MAX_ERROR_CHARS = 2000

#: A job still ``running`` this long after its start lost its starter (a process that
#: died mid-posting); the sweep starts it again. Posting one batch takes well under a second.
STALE_RUNNING_AFTER = timedelta(minutes=15)

#: Most jobs one sweep starts; the rest wait for the next sweep.
SWEEP_LIMIT = 100


SQL = load_queries("timekeeper.accounting", "posting.sql")


def request_posting(conn: psycopg.Connection, workspace_id: UUID, batch_id: UUID, run_id: UUID | None, *,
                    now: datetime) -> UUID:
    """Return the id of the batch's posting job, inserting it (``pending``) if absent.

    Runs inside the caller's transaction and never commits. Idempotent: a second request
    for the same batch returns the existing job whatever its status. ``now`` (aware UTC)
    stamps ``created_at``. Raises :class:`NotFound` when the batch is not in
    ``workspace_id`` and :class:`BatchNotClosed` when it is still open.
    """
    batch = get_batch(conn, workspace_id=workspace_id, batch_id=batch_id)
    if batch.status == "open":
        raise BatchNotClosed(f"batch {batch.name!r} is open; close it before posting")
    params = {"workspace_id": workspace_id, "batch_id": batch_id, "run_id": run_id, "now": instant(now)}
    job_id = fetch_value(conn, SQL["insert_job"], params)
    if job_id is None:
        job_id = fetch_value(conn, SQL["job_for_batch"], params)
    return job_id


def get_posting_job(conn: psycopg.Connection, *, workspace_id: UUID, job_id: UUID) -> PostingJob:
    """Return the posting job; raises :class:`NotFound`."""
    job = fetch_one(conn, SQL["get_job"], {"workspace_id": workspace_id, "job_id": job_id}, PostingJob)
    if job is None:
        raise NotFound(f"posting job {job_id} not found")
    return job


def _describe(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text[:MAX_ERROR_CHARS]


def run_posting_job(conn: psycopg.Connection, job_id: UUID, now: datetime, *, workspace_id: UUID | None = None,
                    hook: PostingHook | None = None) -> str:
    """Run (or retry) a posting job in its own transactions; return its final status.

    Runs the job whatever its status unless it already succeeded (an operator's retry of
    a ``failed`` job). ``conn`` must be idle (no transaction in progress): this commits
    its own work. ``now`` is an aware UTC instant. ``workspace_id``, when given, scopes
    the job lookup (the job is invisible from another workspace); otherwise the job's own
    workspace is used.

    Returns ``"succeeded"`` (also when it had succeeded before, or the batch was already
    posted) or ``"failed"`` (the error is stored on the job; the batch stays closed and
    unposted). Raises :class:`NotFound` for an unknown job, ``RuntimeError`` when ``conn``
    is inside a transaction, and database errors only when even recording the failure fails.
    """
    return _run_job(conn, job_id, instant(now), workspace_id, hook, lambda job: True)[0]


def start_posting_job(conn: psycopg.Connection, job_id: UUID, now: datetime, *, workspace_id: UUID | None = None,
                      hook: PostingHook | None = None, stale_after: timedelta = STALE_RUNNING_AFTER) -> str:
    """Start a committed posting job unless another starter has it; return its status afterwards.

    Idempotent by job id: only a ``pending`` job, or a ``running`` one whose start is older
    than ``stale_after`` (its starter died), is run (as :func:`run_posting_job` does); for
    any other job nothing happens and its current status is returned (``"running"``,
    ``"succeeded"`` or ``"failed"``: a failed job waits for an explicit retry). The job row
    is locked while deciding, so two starters racing for one job run it once.
    ``conn`` must be idle; ``now`` is an aware UTC instant. Raises as :func:`run_posting_job`.
    """
    now = instant(now)
    return _run_job(conn, job_id, now, workspace_id, hook, lambda job: _unstarted(job, now - stale_after))[0]


def sweep_posting_jobs(conn: psycopg.Connection, now: datetime, *, hook: PostingHook | None = None,
                       limit: int = SWEEP_LIMIT, stale_after: timedelta = STALE_RUNNING_AFTER) -> dict[str, int]:
    """Start every committed job that no starter took: ``pending`` ones, and ``running`` ones
    started more than ``stale_after`` before ``now`` (aware UTC); at most ``limit``, oldest first.

    This is what makes the after-commit start at-least-once: a job whose callback was lost
    (the process died between the run's commit and the callback) is started by the next
    sweep, and each job is started once even when a callback runs concurrently
    (:func:`start_posting_job`). Reads every workspace's jobs, so ``conn`` must not be
    walled by row-level security (the dispatcher's and consumers' connections are not);
    each job then runs with its own workspace as tenant. ``conn`` must be idle.

    Returns counts by the status each examined job had afterwards, plus ``"started"``
    (jobs this sweep ran), e.g. ``{"started": 2, "succeeded": 1, "failed": 1}``.
    Raises ``RuntimeError`` when ``conn`` is inside a transaction and ``psycopg.Error`` on
    a database failure (jobs started before it keep their outcome).
    """
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise RuntimeError("sweep_posting_jobs needs an idle connection: it commits its own transactions")
    now = instant(now)
    stale_before = now - stale_after
    found = fetch_rows(conn, SQL["unstarted_jobs"], {"stale_before": stale_before, "limit": limit})
    counts: dict[str, int] = {"started": 0}
    for row in found:
        status, ran = _run_job(conn, row["id"], now, row["workspace_id"], hook,
                               lambda job: _unstarted(job, stale_before))
        counts["started"] += ran
        counts[status] = counts.get(status, 0) + 1
    return counts


def _unstarted(job: PostingJob, stale_before: datetime) -> bool:
    return job.status == "pending" or (job.status == "running" and job.started_at is not None
                                       and job.started_at < stale_before)


def _run_job(conn: psycopg.Connection, job_id: UUID, now: datetime, workspace_id: UUID | None,
             hook: PostingHook | None, startable: Callable[[PostingJob], bool]) -> tuple[str, bool]:
    """Lock the job, run it when ``startable(job)`` says so; return its status afterwards and
    whether this call ran it."""
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise RuntimeError("a posting job needs an idle connection: it commits its own transactions")
    with conn.transaction():
        ws = workspace_id or fetch_value(conn, SQL["find_job_workspace"], {"job_id": job_id})
        job = None
        if ws is not None:
            set_tenant(conn, ws)
            job = fetch_one(conn, SQL["lock_job"], {"workspace_id": ws, "job_id": job_id}, PostingJob)
        if job is None:
            raise NotFound(f"posting job {job_id} not found")
        if job.status == "succeeded" or not startable(job):
            return job.status, False
        key = {"workspace_id": ws, "job_id": job_id, "batch_id": job.batch_id, "now": now}
        attempt = fetch_value(conn, SQL["mark_running"], key)
    try:
        with conn.transaction():
            set_tenant(conn, ws)
            _post_batch(conn, key, hook)
        return "succeeded", True
    except Exception as error:  # any failure: record it on the job, leave the batch closed
        with conn.transaction():
            set_tenant(conn, ws)
            if execute(conn, SQL["mark_failed"], {**key, "error": _describe(error), "attempt": attempt}):
                _tell_owner(conn, job, attempt, now)
        return "failed", True


def _tell_owner(conn: psycopg.Connection, job: PostingJob, attempt: int, now: datetime) -> None:
    """Enqueue the ``posting_failed`` notice of ``job``'s ``attempt`` (the people's, not the
    operators' topic: they have the ``PostingJobsFailed`` alarm), in the failure's
    transaction, for the owner of the schedule whose run requested it."""
    schedule_id = fetch_value(conn, SQL["job_schedule"], {"run_id": job.requested_by_run_id})
    enqueue_notification(conn, schedule_id=schedule_id, workspace_id=job.workspace_id, owner="accounting",
                         kind=POSTING_FAILED, now=now, event_key=f"posting_failed:{job.id}:{attempt}", topic=False,
                         payload={"reason": "posting_failed", "job_id": str(job.id), "batch_id": str(job.batch_id),
                                  "attempt": attempt, "workspace_id": str(job.workspace_id),
                                  "schedule_id": str(schedule_id) if schedule_id else None})


def list_failed_jobs(conn: psycopg.Connection, *, workspace_id: UUID, limit: int = 100) -> list[PostingJob]:
    """The workspace's failed posting jobs, oldest failure first (at most ``limit``): each
    batch closed and unposted until its job is retried and succeeds."""
    return fetch_all(conn, SQL["failed_jobs"], {"workspace_id": workspace_id, "limit": limit}, PostingJob)


def request_retry(conn: psycopg.Connection, *, workspace_id: UUID, job_id: UUID) -> PostingJob:
    """Ask for a failed job to run again, in the caller's transaction: it goes back to
    ``pending`` and the accounting pipeline's sweep starts it (within
    ``POSTING_SWEEP_EVERY_MINUTES``). Returns the job; a job that is not failed is returned
    as it is (idempotent). Raises :class:`NotFound`."""
    job = fetch_one(conn, SQL["retry_job"], {"workspace_id": workspace_id, "job_id": job_id}, PostingJob)
    return job if job is not None else get_posting_job(conn, workspace_id=workspace_id, job_id=job_id)


def count_failed_jobs(conn: psycopg.Connection) -> int:
    """How many posting jobs of every workspace are failed and not retried (the
    ``PostingJobsFailed`` metric's value)."""
    return int(fetch_value(conn, SQL["count_failed"], {}))


def _post_batch(conn: psycopg.Connection, key: dict, hook: PostingHook | None) -> None:
    batch = lock_batch(conn, workspace_id=key["workspace_id"], batch_id=key["batch_id"])
    if batch is None:
        raise NotFound(f"batch {key['batch_id']} not found")
    if batch.status == "open":
        raise PostingError(f"batch {batch.name!r} is open")
    if batch.status == "closed":
        entries = list_entries(conn, workspace_id=key["workspace_id"], batch_id=batch.id)
        total = sum((entry.amount for entry in entries), Decimal("0"))
        if total != 0:
            raise PostingError(f"batch {batch.name!r} does not balance: its {len(entries)} entries sum to {total}")
        if hook is not None:
            hook(conn, batch, entries)
        execute(conn, SQL["post_entries"], key)
        execute(conn, SQL["mark_batch_posted"], key)
    execute(conn, SQL["mark_succeeded"], key)
