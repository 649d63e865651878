"""Settlement: record a run's terminal result once and update its schedule's failure streak
(DESIGN section 2 "Consumer"; seed 000 hop 6, seed 001 hop 7)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from timekeeper.db import load_queries
from timekeeper.schedules.notifications import enqueue_notification

SQL = load_queries("timekeeper.schedules", "settlement.sql")
TERMINAL_STATES = frozenset({"succeeded", "skipped", "failed"})


@dataclass(frozen=True)
class Settlement:
    """The recorded result: run, schedule and workspace ids, ``work_kind``, terminal ``state``, ``outcome_code``,
    the schedule's streak after it, and ``paused_reason`` when this settlement paused it."""

    run_id: UUID
    schedule_id: UUID
    workspace_id: UUID
    work_kind: str
    state: str
    outcome_code: str
    consecutive_failures: int
    paused_reason: str | None


def settle_run(conn: psycopg.Connection, *, run_id: UUID, state: str, outcome_code: str, now: datetime,
               detail: dict[str, Any] | None = None, error: str | None = None, attempt: int | None = None,
               pause_reason: str | None = None, failure_threshold: int = 5,
               actor: str = "consumer") -> Settlement | None:
    """Settle ``run_id`` in the caller's transaction; return None if it was already terminal
    (or, when ``attempt`` is given, no longer held by that attempt).

    ``state`` is ``succeeded`` | ``skipped`` | ``failed``. On the schedule: success or skip
    resets the streak; a scheduled failure adds one; the ``failure_threshold``-th
    consecutive failure of an active schedule (or a scheduled refusal with
    ``pause_reason``) pauses it, records a ``paused`` event and enqueues a pause notice.
    Manual runs' failures neither count nor pause. Raises ``ValueError`` for a bad state.
    """
    if state not in TERMINAL_STATES:
        raise ValueError(f"not a terminal state: {state!r}")
    failed = state == "failed"
    run = conn.execute(SQL["settle_run"], {
        "run_id": run_id, "state": state, "outcome_code": outcome_code,
        "detail": Jsonb(detail) if detail is not None else None, "error": error, "now": now,
        "attempt": attempt, "failed": failed, "threshold": failure_threshold,
        "pause_reason": pause_reason}).fetchone()
    if run is None:
        return None
    paused_reason = None
    if failed:
        conn.execute(SQL["record_event"], {
            "schedule_id": run["schedule_id"], "workspace_id": run["workspace_id"], "run_id": run_id,
            "kind": "settled", "actor": actor, "reason": outcome_code,
            "detail": Jsonb({"state": state, "error": error}), "now": now})
    if run["paused_now"]:
        paused_reason = run["pause_reason"]
        conn.execute(SQL["record_event"], {
            "schedule_id": run["schedule_id"], "workspace_id": run["workspace_id"], "run_id": run_id,
            "kind": "paused", "actor": actor, "reason": paused_reason,
            "detail": Jsonb({"consecutive_failures": run["consecutive_failures"], "last_error": error}),
            "now": now})
        enqueue_notification(conn, schedule_id=run["schedule_id"], workspace_id=run["workspace_id"],
                             owner=run["owner"], kind="schedule_paused", now=now, payload={
                                 "schedule_id": str(run["schedule_id"]), "workspace_id": str(run["workspace_id"]),
                                 "reason": paused_reason, "work_kind": run["work_kind"],
                                 "consecutive_failures": run["consecutive_failures"],
                                 "last_run_id": str(run_id), "last_outcome": outcome_code})
    return Settlement(run_id=run_id, schedule_id=run["schedule_id"], workspace_id=run["workspace_id"],
                      work_kind=run["work_kind"], state=state, outcome_code=outcome_code,
                      consecutive_failures=run["consecutive_failures"],
                      paused_reason=paused_reason)
