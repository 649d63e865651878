"""The tenant rule, in one place: a workspace comes only from the caller's claims.

A :class:`WorkspaceScope` is what a route gets instead of a connection: every owner action
it offers is the :mod:`timekeeper.schedules.service` function with the CALLER'S workspace
filled in (the routes never pass a workspace id), run on the API's tenant-walled
connection with that workspace entered (row-level security). Another workspace's schedule
is therefore never found: :class:`~timekeeper.schedules.service.ScheduleNotFound`, a 404.
The acting user is the caller's user id and ``now`` is read once per request at the edge.

Snapshots: :class:`WorkspaceSnapshots` lists the CALLER'S workspace's periods under the
same rule. :class:`StaffScope` is the one exception to it, and is built only by
:meth:`StaffScope.of`, which refuses (403) a caller holding no staff role of a registered
snapshot type: staff act on a TARGET workspace named by the request, entered on the same
walled connection (row-level security shows that workspace and nothing else), so a
staff action can still touch only one workspace per transaction, and routes that never
build a ``StaffScope`` never see a workspace other than the caller's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from uuid import UUID

import psycopg

from timekeeper.api.auth import Identity
from timekeeper.api.db import TenantConnection
from timekeeper.api.errors import FORBIDDEN, IDEMPOTENCY_KEY_REUSED, ApiError
from timekeeper.db import idempotency
from timekeeper.platform.directory import Workspace, get_workspace
from timekeeper.schedules import service
from timekeeper.schedules.messages import RunMessage, RunPublisher
from timekeeper.schedules.work import WorkKindRegistry
from timekeeper.snapshots import ledger
from timekeeper.snapshots.registry import SnapshotRegistry
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
    ``InvalidSubject``, ``OwnRouteOnly``: create, update and run now refuse a work kind
    with a route of its own, and the reads, pause, resume and delete do not see its
    schedules)."""

    identity: Identity
    conn: TenantConnection
    now: datetime
    publisher: RunPublisher
    #: The registered work kinds: create and update check the subject each one declares.
    kinds: WorkKindRegistry | None = None
    #: The request's method and path (as routed): what an Idempotency-Key is bound to.
    method: str = ""
    path: str = ""

    @property
    def workspace_id(self) -> UUID:
        """The caller's workspace: the only one this scope can see."""
        return self.identity.workspace_id

    def claim_key(self, key: str | None, body: Any = None) -> str | None:
        """Bind the caller's Idempotency-Key to this request (see :func:`claim_key`)."""
        return claim_key(self.conn, self.identity, method=self.method, path=self.path, key=key, body=body,
                         now=self.now)

    def _call(self, action: Callable[..., Any], /, **kwargs: Any) -> Any:
        with self.conn.entered(self.workspace_id):
            return action(self.conn, workspace_id=self.workspace_id, **kwargs)

    def list(self, *, owner: str | None, status: str | None, after: tuple[datetime, UUID] | None,
             limit: int) -> service.SchedulePage:
        """A page of the workspace's schedules (see :func:`service.list_schedules`)."""
        return self._call(service.list_schedules, owner=owner, status=status, after=after, limit=limit,
                          kinds=self.kinds)

    def details(self, schedule_id: UUID, *, history_limit: int) -> service.ScheduleDetails:
        """The schedule with its runs, events and next 5 occurrences."""
        return self._call(service.get_details, schedule_id=schedule_id, now=self.now, history_limit=history_limit,
                          upcoming=5, kinds=self.kinds)

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
        return self._call(service.pause_schedule, schedule_id=schedule_id, actor=self.identity.user_id, now=self.now,
                          kinds=self.kinds)

    def resume(self, schedule_id: UUID) -> service.Schedule:
        """Resume from now (no backlog); resets the failure streak."""
        return self._call(service.resume_schedule, schedule_id=schedule_id, actor=self.identity.user_id,
                          now=self.now, kinds=self.kinds)

    def delete(self, schedule_id: UUID) -> None:
        """Delete (kept for audit, gone from reads)."""
        self._call(service.delete_schedule, schedule_id=schedule_id, actor=self.identity.user_id, now=self.now,
                   kinds=self.kinds)

    def run_now(self, schedule_id: UUID, *, idempotency_key: str | None) -> tuple[UUID, bool]:
        """Commit a manual run, then publish it to its owner's queue (released on refusal)."""
        return self._call(service.run_now, schedule_id=schedule_id, actor=self.identity.user_id, now=self.now,
                          publisher=self.publisher, idempotency_key=idempotency_key, kinds=self.kinds)


def claim_key(conn: TenantConnection, identity: Identity, *, method: str, path: str, key: str | None, body: Any,
              now: datetime) -> str | None:
    """Bind ``identity``'s Idempotency-Key ``key`` to this request (``method``, ``path``, and
    ``body``: a pydantic model, a JSON-ready value or None) at ``now`` (aware UTC), in the
    caller's workspace, before the route does its work; return the key the owner's rows
    are deduplicated by (:func:`timekeeper.db.idempotency.scoped_key`: the requester's
    alone), or None without a key.

    Raises a 409 :class:`ApiError` ``idempotency_key_reused`` naming the header when the
    caller used ``key`` for another method, path or body: a repeat must be the same request."""
    if key is None:
        return None
    if hasattr(body, "model_dump"):
        body = body.model_dump(mode="json")
    try:
        with conn.entered(identity.workspace_id):
            idempotency.claim(conn, workspace_id=identity.workspace_id, requester=identity.user_id, key=key,
                              method=method, path=path, body=body, now=now)
    except idempotency.KeyReused:
        raise ApiError(409, IDEMPOTENCY_KEY_REUSED, "this Idempotency-Key was used for another request (method, "
                       "path or body); send a new key for a new request", "Idempotency-Key") from None
    return idempotency.scoped_key(identity.user_id, key)


