"""The tenant rule, in one place: a workspace comes only from the caller's claims.

A :class:`WorkspaceScope` is what a route gets instead of a connection: every owner action
it offers is the :mod:`timekeeper.schedules.service` function with the CALLER'S workspace
filled in (the routes never pass a workspace id), run on the API's tenant-walled
connection with that workspace entered (row-level security). Another workspace's schedule
is therefore never found: :class:`~timekeeper.schedules.service.ScheduleNotFound`, a 404.
The acting user is the caller's user id and ``now`` is read once per request at the edge.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

from timekeeper.api.auth import Identity
from timekeeper.api.db import TenantConnection
from timekeeper.schedules import service
from timekeeper.schedules.messages import RunMessage, RunPublisher
from timekeeper.schedules.work import WorkKindRegistry
from timekeeper.topology import pipeline_for_owner


class OwnerRoutedPublisher:
    """A :class:`RunPublisher` that sends each message to its owner's pipeline queue
    (``publisher_for(pipeline_name)``). A message of an owner without a pipeline is
    reported refused (released), never raised."""

    def __init__(self, publisher_for: Callable[[str], RunPublisher]) -> None:
        self._publisher_for = publisher_for

    def publish(self, messages: list[RunMessage]) -> set[UUID]:
        """Publish ``messages`` grouped by owner; return the refused run ids."""
        by_owner: dict[str, list[RunMessage]] = defaultdict(list)
        for message in messages:
            by_owner[message.owner].append(message)
        refused: set[UUID] = set()
        for owner, group in by_owner.items():
            try:
                publisher = self._publisher_for(pipeline_for_owner(owner).name)
            except KeyError:
                refused.update(m.run_id for m in group)
                continue
            refused |= publisher.publish(group)
        return refused


@dataclass(frozen=True)
class WorkspaceScope:
    """Owner actions bound to ``identity``'s workspace on ``conn`` at instant ``now`` (aware
    UTC). Each method runs the service function's own transaction(s) with the workspace
    entered; errors are the service's (``ScheduleNotFound``, ``InvalidRecurrence``,
    ``InvalidSubject``)."""

    identity: Identity
    conn: TenantConnection
    now: datetime
    publisher: RunPublisher
    #: The registered work kinds: create and update check the subject each one declares.
    kinds: WorkKindRegistry | None = None

    @property
    def workspace_id(self) -> UUID:
        """The caller's workspace: the only one this scope can see."""
        return self.identity.workspace_id

    def _call(self, action: Callable[..., Any], /, **kwargs: Any) -> Any:
        with self.conn.entered(self.workspace_id):
            return action(self.conn, workspace_id=self.workspace_id, **kwargs)

    def list(self, *, owner: str | None, status: str | None, after: tuple[datetime, UUID] | None,
             limit: int) -> service.SchedulePage:
        """A page of the workspace's schedules (see :func:`service.list_schedules`)."""
        return self._call(service.list_schedules, owner=owner, status=status, after=after, limit=limit)

    def details(self, schedule_id: UUID, *, history_limit: int) -> service.ScheduleDetails:
        """The schedule with its runs, events and next 5 occurrences."""
        return self._call(service.get_details, schedule_id=schedule_id, now=self.now, history_limit=history_limit,
                          upcoming=5)

    def create(self, **fields: Any) -> service.Schedule:
        """Create a schedule (``owner``, ``work_kind``, ``recurrence``, ``subject_id``, ``name``, ``active``)."""
        return self._call(service.create_schedule, actor=self.identity.user_id, now=self.now, kinds=self.kinds,
                          **fields)

    def update(self, schedule_id: UUID, **fields: Any) -> service.Schedule:
        """Change ``recurrence`` / ``name`` / ``subject_id`` (None keeps a field)."""
        return self._call(service.update_schedule, schedule_id=schedule_id, actor=self.identity.user_id,
                          now=self.now, kinds=self.kinds, **fields)

    def pause(self, schedule_id: UUID) -> service.Schedule:
        """Pause (idempotent) with reason ``paused_by_owner``."""
        return self._call(service.pause_schedule, schedule_id=schedule_id, actor=self.identity.user_id, now=self.now)

    def resume(self, schedule_id: UUID) -> service.Schedule:
        """Resume from now (no backlog); resets the failure streak."""
        return self._call(service.resume_schedule, schedule_id=schedule_id, actor=self.identity.user_id,
                          now=self.now)

    def delete(self, schedule_id: UUID) -> None:
        """Delete (kept for audit, gone from reads)."""
        self._call(service.delete_schedule, schedule_id=schedule_id, actor=self.identity.user_id, now=self.now)

    def run_now(self, schedule_id: UUID, *, idempotency_key: str | None) -> tuple[UUID, bool]:
        """Commit a manual run, then publish it to its owner's queue (released on refusal)."""
        return self._call(service.run_now, schedule_id=schedule_id, actor=self.identity.user_id, now=self.now,
                          publisher=self.publisher, idempotency_key=idempotency_key)
