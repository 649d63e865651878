"""What operators read and do about one run: its page's data (the run, its schedule, its
history events and the operators' actions on it), cancel a queued run, settle a stuck one
as failed, and the one record of an operator's action (:func:`record_operator_action`,
table ``schedule_run_actions``, migration ``0064``).

"Stuck" is the operations overview's definition (migration ``0039``): a queued run whose
message was accepted longer than its pipeline's re-offer period ago and never started
(``not_started``), a queued run without an accepted message for as long
(``not_published``), or a started run whose lease has ended (``lease_expired``). Every
function runs in the caller's transaction with the run's workspace entered.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from psycopg.types.json import Jsonb

from timekeeper.db.keyset import keyset_rows
from timekeeper.db.rows import fetch_all, fetch_one
from timekeeper.db.sql import load_queries
from timekeeper.schedules import settlement

SQL = load_queries("timekeeper.schedules", "run_ops.sql")

#: The outcome code of a run an operator settled as failed / cancelled.
SETTLED_BY_OPERATOR = "settled_by_operator"
CANCELLED = "cancelled"


class RunActionRefused(Exception):  # noqa: N818 - the API's 409, not an internal error
    """An action that does not apply to the run now: ``code`` is ``not_queued`` (cancel of a
    run that is not queued) or ``not_stuck`` (settle of a run that is not stuck)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class RunAction:
    """An operator's action on a run: ``action`` (retry, cancel, fail), ``actor``, ``reason``,
    ``detail`` (e.g. the retry's new run id) and ``at`` (aware UTC)."""

    id: int
    action: str
    actor: str
    reason: str
    detail: dict[str, Any]
    at: datetime


@dataclass(frozen=True)
class SupersededAttempt:
    """An attempt of a run that another superseded (table ``schedule_run_attempts``):
    ``attempt`` (its number), ``receive_count`` (the receive of the message that started it;
    None before it was kept), ``started_at`` and ``ended_at`` (aware UTC), ``ended``
    (``retried``: it failed and gave its lease back for a retry; ``taken_over``: its lease
    ran out without an outcome and a later receive took the run over) and ``error`` (a
    retried attempt's)."""

    attempt: int
    receive_count: int | None
    started_at: datetime | None
    ended_at: datetime
    ended: str
    error: str | None


@dataclass(frozen=True)
class RunEvent:
    """An entry of the run's schedule history that names the run."""

    id: int
    kind: str
    actor: str
    reason: str | None
    detail: dict[str, Any] | None
    at: datetime


def run_workspace(conn: Any, run_id: UUID) -> UUID | None:
    """The workspace of the run ``run_id`` of any workspace (staff only: the narrow
    function of migration ``0064``), or None when no run has that id."""
    row = conn.execute(SQL["run_workspace"], {"run_id": run_id}).fetchone()
    return row["workspace_id"] if row else None


def get_run(conn: Any, *, workspace_id: UUID, run_id: UUID) -> dict[str, Any] | None:
    """The run ``run_id`` of ``workspace_id`` with its schedule's name, zone and status
    (``schedule_*``), its ``superseded`` attempts (list of :class:`SupersededAttempt`, in
    number order; the row holds the current one), its ``events`` (list of :class:`RunEvent`) and ``actions`` (list of
    :class:`RunAction`), and ``retry_of`` (the operator's retry that made it: a dict with
    ``run_id`` of the retried run, ``actor``, ``reason``, ``at``; None when it is no retry);
    None when the workspace has no such run."""
    row = conn.execute(SQL["run"], {"run_id": run_id, "workspace_id": workspace_id}).fetchone()
    if row is None:
        return None
    run = dict(row)
    run["superseded"] = fetch_all(conn, SQL["run_attempts"], {"run_id": run_id}, SupersededAttempt)
    run["events"] = fetch_all(conn, SQL["run_events"], {"run_id": run_id}, RunEvent)
    run["actions"] = fetch_all(conn, SQL["run_actions"], {"run_id": run_id}, RunAction)
    retry = conn.execute(SQL["retry_of"], {"run_id": str(run_id), "workspace_id": workspace_id,
                                           "schedule_id": run["schedule_id"]}).fetchone()
    run["retry_of"] = dict(retry) if retry else None
    return run


