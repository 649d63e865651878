"""Runs and their history: the one writer of schedule events, and the publication of run
offers (shared by the dispatcher and "Run now").

Offer lifecycle of a run: *offered* (``offered_at`` set in the claiming transaction) ->
*published* (``published_at`` set once the queue accepted the message, after commit) or
*released* (the queue refused it: the offer is cleared for the next pass). A run offered
but never published (the process died between the commit and the send) is offered again
by the next dispatcher pass; one published but never started is offered again after the
pipeline's ``reoffer_after``, a bounded number of times. The dispatcher's claim inserts its
runs already recorded as published, with one pending-offer row per batch that
:func:`publish_offers` deletes after the send: while the row exists the batch counts as
unpublished (migration 0013).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg.types.json import Jsonb

from timekeeper.db import load_queries
from timekeeper.db.attempts import Fence, Lease, Lifecycle
from timekeeper.db.outbox import Outbox, publish_committed
from timekeeper.schedules.messages import RunMessage, RunPublisher

SQL = load_queries("timekeeper.schedules", "runs.sql")

#: The runs' declaration to the one lifecycle (:mod:`timekeeper.db.attempts`): fenced by the
#: attempt number, leased until an instant in the row (``lease_until``); the consumer's
#: claim and settlements stay its own set-based statements (the benchmarked hot path),
#: and an error kept on a run is cut to 2,000 characters.
RUN_LIFECYCLE = Lifecycle(name="run", table="schedule_runs", open_states=("queued", "running"),
                          fence=Fence.ATTEMPT_NUMBER, lease=Lease.EXPIRY_INSTANT, error_message_limit=2000)


@dataclass(frozen=True)
class Event:
    """One schedule history entry: ``kind`` (e.g. ``paused``), the schedule and workspace ids,
    an optional run id, a machine-readable ``reason`` and a JSON-ready ``detail``."""

    schedule_id: UUID
    workspace_id: UUID
    kind: str
    reason: str | None = None
    detail: dict[str, Any] | None = None
    run_id: UUID | None = None


def record_events(conn: psycopg.Connection, events: Iterable[Event], *, actor: str, now: datetime) -> int:
    """Append ``events`` to the schedule history in the caller's transaction, in one
    statement, attributed to ``actor`` at instant ``now`` (aware UTC). Returns the count."""
    events = list(events)
    if not events:
        return 0
    conn.execute(SQL["record_events"], {
        "actor": actor, "now": now,
        "schedule_id": [e.schedule_id for e in events], "workspace_id": [e.workspace_id for e in events],
        "run_id": [e.run_id for e in events], "kind": [e.kind for e in events],
        "reason": [e.reason for e in events],
        "detail": [Jsonb(e.detail) if e.detail is not None else None for e in events]})
    return len(events)


def release_runs(conn: psycopg.Connection, run_ids: Iterable[UUID], *, now: datetime,
                 actor: str = "dispatcher", recorded: Collection[UUID] = (),
                 pending_id: int | None = None) -> int:
    """Clear the offer of runs whose message the queue refused, and record a ``released``
    event each, in one transaction of its own. Returns the number released; a later
    dispatcher pass offers them again. ``recorded``: runs inserted already recorded as
    accepted (a claim batch's), whose count of accepted offers is taken back;
    ``pending_id``: that batch's pending-offer row, deleted in the same transaction."""
    run_ids = list(run_ids)
    if not run_ids:
        if pending_id is not None:
            conn.execute(SQL["finish_pending_offer"], {"id": pending_id})
        return 0
    with conn.transaction():
        released = conn.execute(SQL["release_runs"], {"ids": run_ids, "now": now,
                                                      "recorded": list(recorded)}).fetchall()
        record_events(conn, (Event(r["schedule_id"], r["workspace_id"], "released", "publish_refused",
                                   run_id=r["id"]) for r in released), actor=actor, now=now)
        if pending_id is not None:
            conn.execute(SQL["finish_pending_offer"], {"id": pending_id})
    return len(released)


def publish_offers(conn: psycopg.Connection, publisher: RunPublisher, messages: list[RunMessage], *,
                   now: datetime, actor: str = "dispatcher", recorded: Collection[UUID] = (),
                   pending_id: int | None = None) -> tuple[int, int]:
    """Send the committed offers ``messages``; record the accepted ones as published and
    release the refused ones. Returns ``(published, released)``.

    The run pipeline's use of the one outbox (:func:`timekeeper.db.outbox.publish_committed`):
    accepted runs are recorded by ``mark_published``, refused ones by :func:`release_runs`.
    ``recorded`` names the runs of ``messages`` that a claim inserted already recorded as
    accepted, with its pending-offer row ``pending_id`` (see ``insert_runs``): an accepted
    one needs no record, and the row is deleted once the send is over (with the release
    of the refused ones, in their transaction), so a claim batch costs one statement
    after the send however many runs it has.

    Must be called after the offering transaction committed (a message never names a run
    the database does not have). If the process dies after the send and before the
    record, the next pass offers the run again; the consumer absorbs the duplicate.
    Raises ``psycopg.Error`` when recording fails (the messages were sent).
    """

    def record_accepted(conn: psycopg.Connection, accepted: list[RunMessage]) -> None:
        unrecorded = [m.run_id for m in accepted if not recorded or m.run_id not in recorded]
        if unrecorded:
            conn.execute(SQL["mark_published"], {"ids": unrecorded, "now": now})  # one statement, one round trip

    def record_refused(conn: psycopg.Connection, refused: list[RunMessage]) -> int:
        return release_runs(conn, [m.run_id for m in refused], now=now, actor=actor, recorded=recorded,
                            pending_id=pending_id)

    sent = publish_committed(conn, publisher, messages, Outbox(
        key=_run_id, record_accepted=record_accepted, record_refused=record_refused,
        after_accept="dispatcher.after_publish", before_refusal="dispatcher.before_release", name="runs"))
    return len(sent.accepted), sent.released


def _run_id(message: RunMessage) -> UUID:
    return message.run_id
