"""The delivery journal: every write of a delivery run, on a second connection beside the
run's transaction (``DeliveryServices.journal``), each committed at once and fenced by the
run's attempt.

A fenced write whose run is no longer ``running`` under this attempt writes nothing and
raises :class:`RunTakenOver`; the record of a message already submitted is not fenced (it
is the truth whatever happens next) but reports, in the same round trip, whether the
attempt still holds the run and the next recipient's outbox claim. The run's own
transaction (``ctx.conn``) only reads and settles; it is touched at least every
:data:`KEEPALIVE_S` seconds because the workers' login ends a session idle in a
transaction for 60 s.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import psycopg

from timekeeper.db import load_queries
from timekeeper.db.durability import commit_without_flush_wait
from timekeeper.db.rows import fetch_row, fetch_rows, fetch_value, from_row
from timekeeper.reporting.delivery_store import DeliverySource, QuerySchedule
from timekeeper.schedules.work import RunContext

SQL = load_queries("timekeeper.reporting", "delivery_journal.sql")

#: The run's transaction is used at least this often (seconds) while the handler works.
KEEPALIVE_S = 20
_ERROR_MESSAGES = {
    "rejected": "the provider rejected the message to this recipient; not retried",
    "invalid_address": "the provider refused this recipient's address; not retried",
    "throttled": "the provider throttled the submission; retried",
    "provider_error": "the provider failed to accept the submission; retried",
    "submission_error": "the submission failed before the provider answered; retried",
    "unconfirmed": "the sender stopped while this message was being submitted, so it may or may not have been "
                   "sent; not submitted again",
}


class RunTakenOver(Exception):  # noqa: N818 - a signal: another attempt holds the run
    """A journal write found the run no longer held by this attempt."""


@dataclass(frozen=True)
class Recipient:
    """A recipient resolved now: ``skip_reason`` (None: deliver), the name and address."""

    user_id: str
    skip_reason: str | None
    display_name: str
    email: str | None


class DeliveryJournal:
    """One attempt's journal: the run's context (``ctx``, whose ``conn`` is the run's own
    transaction), the journal's connection (``conn``, an idle connection beside the run's)
    and the keepalive of the run's transaction. ``monotonic`` is the clock (seconds) the
    keepalive measures idleness with."""

    def __init__(self, ctx: RunContext, conn: psycopg.Connection, *, monotonic: Callable[[], float]) -> None:
        self.ctx = ctx
        self.conn = conn
        self.params = {"run_id": ctx.run_id, "attempt": ctx.attempt}
        self._monotonic = monotonic
        self._touched = monotonic()

    def keepalive(self) -> None:
        """Use the run's transaction when it has been idle for :data:`KEEPALIVE_S`."""
        now = self._monotonic()
        if now - self._touched >= KEEPALIVE_S:
            self.ctx.conn.execute(SQL["keepalive"])
            self._touched = now

    def write(self, statement: str, params: dict[str, Any], *, fenced: bool = True) -> dict[str, Any] | None:
        """Run one journal statement in a transaction of its own; returns its first row.
        ``fenced``: a statement that returns no row means the run was taken over."""
        with self.conn.transaction():
            row = fetch_row(self.conn, statement, {**self.params, **params})
        if fenced and row is None:
            raise RunTakenOver(f"run {self.ctx.run_id} is no longer held by attempt {self.ctx.attempt}")
        return row

    def taken_over(self) -> RunTakenOver:
        """The error that stops an attempt that no longer holds its run."""
        return RunTakenOver(f"run {self.ctx.run_id} is no longer held by attempt {self.ctx.attempt}")


def record_source(journal: DeliveryJournal, schedule: QuerySchedule, actor: str, **values: Any) -> DeliverySource:
    """Record (fenced) the run's complete file; ``values`` are the source's columns
    (``object_key``, ``byte_size``, ``sha256`` and the query's or report's). Raises
    :class:`RunTakenOver`."""
    row = journal.write(SQL["record_source"], {
        "workspace_id": schedule.workspace_id, "schedule_id": schedule.schedule_id,
        "source_kind": schedule.source_kind, "format": schedule.format, "acted_for": actor, "now": journal.ctx.now,
        "row_count": None, "query_id": None, "query_version": None, "report_id": None, "report_version": None,
        "render_id": None, "version_changed": False, "section_row_counts": None,
        "snapshot_basis": None, "snapshot_version_changed": False, **values})
    assert row is not None
    return from_row(DeliverySource, row)


def record_skips(journal: DeliveryJournal, schedule: QuerySchedule, skips: list[Recipient]) -> None:
    """Record the skipped recipients in one fenced statement; a recipient whose earlier
    submission failed (and was to be retried) is settled ``skipped`` with the reason.
    Raises :class:`RunTakenOver`."""
    if not skips:
        return
    journal.write(SQL["record_skips"], {
        "workspace_id": schedule.workspace_id, "schedule_id": schedule.schedule_id, "now": journal.ctx.now,
        "users": [r.user_id for r in skips], "reasons": [r.skip_reason for r in skips]})
    held = journal.write(SQL["held"], {}, fenced=False)
    if held is None:
        raise journal.taken_over()


