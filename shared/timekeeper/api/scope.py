"""The tenant rule, the access rule's refusals and the request's transaction, in one place.

A :class:`WorkspaceScope` is what a workspace route gets instead of a connection (from the
dependency of its role, :func:`scope_for`): a workspace comes only from the caller's
claims, and every action it offers runs on the API's tenant-walled connection with that
workspace entered (row-level security). Another workspace's schedule, query or report is
therefore never found: a 404. The acting user is the caller's user id and ``now`` is
read once per request at the edge. The scope also asks the access rule of
:mod:`timekeeper.platform.access` (every refusal through
:func:`timekeeper.api.errors.access_refused`), says where a transaction opens
(:meth:`WorkspaceScope.unit`, :meth:`WorkspaceScope.call`) and binds an Idempotency-Key
to its request (:func:`claim_key`).

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
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from uuid import UUID

import psycopg
from aws_lambda_powertools.event_handler import Response
from aws_lambda_powertools.event_handler.request import Request

from timekeeper.api import idempotent, snapshot_audit
from timekeeper.api.auth import Identity, identity_from_event
from timekeeper.api.db import TenantConnection
from timekeeper.api.errors import FORBIDDEN, NOT_FOUND, ApiError, access_refused
from timekeeper.api.idempotent import claim_key
from timekeeper.api.routing import ApiContext, api_context, checked_first
from timekeeper.observability import set_log_keys
from timekeeper.platform import access, audit, erasure
from timekeeper.platform.directory import Workspace, display_names, get_workspace, workspace_timezone
from timekeeper.schedules import closures, operations, service
from timekeeper.schedules.messages import RunMessage, RunPublisher
from timekeeper.schedules.work import WorkKindRegistry
from timekeeper.snapshots import ledger, staff
from timekeeper.snapshots.registry import SnapshotRegistry, SnapshotType
from timekeeper.topology import PIPELINES, pipeline_for_owner


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
    """The caller's request, bound to ``identity``'s workspace on ``conn`` at instant ``now``
    (aware UTC): what every route of a workspace resource gets (from the one dependency of
    :func:`scope_for`). It offers the owner actions of
    :mod:`timekeeper.schedules.service` and the three ways a route reaches the database,
    which are also the rule for where a transaction opens:

    * :meth:`unit` -- ONE transaction with the workspace entered, the access rule asked
      first when a permission is given, then the route's repository calls (reads, and
      writes that publish nothing);
    * :meth:`person` then :meth:`call` -- for a service that opens its own transactions
      and publishes after commit (Run now, an export request, the schedule owner actions):
      the access rule in a transaction of its own, then the service outside any;
    * routes never call ``conn.transaction()`` themselves.

    Every access refusal leaves through :func:`timekeeper.api.errors.access_refused` (403
    with the rule's reason, 404 for what the workspace does not have). Errors of the
    schedule actions are the service's (``ScheduleNotFound``, ``InvalidRecurrence``,
    ``InvalidSubject``, ``OwnRouteOnly``: create, update and run now refuse a work kind
    with a route of its own, and the reads, pause, resume and delete do not see its
    schedules)."""

    identity: Identity
    conn: TenantConnection
    now: datetime
    publisher: RunPublisher | None = None
    #: The registered work kinds: create and update check the subject each one declares.
    kinds: WorkKindRegistry | None = None
    #: The request's method and path (as routed): what an Idempotency-Key is bound to.
    method: str = ""
    path: str = ""

    @property
    def workspace_id(self) -> UUID:
        """The caller's workspace: the only one this scope can see."""
        return self.identity.workspace_id

    @property
    def user_id(self) -> str:
        """The caller (the acting user of every action)."""
        return self.identity.user_id

    def _check(self, permission: str, *, query_id: UUID | None, report_id: UUID | None, noun: str) -> None:
        if query_id is not None:
            decision = access.check_query(self.conn, workspace_id=self.workspace_id, user_id=self.user_id,
                                          query_id=query_id, permission=permission)
        elif report_id is not None:
            decision = access.check_report(self.conn, workspace_id=self.workspace_id, user_id=self.user_id,
                                           report_id=report_id, permission=permission)
        else:
            decision = access.check_person(self.conn, workspace_id=self.workspace_id, user_id=self.user_id,
                                           permission=permission)
        if not decision:
            raise access_refused(decision.reason or access.NOT_FOUND, noun)

    @contextmanager
    def unit(self, permission: str | None = None, *, query_id: UUID | None = None, report_id: UUID | None = None,
             noun: str = "object") -> Iterator[TenantConnection]:
        """ONE transaction in the caller's workspace, yielding the connection: first the
        access rule for ``permission`` (of the person; of ``query_id`` or ``report_id``
        when given), then the block. A refusal is :func:`access_refused` (``noun`` names
        the missing thing in a 404); an exception rolls the transaction back."""
        with workspace_unit(self.conn, self.workspace_id):
            if permission is not None:
                self._check(permission, query_id=query_id, report_id=report_id, noun=noun)
            yield self.conn

    def check_access(self, permission: str, *, query_id: UUID | None = None, report_id: UUID | None = None,
                     noun: str = "object") -> None:
        """Ask the access rule only, in a transaction of its own (before :meth:`call`): the
        person's ``permission`` (of ``query_id`` or ``report_id`` when given). Returns
        nothing; a refusal raises :func:`access_refused` (a 403 with the rule's reason, or a
        404 naming ``noun``)."""
        with self.unit(permission, query_id=query_id, report_id=report_id, noun=noun):
            pass

    def call(self, action: Callable[..., Any], /, **kwargs: Any) -> Any:
        """``action(conn, workspace_id=<the caller's>, **kwargs)`` with the workspace entered
        and no transaction open: a service that opens its own (and publishes after commit)."""
        with self.conn.entered(self.workspace_id):
            return action(self.conn, workspace_id=self.workspace_id, **kwargs)

    def claim_key(self, key: str | None, body: Any = None) -> str | None:
        """Bind the caller's Idempotency-Key to this request (see :func:`claim_key`)."""
        return claim_key(self.conn, self.identity, method=self.method, path=self.path, key=key, body=body,
                         now=self.now)

    def create_once(self, key: str | None, body: Any, create: Callable[[], Response]) -> Response:
        """Answer a creating request once per Idempotency-Key (:func:`timekeeper.api.idempotent.create_once`:
        a 409 when the key named another request; a replay carries ``Idempotent-Replayed: true``; a twin sent
        at once waits for the first and replays it; without a key, just ``create()``)."""
        return idempotent.create_once(self.conn, self.identity, method=self.method, path=self.path, now=self.now,
                                      key=key, body=body, create=create)

    def list(self, *, owner: str | None, status: str | None, after: tuple[datetime, UUID] | None,
             limit: int, work_kind: str | None = None, name: str | None = None) -> service.SchedulePage:
        """A page of the workspace's schedules (see :func:`service.list_schedules`)."""
        return self.call(service.list_schedules, owner=owner, status=status, after=after, limit=limit,
                          kinds=self.kinds, work_kind=work_kind, name=name)

    def details(self, schedule_id: UUID, *, history_limit: int, upcoming: int = 5) -> service.ScheduleDetails:
        """The schedule with its runs, events, its rule in words and next ``upcoming`` occurrences."""
        return self.call(service.get_details, schedule_id=schedule_id, now=self.now, history_limit=history_limit,
                          upcoming=upcoming, kinds=self.kinds)

    def zone(self) -> str:
        """The caller's workspace's IANA zone (the zone its people read instants in; "UTC"
        when the directory has no such workspace)."""
        with self.unit() as conn:
            return workspace_timezone(conn, self.workspace_id)

    def closures(self) -> list[Any]:
        """The workspace's closures, by date (:func:`timekeeper.schedules.closures.list_closures`)."""
        return self.call(closures.list_closures)

    def add_closure(self, closed_on: date, reason: str) -> tuple[Any, int]:
        """Close a date and recompute the business-day schedules
        (:func:`~timekeeper.schedules.closures.add_closure`), with a ``closure.added``
        audit event in the same transaction."""
        with self.unit() as conn:
            added, recomputed = closures.add_closure(conn, workspace_id=self.workspace_id, closed_on=closed_on,
                                                     reason=reason, actor=self.identity.user_id, now=self.now)
            if added is not None:
                audit.record_event(conn, workspace_id=self.workspace_id, actor=self.identity.user_id,
                                   kind="closure.added", subject_type="closure", subject_id=closed_on.isoformat(),
                                   before=None, after={"date": closed_on.isoformat(), "reason": reason,
                                                       "schedules_recomputed": recomputed}, now=self.now)
        return added, recomputed

    def remove_closure(self, closed_on: date) -> tuple[Any, int]:
        """Reopen a date and recompute the business-day schedules
        (:func:`~timekeeper.schedules.closures.remove_closure`), with a ``closure.removed``
        audit event in the same transaction."""
        with self.unit() as conn:
            removed, recomputed = closures.remove_closure(conn, workspace_id=self.workspace_id, closed_on=closed_on,
                                                          actor=self.identity.user_id, now=self.now)
            if removed is not None:
                audit.record_event(conn, workspace_id=self.workspace_id, actor=self.identity.user_id,
                                   kind="closure.removed", subject_type="closure",
                                   subject_id=closed_on.isoformat(),
                                   before={"date": closed_on.isoformat(), "reason": removed.reason},
                                   after={"schedules_recomputed": recomputed}, now=self.now)
        return removed, recomputed

    def preview(self, recurrence: dict[str, Any], *, count: int,
                schedule_id: UUID | None = None) -> tuple[Any, str, list[service.UpcomingOccurrence]]:
        """An unsaved rule in words with its next ``count`` occurrences after now
        (:func:`timekeeper.schedules.service.preview_rule`; a business-day rule with the
        caller's workspace's closures, as it will be saved). With ``schedule_id`` (a
        schedule of the workspace the caller may see: :class:`service.ScheduleNotFound`
        otherwise) a windowed rule's occurrences have their given instants."""
        if schedule_id is not None:
            self.details(schedule_id, history_limit=1, upcoming=0)
        return self.call(service.preview_rule, rule=recurrence, now=self.now, count=count, schedule_id=schedule_id)

    def create(self, **fields: Any) -> service.Schedule:
        """Create a schedule (``owner``, ``work_kind``, ``recurrence``, ``subject_id``, ``name``, ``active``,
        ``notify_on``)."""
        return self.call(service.create_schedule, actor=self.identity.user_id, now=self.now, kinds=self.kinds,
                          **fields)

    def update(self, schedule_id: UUID, **fields: Any) -> service.Schedule:
        """Change ``recurrence`` / ``name`` / ``subject_id`` / ``notify_on`` (None keeps a field)."""
        return self.call(service.update_schedule, schedule_id=schedule_id, actor=self.identity.user_id,
                          now=self.now, kinds=self.kinds, **fields)

    def pause(self, schedule_id: UUID) -> service.Schedule:
        """Pause (idempotent) with reason ``paused_by_owner``."""
        return self.call(service.pause_schedule, schedule_id=schedule_id, actor=self.identity.user_id, now=self.now,
                          kinds=self.kinds)

    def resume(self, schedule_id: UUID) -> service.Schedule:
        """Resume from now (no backlog); resets the failure streak."""
        return self.call(service.resume_schedule, schedule_id=schedule_id, actor=self.identity.user_id,
                          now=self.now, kinds=self.kinds)

    def delete(self, schedule_id: UUID) -> None:
        """Delete (kept for audit, gone from reads)."""
        self.call(service.delete_schedule, schedule_id=schedule_id, actor=self.identity.user_id, now=self.now,
                   kinds=self.kinds)

    def run_now(self, schedule_id: UUID, *, idempotency_key: str | None) -> tuple[UUID, bool]:
        """Commit a manual run, then publish it to its owner's queue (released on refusal)."""
        return self.call(service.run_now, schedule_id=schedule_id, actor=self.identity.user_id, now=self.now,
                         publisher=self.publisher, idempotency_key=idempotency_key, kinds=self.kinds)


