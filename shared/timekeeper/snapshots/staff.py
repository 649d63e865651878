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
* Ranges: one request over a month range of one or several workspaces plans each month
  through the ledger's own request (:func:`plan_range`); a preview is the same planning
  rolled back, so what a preview shows is what the request plans (but for what changes
  between the two). Admission then decides as for any request (the backfill lane).
* Finalize: a ``published`` version gets the ``finalized`` protection; when it is the
  period's current version a re-run is then refused ``protected_history``, as for captured
  history. An unpublished run is refused ``not_published``, a finalized one
  ``already_finalized``.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import date, datetime
from uuid import UUID

import psycopg

from timekeeper.db.rows import fetch_rows
from timekeeper.observability import logger
from timekeeper.snapshots.ledger import SQL, RequestRefused, request_run
from timekeeper.snapshots.registry import SnapshotType
from timekeeper.snapshots.run import SnapshotRun, fetch_runs, next_month
from timekeeper.topology import SNAPSHOTS

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
    row itself keeps who, why and when; this reports it in the structured log (the API that
    calls the action writes the workspace's audit log in the same transaction)."""
    del conn
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


#: At most this many periods one range request plans; a later one is refused ``range_cap``
#: (admission runs backfills one at a time: a larger range is asked for in parts).
MAX_RANGE_PLANNED = 120
#: At most this many months one range spans.
MAX_RANGE_MONTHS = 36
#: At most this many workspaces one range names (or "every workspace": at most 1000).
MAX_RANGE_WORKSPACES = 1000


@dataclass(frozen=True)
class DirectoryEntry:
    """A workspace as staff choose it: ``id``, ``name``, IANA ``timezone``, ``status``."""

    id: UUID
    name: str
    timezone: str
    status: str
    snapshots_enabled: bool
    created_at: datetime


def staff_workspaces(conn: psycopg.Connection, *, search: str | None = None, ids: list[UUID] | None = None,
                     limit: int = 100) -> list[DirectoryEntry]:
    """Workspaces by name (case-insensitive, ``search`` a part of it) or by ``ids``, ordered
    by name, at most ``limit`` (capped at 1000), through the narrow function of ``0067``."""
    rows = fetch_rows(conn, SQL["staff_workspaces"], {"search": search or None, "ids": ids, "limit": limit})
    return [DirectoryEntry(**row) for row in rows]


@dataclass(frozen=True)
class RangeItem:
    """One period of a range request: ``planned`` (``run_id``, ``version``: the run it
    planned, or would plan in a preview) or refused (``refusal``: the ledger's reason code,
    or ``range_cap``; ``message`` in words)."""

    workspace_id: UUID
    workspace_name: str
    owner: str
    snapshot_type: str
    period: date
    planned: bool
    version: int | None = None
    run_id: UUID | None = None
    refusal: str | None = None
    message: str | None = None


def months(first: date, last: date) -> list[date]:
    """The months' first days from ``first`` through ``last`` (both months' first days);
    it stops at the calendar's last month (December 9999), never raising past it."""
    out, month = [], first
    while month <= last:
        out.append(month)
        if month.year == date.max.year and month.month == 12:
            break
        month = next_month(month)
    return out


def plan_range(conn: psycopg.Connection, *, enter: Callable[[UUID], AbstractContextManager[object]],
               workspaces: list[DirectoryEntry], snapshot_type: SnapshotType, first: date, last: date, mode: str,
               reason: str, requested_by: str, now: datetime, group: UUID | None, preview: bool,
               on_planned: Callable[[UUID, list[RangeItem]], None] | None = None) -> list[RangeItem]:
    """Plan ``mode`` (``manual`` or ``backfill``) requests of ``snapshot_type`` for every
    month ``first`` .. ``last`` (months' first days) of each of ``workspaces``, through
    :func:`~timekeeper.snapshots.ledger.request_run` (every refusal its reason), one
    ``reason`` for all, ``group`` on each run. Each workspace is one transaction entered by
    ``enter(workspace_id)``; ``preview`` rolls each back (nothing is recorded), so a preview
    and the request it previews run the same code. After :data:`MAX_RANGE_PLANNED`
    planned periods the rest are refused ``range_cap``. Returns an item per period, in
    the workspaces' order then by month. ``on_planned(workspace_id, items)``, when given,
    is called in each workspace's transaction (not in a preview) with the periods it planned
    there, when any (the API records them in that workspace's audit log). Raises
    ``ValueError`` for a blank reason."""
    text = _clean_reason(reason)
    items: list[RangeItem] = []
    planned = 0
    for workspace in workspaces:
        with enter(workspace.id), conn.transaction(force_rollback=preview):
            for period in months(first, last):
                key = {"workspace_id": workspace.id, "workspace_name": workspace.name,
                       "owner": snapshot_type.owner, "snapshot_type": snapshot_type.name, "period": period}
                if planned >= MAX_RANGE_PLANNED:
                    items.append(RangeItem(**key, planned=False, refusal="range_cap", message=(
                        f"one range plans at most {MAX_RANGE_PLANNED} periods (admission runs "
                        f"{SNAPSHOTS.backfill_lane} backfill at a time of {SNAPSHOTS.admission_cap}): "
                        "request the rest afterwards")))
                    continue
                try:
                    run = request_run(conn, snapshot_type=snapshot_type, workspace_id=workspace.id, period=period,
                                      mode=mode, reason=text, requested_by=requested_by, now=now,
                                      request_group=group)
                except RequestRefused as refused:
                    items.append(RangeItem(**key, planned=False, refusal=refused.reason, message=str(refused)))
                    continue
                except psycopg.errors.UniqueViolation:
                    items.append(RangeItem(**key, planned=False, refusal="active_work",
                                           message=f"{snapshot_type.label} {period:%Y-%m} has a version in "
                                                   "progress (requested meanwhile)"))
                    continue
                planned += 1
                items.append(RangeItem(**key, planned=True, version=run.version,
                                       run_id=None if preview else run.id))
            mine = [i for i in items if i.planned and i.workspace_id == workspace.id]
            if on_planned is not None and mine and not preview:
                on_planned(workspace.id, mine)
    return items


@dataclass(frozen=True)
class GroupRun:
    """One run of a range request, with its workspace's name and zone."""

    id: UUID
    workspace_id: UUID
    workspace_name: str
    timezone: str
    owner: str
    snapshot_type: str
    period: date
    version: int
    mode: str
    state: str
    is_current: bool
    attempts: int
    failure_code: str | None
    reason: str | None
    requested_by: str | None
    created_at: datetime
    published_at: datetime | None


def request_group_runs(conn: psycopg.Connection, group: UUID) -> list[GroupRun]:
    """The runs a range request planned (every workspace; at most 2000), by workspace name,
    type and month; empty for an unknown group."""
    return [GroupRun(**row) for row in fetch_rows(conn, SQL["request_group_runs"], {"group": group})]


@dataclass(frozen=True)
class RangeRequestSummary:
    """A range request as staff find it again: when (its first run's creation, UTC), who,
    the type, kind (``manual``/``backfill``) and reason, its month span (months' first
    days), how many workspaces and runs it planned and how many of those are ``done``
    (published, failed, skipped or cancelled)."""

    group_id: UUID
    requested_at: datetime
    requested_by: str | None
    owner: str
    snapshot_type: str
    mode: str
    reason: str | None
    first_period: date
    last_period: date
    workspaces: int
    runs: int
    done: int


def range_requests(conn: psycopg.Connection, *, limit: int = 20) -> list[RangeRequestSummary]:
    """The latest range requests of every workspace, newest first, at most ``limit`` (1-200)."""
    return [RangeRequestSummary(**row) for row in fetch_rows(conn, SQL["staff_range_requests"], {"limit": limit})]


@dataclass(frozen=True)
class StaffPeriod:
    """A period across workspaces as staff scan them: its newest version's state, the
    workspace by name, and ``rank`` (0 failed, 1 in progress, 2 planned, 3 published, 4 the
    rest): what matters first."""

    id: UUID
    workspace_id: UUID
    workspace_name: str
    timezone: str
    owner: str
    snapshot_type: str
    period: date
    version: int
    state: str
    is_current: bool
    protection: str | None
    failure_code: str | None
    updated_at: datetime
    published_at: datetime | None
    rank: int
    #: Why a skipped period was skipped (``0078``); None otherwise.
    skip_reason: str | None = None


#: The overdue periods one staff listing reads (to mark its rows, or list them all).
MAX_OVERDUE_LISTED = 500
#: A staff period listing's keyset: ``(rank, updated_at, run id)`` of the last row.
StaffPeriodKey = tuple[int, datetime, UUID]


def staff_periods(conn: psycopg.Connection, *, search: str | None = None, owner: str | None = None,
                  snapshot_type: str | None = None, states: list[str] | None = None, first: date | None = None,
                  through: date | None = None, after: StaffPeriodKey | None = None,
                  limit: int = 100) -> tuple[list[StaffPeriod], StaffPeriodKey | None]:
    """Every workspace's periods by their newest version, failed first, then in progress,
    planned, published and the rest, the most recently changed first within each;
    filtered by a part of the workspace's ``search`` name, ``owner``, ``snapshot_type``,
    ``states`` and the months ``first`` .. ``through`` (months' first days); at most
    ``limit`` (1-500) after ``after``. Returns the page and the key of its last row when
    more may follow (None on the last page). Periods never planned are not listed (the
    workspace's own listing and the operations overview's overdue periods show them)."""
    rows = fetch_rows(conn, SQL["staff_periods"], {
        "search": search or None, "owner": owner, "type": snapshot_type, "states": states, "first": first,
        "through": through, "after_rank": after[0] if after else None, "after_at": after[1] if after else None,
        "after_id": after[2] if after else None, "limit": limit + 1})
    page = [StaffPeriod(**row) for row in rows[:limit]]
    last = page[-1] if len(rows) > limit and page else None
    return page, ((last.rank, last.updated_at, last.id) if last else None)
