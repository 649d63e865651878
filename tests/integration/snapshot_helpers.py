"""Publishing snapshot versions for the report tests the way production does: a staff
request (backfill, then re-runs) in the ledger, admitted and run by the real run job with
the deployment's registry (:func:`timekeeper.edge.registries.assemble_snapshot_types`)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from uuid import UUID

from timekeeper.edge.registries import assemble_snapshot_types
from timekeeper.snapshots import ledger
from timekeeper.snapshots.jobs import JobMessage, run_job

#: The staff clock of the requests: every month before March 2027 has ended.
STAFF_NOW = datetime(2027, 3, 1, 12, tzinfo=UTC)


def backdate(conn, workspace_id: UUID, created: datetime = datetime(2026, 11, 15, tzinfo=UTC)) -> None:
    """Make the workspace older, so that its earlier months may be snapshotted."""
    conn.execute("UPDATE workspaces SET created_at = %s WHERE id = %s", (created, workspace_id))


def request(conn, workspace_id: UUID, period: date, *, snapshot_type: str = "ar_aging",
            now: datetime = STAFF_NOW) -> ledger.SnapshotRun:
    """Record a staff request for the period: a backfill when it has no runs, else a re-run."""
    registry = assemble_snapshot_types("development")
    has_runs = conn.execute("SELECT 1 FROM snapshot_runs WHERE workspace_id = %s AND snapshot_type = %s "
                            "AND period = %s", (workspace_id, snapshot_type, period)).fetchone() is not None
    return ledger.request_run(conn, snapshot_type=registry.get("platform", snapshot_type), workspace_id=workspace_id,
                              period=period, mode="manual" if has_runs else "backfill", reason="report test",
                              requested_by="staff-1", now=now)


def drain(conn, *, now: datetime = STAFF_NOW) -> None:
    """Admit and run every waiting snapshot run to its end."""
    registry = assemble_snapshot_types("development")
    for _ in range(100):
        with conn.transaction():
            admitted = ledger.admit(conn, owner="platform", now=now)
        if not admitted:
            return
        for job in admitted:
            run_job(conn, registry, JobMessage(run_id=job.run_id, workspace_id=job.workspace_id, job_id=job.job_id),
                    now=lambda: now, receive_count=1, max_receives=3)
    raise AssertionError("the runs did not drain")


def publish(conn, workspace_id: UUID, period: date, *, snapshot_type: str = "ar_aging",
            now: datetime = STAFF_NOW) -> ledger.SnapshotRun:
    """Request and run the period's next version; returns it, published."""
    run = request(conn, workspace_id, period, snapshot_type=snapshot_type, now=now)
    drain(conn, now=now)
    (published,) = ledger.fetch_runs(conn, "SELECT * FROM snapshot_runs WHERE id = %(id)s", {"id": run.id})
    assert published.state == "published", (published.state, published.failure_code, published.failure_message)
    return published
