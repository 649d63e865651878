"""Work kinds: the contract between the scheduling library and the owner modules.

Owners (accounting, queries) register a handler per work kind. The consumer enters the
run's workspace, opens the run's transaction and calls the handler with a
:class:`RunContext`; the handler returns an :data:`Outcome` or raises.

The outcomes: ``Succeeded(detail)`` | ``Skipped(reason)`` |
``Refused(code, message)`` (an expected refusal: the run settles failed at once, no retry)
| an exception (unexpected: retried; settled failed on the final receive).

Every handler states its idempotency contract in its docstring. The library makes one
guarantee that handlers may build on: the handler's database writes and the run's
settlement commit in ONE transaction (the SQS batch's transaction, in a savepoint of
its own, for the default transactional kinds; the run's own transaction, fenced by its
attempt number, for ``leased`` kinds), so a handler whose effects are all in the
database is applied exactly once per run even under duplicate delivery. Effects outside
the database belong in ``ctx.after_commit`` (run at most once, after the settlement
committed, and lost if the process dies first: see :meth:`RunContext.after_commit`), or
in a ``leased`` kind that keys them by run (e.g. a communication key per recipient).

Owners may also register maintenance tasks (:meth:`WorkKindRegistry.register_maintenance`)
that run after each dispatcher pass of their pipeline, e.g. a sweep that finishes what
lost after-commit callbacks left undone.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

import psycopg

from timekeeper import observability as obs


@dataclass(frozen=True)
class Succeeded:
    """The work was done; ``detail`` (JSON-ready dict) is stored on the run."""

    detail: Mapping[str, Any] = field(default_factory=dict)
    outcome_code: str = "succeeded"


@dataclass(frozen=True)
class Skipped:
    """Nothing to do for this occurrence (``reason``: machine-readable, e.g. ``skipped_empty``)."""

    reason: str
    detail: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Refused:
    """An expected refusal: settle failed at once with ``code`` and ``message``; no retry."""

    code: str
    message: str
    detail: Mapping[str, Any] = field(default_factory=dict)
    #: When set, an automatic (scheduled) run's refusal also pauses the schedule with
    #: this reason (e.g. ``source_access_lost``); manual runs never pause.
    pause_reason: str | None = None


Outcome = Succeeded | Skipped | Refused


class RetryableFault(Exception):  # noqa: N818 - a fault the work kind names, retried like any other
    """A fault a work kind expects may pass (a render still running, a provider down):
    raised like any fault, so the run is retried within the queue's receives after the
    pipeline's backoff; on the final receive it settles ``failed`` with :attr:`code`
    instead of ``unexpected_error``. Subclasses set ``code``."""

    code: str = "unexpected_error"


@dataclass
class RunContext:
    """What a work-kind handler receives.

    ``conn`` is inside the run's transaction with the tenant setting applied
    (``app.workspace_id``); the handler must not commit or roll it back. Instants are aware
    UTC datetimes; ``occurrence_local`` is the intended naive local date and time.
    ``now`` is the consumer's clock (simulated in the local stack). ``services`` carries
    the adapters the edge passed in, by name (e.g. ``"posting"``).
    """

    run_id: UUID
    schedule_id: UUID
    workspace_id: UUID
    owner: str
    work_kind: str
    subject_id: UUID | None
    occurrence_at: datetime
    occurrence_local: datetime
    trigger: str
    requested_by: str | None
    attempt: int
    now: datetime
    conn: psycopg.Connection
    services: Mapping[str, Any]
    _after_commit: list[Callable[[], None]] = field(default_factory=list)

    def after_commit(self, callback: Callable[[], None]) -> None:
        """Run ``callback()`` after the run's transaction (effects + settlement) commits.

        The guarantee is **at most once, after commit**:
        - the callback runs only if the settlement committed (never for a rolled-back or
          fenced run), once the transaction holding it committed (the whole SQS batch's,
          for transactional kinds), on the run's connection, then idle;
        - it runs at most once per committed settlement: a redelivered message finds the
          run settled and runs nothing again;
        - it is **lost** if the process dies (a Lambda timeout, an out-of-memory, a crash)
          between the commit and the callback: nothing records that it was due;
        - a callback that raises is logged and does not change the recorded outcome.

        An owner that needs at-least-once therefore records its intent in the run's
        transaction (a row such as a ``pending`` posting job), lets the callback start it
        for low latency, makes starting idempotent, and registers a maintenance task
        (:meth:`WorkKindRegistry.register_maintenance`) that sweeps committed intents the
        callback never started.
        """
        self._after_commit.append(callback)

    def pending_after_commit(self) -> list[Callable[[], None]]:
        """The callbacks registered so far, in order (the consumer runs them after commit)."""
        return list(self._after_commit)


#: ``task(conn, now) -> summary``: an owner's maintenance task. ``conn`` is idle (the task
#: opens and commits its own transactions) and not walled by row-level security; ``now``
#: is the pass's aware UTC instant; the summary (a JSON-ready mapping, or None) is logged.
MaintenanceTask = Callable[[psycopg.Connection, datetime], Mapping[str, Any] | None]


class OwnRouteOnly(ValueError):
    """A work kind whose schedules carry settings of their own (e.g. ``queries.deliver``:
    source, recipients, templates) is created, changed and run only through its own route
    (:attr:`WorkKind.route`), never through the generic schedules actions. ``field`` is
    ``work_kind``; ``reason`` (safe to show) names the route to use."""

    field = "work_kind"

    def __init__(self, work_kind: str, route: str) -> None:
        self.work_kind = work_kind
        self.route = route
        self.reason = f"{work_kind} schedules have settings of their own: use {route}"
        super().__init__(self.reason)


class InvalidSubject(ValueError):
    """A schedule's ``subject_id`` does not meet its work kind's :class:`SubjectRequirement`
    (missing, or no such subject in the workspace: a subject of another workspace or of
    another type is reported exactly as an unknown one). ``reason`` is safe to show."""

    field = "subject_id"

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


#: ``exists(conn, workspace_id, subject_id) -> bool``: whether the subject exists in the
#: workspace; run in the caller's transaction (the API's is walled to the workspace).
SubjectExists = Callable[[psycopg.Connection, UUID, UUID], bool]


@dataclass(frozen=True)
class SubjectChoice:
    """One subject a schedule may name: its ``id`` and the ``name`` people know it by."""

    id: UUID
    name: str


#: ``candidates(conn, workspace_id, limit) -> [SubjectChoice]``: at most ``limit`` of the
#: workspace's subjects a schedule of the kind may name, by name; run in the caller's
#: transaction (the API's is walled to the workspace).
SubjectCandidates = Callable[[psycopg.Connection, UUID, int], list[SubjectChoice]]


@dataclass(frozen=True)
class SubjectRequirement:
    """What a work kind needs as its schedule's subject: a ``noun`` (e.g. ``"recurring
    batch"``) found by the owner module's ``exists`` in the schedule's workspace;
    ``required`` False accepts no subject at all (a given one must still exist);
    ``candidates`` lists the workspace's subjects to choose from by name (None: the owner
    offers no list)."""

    noun: str
    exists: SubjectExists
    required: bool = True
    candidates: SubjectCandidates | None = None

    def check(self, conn: psycopg.Connection, *, work_kind: str, workspace_id: UUID,
              subject_id: UUID | None) -> None:
        """Raise :class:`InvalidSubject` unless ``subject_id`` satisfies the requirement."""
        if subject_id is None:
            if self.required:
                raise InvalidSubject(f"{work_kind} needs the id of a {self.noun} of this workspace")
            return
        if not self.exists(conn, workspace_id, subject_id):
            raise InvalidSubject(f"no {self.noun} with this id in this workspace")


class WorkHandler(Protocol):
    """A work kind's handler: ``(ctx) -> Outcome``; raising means an unexpected fault."""

    def __call__(self, ctx: RunContext) -> Outcome: ...


