"""Work kinds: the contract between the scheduling library and the owner modules.

Owners (accounting, queries) register a handler per work kind. The consumer enters the
run's workspace, opens the run's transaction and calls the handler with a
:class:`RunContext`; the handler returns an :data:`Outcome` or raises.

DESIGN section 2 "Consumer": ``Succeeded(detail)`` | ``Skipped(reason)`` |
``Refused(code, message)`` (an expected refusal: the run settles failed at once, no retry)
| an exception (unexpected: retried; settled failed on the final receive).

Every handler states its idempotency contract in its docstring. The library makes one
guarantee that handlers may build on: the handler's database writes and the run's
settlement commit in ONE transaction (the SQS batch's transaction, in a savepoint of
its own, for the default transactional kinds; the run's own transaction, fenced by its
attempt number, for ``leased`` kinds), so a handler whose effects are all in the
database is applied exactly once per run even under duplicate delivery. Effects outside
the database belong in ``ctx.after_commit`` (run once the settlement committed), or in a
``leased`` kind that keys them by run (e.g. a communication key per recipient).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol
from uuid import UUID

import psycopg


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
        """Run ``callback`` after the run's transaction (effects + settlement) commits.

        Callbacks run at most once per committed settlement; a failing callback is logged
        and does not change the recorded outcome (e.g. a posting job that fails to start
        leaves its batch closed and unposted, visible by the job's status).
        """
        self._after_commit.append(callback)


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
class SubjectRequirement:
    """What a work kind needs as its schedule's subject: a ``noun`` (e.g. ``"recurring
    batch"``) found by the owner module's ``exists`` in the schedule's workspace;
    ``required`` False accepts no subject at all (a given one must still exist)."""

    noun: str
    exists: SubjectExists
    required: bool = True

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

    def register(self, owner: str, name: str, handler: WorkHandler, *, staleness: timedelta | None = None,
                 description: str = "", leased: bool = False,
                 subject: SubjectRequirement | None = None) -> WorkKind:
        """Register ``handler`` for ``(owner, name)``; ``subject`` declares the schedule
        subject its input needs (checked at create and update). Raises ``ValueError`` on a
        duplicate."""
        key = (owner, name)
        if key in self._kinds:
            raise ValueError(f"work kind {owner}/{name} is already registered")
        kind = WorkKind(owner, name, handler, staleness, description or (handler.__doc__ or "").strip(), leased,
                        subject)
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

    def names(self, owner: str) -> list[str]:
        """The registered work-kind names of ``owner``, sorted."""
        return sorted(name for (o, name) in self._kinds if o == owner)
