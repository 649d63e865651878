"""The dispatcher pass: claim due schedules, record their runs, publish the offers.

One pass: repeat {claim <= ``claim_batch`` due schedules in one short transaction,
compute each one's latest due occurrence, skipped backlog and next occurrence, insert the
runs and advance timing in one statement each, reoffer released and stranded runs;
commit; publish; release refusals} while a batch came back full and the time budget
allows. ``now`` is passed in: the database clock never decides what is due.
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from functools import cached_property
from typing import Any
from uuid import UUID

import psycopg
from psycopg.rows import tuple_row

from timekeeper import observability as obs
from timekeeper.db import load_queries
from timekeeper.db.attempts import AttemptRule
from timekeeper.db.durability import commit_without_flush_wait
from timekeeper.faults import crash_point
from timekeeper.schedules.closures import with_closures
from timekeeper.schedules.messages import Notifier, RunMessage, RunPublisher
from timekeeper.schedules.notifications import (
    DELIVERY_SKIPPED_STALE,
    SCHEDULE_PAUSED,
    Notice,
    enqueue_notifications,
    flush_notifications,
)
from timekeeper.schedules.recurrence import InvalidRecurrence, Occurrence, Recurrence, parse_rule_text
from timekeeper.schedules.runs import Event, publish_offers, record_events
from timekeeper.schedules.settlement import settle_run
from timekeeper.schedules.work import WorkKindRegistry

SQL = load_queries("timekeeper.schedules", "dispatcher.sql")
_ONE_MICROSECOND = timedelta(microseconds=1)
#: A delivery's staleness bound never exceeds this (misfire policy: a stale delivery is skipped).
MAX_STALENESS = timedelta(hours=12)


@dataclass
class DispatchReport:
    """Counts of one dispatcher pass (all integers; ``elapsed_s`` in seconds)."""

    claimed: int = 0
    runs_created: int = 0
    stale_skipped: int = 0
    backlog_skipped: int = 0
    published: int = 0
    refused: int = 0
    reoffered: int = 0
    #: Stranded runs settled failed (attempts or offers exhausted), and the schedules that paused.
    exhausted: int = 0
    paused_exhausted: int = 0
    paused_invalid: int = 0
    batches: int = 0
    elapsed_s: float = 0.0


@dataclass(frozen=True)
class Due:
    """What a claimed schedule owes: the latest due occurrence (or None), the count of older
    skipped ones, the first skipped instant, and the next future occurrence (or None).
    ``skipped_is_lower_bound`` is True when the backlog was too long to count exactly
    (``skipped`` is then a lower bound)."""

    latest: Occurrence | None
    skipped: int
    first_skipped_at: datetime | None
    next_occurrence: Occurrence | None
    skipped_is_lower_bound: bool = False

    @cached_property
    def occurrence_key(self) -> str:
        """The latest occurrence's run key: its UTC instant in ISO 8601 (computed once per
        due computation, which schedules sharing a rule and a due instant share)."""
        return self.latest.at.isoformat()

    @cached_property
    def occurrence_local(self) -> datetime:
        """The latest occurrence's naive wall time in the rule's zone."""
        return datetime.combine(self.latest.local_date, self.latest.local_time)


#: A backlog of at most this many occurrences is walked; a longer one is searched and counted.
_WALK_LIMIT = 64


def compute_due(rule: Recurrence, next_due_at: datetime, now: datetime) -> Due:
    """Collapse the occurrences in ``[next_due_at, now]`` (aware UTC) to the latest one and a count.

    Misfire policy: the backlog after an outage is one run for the latest due occurrence
    plus a count of the older ones skipped, never a run each. The cost does not grow with
    the backlog: up to ``_WALK_LIMIT`` occurrences are walked (the usual case: on time or
    a few behind); past that the latest occurrence is searched backwards from ``now`` and
    the skipped ones are counted arithmetically (interval rules) or by whole local days
    (wall-time rules), a backlog longer than ``COUNT_HORIZON`` getting a lower-bound count.
    """
    first: Occurrence | None = None
    latest: Occurrence | None = None
    count = 0
    occurrences = rule.occurrences_after(next_due_at - _ONE_MICROSECOND)
    for occurrence in occurrences:
        if occurrence.at > now:
            skipped = max(count - 1, 0)
            return Due(latest, skipped, first.at if skipped else None, occurrence)
        if count == _WALK_LIMIT:
            break
        first = first or occurrence
        latest = occurrence
        count += 1
    else:  # the rule ran out (past year 9999)
        skipped = max(count - 1, 0)
        return Due(latest, skipped, first.at if skipped else None, None)
    latest = rule.latest_at_or_before(now, first.at)
    counted, exact = rule.count_between(first.at, latest.at)
    return Due(latest, max(counted - 1, 1), first.at, rule.next_after(now), not exact)


class _RuleCache:
    """Compiled rules and due computations shared by the schedules of one pass.

    A rule text is parsed once per pass; schedules that share a rule and a due instant
    share the computation (thousands of "daily at 09:00 New York" schedules cost one).
    Both maps are bounded (oldest entries dropped first) so memory follows the batch,
    not the number of distinct rules a long pass meets.
    """

    MAX_ENTRIES = 4096

    def __init__(self) -> None:
        self.rules: dict[str, Recurrence | InvalidRecurrence] = {}
        self.dues: dict[tuple[str, datetime], Due] = {}

    @classmethod
    def _bound(cls, cache: dict) -> None:
        while len(cache) > cls.MAX_ENTRIES:
            del cache[next(iter(cache))]

    def rule(self, text: str) -> Recurrence:
        """The compiled rule of the stored JSON ``text`` (decoded once per pass and text); a
        business-day rule's text carries its workspace's closed dates after a newline
        (``<json>\n2027-01-04,2027-12-24``, the claim's ``rule_text``), evaluated as
        non-business days. Raises :class:`InvalidRecurrence` (cached too) for a rule that
        no longer validates."""
        compiled = self.rules.get(text)
        if compiled is None:
            try:
                rule_json, _, closed = text.partition("\n")
                compiled = with_closures(parse_rule_text(rule_json),
                                         [date.fromisoformat(d) for d in closed.split(",") if d])
            except InvalidRecurrence as error:
                compiled = error
            self.rules[text] = compiled
            self._bound(self.rules)
        if isinstance(compiled, InvalidRecurrence):
            raise compiled
        return compiled

    def due(self, text: str, next_due_at: datetime, now: datetime) -> Due:
        """:func:`compute_due` of the rule ``text``, shared by schedules with the same
        rule and due instant. Raises :class:`InvalidRecurrence` like :meth:`rule`."""
        key = (text, next_due_at)
        due = self.dues.get(key)
        if due is None:
            due = self.dues[key] = compute_due(self.rule(text), next_due_at, now)
            self._bound(self.dues)
        return due


def _staleness_bound(registry: WorkKindRegistry | None, owner: str, work_kind: str,
                     due: Due) -> timedelta | None:
    """How old a delivery's latest due occurrence may be before the run is skipped as stale.

    Rule: min(the work kind's own staleness, half the real time from the latest due
    occurrence to the next one, ``MAX_STALENESS``); with no next occurrence the half-gap
    term drops out. None when the kind sets no staleness (or is unknown, or no registry).
    """
    if registry is None:
        return None
    try:
        kind = registry.get(owner, work_kind)
    except LookupError:
        return None  # the consumer settles unknown kinds; the dispatcher still offers them
    if kind.staleness is None:
        return None
    bound = min(kind.staleness, MAX_STALENESS)
    if due.latest is not None and due.next_occurrence is not None:
        bound = min(bound, (due.next_occurrence.at - due.latest.at) / 2)
    return bound


#: Dispatch slots: every schedule has one (``schedules.dispatch_slot``, migration
#: ``0031_dispatch_partitions.sql``), the first 15 bits of the MD5 of its id's text.
DISPATCH_SLOTS = 32_768


def dispatch_slot(schedule_id: UUID) -> int:
    """The dispatch slot of ``schedule_id`` (0..32767), as the database computes it: the
    first 15 bits of the MD5 digest of the id's text form. Stable: the same for every
    partition count."""
    return int(hashlib.md5(str(schedule_id).encode(), usedforsecurity=False).hexdigest()[:4], 16) >> 1


@dataclass(frozen=True)
class Partition:
    """Partition ``index`` of ``count`` of one owner's dispatch: it claims the schedules whose
    dispatch slot is in ``[slot_from, slot_to)``, a contiguous share of the
    :data:`DISPATCH_SLOTS` (partition ``i`` of ``k`` holds ``[i*S//k, (i+1)*S//k)``), and
    partition 0 also does the owner-wide work (re-offers, notifications). Raises
    ``ValueError`` unless ``0 <= index < count <= DISPATCH_SLOTS``."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.count <= DISPATCH_SLOTS:
            raise ValueError(f"partitions: {self.count} is not 1..{DISPATCH_SLOTS}")
        if not 0 <= self.index < self.count:
            raise ValueError(f"partition: {self.index} is not 0..{self.count - 1}")

    @property
    def slot_from(self) -> int:
        """The first slot of the partition."""
        return self.index * DISPATCH_SLOTS // self.count

    @property
    def slot_to(self) -> int:
        """The slot after the partition's last."""
        return (self.index + 1) * DISPATCH_SLOTS // self.count

    @property
    def owner_wide(self) -> bool:
        """Whether this partition does the owner-wide work (partition 0)."""
        return self.index == 0

    def owns(self, schedule_id: UUID) -> bool:
        """Whether this partition claims ``schedule_id``."""
        return self.slot_from <= dispatch_slot(schedule_id) < self.slot_to


#: The whole owner: one dispatcher claiming every slot.
WHOLE_OWNER = Partition()


_UUID7_VERSION_AND_VARIANT = (0x7 << 76) | (0x2 << 62)
_LOW_62_BITS = (1 << 62) - 1


def run_ids(count: int, *, unix_ms: int | None = None) -> list[UUID]:
    """``count`` new run ids, time-ordered: UUID version 7 (RFC 9562), the 48-bit Unix time
    in milliseconds (``unix_ms``, default the wall clock), then 74 random bits.

    Ids made later sort after ids made earlier (to the millisecond), so the entries a claim
    batch adds to the run table's primary key land on the index's last pages rather than
    one random page each. Made here rather than in the insert: the statement's bytea-to-text
    round trip cost about 6 us of database time per run, more than this does in Python.
    """
    stamp = (time.time_ns() // 1_000_000 if unix_ms is None else unix_ms) << 80 | _UUID7_VERSION_AND_VARIANT
    noise = os.urandom(10 * count)
    ids = []
    for start in range(0, 10 * count, 10):
        bits = int.from_bytes(noise[start:start + 10])
        ids.append(UUID(int=stamp | (bits >> 68) << 64 | bits & _LOW_62_BITS))
    return ids


def _message(run: dict[str, Any], owner: str) -> RunMessage:
    # Validated construction: pydantic-core checks these already-typed values in about 3 us,
    # faster than the pure-Python model_construct (about 10 us).
    return RunMessage(run_id=run["id"], schedule_id=run["schedule_id"], workspace_id=run["workspace_id"],
                      owner=owner, work_kind=run["work_kind"])


@dataclass(frozen=True)
class OfferLimits:
    """When the dispatcher offers a run again, and when it gives up.

    ``reoffer_after``: a run whose accepted offer has not started this long (or whose lease
    expired this long ago) is offered again. ``unpublished_after``: an offer the queue never
    accepted (the dispatcher died between its commit and the send) is offered again by a
    pass at least this much later (the next minute's pass). ``max_attempts``: a run whose
    attempts reached this many without an outcome (its consumer was killed each time) is
    settled failed ``attempts_exhausted``. ``max_publishes``: a run whose message the queue
    accepted this many times without the run finishing is settled failed
    ``offers_exhausted``. Both settlements count in the failure streak.
    """

    reoffer_after: timedelta = timedelta(minutes=15)
    unpublished_after: timedelta = timedelta(seconds=30)
    max_attempts: int = 5
    max_publishes: int = 3

    @cached_property
    def attempts(self) -> AttemptRule:
        """The attempt rule of ``max_attempts`` (a stranded run's lease is its ``lease_until``)."""
        return AttemptRule(max_attempts=self.max_attempts)


@dataclass
class _Claim:
    """One claim transaction's result: the runs to offer after commit, the counts, the new
    runs inserted already recorded as accepted and their pending-offer row (or None)."""

    messages: list[RunMessage]
    report: DispatchReport
    recorded: set[UUID]
    pending_id: int | None


def claim_batch(conn: psycopg.Connection, *, owner: str, now: datetime, limit: int,
                reoffer_after: timedelta, registry: WorkKindRegistry | None = None,
                cache: _RuleCache | None = None, actor: str = "dispatcher",
                reoffer: bool = True, limits: OfferLimits | None = None,
                partition: Partition = WHOLE_OWNER) -> tuple[list[RunMessage], DispatchReport]:
    """Run one claim transaction's statements inside the caller's transaction; return the
    runs to offer after the caller commits.

    Shapes: returns ``(messages, report)`` where ``messages`` are the new and reoffered
    runs to publish after commit. ``limits`` (default: :class:`OfferLimits` with
    ``reoffer_after``) decides which stranded runs are offered again and which are settled
    failed. The new runs are inserted recorded as accepted by the queue, with a
    pending-offer row that :func:`dispatch` deletes after the send; a caller that never
    sends them leaves the row, and the next pass offers them again. ``partition``: only the
    schedules of that :class:`Partition` are claimed (default: every one). Raises
    ``psycopg.Error`` on database failure (the caller rolls back, leaving timing due).
    """
    claim = _claim_batch(conn, owner=owner, now=now, limit=limit, reoffer_after=reoffer_after, registry=registry,
                         cache=cache, actor=actor, reoffer=reoffer, limits=limits, partition=partition)
    return claim.messages, claim.report


def _claim_batch(conn: psycopg.Connection, *, owner: str, now: datetime, limit: int,
                 reoffer_after: timedelta, registry: WorkKindRegistry | None, cache: _RuleCache | None,
                 actor: str, reoffer: bool, limits: OfferLimits | None,
                 partition: Partition = WHOLE_OWNER) -> _Claim:
    cache = cache or _RuleCache()
    limits = limits or OfferLimits(reoffer_after=reoffer_after)
    report = DispatchReport()
    with conn.cursor(row_factory=tuple_row) as cursor:
        rows = cursor.execute(SQL["claim_due_schedules"], {
            "owner": owner, "now": now, "limit": limit, "slot_from": partition.slot_from,
            "slot_to": partition.slot_to}).fetchall()
    report.claimed = len(rows)

    runs: dict[str, list[Any]] = {k: [] for k in (
        "schedule_id", "workspace_id", "work_kind", "occurrence_key", "occurrence_at", "occurrence_local",
        "dst_shifted", "definition_version", "state", "skipped_backlog", "first_skipped_at")}
    advance_ids: list[UUID] = []
    advance_to: list[datetime | None] = []
    events: list[Event] = []
    invalid: list[UUID] = []
    bounds: dict[tuple[str, str, datetime], timedelta | None] = {}

    notices: list[Notice] = []
    for schedule_id, workspace_id, work_kind, text, next_due_at, definition_version in rows:
        try:
            due = cache.due(text, next_due_at, now)
        except InvalidRecurrence as error:
            invalid.append(schedule_id)
            events.append(Event(schedule_id, workspace_id, "definition_invalid", "definition_invalid",
                                {"field": error.field, "error": error.reason}))
            events.append(Event(schedule_id, workspace_id, "paused", "definition_invalid"))
            notices.append(Notice(schedule_id, workspace_id, owner, SCHEDULE_PAUSED,
                                  f"paused:{schedule_id}:definition_invalid:{now.isoformat()}", {
                                      "schedule_id": str(schedule_id), "workspace_id": str(workspace_id),
                                      "reason": "definition_invalid", "work_kind": work_kind,
                                      "field": error.field, "error": error.reason}))
            continue
        advance_ids.append(schedule_id)
        advance_to.append(due.next_occurrence.at if due.next_occurrence else None)
        latest = due.latest
        if latest is None:
            continue
        key = (work_kind, text, next_due_at)
        if key not in bounds:
            bounds[key] = _staleness_bound(registry, owner, work_kind, due)
        bound = bounds[key]
        stale = bound is not None and now - latest.at > bound
        runs["schedule_id"].append(schedule_id)
        runs["workspace_id"].append(workspace_id)
        runs["work_kind"].append(work_kind)
        runs["occurrence_key"].append(due.occurrence_key)
        runs["occurrence_at"].append(latest.at)
        runs["occurrence_local"].append(due.occurrence_local)
        runs["dst_shifted"].append(latest.shifted)
        runs["definition_version"].append(definition_version)
        runs["state"].append("skipped" if stale else "queued")
        runs["skipped_backlog"].append(due.skipped)
        runs["first_skipped_at"].append(due.first_skipped_at)
        if due.skipped:
            report.backlog_skipped += due.skipped
            events.append(Event(schedule_id, workspace_id, "backlog_skipped", "misfire", {
                "count": due.skipped, "first_skipped_at": due.first_skipped_at.isoformat(),
                "last_skipped_before": latest.at.isoformat(),
                **({"count_is_lower_bound": True} if due.skipped_is_lower_bound else {})}))

    messages: list[RunMessage] = []
    recorded: set[UUID] = set()
    pending_id = None
    if runs["schedule_id"]:
        ids = run_ids(len(runs["schedule_id"]))
        # The statement returns (1-based position of an inserted run's entry in the arrays,
        # state, pending-offer id); the message is built from the arrays, not read back.
        with conn.cursor(row_factory=tuple_row) as cursor:
            inserted = cursor.execute(SQL["insert_runs"], {"owner": owner, "now": now, "id": ids, **runs}).fetchall()
        for entry, state, pending in inserted:
            if state == "queued":
                index = entry - 1
                messages.append(RunMessage(run_id=ids[index], schedule_id=runs["schedule_id"][index],
                                           workspace_id=runs["workspace_id"][index], owner=owner,
                                           work_kind=runs["work_kind"][index]))
                recorded.add(ids[index])
                pending_id = pending
            else:
                report.stale_skipped += 1
                index = entry - 1
                notices.append(Notice(runs["schedule_id"][index], runs["workspace_id"][index], owner,
                                      DELIVERY_SKIPPED_STALE, f"stale:{ids[index]}", {
                                          "schedule_id": str(runs["schedule_id"][index]),
                                          "workspace_id": str(runs["workspace_id"][index]),
                                          "reason": "skipped_stale", "work_kind": runs["work_kind"][index],
                                          "run_id": str(ids[index]),
                                          "occurrence_at": runs["occurrence_at"][index].isoformat()}))
        report.runs_created = len(inserted)
    if advance_ids:
        conn.execute(SQL["advance_schedules"], {"now": now, "id": advance_ids, "next_due_at": advance_to})
    if invalid:
        conn.execute(SQL["pause_invalid_definitions"], {"now": now, "ids": invalid})
        report.paused_invalid = len(invalid)
    if reoffer:
        messages.extend(_reoffer(conn, owner=owner, now=now, limit=limit, limits=limits, report=report,
                                 events=events, actor=actor))
    record_events(conn, events, actor=actor, now=now)
    enqueue_notifications(conn, notices, now=now)  # people only: the topic keeps its pause notices
    return _Claim(messages, report, recorded, pending_id)


def _reoffer_reason(run: dict[str, Any]) -> str:
    if not run["unpublished"]:
        return "stranded"
    return "released" if run["was_released"] else "unpublished"


def _reoffer(conn: psycopg.Connection, *, owner: str, now: datetime, limit: int, limits: OfferLimits,
             report: DispatchReport, events: list[Event], actor: str) -> list[RunMessage]:
    """Offer released and stranded runs again, or settle the ones that exhausted their
    attempts or offers (failed, counted in the streak). Returns the messages to publish."""
    candidates = conn.execute(SQL["stranded_runs"], {
        "owner": owner, "limit": limit, "now": now, "stale_before": now - limits.reoffer_after,
        "unpublished_before": now - limits.unpublished_after, "max_attempts": limits.max_attempts}).fetchall()
    again: list[dict[str, Any]] = []
    for run in candidates:
        if limits.attempts.exhausted(run["attempts"]):
            code, message = "attempts_exhausted", (
                f"{run['attempts']} attempts ended without an outcome (the consumer was killed or timed out)")
        elif run["publish_count"] >= limits.max_publishes:
            code, message = "offers_exhausted", (
                f"offered {run['publish_count']} times; the run never started or finished")
        else:
            again.append(run)
            continue
        settled = settle_run(conn, run_id=run["id"], state="failed", outcome_code=code, now=now, error=message,
                             actor=actor)
        if settled is not None:
            report.exhausted += 1
            report.paused_exhausted += bool(settled.paused_reason)
    if not again:
        return []
    conn.execute(SQL["offer_again"], {"ids": [run["id"] for run in again], "now": now,
                                      "pending": [run["id"] for run in again if run["pending"]]})
    report.reoffered = len(again)
    for run in again:
        events.append(Event(run["schedule_id"], run["workspace_id"], "reoffered",
                            _reoffer_reason(run), run_id=run["id"]))
    return [_message(run, owner) for run in again]


def dispatch(conn: psycopg.Connection, *, owner: str, now: datetime, publisher: RunPublisher,
             claim_limit: int = 200, reoffer_after: timedelta = timedelta(minutes=15),
             time_budget_s: float = 40.0, registry: WorkKindRegistry | None = None,
             notifier: Notifier | None = None, metrics: Any = None,
             monotonic: Callable[[], float] = time.monotonic, limits: OfferLimits | None = None,
             partition: Partition = WHOLE_OWNER,
             second: Callable[[], psycopg.Connection] | None = None) -> DispatchReport:
    """One dispatcher pass for ``owner`` at instant ``now`` (aware UTC).

    ``partition``: the pass claims only that :class:`Partition`'s schedules (default:
    every one); the owner-wide work (re-offers of released, unpublished and stranded runs,
    owner notifications) is done by partition 0 alone. Partitions of different counts may
    run at once (while the count changes): the claim's row locks, the re-check of
    ``next_due_at`` under them and the runs' unique occurrence key keep every occurrence
    to one run.

    Repeats claim -> commit -> publish (recording accepted offers, releasing refused ones)
    while a batch came back full and ``time_budget_s`` (seconds of wall time) remains, so
    the 200 bound limits one transaction, not the minute's throughput. With ``second`` (a
    callable returning a second idle connection, called only when the first batch came
    back full), the batches after the first are claimed by two workers at once, one per
    connection, so the database's work on one worker's batch overlaps the other's Python
    work (computing dues); the claim's ``SKIP LOCKED`` keeps them off each other's rows, as
    it keeps concurrent partitions apart. A worker that raises stops the other after its
    current batch (every batch commits and publishes whole, or rolls back), and the pass
    re-raises. Then flushes unsent owner notifications. ``limits`` (default:
    :class:`OfferLimits` with ``reoffer_after``) governs re-offers. Returns the summed
    :class:`DispatchReport`. Raises ``psycopg.Error`` when a claim transaction fails (it
    rolls back; the timing stays due for the next pass)."""
    started = monotonic()
    limits = limits or OfferLimits(reoffer_after=reoffer_after)
    total = DispatchReport()
    cache = _RuleCache()
    # Never prepared: a generic plan for this probe scans the whole table (custom plans
    # read the partial indexes; measured 0.3 ms against 110 ms at 1M schedules).
    probe = conn.execute(SQL["probe_work"], {
        "owner": owner, "now": now, "stale_before": now - limits.reoffer_after,
        "unpublished_before": now - limits.unpublished_after, "max_attempts": limits.max_attempts,
        "slot_from": partition.slot_from, "slot_to": partition.slot_to, "owner_wide": partition.owner_wide},
        prepare=False).fetchone()
    has_work = probe["due"] or probe["reofferable"] or probe["abandoned"]
    reoffer = bool(probe["reofferable"] or probe["abandoned"])
    counted = threading.Lock()
    stop = threading.Event()

    def one_batch(on: psycopg.Connection, rules: _RuleCache, reoffer: bool) -> DispatchReport:
        with on.transaction():
            commit_without_flush_wait(on)  # a claim lost in a database crash is claimed again
            claim = _claim_batch(on, owner=owner, now=now, limit=claim_limit,
                                 reoffer_after=limits.reoffer_after, registry=registry, cache=rules,
                                 actor="dispatcher", reoffer=reoffer, limits=limits, partition=partition)
        report = claim.report
        if claim.messages:
            crash_point("dispatcher.after_claim_commit")
        report.published, report.refused = publish_offers(on, publisher, claim.messages, now=now,
                                                          recorded=claim.recorded, pending_id=claim.pending_id)
        with counted:
            for name in _REPORT_COUNTS:
                setattr(total, name, getattr(total, name) + getattr(report, name))
            total.batches += 1
        return report

    def worker(on: psycopg.Connection, rules: _RuleCache, reoffer: bool, *, first_only: bool = False) -> bool | None:
        """Claim batches on ``on`` while they come back full, the budget remains and no
        other worker failed. Returns None when the pass is done, else (``first_only``: after
        one full batch) whether the next batch still takes re-offers."""
        while True:
            report = one_batch(on, rules, reoffer)
            # Reoffers are taken in the first batch; later batches repeat them only if it was full.
            reoffer = partition.owner_wide and report.reoffered + report.exhausted >= claim_limit
            full = report.claimed >= claim_limit or reoffer
            if not full or monotonic() - started >= time_budget_s or stop.is_set():
                return None
            if first_only:
                return reoffer

    more = worker(conn, cache, reoffer, first_only=second is not None) if has_work else None
    if more is not None and second is not None:
        _two_workers(lambda: worker(conn, cache, more), lambda: worker(second(), _RuleCache(), False), stop)
    if notifier is not None and partition.owner_wide and (probe["notices"] or total.paused_exhausted):
        flush_notifications(conn, owner=owner, notifier=notifier, now=now)
    total.elapsed_s = monotonic() - started
    if metrics is not None:
        for name, value in ((obs.SCHEDULES_CLAIMED, total.claimed), (obs.RUNS_PUBLISHED, total.published),
                            (obs.PUBLISH_REFUSED, total.refused), (obs.RUNS_REOFFERED, total.reoffered),
                            (obs.BACKLOG_SKIPPED, total.backlog_skipped),
                            (obs.DEFINITIONS_INVALID, total.paused_invalid), (obs.DISPATCHER_HEARTBEAT, 1)):
            metrics.add_metric(name=name, unit="Count", value=value)
        if total.exhausted:
            metrics.add_metric(name=obs.RUN_FAILED, unit="Count", value=total.exhausted)
        if total.paused_exhausted:
            metrics.add_metric(name=obs.SCHEDULE_AUTO_PAUSED, unit="Count", value=total.paused_exhausted)
    return total


def _two_workers(first: Callable[[], Any], other: Callable[[], Any], stop: threading.Event) -> None:
    """Run ``first`` here and ``other`` on a thread of its own; when either raises, ``stop``
    is set (the other ends after its current batch) and, once both ended, the first error
    is raised again."""
    errors: list[BaseException] = []

    def run_other() -> None:
        try:
            other()
        except BaseException as error:  # noqa: BLE001 - raised again on the pass's thread
            stop.set()
            errors.append(error)

    thread = threading.Thread(target=run_other, name="timekeeper-claim-worker", daemon=True)
    thread.start()
    try:
        first()
    except BaseException:
        stop.set()
        thread.join()
        raise
    thread.join()
    if errors:
        raise errors[0]


_REPORT_COUNTS = ("claimed", "runs_created", "stale_skipped", "backlog_skipped", "published", "refused",
                  "reoffered", "exhausted", "paused_exhausted", "paused_invalid")