@dataclass(frozen=True)
class WorkKind:
    """A registered work kind: ``owner``, ``name``, ``handler``, an optional staleness bound
    and how it runs (``leased``).

    ``staleness`` (a timedelta) marks a latest-due occurrence older than it as a stale skip
    instead of running it; ``None`` means late is better than never (accounting, snapshots).
    """

    owner: str
    name: str
    handler: WorkHandler
    staleness: timedelta | None = None
    description: str = ""
    #: False (default): a short handler whose effects are all in the database; it runs in
    #: its SQS batch's transaction. True: long or external work (renders, deliveries); its
    #: start commits first under a lease that a redelivery takes over once it expires.
    leased: bool = False
    #: The subject the kind's input needs, checked when a schedule is created or changed
    #: (None: any subject or none).
    subject: SubjectRequirement | None = None
    #: The API route that creates, changes and runs this kind's schedules together with
    #: the settings it needs (e.g. ``/query-schedules``); None: the generic schedules
    #: actions suffice. See :meth:`check_generic`.
    route: str | None = None
    #: The names of the services its handler reads from ``ctx.services`` (e.g.
    #: ``("delivery",)``): the edge builds those, and only those, for the consumer of the
    #: kind's pipeline.
    services: tuple[str, ...] = ()

    def check_generic(self) -> None:
        """Raise :class:`OwnRouteOnly` when this kind's schedules belong to its own :attr:`route`."""
        if self.route is not None:
            raise OwnRouteOnly(self.name, self.route)

    def check_subject(self, conn: psycopg.Connection, *, workspace_id: UUID, subject_id: UUID | None) -> None:
        """Check a schedule's ``subject_id`` against :attr:`subject`; raises :class:`InvalidSubject`."""
        if self.subject is not None:
            self.subject.check(conn, work_kind=self.name, workspace_id=workspace_id, subject_id=subject_id)