@contextmanager
def workspace_unit(conn: TenantConnection, workspace_id: UUID) -> Iterator[TenantConnection]:
    """ONE transaction on the walled connection with ``workspace_id`` entered: the unit of
    :meth:`WorkspaceScope.unit`, and of the one route without a caller's scope (a download
    link names its workspace in its signed token)."""
    with conn.entered(workspace_id), conn.transaction():
        yield conn


#: The scope dependency of each permission, made once (:func:`scope_for`).
_SCOPES: dict[str, Callable[[Request], WorkspaceScope]] = {}


def scope_for(permission: str) -> Callable[[Request], WorkspaceScope]:
    """The scope dependency of a token role: a Powertools dependency that reads the
    authorizer's claims (401 without them), sets the request's workspace log key, checks
    that the token's roles allow ``permission`` (403 ``forbidden``) and builds the
    :class:`WorkspaceScope` of the caller on the app's connection and clock
    (:class:`~timekeeper.api.routing.ApiContext`; ``connection()`` and ``now()`` are called
    once per request). One function per permission, so a route module declares
    ``Reader = Annotated[WorkspaceScope, Depends(scope_for(READ))]`` at module level."""
    if permission not in _SCOPES:
        _SCOPES[permission] = _scope_of(permission)
    return _SCOPES[permission]