@dataclass(frozen=True)
class ListedRun:
    """A run as a listing of a workspace's runs by state shows it: its schedule by name and
    zone (``timezone``, IANA), ``occurrence_at`` / ``queued_at`` / ``finished_at`` aware
    UTC, ``occurrence_local`` the wall time in that zone, and ``retried_as`` the run an
    operator's Retry now made of it (the latest; None: never retried)."""

    id: UUID
    schedule_id: UUID
    schedule_name: str
    timezone: str | None
    state: str
    trigger: str
    requested_by: str | None
    occurrence_at: datetime
    occurrence_local: datetime
    attempts: int
    outcome_code: str | None
    error: str | None
    queued_at: datetime
    finished_at: datetime | None
    retried_as: UUID | None


def runs_by_state(conn: Any, *, workspace_id: UUID, state: str, since: datetime | None = None,
                  after: tuple[datetime, UUID] | None = None, limit: int = 50) -> list[ListedRun]:
    """At most ``limit`` runs of ``workspace_id`` (the workspace entered on ``conn``) in
    ``state``, requested (``queued_at``) at or after ``since`` (aware UTC; None: any), newest
    first, after the keyset ``after`` (``(queued_at, id)`` of the previous page's last run).
    Raises ``ValueError`` for a ``limit`` below 1."""
    return keyset_rows(conn, ListedRun, select=SQL["runs_by_state_from"], where=SQL["runs_by_state_where"],
                       params={"workspace_id": workspace_id, "state": state, "since": since}, after=after,
                       limit=limit, key=("r.queued_at", "r.id"), newest_first=True)


def retries_of(conn: Any, run_ids: list[UUID]) -> dict[UUID, UUID]:
    """Of ``run_ids`` (runs of the workspace entered on ``conn``), those an operator's Retry
    now made: new run id -> the run it retried (ids of other workspaces find nothing)."""
    if not run_ids:
        return {}
    rows = conn.execute(SQL["retries_of"], {"ids": [str(i) for i in run_ids]}).fetchall()
    return {row["run_id"]: row["retry_of"] for row in rows}


#: The most runs :func:`run_labels` names at once (a dead-letter read's limit).
MAX_LABELS = 50


def run_labels(conn: Any, run_ids: list[UUID]) -> dict[UUID, dict[str, Any]]:
    """What names each of ``run_ids`` (runs of any workspace; staff only: the narrow function
    of migration ``0083``) for people, in one statement: run id -> ``id``, ``schedule_id``,
    ``workspace_id``, ``state``, ``occurrence_at`` (aware UTC), ``occurrence_local`` (naive,
    in ``timezone``, the schedule's zone), ``schedule_name`` and ``in_directory`` (whether
    its workspace is in the directory). Ids of no run are left out; at most
    :data:`MAX_LABELS` ids (raises ``ValueError`` for more)."""
    if len(run_ids) > MAX_LABELS:
        raise ValueError(f"at most {MAX_LABELS} runs at once")
    if not run_ids:
        return {}
    rows = conn.execute(SQL["run_labels"], {"run_ids": [str(r) for r in run_ids]}).fetchall()
    return {row["id"]: dict(row) for row in rows}


#: The run row's fields :func:`stuck_why` reads.
STUCK_FIELDS = ("state", "published_at", "offered_at", "queued_at", "lease_until")


def stuck_why(run: dict[str, Any], *, reoffer_after: timedelta, now: datetime) -> str | None:
    """Why the run row ``run`` (state, published_at, offered_at, queued_at, lease_until) is
    stuck at ``now`` (``not_started``, ``not_published``, ``lease_expired``), or None."""
    before = now - reoffer_after
    if run["state"] == "queued" and run["published_at"] is not None:
        return "not_started" if run["published_at"] < before else None
    if run["state"] == "queued":
        return "not_published" if (run["offered_at"] or run["queued_at"]) < before else None
    if run["state"] == "running" and run["lease_until"] is not None and run["lease_until"] < now:
        return "lease_expired"
    return None


