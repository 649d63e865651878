"""One lifecycle for every work item taken from a queue: claim with an attempt, fence,
settle, back off, re-offer.

A piece of work (a schedule run, an export, a report render, a snapshot run) is attempted
by a worker that may die without a word (a timeout, out of memory). Every kind goes
through the same steps, described here once; each kind declares only what differs
(:class:`Lifecycle`: its table, its states, its fence and its lease) and keeps its
statements in its own named SQL:

1. **Claim with an attempt.** The attempt is counted durably before the work starts
   (``attempts + 1``, or a new job id), so an attempt that kills its process still counts.
2. **Held** (:meth:`AttemptRule.held`): an attempt started less than a lease ago may still
   be running; another worker must not start the work meanwhile (it retries later). Once
   the lease has passed the work may be taken over. Where the lease lives is the kind's
   :class:`Lease` (an expiry instant in the row, the attempt's start plus the consumer's
   timeout, or the job's heartbeat).
3. **Fence.** An attempt's outcome is recorded only while the row still names that
   attempt: its :class:`Fence` (the attempt number, or the snapshot run's job id) is in
   the settling statement's ``WHERE``. A worker whose work was taken over records nothing
   and reads the row as the later attempt left it.
4. **Settle.** An expected failure is a returned :class:`Failure` (never raised), settled
   by :func:`settle_failed` with the kind's statement. **Exhausted**
   (:meth:`AttemptRule.exhausted`): when the attempts made reached the limit the work is
   settled failed (``attempts_exhausted``) instead of attempted again; **final**
   (:meth:`AttemptRule.final`): on the last receive or attempt, a fault is settled as the
   work's outcome instead of being left to a retry that will not come.
5. **Back off** (:class:`Backoff`): a failed attempt is tried again after the topology's
   back-off for its failure count (a run's message comes back after it, through the
   queue's visibility; a snapshot run waits in ``retry_wait`` until it is due).
6. **Re-offer.** Work nothing will finish otherwise (its message lost or dead-lettered) is
   found by its owner's sweep from the rows' timestamps, and settled or offered again.

docs/failure-handling.md lists each kind's declaration; docs/decisions.md says why the
run pipeline's claim stays one set-based statement and a snapshot's attempt spans
receives.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar

import psycopg

from timekeeper.db.rows import fetch_one
from timekeeper.observability import logger


@dataclass(frozen=True)
class AttemptRule:
    """``max_attempts``: the attempts (and queue receives) a piece of work gets (None: no
    limit, for a caller that only asks :meth:`held`); ``lease``: how long a started
    attempt holds the work (None when the pipeline keeps its lease elsewhere, e.g. as an
    expiry instant in its row). Raises ``ValueError`` for a limit below 1 or a lease that
    is not positive."""

    max_attempts: int | None = None
    lease: timedelta | None = None

    def __post_init__(self) -> None:
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if self.lease is not None and self.lease <= timedelta(0):
            raise ValueError("a lease must be positive")

    def held(self, started_at: datetime | None, now: datetime) -> bool:
        """Whether an attempt started at ``started_at`` (aware UTC; None: never started)
        may still be running at ``now``: its lease has not passed. False without a lease."""
        return self.lease is not None and started_at is not None and started_at + self.lease > now

    def exhausted(self, attempts_made: int) -> bool:
        """Whether ``attempts_made`` earlier attempts (each ended without an outcome) used
        up the work's attempts: it is settled failed rather than attempted again. False
        without a limit."""
        return self.max_attempts is not None and attempts_made >= self.max_attempts

    def final(self, *, attempt: int = 0, receive_count: int = 0) -> bool:
        """Whether this is the work's last chance: its attempt number ``attempt`` (1-based,
        this attempt included) or the queue's ``receive_count`` of its message reached the
        limit. A fault then settles the work instead of leaving it to a retry. False
        without a limit."""
        limit = self.max_attempts
        return limit is not None and (attempt >= limit or receive_count >= limit)


@dataclass(frozen=True)
class Failure:
    """An attempt's expected failure, returned (never raised) to the lifecycle that settles
    it: ``code`` is the row's ``error_code`` (an access reason, ``definition_invalid``, ...),
    ``message`` its ``error_message`` (no personal data)."""

    code: str
    message: str


class Fence(enum.Enum):
    """What names an attempt in its row, so that only that attempt settles it."""

    #: The row's ``attempts`` count as the attempt's start left it (runs, exports, renders).
    ATTEMPT_NUMBER = "attempts"
    #: The row's ``job_id``, a new one for every attempt (snapshot runs).
    JOB_ID = "job_id"


class Lease(enum.Enum):
    """Where a started attempt's lease lives (how long it holds the work)."""

    #: An expiry instant in the row (``lease_until``), set by the claim.
    EXPIRY_INSTANT = "lease_until"
    #: The attempt's start (``started_at``) plus the consumer's timeout.
    STARTED_PLUS_TIMEOUT = "started_at"
    #: The job's last heartbeat (``heartbeat_at``) plus the time a lost job is given.
    HEARTBEAT = "heartbeat_at"