def claim_all(journal: DeliveryJournal, schedule: QuerySchedule, user_ids: list[str]) -> dict[str, str | None]:
    """Claim the outbox rows of every recipient to send in one fenced statement (rows an
    earlier attempt claimed without a recorded submission are taken over). Returns each
    recipient's recorded provider message id, or None (claimed: send). Raises
    :class:`RunTakenOver`."""
    if not user_ids:
        return {}
    with journal.conn.transaction():
        commit_without_flush_wait(journal.conn)  # a lost claim is claimed again
        held = fetch_row(journal.conn, SQL["held"], journal.params)
        if held is None:
            raise journal.taken_over()
        rows = fetch_rows(journal.conn, SQL["claim_outbox"], {**journal.params, "workspace_id": schedule.workspace_id,
                                                             "now": journal.ctx.now, "users": user_ids})
        claimed = {r["user_id"] for r in rows}
        recorded = {r["user_id"]: r["provider_message_id"]
                    for r in fetch_rows(journal.conn, SQL["recorded_submissions"], journal.params)}
    return {user_id: (None if user_id in claimed else recorded.get(user_id)) for user_id in user_ids}


def unconfirmed_submissions(journal: DeliveryJournal) -> set[str]:
    """The recipients of the run whose submission has a 'sending' claim and no recorded
    provider id: the attempt that submitted died or was taken over between the claim and the
    record, so whether the provider accepted the message is not known. Fenced as
    :func:`claim_all` is (what the caller then records carries this attempt): raises
    :class:`RunTakenOver` when the attempt no longer holds the run."""
    with journal.conn.transaction():
        if fetch_row(journal.conn, SQL["held"], journal.params) is None:
            raise journal.taken_over()
        return {r["user_id"] for r in fetch_rows(journal.conn, SQL["unconfirmed_submissions"], journal.params)}


def claim_sending(journal: DeliveryJournal, user_id: str) -> None:
    """Journal the 'sending' claim of ``user_id``'s message just before it is submitted, in a
    transaction of its own committed with the WAL flush wait (a claim the database lost could
    let a later attempt submit the message again). Fenced: raises :class:`RunTakenOver` when
    the attempt no longer holds the run or the recipient's outbox claim."""
    row = journal.write(SQL["claim_sending"], {"user_id": user_id, "now": journal.ctx.now}, fenced=False)
    if row is None:
        raise journal.taken_over()


def _outbox_key(run_id: Any, user_id: str | None) -> str | None:
    """The outbox's communication key of ``user_id``'s message of run ``run_id``
    (``<run id>:<user id>``); None when there is no such recipient."""
    return None if user_id is None else f"{run_id}:{user_id}"


def record_sent(journal: DeliveryJournal, schedule: QuerySchedule, recipient: Recipient, message_id: str,
                link_expires_at: datetime | None, *, submitted: bool, next_user: str | None) -> bool:
    """Record an accepted submission: the outbox's provider id and a ``sent`` delivery row,
    in one statement (not fenced: the message was sent whatever happens to the run; an id
    already recorded, e.g. by an attempt that took the run over, is kept). ``submitted``:
    this attempt made the submission (counted in ``submissions``; False when it re-records
    an earlier attempt's). Returns whether the attempt still holds the run and
    ``next_user``'s claim, the fence before the next submission, in the same round trip.
    It commits without waiting for the WAL flush: a process crash cannot lose it, a
    database crash in the next fraction of a second can (that recipient would be sent
    again)."""
    held = fetch_value(journal.conn, SQL["record_sent"], {
        **journal.params, "id": message_id, "now": journal.ctx.now, "user_id": recipient.user_id,
        "workspace_id": schedule.workspace_id, "schedule_id": schedule.schedule_id,
        "address": recipient.email, "expires": link_expires_at, "submitted": 1 if submitted else 0,
        "next_key": _outbox_key(journal.ctx.run_id, next_user)})
    return bool(held)


def record_failed(journal: DeliveryJournal, schedule: QuerySchedule, recipient: Recipient, code: str, *,
                  next_user: str | None, release: bool = True) -> bool:
    """Record a submission that raised: the outbox's last error (the code) and a ``failed``
    row with ``error_code`` and a fixed message (never the provider's text, which can name
    addresses). ``release``: the provider answered, so the 'sending' claim is released
    (False for ``unconfirmed``: the claim stays and the message is never submitted again).
    Returns whether the attempt still holds the run and ``next_user``'s claim."""
    with journal.conn.transaction():
        held = fetch_value(journal.conn, SQL["record_failed"], {
            **journal.params, "error": _ERROR_MESSAGES[code], "code": code, "now": journal.ctx.now,
            "user_id": recipient.user_id, "workspace_id": schedule.workspace_id, "schedule_id": schedule.schedule_id,
            "address": recipient.email, "next_key": _outbox_key(journal.ctx.run_id, next_user), "release": release})
    return bool(held)


__all__ = ["KEEPALIVE_S", "DeliveryJournal", "Recipient", "RunTakenOver", "claim_all", "claim_sending",
           "record_failed", "record_sent", "record_skips", "record_source", "unconfirmed_submissions"]
