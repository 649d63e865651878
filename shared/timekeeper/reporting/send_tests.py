"""A delivery's test send ("Send a test to me"): one message of the delivery to the person
who asks, and nothing else changed.

A test send is a run of trigger ``test`` requested through the schedules' one Run now path
(:func:`timekeeper.schedules.service.run_now`), so the queries pipeline runs it as it runs
any delivery (:func:`timekeeper.reporting.delivery.deliver`): it acts for the requester,
builds the same file, link and message, keeps the delivery's empty-result behaviour, and
records the outcome in the delivery's ledger, where the run shows as ``test``. Its one
recipient is the requester (their own address from the directory), never the delivery's
recipients; settlement leaves the schedule's failure streak, last run and ``next_due_at``
as they were and tells no owner of its failure.

Before the run is committed (in its transaction, the schedule row locked) the requester
is resolved as a run resolves a recipient: one the run would skip (``no_address``,
``unsubscribed``, ``suppressed``, ``no_access``...) is refused with :class:`NotSendable`.
Limits (:class:`TestLimited`): :data:`PER_DELIVERY_PER_HOUR` test runs of one delivery
and :data:`PER_PERSON_PER_HOUR` of one person in the workspace within any hour.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from uuid import UUID

import psycopg

from timekeeper.db import load_queries
from timekeeper.db.rows import fetch_rows
from timekeeper.reporting.delivery import TEST, get_query_schedule, resolve_recipient
from timekeeper.schedules import service
from timekeeper.schedules.messages import RunPublisher
from timekeeper.schedules.models import Schedule

SQL = load_queries("timekeeper.reporting", "send_tests.sql")

#: Test runs one delivery may have within any hour (whoever asked).
PER_DELIVERY_PER_HOUR = 5
#: Test runs one person may ask for within any hour in a workspace (all deliveries).
PER_PERSON_PER_HOUR = 20
WINDOW = timedelta(hours=1)


class TestLimited(Exception):
    """Too many test sends: ``reason`` says which limit (safe to show), ``retry_after_s``
    the whole seconds until one more is allowed (>= 1)."""

    __test__ = False  # not a pytest class

    def __init__(self, reason: str, retry_after_s: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.retry_after_s = retry_after_s


class NotSendable(Exception):
    """The requester cannot be sent to: ``skip_reason`` is the delivery's own
    (``no_address``, ``unsubscribed``, ``suppressed``, ``no_access``, ``deactivated``,
    ``left_workspace``), ``reason`` a sentence to show."""

    def __init__(self, skip_reason: str, reason: str) -> None:
        super().__init__(reason)
        self.skip_reason = skip_reason
        self.reason = reason


_REASONS = {
    "no_address": "you have no email address in the directory, so a test cannot be sent to you",
    "unsubscribed": "you opted out of this delivery's messages, so a test cannot be sent to you",
    "suppressed": "your address is on the workspace's suppression list (it bounced or complained), so a test "
                  "cannot be sent to you",
}


def _retry_after(oldest: datetime, now: datetime) -> int:
    return max(1, math.ceil((oldest + WINDOW - now).total_seconds()))


def _admit(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID, actor: str, now: datetime) -> None:
    """Refuse a test the requester cannot receive (:class:`NotSendable`) or past a limit
    (:class:`TestLimited`); called with the schedule row locked."""
    settings = get_query_schedule(conn, workspace_id=workspace_id, schedule_id=schedule_id)
    if settings is None:
        raise service.ScheduleNotFound(str(schedule_id))
    recipient = resolve_recipient(conn, settings, actor)
    if recipient.skip_reason is not None:
        raise NotSendable(recipient.skip_reason, _REASONS.get(
            recipient.skip_reason, f"you may not receive this delivery now ({recipient.skip_reason})"))
    params = {"ws": workspace_id, "schedule_id": schedule_id, "user_id": actor, "since": now - WINDOW}
    conn.execute(SQL["lock_person"], params)
    (of_schedule,) = fetch_rows(conn, SQL["recent_of_schedule"], params)
    if of_schedule["n"] >= PER_DELIVERY_PER_HOUR:
        raise TestLimited(f"this delivery was sent as a test {PER_DELIVERY_PER_HOUR} times within the hour; "
                          "try again later", _retry_after(of_schedule["oldest"], now))
    (of_person,) = fetch_rows(conn, SQL["recent_of_person"], params)
    if of_person["n"] >= PER_PERSON_PER_HOUR:
        raise TestLimited(f"you asked for {PER_PERSON_PER_HOUR} test sends within the hour; try again later",
                          _retry_after(of_person["oldest"], now))


def request_test(conn: psycopg.Connection, *, workspace_id: UUID, schedule_id: UUID, actor: str, now: datetime,
                 publisher: RunPublisher, idempotency_key: str | None = None) -> tuple[UUID, bool]:
    """Commit a test run of query schedule ``schedule_id`` for ``actor`` at ``now`` (aware
    UTC), then publish it to the queries pipeline (the Run now path, trigger ``test``).
    Returns ``(run_id, created)``; a repeated ``idempotency_key`` returns the first run with
    ``created=False`` (no limit counted). The caller checks the person's access first.
    Raises :class:`NotSendable`, :class:`TestLimited` and
    :class:`~timekeeper.schedules.service.ScheduleNotFound`."""

    def admit(conn: psycopg.Connection, _schedule: Schedule) -> None:
        _admit(conn, workspace_id=workspace_id, schedule_id=schedule_id, actor=actor, now=now)

    return service.run_now(conn, workspace_id=workspace_id, schedule_id=schedule_id, actor=actor, now=now,
                           publisher=publisher, idempotency_key=idempotency_key, trigger=TEST, admit=admit)


__all__ = ["PER_DELIVERY_PER_HOUR", "PER_PERSON_PER_HOUR", "NotSendable", "TestLimited", "request_test"]
