"""The snapshot ledger: planning, staff requests, admission, and the period listing.

Rows are :class:`~timekeeper.snapshots.run.SnapshotRun` dataclasses. Instants are aware UTC;
a period is the first day of a workspace-local calendar month (a ``date``). Every function
runs in the caller's transaction unless it says it commits.

Rules implemented here:

* Planning: version 1 of every completed workspace-local month, once (the version key);
  every expected month within ``horizon_months`` (never before the workspace existed) that
  has no run is planned by the next pass, whatever runs later months have (a staff
  backfill of a later month does not hide an earlier missed one); loading, disabled and
  policy-disabled workspaces get the row with its skip reason.
* Admission (per owner, serialized by an advisory lock): at most ``cap`` runs queued or
  running, at most ``backfill_lane`` of them backfills. The backfill lane is reserved, not
  a sort order: while a backfill waits or runs, regular runs may use only
  ``cap - backfill_lane`` slots, so a backfill waits at most for one run to finish however
  many planned runs are queued behind it.
* Staff requests: a manual re-run (a new version of a period that has runs) or a backfill
  (version 1 of a completed period that has none), each with a reason; refused with a
  machine-readable reason (:class:`RequestRefused`).
* Overdue: a period not published ``grace`` (24 hours) after its local month end.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any
from uuid import UUID
from zoneinfo import ZoneInfo

import psycopg
from psycopg.rows import dict_row, tuple_row
from psycopg.types.json import Jsonb

from timekeeper.db.rows import fetch_row, fetch_rows
from timekeeper.db.sql import load_queries
from timekeeper.snapshots.registry import SnapshotRegistry, SnapshotType
from timekeeper.snapshots.run import SnapshotRun, fetch_runs, next_month
from timekeeper.topology import SNAPSHOTS

SQL = load_queries("timekeeper.snapshots", "ledger.sql")

#: States of a run that still has work to do (at most one per period).
ACTIVE_STATES = ("planned", "queued", "running", "retry_wait")
#: How long after its local month end a period may stay unpublished (the topology's).
OVERDUE_GRACE = timedelta(hours=SNAPSHOTS.overdue_grace_hours)
#: How far back the planner looks for missed months, and the period listing for overdue ones.
DEFAULT_HORIZON_MONTHS = SNAPSHOTS.horizon_months


def current_month(now: datetime, timezone: str) -> date:
    """The first day of the month that is in progress at ``now`` in ``timezone`` (IANA)."""
    local = now.astimezone(ZoneInfo(timezone))
    return date(local.year, local.month, 1)


def month_end_instant(period: date, timezone: str) -> datetime:
    """The UTC instant the period ends: local midnight starting the next month."""
    following = next_month(period)
    return datetime(following.year, following.month, 1, tzinfo=ZoneInfo(timezone)).astimezone(ZoneInfo("UTC"))


@dataclass(frozen=True)
class PlanResult:
    """A planner pass: ``planned`` runs inserted to be generated, ``skipped`` rows inserted
    with a skip reason, and the ``overdue`` periods as ``(workspace_id, owner, type, period)``."""

    planned: int
    skipped: int
    overdue: list[tuple[UUID, str, str, date]]


def _type_arrays(types: list[SnapshotType]) -> dict[str, list[str]]:
    return {"owners": [t.owner for t in types], "types": [t.name for t in types]}


def plan(conn: psycopg.Connection, registry: SnapshotRegistry, *, now: datetime,
         horizon_months: int = DEFAULT_HORIZON_MONTHS) -> PlanResult:
    """One planner pass over every workspace and enabled type (commits nothing itself):
    plans the expected months without a row and counts the overdue periods, both only
    for the months outside the planner's watermark (``snapshot_planner_watermarks``)."""
    if horizon_months < 1:
        raise ValueError("horizon_months must be at least 1")
    arrays = _type_arrays(registry.enabled())
    rows = fetch_rows(conn, SQL["plan_months"], {**arrays, "now": now, "horizon": horizon_months})
    planned = sum(1 for r in rows if r["state"] == "planned")
    return PlanResult(planned=planned, skipped=len(rows) - planned,
                      overdue=overdue_periods(conn, registry, now=now, horizon_months=horizon_months))