def _scope_of(permission: str) -> Callable[[Request], WorkspaceScope]:
    def scope(request: Request) -> WorkspaceScope:
        api = api_context(request)
        identity = identity_from_event(request.resolved_event.raw_event)
        set_log_keys(workspace_id=identity.workspace_id)
        identity.require(permission)
        return WorkspaceScope(identity=identity, conn=api.adapters.connection(), now=api.adapters.now(),
                              publisher=api.publisher, kinds=api.registry,
                              method=request.method.upper(), path=request.resolved_event.path)

    scope.__name__ = f"scope_{permission.replace(':', '_')}"
    return scope


def signed_in_scope(request: Request) -> WorkspaceScope:
    """The caller's scope whatever their roles (a person holding none signs out too): the
    dependency of the console session routes (401 without claims)."""
    api = api_context(request)
    return WorkspaceScope(identity=caller_identity(request), conn=api.adapters.connection(), now=api.adapters.now())


def member_check(connection: Callable[[], TenantConnection]) -> Callable[[Identity], None]:
    """The membership rule every authenticated request passes before it is routed (see
    :class:`timekeeper.api.app.JsonApiResolver`): ``check(identity)`` asks the access rule
    (:func:`timekeeper.platform.access.check_member`, rules 1-2), in one transaction on
    ``connection()`` with the token's workspace entered, whether the token's user is an
    active, current member of the token's workspace. A token whose workspace claim names
    any other workspace is refused whatever its issuer signed: a 403 :class:`ApiError`
    whose code is the rule's reason (``not_a_member``, ``left_workspace``,
    ``user_deactivated``). Raises ``psycopg.OperationalError`` when the database does not
    answer."""

    def check(identity: Identity) -> None:
        conn = connection()
        with workspace_unit(conn, identity.workspace_id):
            decision = access.check_member(conn, workspace_id=identity.workspace_id, user_id=identity.user_id)
        if not decision:
            raise access_refused(decision.reason or access.NOT_A_MEMBER)

    return check


