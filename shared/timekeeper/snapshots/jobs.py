"""The run job: start or resume an attempt, generate in chunks, validate and publish.

One job message (``{run_id, workspace_id, job_id}``) drives one attempt of a run. The
job may be received several times (a crash, a hand-over before the function's time
limit): every receive resumes from the committed cursor. Each step is its own
transaction, fenced by the job id (a message of an older job matches nothing):

1. start: ``queued -> running`` (the attempt is counted once) or resume ``running``;
2. the generation mode is chosen at the first start and retained;
3. each chunk: the generator writes its rows after the cursor and the new cursor is
   committed in the same transaction, so a crash between chunks loses nothing and repeats
   nothing;
4. finalize: validate and publish in one transaction: the previous current version stays
   current until that commit (a crash inside publish leaves it current).

Failures: :class:`~timekeeper.snapshots.registry.ValidationFailed` is final at once. Any
other fault is left to the job queue's receives; on the last receive it becomes a
retryable failure of the attempt (the run waits in ``retry_wait`` until ``retry_due_at``,
then admission starts a new attempt), and the fourth retryable failure is final.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

import psycopg
from pydantic import BaseModel, ConfigDict

from timekeeper.db.attempts import AttemptRule, Backoff, Fence, Lease, Lifecycle
from timekeeper.db.outbox import Outbox, Publisher, publish_committed
from timekeeper.faults import crash_point
from timekeeper.observability import logger
from timekeeper.snapshots.ledger import SQL, jsonb
from timekeeper.snapshots.registry import SnapshotRegistry, UnknownSnapshotType, ValidationFailed
from timekeeper.snapshots.run import SnapshotRun, fetch_runs
from timekeeper.topology import SNAPSHOTS

#: The retryable failure that is final.
MAX_RETRYABLE_FAILURES = 4
#: The back-off before the attempt after the n-th retryable failure: the topology's
#: (``SnapshotPipeline.retry_backoff_s``), applied as the runs' is (:mod:`timekeeper.db.attempts`).
RETRY_BACKOFF = Backoff(SNAPSHOTS.retry_backoff_s)
#: The snapshot runs' declaration to the one lifecycle (:mod:`timekeeper.db.attempts`):
#: fenced by the job id (a new one per attempt), leased while the job beats
#: (``heartbeat_at``); a failure has states of its own (``retry_wait`` or ``failed``), so
#: :func:`record_failure` keeps its statements; a failure message is cut to 500 characters.
SNAPSHOT_LIFECYCLE = Lifecycle(name="snapshot_run", table="snapshot_runs", open_states=("queued", "running"),
                               fence=Fence.JOB_ID, lease=Lease.HEARTBEAT, error_message_limit=500)
_DONE = {"done": True}


class JobMessage(BaseModel):
    """The job queue's message body."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: UUID
    workspace_id: UUID
    job_id: UUID


class JobStatus(enum.StrEnum):
    """What a receive of a job did (its value is the word logs carry)."""

    #: The run's version was validated and published.
    PUBLISHED = "published"
    #: The attempt failed finally (a validation failure, an unknown type, the last retry).
    FAILED = "failed"
    #: A retryable failure was recorded: the run waits until its ``retry_due_at``.
    RETRY_WAIT = "retry_wait"
    #: The invocation ran short of time: send the same message again to continue.
    HANDED_OVER = "handed_over"
    #: Another job owns the run, or it is finished: nothing was done.
    STALE = "stale"


@dataclass(frozen=True)
class JobResult:
    """What a receive did (:class:`JobStatus`) and the run as it left it (None when stale)."""

    status: JobStatus
    run: SnapshotRun | None = None


def _job_run_id(job: JobMessage) -> UUID:
    return job.run_id


def send_jobs(conn: psycopg.Connection, publisher: Publisher[JobMessage], jobs: list[JobMessage], *,
              now: datetime) -> int:
    """Send admitted ``jobs`` (their admission committed) to the job queue through the one
    outbox (:mod:`timekeeper.db.outbox`); returns how many the queue accepted.

    A refused job's offer is cleared (``release_jobs``, one statement for the batch, a
    transaction of its own): the next admission pass sends the run a new job at once. An
    accepted job is not recorded: a job that never starts (lost, or the process died
    between the admission's commit and the send) is offered again after the admission's
    ``reoffer_after``, and the job id fences the old one. ``publisher`` reports refusals by
    run id and never raises for one. Raises ``psycopg.Error`` when the release fails."""

    def release(conn: psycopg.Connection, refused: list[JobMessage]) -> None:
        if refused:
            logger.warning("snapshot jobs not sent; offered again by the next pass",
                           extra={"run_ids": sorted(str(j.run_id) for j in refused)})
            conn.execute(SQL["release_jobs"], {"run_ids": [j.run_id for j in refused],
                                                   "job_ids": [j.job_id for j in refused], "now": now})

    sent = publish_committed(conn, publisher, jobs, Outbox(key=_job_run_id, record_refused=release,
                                                           name="snapshot_jobs"))
    return len(sent.accepted)


def retry_backoff(failures: int) -> timedelta:
    """The wait before the attempt after the ``failures``-th retryable failure (1-based):
    :data:`RETRY_BACKOFF`'s step for it."""
    return RETRY_BACKOFF.delay(failures)


def _fenced(conn: psycopg.Connection, message: JobMessage) -> SnapshotRun | None:
    runs = fetch_runs(conn, SQL["lock_run"], {"run_id": message.run_id, "job_id": message.job_id})
    return runs[0] if runs else None