def overdue_periods(conn: psycopg.Connection, registry: SnapshotRegistry, *, now: datetime,
                    horizon_months: int = DEFAULT_HORIZON_MONTHS,
                    grace: timedelta = OVERDUE_GRACE) -> list[tuple[UUID, str, str, date]]:
    """Periods within the horizon that should be published by now and are not (nor
    skipped): ``[(workspace_id, owner, type, period)]``, including months never planned.

    Widens the planner's watermark's settled range (months with a current version or a
    skip row, which are not looked up again) in the caller's transaction, so it writes:
    call it from the planner's pass (:func:`plan`), on a worker's connection."""
    rows = fetch_rows(conn, SQL["overdue_periods"],
                      {**_type_arrays(registry.enabled()), "now": now, "horizon": horizon_months, "grace": grace})
    return [tuple(r.values()) for r in rows]


@dataclass(frozen=True)
class OverduePeriod:
    """An overdue period of any workspace, for staff: the workspace (``workspace_id``,
    ``workspace_name``, its IANA ``timezone``), ``owner``, ``snapshot_type``, ``period`` (the
    first day of the local month), ``status`` (the latest run's state: ``planned``,
    ``queued``, ``running``, ``retry_wait``, ``failed``; ``missing`` when never planned),
    that run's ``run_id``, ``version`` and ``failure_code`` (None when missing), and
    ``due_at``: the UTC instant it became overdue (local month end + ``OVERDUE_GRACE``)."""

    workspace_id: UUID
    workspace_name: str
    timezone: str
    owner: str
    snapshot_type: str
    period: date
    status: str
    run_id: UUID | None
    version: int | None
    failure_code: str | None
    due_at: datetime

    def overdue_hours(self, now: datetime) -> float:
        """Hours since the period became overdue at ``now`` (aware UTC), one decimal."""
        return round((now - self.due_at).total_seconds() / 3600, 1)


#: The most overdue periods one staff read returns (the database function caps it too).
MAX_OVERDUE_ROWS = 500


def overdue_periods_for_staff(conn: psycopg.Connection, registry: SnapshotRegistry, *, now: datetime,
                              limit: int = 100, horizon_months: int = DEFAULT_HORIZON_MONTHS,
                              grace: timedelta = OVERDUE_GRACE) -> tuple[list[OverduePeriod], int]:
    """Every workspace's overdue periods at ``now`` (aware UTC) by the planner's rule (the
    same periods :func:`overdue_periods` counts for the alarm), most overdue first, at most
    ``limit`` (capped at :data:`MAX_OVERDUE_ROWS`), and the total count. Read-only: reads
    through the cross-workspace function of migration ``0047_operations_overdue_periods.sql``
    (the API's walled login may call it; it never widens the watermark). Raises
    ``ValueError`` when ``limit`` < 1."""
    if limit < 1:
        raise ValueError("limit must be >= 1")
    rows = fetch_rows(conn, SQL["overdue_for_staff"], {
        **_type_arrays(registry.enabled()), "now": now, "horizon": horizon_months, "grace": grace,
        "limit": min(limit, MAX_OVERDUE_ROWS)})
    total = rows[0].pop("total") if rows else 0
    for row in rows[1:]:
        row.pop("total")
    return [OverduePeriod(**row) for row in rows], total


@dataclass(frozen=True)
class Admitted:
    """A run admitted by :func:`admit`: send ``{run_id, workspace_id, job_id}`` to the job queue."""

    run_id: UUID
    workspace_id: UUID
    job_id: UUID


