"""Staff actions on one snapshot version: cancel a waiting request, finalize a published one.

Both run in the caller's transaction with the run's workspace entered (the API's walled
login: migration ``0067_snapshot_staff_actions.sql`` gives it one function per action,
bound to the entered workspace). Each records who acted, why and when on the run's row,
as a request records its requester and reason, and passes through
:func:`_record_staff_action`, the one place a staff action on a snapshot is reported.

* Cancel: a ``planned`` or ``queued`` run becomes ``cancelled`` (terminal, not active: the
  period may be requested again; not ``skipped``: the period stays overdue until a version
  publishes). A queued run's job id is cleared, so its job message, when it arrives, finds
  another job and is dropped. A ``running`` or ``retry_wait`` run is refused
  ``run_in_progress`` (its attempt owns it), a finished one ``not_cancellable``.
* Finalize: a ``published`` version gets the ``finalized`` protection; when it is the
  period's current version a re-run is then refused ``protected_history``, as for captured
  history. An unpublished run is refused ``not_published``, a finalized one
  ``already_finalized``.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

import psycopg

from timekeeper.observability import logger
from timekeeper.snapshots.ledger import SQL
from timekeeper.snapshots.run import SnapshotRun, fetch_runs

#: What a staff action may be refused for (the API's ``code``).
STAFF_REFUSALS = ("run_in_progress", "not_cancellable", "not_published", "already_finalized")


class RunNotFound(Exception):
    """No run with that id in the entered workspace."""


class StaffActionRefused(Exception):
    """A staff action the run's state does not allow: ``reason`` is one of
    :data:`STAFF_REFUSALS`; the message says why in words."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def _clean_reason(reason: str) -> str:
    text = (reason or "").strip()
    if not text:
        raise ValueError("a reason is required")
    return text


def locked_run(conn: psycopg.Connection, workspace_id: UUID, run_id: UUID) -> SnapshotRun:
    """``workspace_id``'s run ``run_id``, locked for update (caller's transaction); raises
    :class:`RunNotFound` when the entered workspace has no such run."""
    found = fetch_runs(conn, SQL["run_in_workspace"], {"run_id": run_id, "workspace_id": workspace_id})
    if not found:
        raise RunNotFound(f"no snapshot run {run_id}")
    return found[0]


def _record_staff_action(conn: psycopg.Connection, *, action: str, run: SnapshotRun, actor: str, reason: str,
                         now: datetime) -> None:
    """Report one staff action (``action``: ``cancel`` or ``finalize``) on ``run`` by
    ``actor`` with ``reason`` at ``now`` (aware UTC), in the caller's transaction. The
    row itself keeps who, why and when; this is the one place that also tells the
    workspace's audit trail (today: the structured log)."""
    del conn  # the workspace's audit trail is written here, in the action's transaction
    logger.info("snapshot staff action", extra={
        "action": action, "run_id": str(run.id), "workspace_id": str(run.workspace_id), "owner": run.owner,
        "snapshot_type": run.snapshot_type, "period": f"{run.period:%Y-%m}", "version": run.version,
        "actor": actor, "reason": reason, "at": now.isoformat()})


def cancel_run(conn: psycopg.Connection, *, workspace_id: UUID, run_id: UUID, actor: str, reason: str,
               now: datetime) -> SnapshotRun:
    """Cancel ``workspace_id``'s run ``run_id`` (``planned`` or ``queued``) as ``actor``
    with ``reason`` (stripped) at ``now`` (aware UTC); returns the cancelled run. The
    workspace must be entered. Raises :class:`RunNotFound`, :class:`StaffActionRefused`
    (``run_in_progress``, ``not_cancellable``) and ``ValueError`` for a blank reason. Its
    own transaction (a savepoint in the caller's)."""
    text = _clean_reason(reason)
    with conn.transaction():
        run = locked_run(conn, workspace_id, run_id)
        if run.state in ("running", "retry_wait"):
            raise StaffActionRefused("run_in_progress", f"version {run.version} is {run.state.replace('_', ' ')}: "
                                     "its attempt owns it; wait for it to finish")
        if run.state not in ("planned", "queued"):
            raise StaffActionRefused("not_cancellable", f"version {run.version} is {run.state}: only a planned "
                                     "or queued run can be cancelled")
        [cancelled] = fetch_runs(conn, SQL["cancel_run"], {"run_id": run_id, "actor": actor, "reason": text,
                                                           "now": now})
        _record_staff_action(conn, action="cancel", run=cancelled, actor=actor, reason=text, now=now)
    return cancelled


def finalize_run(conn: psycopg.Connection, *, workspace_id: UUID, run_id: UUID, actor: str, reason: str,
                 now: datetime) -> SnapshotRun:
    """Finalize ``workspace_id``'s published version ``run_id`` as ``actor`` with ``reason``
    (stripped) at ``now`` (aware UTC); returns the finalized version. The workspace must be
    entered. Raises :class:`RunNotFound`, :class:`StaffActionRefused` (``not_published``,
    ``already_finalized``) and ``ValueError`` for a blank reason. Its own transaction."""
    text = _clean_reason(reason)
    with conn.transaction():
        run = locked_run(conn, workspace_id, run_id)
        if run.state != "published":
            raise StaffActionRefused("not_published", f"version {run.version} is {run.state.replace('_', ' ')}: "
                                     "only a published version can be finalized")
        if run.protection == "finalized":
            raise StaffActionRefused("already_finalized", f"version {run.version} is finalized already")
        [finalized] = fetch_runs(conn, SQL["finalize_run"], {"run_id": run_id, "actor": actor, "reason": text,
                                                             "now": now})
        _record_staff_action(conn, action="finalize", run=finalized, actor=actor, reason=text, now=now)
    return finalized
