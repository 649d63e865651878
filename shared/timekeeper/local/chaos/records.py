"""What a fault campaign is asked to do and what it records: the options, each handler
execution and stalled process, each audited invariant's check, and the result."""

from __future__ import annotations

import collections
from dataclasses import dataclass, field
from datetime import date, datetime
from typing import Any
from uuid import UUID

CHAOS_DATABASE = "timekeeper_chaos"


@dataclass(frozen=True)
class ChaosOptions:
    """A campaign: ``days`` of faults from ``start`` (UTC midnight), then ``quiet_hours``
    without; rates are probabilities per crash-point hit (``crash_rate``,
    ``disconnect_rate``), per received message (``duplicate_rate``), per published
    message (``refuse_rate``) and per consumer invocation's first handler start
    (``stall_rate``: the process stalls past its lease while another takes the run over),
    per mail submission (``ses_throttle_rate``: SES answers ``Throttling``;
    ``ses_reject_rate``: ``MessageRejected``), and ``db_restarts`` restarts of the database
    server per simulated day of faults (a count, at instants drawn from the seed).
    ``each_point_once``: instead of random crashes, crash at the first hit of every crash
    point (one crash per point), for a deterministic test. ``load``: units of traffic
    added to the simulation's samples (see :func:`timekeeper.local.chaos.injector.add_load`)."""

    days: int = 30
    seed: int = 1
    crash_rate: float = 0.05
    duplicate_rate: float = 0.10
    refuse_rate: float = 0.02
    disconnect_rate: float = 0.01
    quiet_hours: int = 6
    start: date = date(2027, 3, 1)
    database: str = CHAOS_DATABASE
    each_point_once: bool = False
    show_progress: bool = True
    load: int = 1
    #: Probability per consumer invocation's first handler start of a stall past the lease.
    stall_rate: float = 0.02
    #: Probability per mail submission (deliveries and owner notices) that SES throttles it.
    ses_throttle_rate: float = 0.1
    #: Probability per mail submission that SES refuses it permanently (``MessageRejected``).
    ses_reject_rate: float = 0.1
    #: Restarts of the database server per simulated day of faults (at seeded instants).
    db_restarts: int = 1
    #: Connections cut per wall-clock second while faults are injected (a Poisson process):
    #: the product reaches the database through a TCP proxy (:mod:`timekeeper.local.cut_proxy`)
    #: that cuts one of its open connections, chosen from the seed, at each event. 0: no proxy.
    cut_rate: float = 0.5
    #: API requests per simulated day of faults (Run now of a schedule and of a delivery, an
    #: export, a render, in turn; :mod:`timekeeper.local.chaos.api`).
    api_requests: int = 24


@dataclass
class Execution:
    """One handler execution: the run, its attempt number, the simulated instant it started,
    the lease it held until, the invocation it ran in, whether its settlement committed
    (its outcome recorded or its lease given back for a retry) and whether that invocation
    died."""

    run_id: UUID
    attempt: int
    started_at: datetime
    lease_until: datetime
    invocation: int
    settled: bool = False
    killed: bool = False


@dataclass
class Stall:
    """One stalled process: the run and attempt it held, the simulated instant it stalled
    (its attempt's instant), the instant a second environment received the run again, and
    whether that one took the run over (its start counted a later attempt)."""

    run_id: UUID
    attempt: int
    stalled_at: datetime
    resumed_at: datetime
    taken_over: bool = False


@dataclass
class Check:
    """One audited invariant: its name, whether it held, what was checked and the failures."""

    name: str
    checked: int = 0
    failures: list[str] = field(default_factory=list)

    @property
    def held(self) -> bool:
        return not self.failures


@dataclass
class ChaosResult:
    """What a campaign injected (``faults`` by (kind, where)), how often each crash point
    was reached, the audit's checks and the simulation's own result."""

    options: ChaosOptions
    faults: collections.Counter = field(default_factory=collections.Counter)
    point_hits: collections.Counter = field(default_factory=collections.Counter)
    checks: list[Check] = field(default_factory=list)
    simulation: Any = None
    #: Well-formed messages in dead-letter queues whose consumer was killed on their receives
    #: (or whose final receive's invocation raised on an injected fault).
    dead_lettered_killed: int = 0
    #: Delivery messages sent again because the attempt that sent them died before recording them.
    resent_in_window: int = 0
    #: The campaign's API requests (:mod:`timekeeper.local.chaos.api`): answers by HTTP
    #: status over every try, and requests by kind.
    api_answers: collections.Counter = field(default_factory=collections.Counter)
    api_requests: collections.Counter = field(default_factory=collections.Counter)
    #: The stalled processes, in the order they stalled.
    stalls: list[Stall] = field(default_factory=list)
    #: The database restarts made: (simulated instant, the crash point it interrupted, seconds).
    restarts: list[tuple[datetime, str, float]] = field(default_factory=list)
    #: Restarts drawn but not made, and why (e.g. the server is ``DATABASE_URL``'s).
    skipped_restarts: int = 0
    #: What the campaign could not do as asked, in words (printed under the faults).
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(check.held for check in self.checks)

    def fault_totals(self) -> dict[str, int]:
        """Injected faults by kind (crash, disconnect, duplicate, refusal, stall,
        ses_throttle, ses_reject, db_restart, cut)."""
        totals: dict[str, int] = collections.Counter()
        for (kind, _), count in self.faults.items():
            totals[kind] += count
        return dict(totals)