def admit(conn: psycopg.Connection, *, owner: str, now: datetime, cap: int = SNAPSHOTS.admission_cap,
          backfill_lane: int = SNAPSHOTS.backfill_lane,
          reoffer_after: timedelta = SNAPSHOTS.reoffer_after) -> list[Admitted]:
    """Admit ``owner``'s waiting runs under the cap and reoffer queued runs whose job did
    not start within ``reoffer_after``; returns the jobs to send. Runs in the caller's
    transaction and takes the owner's advisory lock: commit, then send. Raises
    ``ValueError`` when ``backfill_lane`` is not in ``[0, cap)``."""
    if not 0 <= backfill_lane < cap:
        raise ValueError("the backfill lane must be smaller than the cap")
    conn.execute(SQL["lock_owner"], {"owner": owner})
    with conn.cursor(row_factory=dict_row) as cur:
        flight = cur.execute(SQL["in_flight"], {"owner": owner}).fetchone()
        backfill_active = cur.execute(SQL["any_backfill_waiting"], {"owner": owner}).fetchone()["waiting"]
    regular, backfill = flight["regular"], flight["backfill"]
    backfill_slots = max(0, min(backfill_lane - backfill, cap - regular - backfill))
    regular_cap = cap - backfill_lane if backfill_active else cap
    ids: list[UUID] = []
    with conn.cursor(row_factory=tuple_row) as cur:
        if backfill_slots:
            ids += [r[0] for r in cur.execute(SQL["waiting"], {"owner": owner, "now": now, "backfill": True,
                                                               "limit": backfill_slots}).fetchall()]
        regular_slots = max(0, regular_cap - regular)
        if regular_slots:
            ids += [r[0] for r in cur.execute(SQL["waiting"], {"owner": owner, "now": now, "backfill": False,
                                                               "limit": regular_slots}).fetchall()]
        admitted = cur.execute(SQL["admit"], {"ids": ids, "now": now}).fetchall() if ids else []
        reoffered = cur.execute(SQL["reoffer"], {"owner": owner, "now": now, "after": reoffer_after}).fetchall()
    return [Admitted(run_id=r[0], workspace_id=r[1], job_id=r[2]) for r in (*admitted, *reoffered)]


@dataclass(frozen=True)
class AdmissionQueue:
    """What a planned run waits for: its owner's runs ``in_flight`` (queued or running, every
    workspace), the ``backfills_in_flight`` among them, the runs of its lane admission takes
    ``ahead`` of it (oldest first), and whether a backfill is active (``backfill_active``:
    regular runs then use ``cap - backfill_lane`` slots)."""

    in_flight: int
    backfills_in_flight: int
    ahead: int
    backfill_active: bool


def admission_queue(conn: psycopg.Connection, run_id: UUID) -> AdmissionQueue | None:
    """The admission queue of run ``run_id`` (:class:`AdmissionQueue`; counts only, read
    through the function of migration ``0077_snapshot_admission_queue.sql``), None when there
    is no such run. Read-only, in the caller's transaction."""
    found = fetch_row(conn, SQL["admission_queue"], {"run_id": run_id})
    return AdmissionQueue(**found) if found and found["in_flight"] is not None else None


#: A staff request is judged by the planner's rule for the workspace's state: a workspace the
#: planner skips (data still loading, disabled, snapshots off by policy) is refused with the
#: planner's skip reason, so a request cannot publish what the schedule deliberately does not.
WORKSPACE_REFUSALS = {"loading": "workspace_loading", "disabled": "workspace_disabled"}
POLICY_DISABLED = "policy_disabled"