class UnknownWorkKind(LookupError):
    """No handler is registered for this owner and work kind."""


class WorkKindRegistry:
    """Work kinds by (owner, name). The scheduling library knows no owner module."""

    def __init__(self) -> None:
        self._kinds: dict[tuple[str, str], WorkKind] = {}
        self._maintenance: dict[str, dict[str, MaintenanceTask]] = {}
        self._maintenance_metrics: dict[tuple[str, str], dict[str, str]] = {}

    def register(self, owner: str, name: str, handler: WorkHandler, *, staleness: timedelta | None = None,
                 description: str = "", leased: bool = False,
                 subject: SubjectRequirement | None = None, route: str | None = None,
                 services: tuple[str, ...] = ()) -> WorkKind:
        """Register ``handler`` for ``(owner, name)``; ``subject`` declares the schedule
        subject its input needs (checked at create and update); ``route`` names the API
        route that alone creates, changes and runs its schedules (the generic actions
        refuse it: :class:`OwnRouteOnly`); ``services`` names what its handler reads from
        ``ctx.services`` (built by the edge for the owner's consumer). Raises ``ValueError``
        on a duplicate."""
        key = (owner, name)
        if key in self._kinds:
            raise ValueError(f"work kind {owner}/{name} is already registered")
        kind = WorkKind(owner, name, handler, staleness, description or (handler.__doc__ or "").strip(), leased,
                        subject, route, tuple(services))
        self._kinds[key] = kind
        return kind

    def get(self, owner: str, name: str) -> WorkKind:
        """Return the work kind; raises :class:`UnknownWorkKind`."""
        try:
            return self._kinds[(owner, name)]
        except KeyError:
            raise UnknownWorkKind(f"no work kind {name!r} registered for owner {owner!r}") from None

    def find(self, owner: str, name: str) -> WorkKind | None:
        """Return the work kind, or None when none is registered."""
        return self._kinds.get((owner, name))

    def kinds(self) -> list[WorkKind]:
        """Every registered work kind, in registration order."""
        return list(self._kinds.values())

    def names(self, owner: str) -> list[str]:
        """The registered work-kind names of ``owner``, sorted."""
        return sorted(name for (o, name) in self._kinds if o == owner)

    def services(self, owner: str) -> tuple[str, ...]:
        """The service names ``owner``'s work kinds read from ``ctx.services``, sorted, each once."""
        return tuple(sorted({service for kind in self._kinds.values() if kind.owner == owner
                             for service in kind.services}))

    def register_maintenance(self, owner: str, name: str, task: MaintenanceTask, *,
                             metrics: Mapping[str, str] | None = None) -> None:
        """Register ``task`` to run after each dispatcher pass of ``owner``'s pipeline (once a
        minute, one at a time: the dispatcher has reserved concurrency one). ``metrics``:
        summary key -> metric name; after a pass whose summary of the task has the key, the
        edge emits its value as that metric (a count). Raises ``ValueError`` when ``(owner,
        name)`` is registered already."""
        tasks = self._maintenance.setdefault(owner, {})
        if name in tasks:
            raise ValueError(f"maintenance task {owner}/{name} is already registered")
        tasks[name] = task
        self._maintenance_metrics[(owner, name)] = dict(metrics or {})

    def maintenance_metrics(self, owner: str, name: str) -> dict[str, str]:
        """The metrics ``owner``'s maintenance task ``name`` reports: summary key -> metric
        name (empty for a task that reports none, or an unknown one)."""
        return dict(self._maintenance_metrics.get((owner, name), {}))

    def maintenance(self, owner: str) -> dict[str, MaintenanceTask]:
        """``owner``'s maintenance tasks by name, in registration order."""
        return dict(self._maintenance.get(owner, {}))


def run_maintenance(conn: psycopg.Connection, registry: WorkKindRegistry, owner: str,
                    now: datetime) -> dict[str, Any]:
    """Run ``owner``'s maintenance tasks at ``now`` (aware UTC) on the idle ``conn``.

    Returns each task's summary by name; a task that raises is logged and its entry is
    ``{"error": "<exception type>"}``: one owner's failing task never fails the dispatcher
    pass that runs it.
    """
    summaries: dict[str, Any] = {}
    for name, task in registry.maintenance(owner).items():
        try:
            summaries[name] = task(conn, now)
        except Exception as error:  # noqa: BLE001 - logged; the next pass runs the task again
            obs.logger.exception("maintenance task failed", extra={"owner": owner, "task": name})
            summaries[name] = {"error": type(error).__name__}
    return summaries