def record_failure(conn: psycopg.Connection, run: SnapshotRun, job_id: UUID, *, code: str, message: str,
                   retryable: bool, now: datetime) -> SnapshotRun | None:
    """Settle the attempt of ``job_id`` failed: final (``retryable`` False, or the fourth
    retryable failure) or ``retry_wait`` with a backoff. Returns the updated run, or None
    when the job no longer owns it. Runs in the caller's transaction."""
    limit = SNAPSHOT_LIFECYCLE.error_message_limit
    params = {"run_id": run.id, "job_id": job_id, "code": code, "message": message[:limit], "now": now}
    if retryable and run.retryable_failures + 1 < MAX_RETRYABLE_FAILURES:
        updated = fetch_runs(conn, SQL["fail_retryable"], {
            **params, "retry_due_at": now + retry_backoff(run.retryable_failures + 1)})
    else:
        if retryable:
            params["code"] = "retries_exhausted"
            params["message"] = f"{MAX_RETRYABLE_FAILURES} retryable failures; the last: {code}: {message}"[:limit]
        updated = fetch_runs(conn, SQL["fail_final"], {**params, "retryable": 1 if retryable else 0})
    return updated[0] if updated else None


def run_job(conn: psycopg.Connection, registry: SnapshotRegistry, message: JobMessage, *,
            now: Callable[[], datetime], receive_count: int, max_receives: int,
            time_left_s: Callable[[], float] = lambda: float("inf"),
            handover_margin_s: float = SNAPSHOTS.handover_margin_s) -> JobResult:
    """Drive one receive of a job (see the module docstring). ``conn`` is an idle
    autocommit connection (the worker login); ``now`` the clock (aware UTC);
    ``time_left_s`` the seconds the invocation has left (fewer than ``handover_margin_s``:
    hand over before the next chunk). Raises on an unexpected fault
    before the last receive (the queue redelivers); never after it."""
    started = fetch_runs(conn, SQL["start_job"], {"run_id": message.run_id, "job_id": message.job_id, "now": now()})
    if not started:
        return JobResult(JobStatus.STALE)
    run = started[0]
    try:
        snapshot_type = registry.get(run.owner, run.snapshot_type)
    except UnknownSnapshotType as refused:
        with conn.transaction():
            failed = record_failure(conn, run, message.job_id, code=refused.reason, message=str(refused),
                                    retryable=False, now=now())
        return JobResult(JobStatus.FAILED, failed)
    generator = snapshot_type.generator
    try:
        if run.generation_mode is None:
            with conn.transaction():
                run = _fenced(conn, message) or run
                mode = generator.choose_mode(conn, run)
                conn.execute(SQL["retain_mode"], {"run_id": run.id, "mode": mode, "now": now()})
        while True:
            if time_left_s() < handover_margin_s:
                return JobResult(JobStatus.HANDED_OVER, run)
            with conn.transaction():
                fenced = _fenced(conn, message)
                if fenced is None:
                    return JobResult(JobStatus.STALE)
                if fenced.cursor == _DONE:
                    run = fenced
                    break
                chunk = generator.generate(conn, fenced, fenced.cursor)
                cursor = _DONE if chunk.next_cursor is None else chunk.next_cursor
                run = fetch_runs(conn, SQL["commit_chunk"], {"run_id": fenced.id, "cursor": jsonb(cursor),
                                                            "rows": chunk.rows, "now": now()})[0]
            crash_point("snapshots.between_chunks")
        with conn.transaction():
            fenced = _fenced(conn, message)
            if fenced is None:
                return JobResult(JobStatus.STALE)
            basis = generator.validate(conn, fenced)
            key = {"owner": fenced.owner, "snapshot_type": fenced.snapshot_type,
                   "workspace_id": fenced.workspace_id, "period": fenced.period, "now": now()}
            conn.execute(SQL["retire_current"], key)
            crash_point("snapshots.inside_publish")
            conn.execute(SQL["publish"], {"run_id": fenced.id, "basis": jsonb(basis), "now": now()})
        published = fetch_runs(conn, SQL["get_run"], {"id": run.id})[0]
        return JobResult(JobStatus.PUBLISHED, published)
    except ValidationFailed as invalid:
        with conn.transaction():
            failed = record_failure(conn, run, message.job_id, code=invalid.code, message=str(invalid),
                                    retryable=False, now=now())
        return JobResult(JobStatus.FAILED if failed else JobStatus.STALE, failed)
    except Exception as error:
        if conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            conn.rollback()
        if not AttemptRule(max_attempts=max_receives).final(receive_count=receive_count):
            raise
        logger.warning("snapshot attempt failed on its last receive",
                       extra={"run_id": str(run.id), "error_type": type(error).__name__})
        with conn.transaction():
            fenced = _fenced(conn, message) or run
            failed = record_failure(conn, fenced, message.job_id, code="generation_error",
                                    message=type(error).__name__, retryable=True, now=now())
        if failed is None:
            return JobResult(JobStatus.STALE)
        return JobResult(JobStatus(failed.state), failed)


def reconcile_lost_jobs(conn: psycopg.Connection, *, owner: str, now: datetime, after: timedelta) -> list[SnapshotRun]:
    """Runs of ``owner`` still ``running`` whose job has not beaten for ``after`` (its
    messages ran out or were lost): each is a retryable failure ``job_lost``. Runs in the
    caller's transaction; returns the settled runs."""
    settled = []
    for run in fetch_runs(conn, SQL["lost_jobs"], {"owner": owner, "now": now, "after": after}):
        updated = record_failure(conn, run, run.job_id, code="job_lost", message="the job stopped without an outcome",
                                 retryable=True, now=now)
        if updated is not None:
            settled.append(updated)
    return settled
