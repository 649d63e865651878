"""A deleted schedule's address: the routes that read one schedule answer 410
``schedule_deleted`` (:class:`~timekeeper.api.errors.ScheduleGone`: when, and by whom where
the workspace's history still says so) for a schedule of the caller's workspace that was
deleted, and stay a 404 for one that never was, or was another workspace's (the tenant
wall: :func:`timekeeper.schedules.service.get_deletion` reads the caller's workspace only).
"""

from __future__ import annotations

from uuid import UUID

import psycopg

from timekeeper.api.errors import ScheduleGone
from timekeeper.platform.directory import display_names, workspace_timezone
from timekeeper.schedules import service
from timekeeper.schedules.work import WorkKindRegistry


def raise_if_deleted(conn: psycopg.Connection, workspace_id: UUID, schedule_id: UUID, *,
                     kinds: WorkKindRegistry | None, route: str | None) -> None:
    """Raise :class:`ScheduleGone` when ``schedule_id`` is a deleted schedule of
    ``workspace_id`` read through ``route`` (None: the generic ``/schedules``; else the
    :attr:`~timekeeper.schedules.work.WorkKind.route` of its kind, e.g. ``/query-schedules``).
    A deleted schedule of a kind another route owns is not this route's: nothing is raised
    (the caller answers its 404). Returns None when there is nothing to tell."""
    deletion = service.get_deletion(conn, workspace_id=workspace_id, schedule_id=schedule_id)
    if deletion is None:
        return
    kind = kinds.find(deletion.owner, deletion.work_kind) if kinds is not None else None
    if (kind.route if kind is not None else None) != route:
        return
    name = display_names(conn, [deletion.deleted_by]).get(deletion.deleted_by) if deletion.deleted_by else None
    raise ScheduleGone(deletion.deleted_at, deletion.deleted_by, name or None, workspace_timezone(conn, workspace_id))