# ------------------------------------------------------------------------------ snapshots


@dataclass(frozen=True)
class WorkspacePeriods:
    """A workspace (its directory row: ``timezone`` is where its months end) and its
    snapshot periods (:class:`~timekeeper.snapshots.ledger.PeriodStatus`, newest first per type)."""

    workspace: Workspace
    periods: list[ledger.PeriodStatus]


def _workspace_periods(conn: TenantConnection, workspace_id: UUID, *, now: datetime, owner: str | None,
                       snapshot_type: str | None) -> WorkspacePeriods | None:
    """``workspace_id``'s periods read with that workspace entered (one transaction), or
    None when the directory has no such workspace."""
    with conn.entered(workspace_id), conn.transaction():
        workspace = get_workspace(conn, workspace_id)
        if workspace is None:
            return None
        return WorkspacePeriods(workspace, ledger.list_periods(conn, workspace_id=workspace_id,
                                                               timezone=workspace.timezone, now=now, owner=owner,
                                                               snapshot_type=snapshot_type))


@dataclass(frozen=True)
class WorkspaceSnapshots:
    """The caller's own workspace's snapshot periods (the tenant rule: the workspace is the
    identity's, never a parameter) at instant ``now`` (aware UTC)."""

    identity: Identity
    conn: TenantConnection
    now: datetime

    def periods(self, *, owner: str | None = None, snapshot_type: str | None = None) -> WorkspacePeriods | None:
        """The caller's workspace's periods (optionally of one owner / type); None when the
        workspace is not in the directory."""
        return _workspace_periods(self.conn, self.identity.workspace_id, now=self.now, owner=owner,
                                  snapshot_type=snapshot_type)


def staff_roles(registry: SnapshotRegistry) -> frozenset[str]:
    """Every claims role that is a staff role of a registered snapshot type (enabled or not)."""
    out: set[str] = set()
    for snapshot_type in registry.all():
        out |= snapshot_type.staff_roles
    return frozenset(out)


@dataclass(frozen=True)
class StaffScope:
    """Snapshot staff actions on a TARGET workspace (see the module docstring). Build it
    with :meth:`of`, never directly: that is where the staff role is checked."""

    identity: Identity
    conn: TenantConnection
    now: datetime
    registry: SnapshotRegistry

    @classmethod
    def of(cls, identity: Identity, *, conn: TenantConnection, now: datetime,
           registry: SnapshotRegistry) -> StaffScope:
        """The staff scope of ``identity``; raises a 403 :class:`ApiError` (``forbidden``)
        unless one of its roles is a staff role of a registered snapshot type."""
        if not identity.roles & staff_roles(registry):
            raise ApiError(403, FORBIDDEN, "this action needs a snapshot staff role (e.g. platform:staff)")
        return cls(identity=identity, conn=conn, now=now, registry=registry)

    def periods(self, workspace_id: UUID, *, owner: str | None = None,
                snapshot_type: str | None = None) -> WorkspacePeriods | None:
        """Any workspace's periods (every type); None when the directory has no such workspace."""
        return _workspace_periods(self.conn, workspace_id, now=self.now, owner=owner, snapshot_type=snapshot_type)

    def request_run(self, *, owner: str, snapshot_type: str, workspace_id: UUID, period: date, mode: str,
                    reason: str) -> ledger.SnapshotRun:
        """Record a staff request (:func:`timekeeper.snapshots.ledger.request_run`) in
        ``workspace_id``, entered on the walled connection, as the caller.

        Raises :class:`~timekeeper.snapshots.registry.UnknownSnapshotType` (``unsupported_type``,
        ``type_disabled``), a 403 :class:`ApiError` when none of the caller's roles is a staff
        role of that type, and the ledger's :class:`~timekeeper.snapshots.ledger.RequestRefused`
        / ``ValueError``; a run of the period committed concurrently (the insert's unique
        key) is ``RequestRefused("active_work")``."""
        found = self.registry.get(owner, snapshot_type)
        if not self.identity.roles & found.staff_roles:
            raise ApiError(403, FORBIDDEN, f"requests of {owner}/{snapshot_type} need the role "
                           f"{' or '.join(sorted(found.staff_roles))}")
        with self.conn.entered(workspace_id):
            try:
                return ledger.request_run(self.conn, snapshot_type=found, workspace_id=workspace_id, period=period,
                                          mode=mode, reason=reason, requested_by=self.identity.user_id, now=self.now)
            except psycopg.errors.UniqueViolation:
                # A run of the period was inserted meanwhile (the planner's version 1, or
                # another request) and committed while this insert waited: it is active now.
                raise ledger.RequestRefused("active_work", f"{period:%Y-%m} already has a run in progress") from None
