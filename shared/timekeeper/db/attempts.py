"""Attempts under a lease: the one rule every pipeline applies to work taken from a queue.

A piece of work (a run, an export, a render, a snapshot job) is attempted by a worker
that may die without a word (a timeout, out of memory). Every pipeline counts its
attempts durably before the work starts and applies the same three rules, kept here:

* **Held** (:meth:`AttemptRule.held`): an attempt started less than a lease ago may still
  be running; another worker must not start the work meanwhile (it retries later). Once
  the lease has passed the work may be taken over.
* **Exhausted** (:meth:`AttemptRule.exhausted`): when the attempts already made reached
  the limit, the work is settled failed (``attempts_exhausted``) instead of attempted again.
* **Final** (:meth:`AttemptRule.final`): on the last receive or the last attempt, a fault
  is settled as the work's outcome instead of being left to a retry that will not come.

The outcome of an attempt is recorded fenced by its attempt (its number, or a snapshot's
job id): a worker whose work was taken over records nothing. The fence and the start are
each pipeline's statements (its table, its states); see docs/decisions.md for why the
run pipeline's start stays one set-based statement and a snapshot's attempt spans receives.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta


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