def caller_identity(request: Request) -> Identity:
    """The caller's identity from the authorizer's claims (401 without them), with the
    workspace log key set: the dependency of routes whose role check is their own (the
    snapshot routes: a staff role of the registry, or ``snapshots:read``)."""
    identity = identity_from_event(request.resolved_event.raw_event)
    set_log_keys(workspace_id=identity.workspace_id)
    return identity


# ------------------------------------------------------------------------------ snapshots


@dataclass(frozen=True)
class WorkspacePeriods:
    """A workspace (its directory row: ``timezone`` is where its months end) and its
    snapshot periods (:class:`~timekeeper.snapshots.ledger.PeriodStatus`, newest first per type)."""

    workspace: Workspace
    periods: list[ledger.PeriodStatus]
    #: The key of the next page's first period (``after``), None on the last page.
    next: ledger.PeriodKey | None = None


def _workspace_periods(conn: TenantConnection, workspace_id: UUID, *, now: datetime, owner: str | None,
                       snapshot_type: str | None, types: list[SnapshotType], after: ledger.PeriodKey | None,
                       limit: int) -> WorkspacePeriods | None:
    """A page of ``workspace_id``'s periods (every expected month of ``types``, never-planned
    ones ``missing``) read with that workspace entered (one transaction), or None when the
    directory has no such workspace."""
    with workspace_unit(conn, workspace_id):
        workspace = get_workspace(conn, workspace_id)
        if workspace is None:
            return None
        page = ledger.page_periods(conn, workspace_id=workspace_id, now=now,
                                   types=types, owner=owner, snapshot_type=snapshot_type, after=after, limit=limit)
        return WorkspacePeriods(workspace, page.items, page.next)


@dataclass(frozen=True)
class PeriodVersions:
    """A workspace, every version of one of its snapshot periods newest first (``ledger.SnapshotRun``), the
    ``names`` (``{user id: display name}``) of who requested or acted on them, and ``admission``: what the
    newest version waits for while planned (staff's reads only, else None)."""

    workspace: Workspace
    versions: list[ledger.SnapshotRun]
    names: dict[str, str]
    admission: ledger.AdmissionQueue | None = None


