"""Staff snapshot requests in the workspace's audit log.

A staff re-run or backfill of one month (``staff.snapshot_requested``, subject the new
``snapshot_run``) and a range request's months in one workspace
(``staff.snapshot_range_requested``, subject the ``snapshot_range``: the request group)
are recorded in the request's own transaction, as staff cancels and finalizations are
(:meth:`timekeeper.api.scope.StaffScope.act_on_run`): who (the actor), why (the reason),
the type (``owner/name``), the month(s) and the kind (``manual``: a re-run, ``backfill``).
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import psycopg

from timekeeper.platform import audit
from timekeeper.snapshots import ledger, staff


def record_request(conn: psycopg.Connection, run: ledger.SnapshotRun, *, actor: str, now: datetime) -> int:
    """Record staff's request of one month (``run``: the version it planned) in the run's
    workspace, in the caller's transaction (that workspace entered). Returns the event's id."""
    return audit.record_event(
        conn, workspace_id=run.workspace_id, actor=actor, kind="staff.snapshot_requested",
        subject_type="snapshot_run", subject_id=run.id, before=None,
        after={"snapshot_type": f"{run.owner}/{run.snapshot_type}", "period": f"{run.period:%Y-%m}",
               "version": run.version, "mode": run.mode}, reason=run.reason, now=now)


def record_range(conn: psycopg.Connection, workspace_id: UUID, items: list[staff.RangeItem], *, group: UUID | None,
                 mode: str, reason: str, label: str, actor: str, now: datetime) -> int:
    """Record the months a range request (``group``) planned in ``workspace_id`` (``items``,
    at least one, by month), in that workspace's transaction, named by the type's ``label``
    and the months (``"Receivables aging 2026-04 to 2026-08"``). Returns the event's id."""
    first, last = f"{items[0].period:%Y-%m}", f"{items[-1].period:%Y-%m}"
    months = first if first == last else f"{first} to {last}"
    return audit.record_event(
        conn, workspace_id=workspace_id, actor=actor, kind="staff.snapshot_range_requested",
        subject_type="snapshot_range", subject_id=group, before=None,
        after={"name": f"{label} {months}", "snapshot_type": f"{items[0].owner}/{items[0].snapshot_type}",
               "months": months,
               "planned": len(items), "mode": mode}, reason=reason.strip(), now=now)
