"""Settlement: record a run's terminal result once and update its schedule's failure streak
(success or skip resets it; a scheduled failure adds one; the pipeline's threshold in a row
pauses), and tell the owner of the failures they chose to hear of (``schedules.notify_on``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from timekeeper.db import load_queries
from timekeeper.schedules.notifications import SCHEDULE_FAILED, enqueue_notification
from timekeeper.schedules.runs import Event, record_events

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
               failure_threshold: int, detail: dict[str, Any] | None = None, error: str | None = None,
               attempt: int | None = None, pause_reason: str | None = None,
               actor: str = "consumer") -> Settlement | None:
    """Settle ``run_id`` in the caller's transaction; return None if it was already terminal
    (or, when ``attempt`` is given, no longer held by that attempt).

    ``state`` is ``succeeded`` | ``skipped`` | ``failed``. On the schedule: success or skip
    resets the streak; a scheduled failure adds one; the ``failure_threshold``-th (the
    pipeline's ``failure_pause_threshold``, passed by every caller) consecutive failure of
    an active schedule (or a scheduled refusal with ``pause_reason``) pauses it, records a
    ``paused`` event and enqueues a pause notice.
    A scheduled failure that does not pause enqueues a ``schedule_failed`` notice (the
    people's, not the operators' topic) when the schedule's ``notify_on`` asks for it:
    ``every_failure``, or ``first_failure`` (the default) when it starts a streak;
    ``pause_only`` never. Manual runs' failures neither count, pause nor notify; a test
    run (trigger ``test``) leaves the schedule's streak and last run as they were. Raises
    ``ValueError`` for a bad state.
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
    events: list[Event] = []
    if failed:
        events.append(Event(run["schedule_id"], run["workspace_id"], "settled", outcome_code,
                            {"state": state, "error": error}, run_id=run_id))
    if run["paused_now"]:
        paused_reason = run["pause_reason"]
        events.append(Event(run["schedule_id"], run["workspace_id"], "paused", paused_reason, {
            "consecutive_failures": run["consecutive_failures"], "last_error": error}, run_id=run_id))
    record_events(conn, events, actor=actor, now=now)
    if failed and not paused_reason and run["trigger"] == "scheduled" and _tells(run):
        enqueue_notification(conn, schedule_id=run["schedule_id"], workspace_id=run["workspace_id"],
                             owner=run["owner"], kind=SCHEDULE_FAILED, now=now, topic=False,
                             event_key=f"failed:{run['schedule_id']}:{run_id}", payload={
                                 "schedule_id": str(run["schedule_id"]), "workspace_id": str(run["workspace_id"]),
                                 "name": run["name"], "reason": outcome_code, "work_kind": run["work_kind"],
                                 "consecutive_failures": run["consecutive_failures"], "run_id": str(run_id),
                                 "occurrence_at": run["occurrence_at"].isoformat(),
                                 "message": None if outcome_code == "unexpected_error" else error})
    if paused_reason:
        enqueue_notification(conn, schedule_id=run["schedule_id"], workspace_id=run["workspace_id"],
                             owner=run["owner"], kind="schedule_paused", now=now,
                             event_key=f"paused:{run['schedule_id']}:{run_id}", payload={
                                 "schedule_id": str(run["schedule_id"]), "workspace_id": str(run["workspace_id"]),
                                 "reason": paused_reason, "work_kind": run["work_kind"],
                                 "consecutive_failures": run["consecutive_failures"],
                                 "last_run_id": str(run_id), "last_outcome": outcome_code})
    return Settlement(run_id=run_id, schedule_id=run["schedule_id"], workspace_id=run["workspace_id"],
                      work_kind=run["work_kind"], state=state, outcome_code=outcome_code,
                      consecutive_failures=run["consecutive_failures"],
                      paused_reason=paused_reason)


def _tells(run: dict[str, Any]) -> bool:
    """Whether a scheduled failure that did not pause is told, by the schedule's choice."""
    return run["notify_on"] == "every_failure" or (run["notify_on"] == "first_failure"
                                                    and run["consecutive_failures"] == 1)


@dataclass(frozen=True)
class Completion:
    """A succeeded or skipped result to record: run id, the attempt that holds the run,
    terminal ``state`` (``succeeded`` | ``skipped``), ``outcome_code`` and JSON-ready ``detail``."""

    run_id: UUID
    attempt: int
    state: str
    outcome_code: str
    detail: dict[str, Any] | None = None


def settle_completed(conn: psycopg.Connection, completions: list[Completion], *, now: datetime) -> set[UUID]:
    """Settle succeeded and skipped runs in ONE statement in the caller's transaction and
    reset their schedules' failure streaks (each schedule records its latest occurrence's
    run). Returns the ids settled; a run missing from it was already terminal or is held by
    another attempt (fenced). Raises ``ValueError`` for a state that is not a success or
    skip (failures go through :func:`settle_run`, which pauses and notifies)."""
    if not completions:
        return set()
    if any(c.state not in ("succeeded", "skipped") for c in completions):
        raise ValueError("settle_completed records successes and skips only")
    rows = conn.execute(SQL["settle_completed"], {
        "id": [c.run_id for c in completions], "state": [c.state for c in completions],
        "outcome_code": [c.outcome_code for c in completions],
        "detail": [_json_text(c.detail) for c in completions],
        "attempt": [c.attempt for c in completions], "now": now}).fetchall()
    return {row["id"] for row in rows}


def _json_text(detail: dict[str, Any] | None) -> str | None:
    """``detail`` as JSON text for a ``text[]`` parameter the statement casts to jsonb (an
    array of ``Jsonb`` wrappers costs about twice as much to send; most details are empty)."""
    if detail is None:
        return None
    return json.dumps(detail) if detail else "{}"


def lock_schedules(conn: psycopg.Connection, schedule_ids: set[UUID]) -> None:
    """Lock the schedule rows a batch will settle, in id order, in the caller's transaction."""
    if schedule_ids:
        conn.execute(SQL["lock_schedules"], {"ids": sorted(schedule_ids)})