def record_operator_action(conn: Any, *, run: dict[str, Any], action: str, actor: str, reason: str,
                           detail: dict[str, Any], now: datetime) -> RunAction:
    """Record an operator's ``action`` (retry, cancel, fail; ``redriven`` / ``dead_letter_deleted``:
    staff moved the run's dead-letter message back to its queue or deleted it) on ``run`` (a row with id,
    schedule_id, workspace_id) by ``actor`` with ``reason`` at ``now``: the one writer of
    ``schedule_run_actions``."""
    return fetch_one(conn, SQL["record_run_action"], {
        "run_id": run["id"], "schedule_id": run["schedule_id"], "workspace_id": run["workspace_id"],
        "action": action, "actor": actor, "reason": reason, "detail": Jsonb(detail), "at": now}, RunAction)


def locked_run(conn: Any, *, workspace_id: UUID, run_id: UUID) -> dict[str, Any] | None:
    """The run's row locked for an action (None when the workspace has no such run)."""
    row = conn.execute(SQL["run_for_update"], {"run_id": run_id, "workspace_id": workspace_id}).fetchone()
    return dict(row) if row else None


def _earlier(conn: Any, run_id: UUID, action: str, key: str | None) -> RunAction | None:
    """The action ``action`` recorded on the run under the Idempotency-Key ``key`` (None: none, or no key)."""
    if key is None:
        return None
    return fetch_one(conn, SQL["keyed_run_action"], {"run_id": run_id, "action": action, "key": key}, RunAction)


def cancel_run(conn: Any, *, workspace_id: UUID, run_id: UUID, actor: str, reason: str, now: datetime,
               key: str | None = None) -> RunAction | None:
    """Cancel the queued run ``run_id``: settled as ``skipped`` with outcome ``cancelled``
    (the streak unchanged) and the action recorded (with ``key``, the request's scoped
    Idempotency-Key: a repeat answers the recorded action). None when the workspace has no
    such run; raises :class:`RunActionRefused` ``not_queued``."""
    run = locked_run(conn, workspace_id=workspace_id, run_id=run_id)
    if run is None:
        return None
    earlier = _earlier(conn, run_id, "cancel", key)
    if earlier is not None:
        return earlier
    if conn.execute(SQL["cancel_run"], {"run_id": run_id, "now": now}).fetchone() is None:
        raise RunActionRefused("not_queued", f"the run is {run['state']}: only a queued run can be cancelled")
    return record_operator_action(conn, run=run, action="cancel", actor=actor, reason=reason,
                                  detail={"state_before": run["state"], "key": key}, now=now)


def fail_stuck_run(conn: Any, *, workspace_id: UUID, run_id: UUID, actor: str, reason: str, now: datetime,
                   reoffer_after: timedelta, failure_threshold: int, key: str | None = None) -> RunAction | None:
    """Settle the stuck run ``run_id`` as ``failed`` (outcome ``settled_by_operator``, the
    reason as its error; a scheduled run counts in the schedule's streak as any failure)
    and record the action (``key`` as for :func:`cancel_run`). None when the workspace has
    no such run; raises :class:`RunActionRefused` ``not_stuck`` (see the module docstring)."""
    run = locked_run(conn, workspace_id=workspace_id, run_id=run_id)
    if run is None:
        return None
    earlier = _earlier(conn, run_id, "fail", key)
    if earlier is not None:
        return earlier
    why = stuck_why(run, reoffer_after=reoffer_after, now=now)
    if why is None:
        raise RunActionRefused("not_stuck", f"the run is {run['state']} and not stuck: only a run that waits "
                               "too long or whose execution died can be settled as failed")
    settlement.settle_run(conn, run_id=run_id, state="failed", outcome_code=SETTLED_BY_OPERATOR, now=now,
                          failure_threshold=failure_threshold, error=f"settled by an operator: {reason}",
                          actor=actor)
    return record_operator_action(conn, run=run, action="fail", actor=actor, reason=reason,
                                  detail={"why": why, "state_before": run["state"], "key": key}, now=now)
