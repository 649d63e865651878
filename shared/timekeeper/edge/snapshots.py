"""The monthly-snapshot pipeline (:data:`timekeeper.topology.SNAPSHOTS`): the planner, the
dispatcher and the run job reading the job queue."""

from __future__ import annotations

import os
from typing import Any

import psycopg

from timekeeper import clock
from timekeeper import observability as obs
from timekeeper.db.retention import expire_snapshot_personal_data, prune_failed_snapshot_rows
from timekeeper.edge import adapters, batch
from timekeeper.edge.registries import snapshot_types
from timekeeper.faults import crash_point
from timekeeper.observability import logger, metrics
from timekeeper.settings import SNAPSHOT_NUDGE_FUNCTION_VARIABLE
from timekeeper.snapshots.jobs import JobMessage, JobStatus, reconcile_lost_jobs, send_jobs
from timekeeper.snapshots.jobs import run_job as run_snapshot_job
from timekeeper.snapshots.ledger import admit as admit_snapshots
from timekeeper.snapshots.ledger import plan as plan_snapshots
from timekeeper.snapshots.run import SnapshotRun
from timekeeper.topology import HISTORY, SNAPSHOTS


def run_planner() -> dict[str, Any]:
    """One planner pass at the clock's ``now`` (commits), the SnapshotOverdue metric, then a
    nudge of the dispatcher (an asynchronous invoke; skipped when none is configured).
    Returns the pass summary (counts, overdue periods)."""
    conn, now = adapters.database().get(), clock.now()
    with conn.transaction():
        result = plan_snapshots(conn, snapshot_types(), now=now, horizon_months=SNAPSHOTS.horizon_months)
    metrics.add_metric(name=obs.SNAPSHOTS_PLANNED, unit="Count", value=result.planned)
    metrics.add_metric(name=obs.SNAPSHOT_OVERDUE, unit="Count", value=len(result.overdue))
    nudge = os.environ.get(SNAPSHOT_NUDGE_FUNCTION_VARIABLE)
    if nudge and result.planned:
        adapters.lambda_client().invoke(FunctionName=nudge, InvocationType="Event", Payload=b"{}")
    summary = {"planned": result.planned, "skipped": result.skipped, "overdue": len(result.overdue),
               "overdue_periods": [f"{w}/{o}/{t}/{p:%Y-%m}" for w, o, t, p in result.overdue[:20]]}
    if result.overdue:
        logger.warning("snapshot periods overdue", extra=summary)
    return summary


def report_failures(runs: list[SnapshotRun]) -> int:
    """Count the finally ``failed`` runs among ``runs`` (settled and committed by either
    path: the run job's receive or the dispatcher's reconciliation of lost jobs) in the
    ``SnapshotFailed`` metric, with a warning naming each run and its failure code; runs in
    another state (``retry_wait``, ``published``) are not counted. Returns the count."""
    failed = [run for run in runs if run.state == "failed"]
    if failed:
        metrics.add_metric(name=obs.SNAPSHOT_FAILED, unit="Count", value=len(failed))
        logger.warning("snapshot runs failed", extra={"failed_runs": [
            {"run_id": str(run.id), "workspace_id": str(run.workspace_id), "snapshot_type": run.snapshot_type,
             "period": f"{run.period:%Y-%m}", "failure_code": run.failure_code} for run in failed]})
    return len(failed)


