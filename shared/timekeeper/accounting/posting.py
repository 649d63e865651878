"""Posting jobs: post a closed batch's ledger entries (DESIGN section 3, seed 000 hop 5).

``batch.roll`` and ``batch.auto_close`` call :func:`request_posting` inside the run's
transaction (one job per batch, idempotent) and register an after-commit callback that
calls :func:`run_posting_job`. That function owns its transactions: it marks the job
running, then posts (entries ``posted``/``posted_at``, batch ``posted``) and marks the
job succeeded in one transaction; any failure rolls the posting back and marks the job
failed with the error, leaving the batch closed and unposted, visible by the job's
status (seed 000 hop 5 ``left_inconsistent``). Calling it again retries a failed job.

Posting rule: a batch posts only when its entries sum to zero (double entry); an
optional ``hook`` (``PostingHook``) runs inside the posting transaction before the rows
are marked posted, e.g. to hand the entries to a general ledger; raising fails the job.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from decimal import Decimal
from uuid import UUID

import psycopg

from timekeeper.accounting._rows import execute, fetch_one, fetch_value, utc_now
from timekeeper.accounting.books import get_batch, list_entries, lock_batch
from timekeeper.accounting.models import Batch, BatchNotClosed, LedgerEntry, NotFound, PostingError, PostingJob
from timekeeper.db import load_queries, set_tenant

#: ``hook(conn, batch, entries)`` runs in the posting transaction; raising fails the job.
PostingHook = Callable[[psycopg.Connection, Batch, list[LedgerEntry]], None]

#: Longest error text stored on a failed job.
MAX_ERROR_CHARS = 2000


def _q(name: str) -> str:
    return load_queries("timekeeper.accounting", "posting.sql")[name]


def request_posting(conn: psycopg.Connection, workspace_id: UUID, batch_id: UUID, run_id: UUID | None, *,
                    now: datetime | None = None) -> UUID:
    """Return the id of the batch's posting job, inserting it (``pending``) if absent (seed 000 hop 5).

    Runs inside the caller's transaction and never commits. Idempotent: a second request
    for the same batch returns the existing job whatever its status. ``now`` (aware UTC)
    stamps ``created_at``. Raises :class:`NotFound` when the batch is not in
    ``workspace_id`` and :class:`BatchNotClosed` when it is still open.
    """
    batch = get_batch(conn, workspace_id=workspace_id, batch_id=batch_id)
    if batch.status == "open":
        raise BatchNotClosed(f"batch {batch.name!r} is open; close it before posting")
    params = {"workspace_id": workspace_id, "batch_id": batch_id, "run_id": run_id, "now": utc_now(now)}
    job_id = fetch_value(conn, _q("insert_job"), params)
    if job_id is None:
        job_id = fetch_value(conn, _q("job_for_batch"), params)
    return job_id


def get_posting_job(conn: psycopg.Connection, *, workspace_id: UUID, job_id: UUID) -> PostingJob:
    """Return the posting job; raises :class:`NotFound`."""
    job = fetch_one(conn, _q("get_job"), {"workspace_id": workspace_id, "job_id": job_id}, PostingJob)
    if job is None:
        raise NotFound(f"posting job {job_id} not found")
    return job


def posting_job_for_batch(conn: psycopg.Connection, *, workspace_id: UUID, batch_id: UUID) -> PostingJob | None:
    """Return the batch's posting job, or None when none was requested."""
    return fetch_one(conn, _q("job_for_batch"), {"workspace_id": workspace_id, "batch_id": batch_id}, PostingJob)


def _describe(error: BaseException) -> str:
    text = f"{type(error).__name__}: {error}"
    return text[:MAX_ERROR_CHARS]


def run_posting_job(conn: psycopg.Connection, job_id: UUID, now: datetime, *, workspace_id: UUID | None = None,
                    hook: PostingHook | None = None) -> str:
    """Run (or retry) a posting job in its own transactions; return its final status (seed 000 hop 5).

    ``conn`` must be idle (no transaction in progress): this runs after the handler's
    transaction committed (``ctx.after_commit``) and commits its own work. ``now`` is an
    aware UTC instant. ``workspace_id``, when given, scopes the job lookup (the job is
    invisible from another workspace); otherwise the job's own workspace is used.

    Returns ``"succeeded"`` (also when it had succeeded before, or the batch was already
    posted) or ``"failed"`` (the error is stored on the job; the batch stays closed and
    unposted). Raises :class:`NotFound` for an unknown job, ``RuntimeError`` when ``conn``
    is inside a transaction, and database errors only when even recording the failure fails.
    """
    if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        raise RuntimeError("run_posting_job needs an idle connection: it commits its own transactions")
    now = utc_now(now)
    with conn.transaction():
        ws = workspace_id or fetch_value(conn, _q("find_job_workspace"), {"job_id": job_id})
        job = None
        if ws is not None:
            set_tenant(conn, ws)
            job = fetch_one(conn, _q("lock_job"), {"workspace_id": ws, "job_id": job_id}, PostingJob)
        if job is None:
            raise NotFound(f"posting job {job_id} not found")
        if job.status == "succeeded":
            return "succeeded"
        key = {"workspace_id": ws, "job_id": job_id, "batch_id": job.batch_id, "now": now}
        attempt = fetch_value(conn, _q("mark_running"), key)
    try:
        with conn.transaction():
            set_tenant(conn, ws)
            _post_batch(conn, key, hook)
        return "succeeded"
    except Exception as error:  # any failure: record it on the job, leave the batch closed
        with conn.transaction():
            set_tenant(conn, ws)
            execute(conn, _q("mark_failed"), {**key, "error": _describe(error), "attempt": attempt})
        return "failed"


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
        execute(conn, _q("post_entries"), key)
        execute(conn, _q("mark_batch_posted"), key)
    execute(conn, _q("mark_succeeded"), key)
