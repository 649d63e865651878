"""A workspace's settings its admins change: the time zone, the locale of files and
messages, and who gets notices (``notify_admins`` and each member's notice e-mails).

Every change is recorded in the workspace's audit log (:func:`timekeeper.platform.audit.record_event`)
in the same transaction: ``settings.updated`` with the changed fields before and after,
``settings.notice_mail`` for a member's notice e-mails.

The zone: the workspace's zone is where its people read times and where its months
(snapshot periods, report months) begin and end; each schedule's rule carries its own zone.
A zone change with ``move_schedules`` also moves every live schedule whose rule is in the
OLD zone to the new one, each through the code that changes a schedule's rule
(:func:`timekeeper.schedules.service.update_schedule`): a new definition version, an
``updated`` history event, and ``next_due_at`` recomputed as the first occurrence of the
moved rule after ``now`` (no backlog; a paused schedule keeps none), and so a
``schedule.updated`` (``delivery.updated``) audit event per schedule. Without it the schedules keep their rules
and their next due instants. :func:`preview_zone` shows what a change would do first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg

from timekeeper.db import load_queries
from timekeeper.db.rows import execute, fetch_all, fetch_one, fetch_row, fetch_rows, fetch_value
from timekeeper.platform import audit
from timekeeper.platform.directory import check_locale, check_timezone
from timekeeper.schedules import service
from timekeeper.schedules.closures import workspace_rule
from timekeeper.schedules.models import UpcomingOccurrence
from timekeeper.schedules.recurrence import InvalidRecurrence, parse_rule

SQL = load_queries("timekeeper.platform", "workspace_settings.sql")

#: How many schedules a zone preview lists (it counts them all).
PREVIEW_SCHEDULES = 20
#: How many occurrences before and after a zone preview gives per schedule.
PREVIEW_OCCURRENCES = 3
#: The most members the notice e-mail list returns.
MAX_MEMBERS = 500
#: The most schedules a zone change moves in one request: each is a rule update (about
#: 5 ms on a busy machine), and a request must end well within the API's 29 s.
MAX_MOVED_SCHEDULES = 1000


class TooManyToMove(ValueError):
    """More schedules are in the old zone than one change moves (:data:`MAX_MOVED_SCHEDULES`)."""

    def __init__(self, count: int) -> None:
        super().__init__(f"{count} schedules have their rule in the current zone; one change moves at most "
                         f"{MAX_MOVED_SCHEDULES}: change the zone without moving them, and edit their rules")
        self.count = count


class ScheduleWouldNotRun(ValueError):
    """A schedule a zone change would move has a rule that would not run in the new zone
    (no occurrence within ten years there, e.g. a rule whose end has already passed in it):
    ``schedule_id``, ``name``, ``zone`` and ``reason`` (the rule check's field and reason)."""

    def __init__(self, schedule_id: UUID, name: str, zone: str, reason: str) -> None:
        super().__init__(f"the schedule {name!r} ({schedule_id}) would not run in {zone}: {reason}")
        self.schedule_id, self.name, self.zone, self.reason = schedule_id, name, zone, reason


class NotAMember(LookupError):
    """The user is not an active, current member of the workspace."""


class PersonsOwnOptOut(PermissionError):
    """The person turned their notice e-mails off themselves: only they turn them back on."""


@dataclass(frozen=True)
class WorkspaceSettings:
    """``timezone`` (IANA), ``locale`` (CLDR, e.g. ``de_DE``) and ``notify_admins``
    (whether the workspace's admins get a copy of every notice about its schedules)."""

    timezone: str
    locale: str
    notify_admins: bool


@dataclass(frozen=True)
class MemberNoticeMail:
    """A member and their notice e-mails: ``opted_out_at`` (aware UTC) when off, None when
    on; ``set_by`` who turned them off (None: the person themselves)."""

    user_id: str
    display_name: str
    opted_out_at: datetime | None
    set_by: str | None


@dataclass(frozen=True)
class ScheduleZoneChange:
    """One schedule a zone change would move: its next occurrences in the old zone
    (``before``) and in the new one (``after``), and ``next_due_before`` /
    ``next_due_after`` (aware UTC; None for a paused schedule, which keeps none).
    ``would_not_run``: why its rule would not run in the new zone (``after`` is then
    empty, and moving the schedules is refused), None when it would."""

    id: UUID
    name: str
    status: str
    before: list[UpcomingOccurrence]
    after: list[UpcomingOccurrence]
    next_due_before: datetime | None
    next_due_after: datetime | None
    would_not_run: str | None = None


@dataclass(frozen=True)
class ZonePreview:
    """What changing the zone from ``old`` to ``new`` does: ``affected`` schedules in the
    old zone (all counted), the first :data:`PREVIEW_SCHEDULES` of them by name in
    ``schedules``, and in ``would_not_run`` every one of them (up to
    :data:`MAX_MOVED_SCHEDULES`, by name) whose rule would not run in the new zone: a change
    that moves the schedules is then refused (:class:`ScheduleWouldNotRun`)."""

    old: str
    new: str
    affected: int
    schedules: list[ScheduleZoneChange]
    would_not_run: list[ScheduleWouldNotRun] = field(default_factory=list)


#: The statement that writes each setting.
SET_STATEMENTS = {"timezone": "set_timezone", "locale": "set_locale", "notify_admins": "set_notify_admins"}


def get_settings(conn: psycopg.Connection, workspace_id: UUID) -> WorkspaceSettings:
    """The workspace's settings; raises ``LookupError`` for a workspace not visible."""
    row = fetch_one(conn, SQL["read_settings"], {"workspace_id": workspace_id}, WorkspaceSettings)
    if row is None:
        raise LookupError(f"no workspace {workspace_id}")
    return row


def list_notice_mail(conn: psycopg.Connection, workspace_id: UUID) -> list[MemberNoticeMail]:
    """The workspace's active, current members by display name (at most :data:`MAX_MEMBERS`),
    each with their notice e-mail setting."""
    return fetch_all(conn, SQL["notice_mail"], {"workspace_id": workspace_id, "limit": MAX_MEMBERS},
                     MemberNoticeMail)


def _moved(rule: dict[str, Any], zone: str) -> dict[str, Any]:
    return {**rule, "timezone": zone}


def preview_zone(conn: psycopg.Connection, *, workspace_id: UUID, timezone: str, now: datetime,
                 occurrences: int = PREVIEW_OCCURRENCES) -> ZonePreview:
    """What moving the workspace (and its schedules in the current zone) to ``timezone``
    would change, computed after ``now`` (aware UTC) by the rule preview code; nothing is
    written. Raises :class:`~timekeeper.platform.directory.InvalidTimezone`."""
    check_timezone(timezone)
    old = get_settings(conn, workspace_id).timezone
    params = {"workspace_id": workspace_id, "timezone": old}
    affected = int(fetch_value(conn, SQL["count_in_zone"], params)) if timezone != old else 0
    rows = fetch_rows(conn, SQL["schedules_in_zone"], {**params, "limit": MAX_MOVED_SCHEDULES}) if affected else []
    refused = {row["id"]: reason for row in rows
               if (reason := _would_not_run(conn, workspace_id, row["recurrence"], timezone, now)) is not None}
    changes = []
    for row in rows[:PREVIEW_SCHEDULES]:
        before = _upcoming(conn, workspace_id, row["recurrence"], now, occurrences)
        reason = refused.get(row["id"])
        after = [] if reason else _upcoming(conn, workspace_id, _moved(row["recurrence"], timezone), now,
                                            occurrences)
        active = row["status"] == "active"
        changes.append(ScheduleZoneChange(id=row["id"], name=row["name"], status=row["status"], before=before,
                                          after=after, next_due_before=row["next_due_at"],
                                          next_due_after=after[0].at if active and after else None,
                                          would_not_run=reason))
    return ZonePreview(old=old, new=timezone, affected=affected, schedules=changes, would_not_run=[
        ScheduleWouldNotRun(row["id"], row["name"], timezone, refused[row["id"]]) for row in rows
        if row["id"] in refused])


def _upcoming(conn: psycopg.Connection, workspace_id: UUID, rule: dict[str, Any], now: datetime,
              count: int) -> list[UpcomingOccurrence]:
    """The rule's next ``count`` occurrences after ``now``; none when it does not run."""
    try:
        return service.preview_rule(conn, rule=rule, now=now, count=count, workspace_id=workspace_id)[2]
    except InvalidRecurrence:
        return []


def _would_not_run(conn: psycopg.Connection, workspace_id: UUID, rule: dict[str, Any], zone: str,
                   now: datetime) -> str | None:
    """Why ``rule`` moved to ``zone`` would not run (the check a move makes: it validates
    and fires within ten years of ``now``, a business-day rule with the workspace's
    closures), or None."""
    moved = _moved(rule, zone)
    try:
        workspace_rule(conn, parse_rule(moved), moved, workspace_id=workspace_id).check_fires(now)
    except InvalidRecurrence as error:
        return str(error)
    return None


def update_settings(conn: psycopg.Connection, *, workspace_id: UUID, actor: str, now: datetime,
                    timezone: str | None = None, move_schedules: bool = False, locale: str | None = None,
                    notify_admins: bool | None = None) -> tuple[WorkspaceSettings, int]:
    """Change the given settings (None: unchanged) in one transaction, with one
    ``settings.updated`` audit event of the changed fields (none when nothing changed).
    ``move_schedules`` moves the schedules in the old zone with a zone change (module
    docstring). Returns the settings and how many schedules moved. Raises
    :class:`~timekeeper.platform.directory.InvalidTimezone`,
    :class:`~timekeeper.platform.directory.InvalidLocale`, ``LookupError`` (no workspace),
    :class:`ScheduleWouldNotRun` (a moved rule that would not fire within ten years; it
    names the first such schedule by name; nothing changes),
    :class:`TooManyToMove` (more than :data:`MAX_MOVED_SCHEDULES` to move; nothing changes)."""
    if timezone is not None:
        check_timezone(timezone)
    if locale is not None:
        check_locale(locale)
    with conn.transaction():
        row = fetch_row(conn, SQL["get_settings"], {"workspace_id": workspace_id})
        if row is None:
            raise LookupError(f"no workspace {workspace_id}")
        wanted = {"timezone": timezone, "locale": locale, "notify_admins": notify_admins}
        changed = {k: v for k, v in wanted.items() if v is not None and v != row[k]}
        moved = 0
        for field, value in changed.items():
            execute(conn, SQL[SET_STATEMENTS[field]], {"workspace_id": workspace_id, field: value})
        if "timezone" in changed and move_schedules:
            moved = _move_schedules(conn, workspace_id=workspace_id, old=row["timezone"], new=changed["timezone"],
                                    actor=actor, now=now)
        if changed:
            after: dict[str, Any] = dict(changed)
            if "timezone" in changed:
                after["schedules_moved"] = moved
            audit.record_event(conn, workspace_id=workspace_id, actor=actor, kind="settings.updated",
                               subject_type="workspace", subject_id=str(workspace_id),
                               before={k: row[k] for k in changed}, after=after, now=now)
    return get_settings(conn, workspace_id), moved


def _move_schedules(conn: psycopg.Connection, *, workspace_id: UUID, old: str, new: str, actor: str,
                    now: datetime) -> int:
    rows = fetch_rows(conn, SQL["schedules_in_zone"], {"workspace_id": workspace_id, "timezone": old,
                                                       "limit": MAX_MOVED_SCHEDULES + 1})
    if len(rows) > MAX_MOVED_SCHEDULES:
        raise TooManyToMove(int(fetch_value(conn, SQL["count_in_zone"], {"workspace_id": workspace_id,
                                                                         "timezone": old})))
    for row in rows:
        try:
            service.update_schedule(conn, workspace_id=workspace_id, schedule_id=row["id"], actor=actor, now=now,
                                    recurrence=_moved(row["recurrence"], new))
        except InvalidRecurrence as error:
            raise ScheduleWouldNotRun(row["id"], row["name"], new, str(error)) from None
    return len(rows)


def set_notice_mail(conn: psycopg.Connection, *, workspace_id: UUID, user_id: str, mail: bool, actor: str,
                    now: datetime) -> MemberNoticeMail:
    """An admin turns ``user_id``'s notice e-mails of the workspace on or off (repeating it
    changes nothing), with a ``settings.notice_mail`` audit event when it changed. Raises
    :class:`NotAMember` and, turning on what the person turned off themselves,
    :class:`PersonsOwnOptOut`. Returns the member's setting afterwards."""
    params = {"workspace_id": workspace_id, "user_id": user_id}
    with conn.transaction():
        # One change of a person's notice mail at a time: two at once would both read "on" (or
        # "off") and both write, one failing on the opt-out's key, both auditing a change.
        execute(conn, SQL["lock_notice_mail"], params)
        if fetch_value(conn, SQL["is_member"], params) is None:
            raise NotAMember(user_id)
        current = fetch_row(conn, SQL["opt_out_of"], params)
        if mail and current is not None:
            if current["set_by"] is None:
                raise PersonsOwnOptOut(user_id)
            execute(conn, SQL["admin_resume"], params)
        elif not mail and current is None:
            execute(conn, SQL["admin_opt_out"], {**params, "now": now, "set_by": actor})
        if mail == (current is not None):
            audit.record_event(conn, workspace_id=workspace_id, actor=actor, kind="settings.notice_mail",
                               subject_type="person", subject_id=user_id, before={"mail": not mail},
                               after={"mail": mail}, now=now)
    return next(m for m in list_notice_mail(conn, workspace_id) if m.user_id == user_id)