def _period_versions(conn: TenantConnection, workspace_id: UUID, *, owner: str, snapshot_type: str,
                     period: date, staff_read: bool = False) -> PeriodVersions | None:
    """Every version of ``workspace_id``'s period read with that workspace entered (one
    transaction), or None when the directory has no such workspace."""
    with workspace_unit(conn, workspace_id):
        workspace = get_workspace(conn, workspace_id)
        if workspace is None:
            return None
        runs = ledger.period_versions(conn, workspace_id=workspace_id, owner=owner, snapshot_type=snapshot_type,
                                      period=period)
        people = {p for r in runs for p in (r.requested_by, r.cancelled_by, r.finalized_by) if p}
        return PeriodVersions(workspace, runs, display_names(conn, sorted(people)), admission=ledger.admission_queue(
            conn, runs[0].id) if staff_read and runs and runs[0].state == "planned" else None)


@dataclass(frozen=True)
class WorkspaceSnapshots:
    """The caller's own workspace's snapshot periods (the tenant rule: the workspace is the
    identity's, never a parameter) at instant ``now`` (aware UTC)."""

    identity: Identity
    conn: TenantConnection
    now: datetime

    def periods(self, *, owner: str | None = None, snapshot_type: str | None = None,
                types: list[SnapshotType] | None = None, after: ledger.PeriodKey | None = None,
                limit: int = 100) -> WorkspacePeriods | None:
        """A page of the caller's workspace's periods (optionally of one owner / type; the
        expected months of ``types`` included, ``missing`` when never planned); None when
        the workspace is not in the directory."""
        return _workspace_periods(self.conn, self.identity.workspace_id, now=self.now, owner=owner,
                                  snapshot_type=snapshot_type, types=types or [], after=after, limit=limit)

    def versions(self, *, owner: str, snapshot_type: str, period: date) -> PeriodVersions | None:
        """Every version of one of the caller's workspace's periods (a month's first day),
        newest first; None when the workspace is not in the directory."""
        return _period_versions(self.conn, self.identity.workspace_id, owner=owner, snapshot_type=snapshot_type,
                                period=period)


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
    #: The request's method and path (as routed): what an Idempotency-Key is bound to.
    method: str = ""
    path: str = ""

    @classmethod
    def of(cls, identity: Identity, *, conn: TenantConnection, now: datetime, registry: SnapshotRegistry,
           method: str = "", path: str = "") -> StaffScope:
        """The staff scope of ``identity`` (for the request ``method`` ``path``); raises a 403
        :class:`ApiError` (``forbidden``) unless one of its roles is a staff role of a
        registered snapshot type (:func:`require_staff`)."""
        require_staff(identity, registry)
        return cls(identity=identity, conn=conn, now=now, registry=registry, method=method, path=path)

    def create_once(self, key: str | None, body: Any, create: Callable[[], Response]) -> Response:
        """Answer a staff request that creates or starts something once per the caller's
        Idempotency-Key (:func:`timekeeper.api.idempotent.create_once`, the key and its answer
        kept in the caller's own workspace; the work enters the target workspaces in
        transactions of its own)."""
        return idempotent.create_once(self.conn, self.identity, method=self.method, path=self.path, now=self.now,
                                      key=key, body=body, create=create, one_transaction=False)

    def periods(self, workspace_id: UUID, *, owner: str | None = None, snapshot_type: str | None = None,
                after: ledger.PeriodKey | None = None, limit: int = 100) -> WorkspacePeriods | None:
        """A page of any workspace's periods (every type; the expected months of the enabled
        types included, ``missing`` when never planned); None when the directory has no
        such workspace. A read of a workspace other than the caller's is recorded in that
        workspace's audit trail (:func:`timekeeper.platform.audit.record_staff_read`)."""
        page = _workspace_periods(self.conn, workspace_id, now=self.now, owner=owner, snapshot_type=snapshot_type,
                                  types=self.registry.enabled(), after=after, limit=limit)
        if page is not None and workspace_id != self.identity.workspace_id:
            with workspace_unit(self.conn, workspace_id):
                audit.record_staff_read(self.conn, workspace_id=workspace_id, actor=self.identity.user_id,
                                        what="snapshot_periods", now=self.now, detail={
                                            "owner": owner, "snapshot_type": snapshot_type,
                                            "after": [str(v) for v in after] if after else None, "limit": limit})
        return page

    def versions(self, workspace_id: UUID, *, owner: str, snapshot_type: str,
                 period: date) -> PeriodVersions | None:
        """Every version of any workspace's period (a month's first day), newest first; None
        when the directory has no such workspace. A read of another workspace than the
        caller's is recorded in that workspace's audit trail, as the period listing's is."""
        found = _period_versions(self.conn, workspace_id, owner=owner, snapshot_type=snapshot_type, period=period,
                                 staff_read=True)
        if found is not None and workspace_id != self.identity.workspace_id:
            with workspace_unit(self.conn, workspace_id):
                audit.record_staff_read(self.conn, workspace_id=workspace_id, actor=self.identity.user_id,
                                        what="snapshot_period_versions", now=self.now, detail={
                                            "owner": owner, "snapshot_type": snapshot_type,
                                            "period": f"{period:%Y-%m}"})
            with workspace_unit(self.conn, self.identity.workspace_id):  # staff named in their own workspace
                found.names.update(display_names(self.conn, sorted({p for r in found.versions for p in (
                    r.requested_by, r.cancelled_by, r.finalized_by) if p and p not in found.names})))
        return found

    def request_run(self, *, owner: str, snapshot_type: str, workspace_id: UUID, period: date, mode: str,
                    reason: str) -> ledger.SnapshotRun:
        """Record a staff request (:func:`timekeeper.snapshots.ledger.request_run`) in
        ``workspace_id``, entered on the walled connection, as the caller, and in its audit log.

        Raises :class:`~timekeeper.snapshots.registry.UnknownSnapshotType` (``unsupported_type``,
        ``type_disabled``), a 403 :class:`ApiError` when none of the caller's roles is a staff
        role of that type, and the ledger's :class:`~timekeeper.snapshots.ledger.RequestRefused`
        / ``ValueError``; a run of the period committed concurrently (the insert's unique
        key) is ``RequestRefused("active_work")``."""
        found = self.registry.get(owner, snapshot_type)
        if not self.identity.roles & found.staff_roles:
            raise ApiError(403, FORBIDDEN, f"requests of {owner}/{snapshot_type} need the role "
                           f"{' or '.join(sorted(found.staff_roles))}")
        with self.conn.entered(workspace_id), self.conn.transaction():
            try:
                run = ledger.request_run(self.conn, snapshot_type=found, workspace_id=workspace_id, period=period,
                                         mode=mode, reason=reason, requested_by=self.identity.user_id, now=self.now)
                snapshot_audit.record_request(self.conn, run, actor=self.identity.user_id, now=self.now)
                return run
            except psycopg.errors.UniqueViolation:
                # A run of the period was inserted meanwhile (the planner's version 1, or
                # another request) and committed while this insert waited: it is active now.
                raise ledger.RequestRefused("active_work", f"{found.label} {period:%Y-%m} has a version in progress "
                                            "(requested meanwhile)") from None

    def act_on_run(self, action: str, workspace_id: UUID, run_id: UUID, *, reason: str) -> ledger.SnapshotRun:
        """Cancel (``action`` ``cancel``) or finalize (``finalize``) ``workspace_id``'s run
        ``run_id`` as the caller, with ``reason`` (:mod:`timekeeper.snapshots.staff`), in
        that workspace entered on the walled connection; the workspace's audit log gets the
        action in the same transaction (``staff.snapshot_cancelled`` / ``_finalized``). Raises a 404 :class:`ApiError`
        for no such run in that workspace, a 403 when none of the caller's roles is a staff
        role of the run's type, and :class:`~timekeeper.snapshots.staff.StaffActionRefused`."""
        act = {"cancel": staff.cancel_run, "finalize": staff.finalize_run}[action]
        with self.conn.entered(workspace_id), self.conn.transaction():
            try:
                run = staff.locked_run(self.conn, workspace_id, run_id)
            except staff.RunNotFound:
                raise ApiError(404, NOT_FOUND, "no such snapshot run in that workspace") from None
            roles = next((t.staff_roles for t in self.registry.all()
                          if (t.owner, t.name) == (run.owner, run.snapshot_type)), None)
            if roles is not None and not self.identity.roles & roles:
                raise ApiError(403, FORBIDDEN, f"actions on {run.owner}/{run.snapshot_type} need the role "
                               f"{' or '.join(sorted(roles))}")
            acted = act(self.conn, workspace_id=workspace_id, run_id=run_id, actor=self.identity.user_id,
                        reason=reason, now=self.now)
            audit.record_event(
                self.conn, workspace_id=workspace_id, actor=self.identity.user_id,
                kind="staff.snapshot_cancelled" if action == "cancel" else "staff.snapshot_finalized",
                subject_type="snapshot_run", subject_id=run_id, before={"state": run.state},
                after={"state": acted.state, "snapshot_type": f"{acted.owner}/{acted.snapshot_type}",
                       "period": f"{acted.period:%Y-%m}", "version": acted.version},
                reason=acted.cancel_reason if action == "cancel" else acted.finalize_reason, now=self.now)
            return acted

    def staff_workspaces(self, *, search: str | None = None, ids: list[UUID] | None = None,
                         limit: int = 100) -> list[staff.DirectoryEntry]:
        """Workspaces by name or id for staff to choose from (names, zones, states only)."""
        with self.conn.transaction():
            return staff.staff_workspaces(self.conn, search=search, ids=ids, limit=limit)

    def plan_range(self, *, owner: str, snapshot_type: str, workspaces: list[staff.DirectoryEntry], first: date,
                   last: date, mode: str, reason: str, group: UUID | None,
                   preview: bool) -> list[staff.RangeItem]:
        """Plan (or, ``preview``, plan and roll back) a range request as the caller
        (:func:`timekeeper.snapshots.staff.plan_range`), each workspace entered in turn (and audited).
        Raises :class:`~timekeeper.snapshots.registry.UnknownSnapshotType` and a 403
        :class:`ApiError` when none of the caller's roles is a staff role of the type."""
        found = self.registry.get(owner, snapshot_type)
        if not self.identity.roles & found.staff_roles:
            raise ApiError(403, FORBIDDEN, f"requests of {owner}/{snapshot_type} need the role "
                           f"{' or '.join(sorted(found.staff_roles))}")
        def audited(workspace_id: UUID, items: list[staff.RangeItem]) -> None:  # in that workspace's transaction
            snapshot_audit.record_range(self.conn, workspace_id, items, group=group, mode=mode, reason=reason,
                                        label=found.label, actor=self.identity.user_id, now=self.now)
        return staff.plan_range(self.conn, enter=self.conn.entered, workspaces=workspaces, snapshot_type=found,
                                first=first, last=last, mode=mode, reason=reason, on_planned=audited,
                                requested_by=self.identity.user_id, now=self.now, group=group, preview=preview)

    def staff_periods(self, **filters: Any) -> tuple[list[staff.StaffPeriod], staff.StaffPeriodKey | None]:
        """Every workspace's periods, what matters first (:func:`timekeeper.snapshots.staff.staff_periods`)."""
        with self.conn.transaction():
            return staff.staff_periods(self.conn, **filters)

    def request_group(self, group: UUID) -> list[staff.GroupRun]:
        """A range request's runs in every workspace (empty: no such request)."""
        with self.conn.transaction():
            return staff.request_group_runs(self.conn, group)

    def operations_overview(self, *, limit: int, kind: str | None = None, status: str | None = None,
                            name: str | None = None, state: str | None = None
                            ) -> tuple[list[operations.AttentionSchedule], list[operations.StrandedRun]]:
        """Every workspace's paused and failing schedules and the runs that wait too long (:mod:`~timekeeper.
        schedules.operations`), ``limit`` of each, one transaction; ``kind`` narrows both, ``status``/``name``
        the schedules, ``state`` the runs."""
        pipelines = list(PIPELINES.values())
        with self.conn.transaction():
            return (operations.schedules_needing_attention(self.conn, limit=limit, kind=kind, status=status,
                                                           name=name),
                    operations.stranded_runs(self.conn, owners=[p.owner for p in pipelines],
                                             reoffer_after={p.owner: p.reoffer_after for p in pipelines},
                                             now=self.now, limit=limit, kind=kind, state=state))

    def own_zone(self) -> str:
        """The staff member's own workspace's IANA zone (what their pages show instants in)."""
        with self.conn.entered(self.identity.workspace_id), self.conn.transaction():
            return workspace_timezone(self.conn, self.identity.workspace_id)

    def overdue_periods(self, *, limit: int) -> tuple[list[ledger.OverduePeriod], int]:
        """Every workspace's overdue snapshot periods at this scope's clock, most overdue first, at most
        ``limit``, and their count (:func:`timekeeper.snapshots.ledger.overdue_periods_for_staff`)."""
        with self.conn.transaction():
            return ledger.overdue_periods_for_staff(self.conn, self.registry, now=self.now, limit=limit)

    def resume_schedule(self, workspace_id: UUID, schedule_id: UUID, *, reason: str) -> service.Schedule:
        """Resume a paused schedule of ``workspace_id`` as this staff member, ``reason`` on its ``resumed``
        history event and in the operations actions, in one transaction. Raises the service's
        ``ScheduleNotFound`` (also for another workspace's), ``Ownerless`` and ``InvalidRecurrence``."""
        with self.conn.entered(workspace_id), self.conn.transaction():
            resumed = service.resume_schedule(self.conn, workspace_id=workspace_id, schedule_id=schedule_id,
                                              actor=self.identity.user_id, now=self.now, reason=reason)
            operations.record_action(self.conn, action="resume", actor=self.identity.user_id,
                                     target=str(schedule_id), reason=reason,
                                     detail={"workspace_id": str(workspace_id), "name": resumed.name}, at=self.now)
        return resumed

    def erase_person(self, user_id: str, *, reason: str) -> erasure.Erasure:
        """Erase ``user_id`` in every workspace (:func:`timekeeper.platform.erasure.erase_person`) as this staff
        member, recording the operations action ``erase`` (target the id's digest ``sha256:<hex>``, never the
        id; detail the counts), in one transaction."""
        with self.conn.transaction():
            erased = erasure.erase_person(self.conn, user_id=user_id, actor=self.identity.user_id, now=self.now)
            operations.record_action(self.conn, action="erase", actor=self.identity.user_id,
                                     target=f"sha256:{erased.user_digest}", reason=reason, detail={
                                         "recipient_lists": erased.recipient_lists, "opt_outs": erased.opt_outs,
                                         "delivery_addresses": erased.delivery_addresses,
                                         "suppressions": erased.suppressions}, at=self.now)
        return erased

    def erase_member(self, workspace_id: UUID, member_id: UUID, *, reason: str) -> int:
        """Erase member ``member_id`` of ``workspace_id`` from every snapshot's rows (:mod:`~timekeeper.platform.
        erasure`), recording the operations action ``erase`` (target ``member:sha256:<hex>``) and the audit event
        ``staff.member_erased``, in one transaction; returns the rows changed (0: a repeat, or none named the
        member). 404 naming ``workspace_id``: no such workspace."""
        target, actor = f"member:sha256:{erasure.user_digest(str(member_id))}", self.identity.user_id
        with workspace_unit(self.conn, workspace_id):
            if get_workspace(self.conn, workspace_id) is None:
                raise ApiError(404, NOT_FOUND, "no such workspace", "workspace_id")
            changed = erasure.erase_member(self.conn, workspace_id=workspace_id, member_id=member_id, now=self.now)
            operations.record_action(self.conn, action="erase", actor=actor, target=target, reason=reason, at=self.now,
                                     detail={"workspace_id": str(workspace_id), "snapshot_rows": changed})
            audit.record_event(self.conn, workspace_id=workspace_id, actor=actor, kind="staff.member_erased",
                               subject_type="member", subject_id=None, before=None, reason=reason, now=self.now,
                               after={"member": target.partition(":")[2], "snapshot_rows": changed})
        return changed

    def record_action(self, *, action: str, target: str, reason: str,
                      detail: dict[str, Any]) -> operations.OperationsAction:
        """Record an operations action of this staff member (e.g. a redrive it started)."""
        with self.conn.transaction():
            return operations.record_action(self.conn, action=action, actor=self.identity.user_id, target=target,
                                            reason=reason, detail=detail, at=self.now)

    def recent_actions(self, *, limit: int = 20) -> list[operations.OperationsAction]:
        """Every staff member's latest operations actions, newest first, named as the caller's directory
        shows them (else ``actor_name`` None)."""
        with self.conn.entered(self.identity.workspace_id), self.conn.transaction():
            return operations.recent_actions(self.conn, limit=limit)