class RequestRefused(Exception):
    """A staff request the ledger refuses: ``reason`` is one of ``unsupported_type``,
    ``type_disabled``, ``period_not_complete``, ``active_work``, ``protected_history``,
    ``period_before_workspace`` (the month ended before the workspace was created),
    ``not_planned`` (a re-run of a period without runs: request a backfill),
    ``already_planned`` (a backfill of a period with runs: request a re-run, or while a
    version is active, cancel it or wait for it),
    ``unknown_workspace``, and the planner's own skip reasons for the workspace's state now:
    ``workspace_loading``, ``workspace_disabled``, ``policy_disabled`` (:data:`WORKSPACE_REFUSALS`)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


#: How a refusal for work in progress names the version's state, and what staff may do.
_ACTIVE_ADVICE = {
    "planned": "planned (not started); cancel it to request a re-run",
    "queued": "queued (admitted, its attempt not started); cancel it to request a re-run",
    "running": "running; wait for it to publish or fail",
    "retry_wait": "waiting to retry a failed attempt; wait for it to publish or fail",
}


def _judge_period(runs: list[SnapshotRun], *, mode: str, name: str) -> None:
    """Refuse a ``mode`` request of a period with ``runs`` (oldest version first), named
    ``name`` (the type's label and the month) in the message: a protected current version
    first (one message, whatever the mode), then a backfill of a planned month, then
    work in progress (by the version's state, with what to do)."""
    if mode == "manual" and not runs:
        raise RequestRefused("not_planned", f"{name} was never planned: request a backfill")
    current = next((r for r in runs if r.is_current), None)
    if current is not None and current.protection:
        raise RequestRefused("protected_history", f"the current version of {name} (version {current.version}) "
                             f"is {current.protection}: it is kept as it is, neither re-run nor backfilled")
    active = next((r for r in reversed(runs) if r.state in ACTIVE_STATES), None)
    if mode == "backfill" and runs and active is not None:
        # Work in progress: a re-run is refused too, so the advice is the active version's
        raise RequestRefused("already_planned", f"{name} was planned already: version {active.version} is "
                             f"{_ACTIVE_ADVICE[active.state]}")
    if mode == "backfill" and runs:
        raise RequestRefused("already_planned", f"{name} was planned already (version {runs[-1].version} is "
                             f"{runs[-1].state.replace('_', ' ')}): a backfill is for a month never planned; "
                             "request a re-run")
    if active is not None:
        raise RequestRefused("active_work", f"{name} has version {active.version} {_ACTIVE_ADVICE[active.state]}")


def request_run(conn: psycopg.Connection, *, snapshot_type: SnapshotType, workspace_id: UUID, period: date,
                mode: str, reason: str, requested_by: str, now: datetime,
                request_group: UUID | None = None) -> SnapshotRun:
    """Record a staff request: ``mode`` ``manual`` (a new version of the period) or
    ``backfill`` (version 1 of a period never planned); ``request_group`` the range request
    it is part of (None: a request of its own). ``period`` must be the first of a
    month completed in the workspace's timezone. Raises :class:`RequestRefused` with the
    reason, ``ValueError`` for a bad mode, empty reason or a period not on a month's first
    day. Runs in its own transaction (a savepoint when the caller has one)."""
    if mode not in ("manual", "backfill"):
        raise ValueError("mode must be manual or backfill")
    if not reason or not reason.strip():
        raise ValueError("a reason is required")
    if period.day != 1:
        raise ValueError("a period is the first day of a month")
    with conn.transaction():
        found = fetch_row(conn, SQL["workspace_for_request"], (workspace_id,))
        if found is None:
            raise RequestRefused("unknown_workspace", f"no workspace {workspace_id}")
        timezone, created_at, status, snapshots_enabled = (
            found["timezone"], found["created_at"], found["status"], found["snapshots_enabled"])
        if status in WORKSPACE_REFUSALS:
            raise RequestRefused(WORKSPACE_REFUSALS[status], f"the workspace is {status}: the planner does not "
                                 "snapshot it, nor does a staff request")
        if not snapshots_enabled:
            raise RequestRefused(POLICY_DISABLED, "the workspace's snapshot policy is off")
        if period >= current_month(now, timezone):
            raise RequestRefused("period_not_complete",
                                 f"{period:%Y-%m} has not ended in the workspace's timezone ({timezone})")
        if period < current_month(created_at, timezone):
            raise RequestRefused("period_before_workspace",
                                 f"{period:%Y-%m} ended before the workspace existed ({created_at:%Y-%m-%d})")
        key = {"owner": snapshot_type.owner, "snapshot_type": snapshot_type.name, "workspace_id": workspace_id,
               "period": period}
        runs = fetch_runs(conn, SQL["period_runs"], key)
        _judge_period(runs, mode=mode, name=f"{snapshot_type.label} {period:%Y-%m}")
        version = max((r.version for r in runs), default=0) + 1
        return fetch_runs(conn, SQL["insert_request"], {**key, "version": version, "mode": mode,
                                                       "reason": reason.strip(), "requested_by": requested_by,
                                                       "request_group": request_group, "now": now})[0]


@dataclass(frozen=True)
class PeriodStatus:
    """One period of a workspace's listing: ``status`` (``published``, ``skipped``,
    ``failed``, the active state, or ``missing``: an expected month never planned), the
    ``chosen_version`` (the current one, else the latest; None when missing), ``basis``,
    ``published_at``, ``skip_reason``, ``overdue`` and the chosen ``run_id`` (None when
    missing), the chosen run's ``attempts`` and ``failure_code``; the latest version's
    number, state and failure code (``latest_*``: a re-run running or failed beside the
    published version shows there) and how many ``versions`` the period has."""

    owner: str
    snapshot_type: str
    period: date
    status: str
    chosen_version: int | None
    basis: dict[str, Any] | None
    published_at: datetime | None
    skip_reason: str | None
    overdue: bool
    run_id: UUID | None
    attempts: int | None = None
    failure_code: str | None = None
    latest_version: int | None = None
    latest_state: str | None = None
    latest_failure_code: str | None = None
    versions: int = 0
    #: The chosen version's protection (``captured``, ``finalized``) when it is current.
    protection: str | None = None


#: The status of an expected month that has no run.
MISSING = "missing"
#: A period listing's key: ``(owner, snapshot type, period)``.
PeriodKey = tuple[str, str, date]


@dataclass(frozen=True)
class PeriodPage:
    """A page of a period listing: ``items`` and ``next``, the key to pass as ``after`` for
    the next page (None on the last)."""

    items: list[PeriodStatus]
    next: PeriodKey | None


def page_periods(conn: psycopg.Connection, *, workspace_id: UUID, now: datetime, types: list[SnapshotType],
                 owner: str | None = None, snapshot_type: str | None = None, after: PeriodKey | None = None,
                 limit: int = 100, horizon_months: int = DEFAULT_HORIZON_MONTHS,
                 grace: timedelta = OVERDUE_GRACE) -> PeriodPage:
    """One page of the workspace's periods at ``now`` (aware UTC), owner, type and period
    descending (newest first per type): every expected month of ``types`` (the workspace's
    first local month through the last one completed at ``now``) and every period with
    runs. A month never planned is ``missing``. ``overdue`` is the planner's rule, the one
    its alarm and the staff overview count (:func:`overdue_periods`): an enabled type's
    month of a workspace that is not disabled, within ``horizon_months`` of this local
    month, neither published nor skipped ``grace`` after its local month end; an older
    missing month is not overdue (the planner no longer looks at it). ``after``: the
    previous page's ``next``; ``limit`` >= 1 (``ValueError`` otherwise)."""
    if limit < 1:
        raise ValueError("limit must be >= 1")
    keys = fetch_rows(conn, SQL["page_periods"], {
        **_type_arrays(types), "workspace_id": workspace_id, "now": now, "owner": owner,
        "snapshot_type": snapshot_type, "after_owner": after[0] if after else None,
        "after_type": after[1] if after else None, "after_period": after[2] if after else None,
        "limit": limit + 1, "horizon": horizon_months, "grace": grace})
    page = keys[:limit]
    ids = {k[column] for k in page for column in ("run_id", "latest_run_id") if k[column] is not None}
    runs = {r.id: r for r in fetch_runs(conn, SQL["runs_by_id"], {"ids": list(ids)})} if ids else {}
    items = []
    for key in page:
        run = runs.get(key["run_id"]) if key["run_id"] is not None else None
        if run is not None:
            latest = runs.get(key["latest_run_id"], run)
            items.append(PeriodStatus(
                owner=run.owner, snapshot_type=run.snapshot_type, period=run.period,
                status="published" if run.is_current else run.state, chosen_version=run.version, basis=run.basis,
                published_at=run.published_at, skip_reason=run.skip_reason, run_id=run.id, overdue=key["overdue"],
                attempts=run.attempts, failure_code=run.failure_code, latest_version=latest.version,
                latest_state=latest.state, latest_failure_code=latest.failure_code, versions=int(key["versions"]),
                protection=run.protection if run.is_current else None))
        else:
            items.append(PeriodStatus(
                owner=key["owner"], snapshot_type=key["snapshot_type"], period=key["period"], status=MISSING,
                chosen_version=None, basis=None, published_at=None, skip_reason=None, run_id=None,
                overdue=key["overdue"]))
    last = page[-1] if len(keys) > limit and page else None
    return PeriodPage(items, (last["owner"], last["snapshot_type"], last["period"]) if last else None)


def period_versions(conn: psycopg.Connection, *, workspace_id: UUID, owner: str, snapshot_type: str,
                    period: date) -> list[SnapshotRun]:
    """Every version (run) of ``workspace_id``'s ``period`` (a month's first day) of the
    type, newest first: each with its state, ``attempts``, ``retryable_failures``,
    ``failure_code`` and ``failure_message``; empty when the period has none."""
    return fetch_runs(conn, SQL["period_versions"], {"workspace_id": workspace_id, "owner": owner,
                                                     "snapshot_type": snapshot_type, "period": period})


def jsonb(value: dict[str, Any] | None) -> Jsonb | None:
    """``value`` wrapped for a jsonb parameter (None stays NULL)."""
    return None if value is None else Jsonb(value)


def published_version(conn: psycopg.Connection, *, owner: str, snapshot_type: str, workspace_id: UUID,
                      period: date | None = None, version: int | None = None) -> SnapshotRun | None:
    """The published version a reader chose, or None when there is none: ``period`` None
    (and no ``version``): the current version of the latest published period; a
    ``period`` alone: that month's current version; a ``period`` and a ``version``: that
    version, current or not. Raises ``ValueError`` for a ``version`` without a ``period``.
    Runs in the caller's transaction (a report render's read-only snapshot)."""
    key = {"owner": owner, "snapshot_type": snapshot_type, "workspace_id": workspace_id}
    if version is not None and period is None:
        raise ValueError("a version is a version of a period")
    if period is None:
        found = fetch_runs(conn, SQL["latest_published"], key)
    elif version is None:
        found = fetch_runs(conn, SQL["current_of_period"], {**key, "period": period})
    else:
        found = fetch_runs(conn, SQL["published_version"], {**key, "period": period, "version": version})
    return found[0] if found else None


def capture_versions(conn: psycopg.Connection, run_ids: list[UUID], *, now: datetime) -> list[SnapshotRun]:
    """Mark the published versions ``run_ids`` ``captured`` (read into a delivered report):
    their period's history is then protected (a staff re-run is refused
    ``protected_history``). Idempotent; a ``finalized`` version stays finalized and an
    unpublished id is ignored. Returns the versions it marked now. Caller's transaction."""
    if not run_ids:
        return []
    return fetch_runs(conn, SQL["capture_versions"], {"ids": list(run_ids), "now": now})