def run_dispatcher() -> dict[str, Any]:
    """One snapshot dispatcher pass per owner of an enabled type: settle lost jobs, admit
    under the cap and reoffer stale offers (one committed transaction under the owner's
    lock; a lost job's run that fails finally counts in ``SnapshotFailed`` as the run
    job's failures do: :func:`report_failures`), then send the jobs; then history
    retention of the generated rows of failed snapshot runs
    (:func:`timekeeper.db.retention.prune_failed_snapshot_rows`) and of the personal data
    in snapshot rows past their type's retention
    (:func:`timekeeper.db.retention.expire_snapshot_personal_data`), bounded per pass
    (the ``HistoryPruned`` metric counts deleted rows). Returns counts (``pruned_rows`` and
    ``pseudonymised_rows`` among them)."""
    conn, now = adapters.database().get(), clock.now()
    owners = sorted({t.owner for t in snapshot_types().enabled()})
    admitted: list[JobMessage] = []
    lost: list[SnapshotRun] = []
    for owner in owners:
        with conn.transaction():
            lost += reconcile_lost_jobs(conn, owner=owner, now=now, after=SNAPSHOTS.job_lost_after)
            admitted += [JobMessage(run_id=a.run_id, workspace_id=a.workspace_id, job_id=a.job_id)
                         for a in admit_snapshots(conn, owner=owner, now=now, cap=SNAPSHOTS.admission_cap,
                                                  backfill_lane=SNAPSHOTS.backfill_lane,
                                                  reoffer_after=SNAPSHOTS.reoffer_after)]
    report_failures(lost)
    if admitted:
        crash_point("snapshots.after_admit_commit")
    sent = send_jobs(conn, adapters.snapshot_job_publisher(), admitted, now=now) if admitted else 0
    pruned = prune_failed_snapshot_rows(conn, now=now, days=HISTORY.failed_snapshot_rows_days,
                                        max_batches=HISTORY.max_batches_per_pass,
                                        time_budget_s=HISTORY.time_budget_s)
    personal = expire_snapshot_personal_data(conn, now=now, retention_days=personal_data_retention(),
                                             batch_rows=HISTORY.batch_rows, max_batches=HISTORY.max_batches_per_pass,
                                             time_budget_s=HISTORY.time_budget_s)
    for kind, n in personal.rows.items():
        pruned.add(kind, n)
    pruned.more = pruned.more or personal.more
    if pruned.summary() is not None:
        logger.info("history pruned", extra={"pipeline": "snapshots", "retention": pruned.summary()})
    metrics.add_metric(name=obs.SNAPSHOTS_ADMITTED, unit="Count", value=len(admitted))
    metrics.add_metric(name=obs.HISTORY_PRUNED, unit="Count", value=pruned.total)
    metrics.add_metric(name=obs.SNAPSHOT_DISPATCHER_HEARTBEAT, unit="Count", value=1)
    return {"owners": owners, "admitted": len(admitted), "sent": sent, "lost_jobs": len(lost),
            "pruned_rows": pruned.total, "pseudonymised_rows": pruned.rows.get("snapshot_rows_pseudonymised", 0)}


def personal_data_retention() -> dict[str, int]:
    """The enabled snapshot types' personal-data retention: row table -> days
    (``SnapshotType.personal_data``; types whose rows name no one are left out)."""
    return {t.rows.table: t.personal_data.retention_days for t in snapshot_types().enabled()
            if t.personal_data is not None and t.rows is not None}


def run_jobs(event: dict[str, Any], context: Any) -> dict[str, Any]:
    """Run the job messages of an SQS batch (the event source gives one at a time) through
    :func:`batch.consume`; return the partial batch response. A malformed message fails
    only its own item (it reaches the DLQ after ``max_receive_count``); a job that must
    hand over sends its message again and is acknowledged; an unexpected fault before the
    last receive fails its item (the queue redelivers it); on the last receive it is
    recorded as a retryable failure. A lost database connection fails its item before the
    last receive and is acknowledged on it: the dispatcher's lost-job check takes the run
    over (nothing could be recorded)."""
    remaining = getattr(context, "get_remaining_time_in_millis", None)

    def time_left_s() -> float:
        return remaining() / 1000 if remaining else float("inf")

    def run_one(item: batch.Received[JobMessage]) -> bool:
        message = item.message
        try:
            result = run_snapshot_job(adapters.database().get(), snapshot_types(), message, now=clock.now,
                                      receive_count=item.receive_count,
                                      max_receives=SNAPSHOTS.consumer.max_receive_count,
                                      time_left_s=time_left_s, handover_margin_s=SNAPSHOTS.handover_margin_s)
        except psycopg.OperationalError as error:
            # The database was lost (a cut, a restart, a failover): nothing of this receive
            # could be recorded. Before the final receive the queue redelivers the message; on
            # it, the message is acknowledged rather than left in the dead-letter queue, since
            # the run's one recovery path is the snapshot dispatcher's lost-job check (the job
            # stops beating; after job_lost_after the run is a retryable failure and admitted
            # again), which holds whatever became of the message.
            final = item.receive_count >= SNAPSHOTS.consumer.max_receive_count
            logger.warning("snapshot job lost its database; " + (
                "acknowledged on the final receive: the lost-job check takes the run over" if final
                else "the queue redelivers it"), extra={"run_id": str(message.run_id),
                                                         "error_type": type(error).__name__})
            return final
        except Exception as error:  # noqa: BLE001 - the queue redelivers it; logged by type only
            logger.warning("snapshot job receive failed; the queue redelivers it",
                           extra={"run_id": str(message.run_id), "error_type": type(error).__name__})
            return False
        if result.status is JobStatus.HANDED_OVER:
            send_jobs(adapters.database().get(), adapters.snapshot_job_publisher(), [message], now=clock.now())
        elif result.status is JobStatus.PUBLISHED:
            metrics.add_metric(name=obs.SNAPSHOT_PUBLISHED, unit="Count", value=1)
        elif result.status is JobStatus.FAILED and result.run is not None:
            report_failures([result.run])
        logger.info("snapshot job", extra={"run_id": str(message.run_id), "status": result.status.value})
        return True

    return batch.consume(event, JobMessage, batch.each(run_one), what="snapshot job message")