@dataclass(frozen=True)
class Backoff:
    """The waits before the attempts after a failed one: ``steps_s[n - 1]`` seconds after
    the ``n``-th failure (1-based; the last step repeats). Raises ``ValueError`` for no
    steps or a negative one."""

    steps_s: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.steps_s or any(step < 0 for step in self.steps_s):
            raise ValueError("a back-off needs one or more steps of 0 s or more")

    def delay_s(self, failures: int) -> int:
        """Seconds to wait after the ``failures``-th failure (below 1 counts as the first)."""
        return self.steps_s[min(max(failures, 1), len(self.steps_s)) - 1]

    def delay(self, failures: int) -> timedelta:
        """:meth:`delay_s` as a ``timedelta``."""
        return timedelta(seconds=self.delay_s(failures))


@dataclass(frozen=True)
class Lifecycle:
    """What one kind of work item declares to the shared lifecycle (the module docstring):
    ``name`` (as logs name it: ``export`` logs ``export_id``), its ``table``, the
    ``open_states`` an attempt may still settle, its :class:`Fence` and :class:`Lease`,
    the longest ``error_message`` it records (characters), and for :func:`settle_failed`
    its ``statements``: ``finish_failed`` (named parameters ``id``, ``workspace_id``,
    ``fence``, ``code``, ``message``, ``now``; fenced; ``RETURNING`` the row) and
    ``row_by_id`` (parameters ``id``, ``workspace_id``), with ``row`` the dataclass both
    return. A kind whose settlement is set-based (runs) or has states of its own
    (snapshot runs) keeps its statements elsewhere and leaves ``statements`` empty."""

    name: str
    table: str
    open_states: tuple[str, ...]
    fence: Fence
    lease: Lease
    error_message_limit: int
    row: type | None = None
    statements: Mapping[str, str] | None = None


class _Attempted(Protocol):
    id: Any
    workspace_id: Any


Row = TypeVar("Row", bound=_Attempted)
T = TypeVar("T")


def settle_failed(conn: psycopg.Connection, kind: Lifecycle, row: Row, failure: Failure, *, now: datetime) -> Row:
    """Settle ``row``'s attempt ``failed`` with ``failure`` (``error_code``, the message cut
    to the kind's limit, ``finished_at`` = ``now``, aware UTC), fenced by the kind's
    :class:`Fence` (the value ``row`` holds): when a later attempt took the work over (or
    settled it) nothing is written and the row is returned as that attempt left it.
    Runs in the caller's transaction (autocommit: two statements). Logs ``<name> failed``
    at info. Raises ``psycopg.Error``; ``ValueError`` for a kind without the statements."""
    if kind.statements is None or kind.row is None:
        raise ValueError(f"{kind.name}: no finish_failed statement declared")
    params = {"id": row.id, "workspace_id": row.workspace_id, "fence": getattr(row, kind.fence.value),
              "code": failure.code, "message": failure.message[:kind.error_message_limit], "now": now}
    done = fetch_one(conn, kind.statements["finish_failed"], params, kind.row)
    if done is None:
        done = fetch_one(conn, kind.statements["row_by_id"], params, kind.row)
    else:
        logger.info(f"{kind.name} failed", extra={f"{kind.name}_id": str(row.id), "workspace_id": str(row.workspace_id),
                                                   "error_code": failure.code})
    assert done is not None, f"{kind.name} {row.id} vanished"
    return done


def record_outcome(conn: psycopg.Connection, reconnect: Callable[[], psycopg.Connection] | None,
                   record: Callable[[psycopg.Connection], T], *, name: str,
                   extra: Mapping[str, str] | None = None) -> T:
    """Run ``record`` (an attempt's fenced, idempotent outcome) on ``conn`` and return what
    it returns; when ``conn`` was lost meanwhile (``conn.broken`` / ``closed``: the
    statement's outcome is unknown), once more on ``reconnect()``'s new connection, after
    logging ``<name>'s connection lost before its outcome was recorded`` (a warning with
    ``extra``). Raises the ``psycopg.OperationalError`` when there is no ``reconnect`` or
    ``conn`` is still usable, and whatever the second try raises."""
    try:
        return record(conn)
    except psycopg.OperationalError:
        if reconnect is None or not (conn.broken or conn.closed):
            raise
        logger.warning(f"{name}'s connection lost before its outcome was recorded; recording it on a new one",
                       extra=dict(extra or {}))
    return record(reconnect())