def require_staff(identity: Identity, registry: SnapshotRegistry) -> None:
    """Refuse (a 403 :class:`ApiError` ``forbidden``) ``identity`` unless one of its roles is
    a staff role of a registered snapshot type (:func:`staff_roles`)."""
    if not identity.roles & staff_roles(registry):
        raise ApiError(403, FORBIDDEN, "this action needs a snapshot staff role (e.g. platform:staff)")


def _staff_first(identity: Identity, api: ApiContext) -> None:
    require_staff(identity, api.adapters.snapshot_registry())


@checked_first(_staff_first)
def staff_scope(request: Request) -> StaffScope:
    """The route dependency of the staff routes (snapshots, operations): the caller's
    :class:`StaffScope` on the app's connection at the request's clock, with the app's
    snapshot types (:class:`~timekeeper.api.routing.ApiContext`); 401 without claims, 403
    without a staff role. A route that takes it is staff only: the resolver asks
    :func:`require_staff` before the request is validated (:func:`~timekeeper.api.routing.checked_first`),
    so anyone else is 403 whatever the body."""
    adapters = api_context(request).adapters
    return StaffScope.of(caller_identity(request), conn=adapters.connection(), now=adapters.now(),
                         registry=adapters.snapshot_registry(), method=request.method.upper(),
                         path=request.resolved_event.path)
