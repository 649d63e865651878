"""The queue consumer: run the work kinds of one SQS batch and record each result once.

For the run messages of one batch:

1. **Start** (one committed statement, before any handler runs): every named run that is
   queued, or running under an expired lease, becomes running under a lease with
   ``attempts + 1``. The attempt is durable, so an attempt that kills its process (a
   Lambda timeout, out of memory) still counts: once a run's attempts pass the
   pipeline's limit it is settled failed ``attempts_exhausted`` (here, or by the
   dispatcher when its message is gone) and counts in the failure streak. A run under
   another live lease is reported failed so SQS redelivers it later; an absent or
   terminal run is acknowledged.
2. **No handler needed**: a deleted schedule's run settles skipped, an unknown work kind's
   run failed, an exhausted run failed.
3. **Transactional work kinds** share ONE transaction: each handler runs in a savepoint
   with its run's workspace entered; successes and skips settle in one statement,
   failures one by one (they may pause and notify); one commit. The transaction begins
   at the first handler's first database use (or for a failure's settlement): a batch
   whose handlers never touch the database and all succeed or skip settles in one
   statement that commits on its own.
4. **Alone**: leased work kinds (long or external work) and suspects (runs whose previous
   attempt ended without an outcome: isolating them keeps a run that kills its process
   from taking its batch-mates' attempts with it) run one by one, each in its own
   transaction.

Settlement is fenced by the attempt number: a holder whose run was taken over records
nothing and its effects roll back. A handler that raises is retried on a later receive
(its lease given back at once, its message received again after the pipeline's backoff)
and settled failed ``unexpected_error`` on the final one (a :class:`RetryableFault`: its
own code).
After the commit, the handlers' ``after_commit`` callbacks run.
"""

from __future__ import annotations

import collections
import contextlib
import random
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import cached_property
from typing import Any
from uuid import UUID

import psycopg
from psycopg import sql

from timekeeper import observability as obs
from timekeeper.db import load_queries, set_tenant
from timekeeper.db.attempts import AttemptRule, Backoff
from timekeeper.db.rows import fetch_all
from timekeeper.faults import crash_point
from timekeeper.schedules.messages import RunMessage
from timekeeper.schedules.runs import RUN_LIFECYCLE
from timekeeper.schedules.settlement import (
    Completion,
    Settlement,
    lock_schedules,
    settle_completed,
    settle_run,
)
from timekeeper.schedules.work import (
    Outcome,
    Refused,
    RetryableFault,
    RunContext,
    Skipped,
    Succeeded,
    WorkKind,
    WorkKindRegistry,
)

SQL = load_queries("timekeeper.schedules", "consumer.sql")


class RetryLater(Exception):  # noqa: N818 - a signal, not an error condition of ours
    """The message must be redelivered later (live lease elsewhere, or a retryable fault).
    ``delay_s``: the backoff before its next receive (seconds; a handler's fault), or None
    for the queue's own visibility timeout (a run held by another consumer waits out its
    lease)."""

    def __init__(self, message: str, *, delay_s: int | None = None) -> None:
        super().__init__(message)
        self.delay_s = delay_s


class Released(RetryLater):  # noqa: N818 - a signal, like RetryLater
    """A run of a capped work kind whose workspace already has its cap of such runs in
    flight: it was not started (no attempt counted, nothing recorded). The edge sends a new
    copy of ``message`` delayed by ``delay_s`` (seconds) and acknowledges the received one,
    so cap releases never raise the message's receive count towards the dead-letter
    queue."""

    def __init__(self, message: RunMessage, *, delay_s: int) -> None:
        super().__init__(f"run {message.run_id}: its workspace has its cap of runs in flight", delay_s=delay_s)
        self.message = message


class MisroutedMessage(ValueError):
    """A run message of another owner reached this consumer (a wiring fault: the message
    fails, and after maxReceiveCount it rests in the dead-letter queue)."""


@dataclass(frozen=True)
class ConsumerSettings:
    """Per-pipeline consumer settings from the topology: owner, lease (a timedelta), the
    queue's maxReceiveCount (the final receive, and the most attempts a run gets), and the
    auto-pause threshold."""

    owner: str
    lease: timedelta
    max_receive_count: int
    failure_threshold: int
    #: The backoff before the next receive of a run whose handler raised, by the receive
    #: that failed (seconds; the last entry repeats). Empty: the queue's visibility timeout.
    retry_backoff_s: tuple[int, ...] = ()
    #: Work kinds capped per workspace at start, the cap (runs in flight), and the range of
    #: a released message's delay (seconds, inclusive): the topology's numbers.
    capped_work_kinds: frozenset[str] = frozenset()
    max_in_flight_per_workspace: int = 2
    cap_release_delay_s: tuple[int, int] = (10, 30)

    @classmethod
    def from_pipeline(cls, pipeline: Any) -> ConsumerSettings:
        return cls(owner=pipeline.owner, lease=pipeline.lease, max_receive_count=pipeline.consumer.max_receive_count,
                   failure_threshold=pipeline.failure_pause_threshold, retry_backoff_s=pipeline.retry_backoff_s,
                   capped_work_kinds=frozenset(pipeline.capped_work_kinds),
                   max_in_flight_per_workspace=pipeline.max_in_flight_per_workspace,
                   cap_release_delay_s=pipeline.cap_release_delay_s)

    def release_delay_s(self) -> int:
        """A released message's delay: a random whole number of seconds in ``cap_release_delay_s``
        (jitter, so released runs of one workspace do not come back together)."""
        low, high = self.cap_release_delay_s
        return random.randint(low, high)  # noqa: S311 - jitter, not a secret

    def retry_delay_s(self, receive_count: int) -> int | None:
        """The backoff after receive ``receive_count`` (1-based) failed (the one back-off
        rule, :class:`~timekeeper.db.attempts.Backoff`), or None."""
        if not self.retry_backoff_s:
            return None
        return Backoff(self.retry_backoff_s).delay_s(receive_count)

    @property
    def max_attempts(self) -> int:
        """Attempts a run gets before it is settled ``attempts_exhausted``."""
        return self.max_receive_count

    @cached_property
    def attempts(self) -> AttemptRule:
        """The pipeline's attempt rule (the lease itself is the run's ``lease_until``)."""
        return AttemptRule(max_attempts=self.max_attempts)


@dataclass(frozen=True)
class ProcessResult:
    """``action``: ``settled`` | ``ignored`` (absent or terminal run, or a duplicate in the
    batch) | ``fenced`` (lost the run to another attempt; nothing committed);
    ``settlement`` when settled."""

    action: str
    settlement: Settlement | None = None


@dataclass(frozen=True)
class Delivery:
    """One received message of a batch: its ``key`` (the SQS message id), the parsed
    ``message`` and ``receive_count`` (ApproximateReceiveCount as an int)."""

    key: str
    message: RunMessage
    receive_count: int


#: What a delivery comes to: acknowledge (:class:`ProcessResult`) or report the item failed.
Result = ProcessResult | RetryLater | MisroutedMessage


@dataclass(frozen=True)
class StartedRun:
    """A run this consumer started: its row after the start (``attempts`` is this attempt)."""

    id: UUID
    schedule_id: UUID
    workspace_id: UUID
    owner: str
    work_kind: str
    occurrence_at: datetime
    occurrence_local: datetime
    trigger: str
    requested_by: str | None
    attempts: int
    subject_id: UUID | None
    deleted_at: datetime | None


@dataclass(frozen=True)
class _Verdict:
    """A terminal result to record for a run."""

    state: str
    code: str
    detail: dict[str, Any] | None = None
    error: str | None = None
    pause_reason: str | None = None


@dataclass(frozen=True)
class _Retry:
    """A handler fault on a non-final receive: give the lease back, redeliver later."""

    error: BaseException
    text: str


@dataclass
class _Batch:
    """The shared state of one :func:`process_batch` call."""

    conn: psycopg.Connection
    now: datetime
    registry: WorkKindRegistry
    settings: ConsumerSettings
    services: dict[str, Any]
    receive_counts: dict[UUID, int]

    def final(self, run: StartedRun) -> bool:
        """Whether this is the run's last chance: its receive or its attempts reached the limit."""
        return self.settings.attempts.final(attempt=run.attempts, receive_count=self.receive_counts.get(run.id, 1))


def process_batch(conn: psycopg.Connection, deliveries: list[Delivery], *, now: datetime,
                  registry: WorkKindRegistry, settings: ConsumerSettings, services: dict[str, Any] | None = None,
                  metrics: Any = None) -> list[Result]:
    """Process the run messages of one SQS batch at instant ``now`` (aware UTC).

    Returns one result per delivery, in order: a :class:`ProcessResult` (acknowledge), or
    a :class:`RetryLater` / :class:`MisroutedMessage` (report the item failed so SQS
    redelivers it). Raises ``psycopg.Error`` when the database fails (what committed stays
    committed; every message not yet answered is redelivered).
    """
    results: dict[int, Result] = {}
    wanted: dict[UUID, list[int]] = {}
    for index, delivery in enumerate(deliveries):
        message = delivery.message
        if message.owner != settings.owner:
            results[index] = MisroutedMessage(
                f"message for owner {message.owner!r} reached the {settings.owner!r} consumer")
        else:
            wanted.setdefault(message.run_id, []).append(index)
    if not wanted:
        return [results[index] for index in range(len(deliveries))]

    batch = _Batch(conn, now, registry, settings, services or {}, {
        run_id: max(deliveries[i].receive_count for i in indexes) for run_id, indexes in wanted.items()})
    messages = {run_id: deliveries[indexes[0]].message for run_id, indexes in wanted.items()}
    for indexes in wanted.values():
        for index in indexes[1:]:  # a run named twice in one batch is processed once
            results[index] = ProcessResult("ignored")

    # First attempts of transactional kinds start together; leased kinds and runs whose
    # earlier attempt ended without an outcome start one by one, right before they run.
    capped = {run_id for run_id, m in messages.items() if m.work_kind in settings.capped_work_kinds}
    first = _start(batch, [run_id for run_id, m in messages.items()
                           if not _leased(registry, m) and run_id not in capped], first_only=True)
    outcomes: dict[UUID, ProcessResult | RetryLater] = {}
    if first:
        crash_point("consumer.after_start_commit")
        together, callbacks = _run_together(batch, [(run, registry.find(run.owner, run.work_kind))
                                                    for run in first.values()])
        outcomes.update(together)
        crash_point("consumer.after_settle_commit")
        _after_commit(callbacks)
    for run_id in messages:
        if run_id in first:
            continue
        if run_id in capped:
            started = _start_capped(batch, run_id)
            if started is False:
                outcomes[run_id] = Released(messages[run_id], delay_s=settings.release_delay_s())
                continue
        else:
            started = _start(batch, [run_id], first_only=False).get(run_id)
        if started is None:
            outcomes[run_id] = _not_started(batch, run_id)
            continue
        crash_point("consumer.after_start_commit")
        outcomes[run_id], callbacks = _run_alone(batch, started, registry.find(started.owner, started.work_kind))
        crash_point("consumer.after_settle_commit")
        _after_commit(callbacks)
    for run_id, outcome in outcomes.items():
        results[wanted[run_id][0]] = outcome
    _count(outcomes.values(), metrics)
    return [results[index] for index in range(len(deliveries))]


def _leased(registry: WorkKindRegistry, message: RunMessage) -> bool:
    kind = registry.find(message.owner, message.work_kind)
    return kind is not None and kind.leased


def _not_started(batch: _Batch, run_id: UUID) -> ProcessResult | RetryLater:
    """Why a run could not be started: held elsewhere (redeliver later) or absent/terminal.

    A run held elsewhere whose message is on its final receive is acknowledged instead:
    failing the item would only move a duplicate to the dead-letter queue (and page an
    operator for nothing). The holder settles the run; if the holder dies, its lease
    expires and the dispatcher's sweep offers the run again with a message of its own."""
    row = batch.conn.execute(SQL["run_state"], {"id": run_id}).fetchone()
    if row is not None and row["state"] in ("queued", "running"):
        if batch.settings.attempts.final(receive_count=batch.receive_counts.get(run_id, 1)):
            obs.logger.info("run held by another consumer on the message's final receive; acknowledged",
                            extra={"run_id": str(run_id)})
            return ProcessResult("ignored")
        return RetryLater(f"run {run_id} is held by another consumer")
    return ProcessResult("ignored")


def process_run(conn: psycopg.Connection, message: RunMessage, *, receive_count: int, now: datetime,
                registry: WorkKindRegistry, settings: ConsumerSettings, services: dict[str, Any] | None = None,
                metrics: Any = None) -> ProcessResult:
    """Process one run message at instant ``now`` (aware UTC): :func:`process_batch` of one.

    Returns the :class:`ProcessResult`; raises :class:`RetryLater` (redeliver later),
    :class:`MisroutedMessage` or ``psycopg.Error``.
    """
    (result,) = process_batch(conn, [Delivery(str(message.run_id), message, receive_count)], now=now,
                              registry=registry, settings=settings, services=services, metrics=metrics)
    if isinstance(result, Exception):
        raise result
    return result


def _start(batch: _Batch, run_ids: list[UUID], *, first_only: bool) -> dict[UUID, StartedRun]:
    """Start the runs in one committed statement; return the ones this attempt holds.
    ``first_only`` starts only runs that never had an attempt.

    The start is committed before any handler runs (so a killed attempt still counts) but
    without waiting for its WAL flush: a database crash may forget the newest starts,
    which costs at most one uncounted attempt, never an effect (effects and outcomes
    commit durably with the settlement). One statement, one round trip.
    """
    if not run_ids:
        return {}
    params = {"ids": run_ids, "now": batch.now, "first_only": first_only,
              "lease_until": batch.now + batch.settings.lease}
    if first_only:  # the batch's first attempts: nothing to keep, nothing more written
        rows = fetch_all(batch.conn, SQL["start_runs"], params, StartedRun)
    else:  # one by one: the attempt's start and receive kept, a stalled attempt taken over kept
        params["receive_counts"] = [batch.receive_counts.get(run_id, 1) for run_id in run_ids]
        rows = fetch_all(batch.conn, SQL["start_runs_kept"], params, StartedRun)
    return {run.id: run for run in rows}


def _start_capped(batch: _Batch, run_id: UUID) -> StartedRun | None | bool:
    """Start one run of a capped work kind unless its workspace already has
    ``max_in_flight_per_workspace`` runs of the capped kinds running under a live lease:
    the count and the start commit together under the workspace's cap lock. Returns the
    started run, None when it could not be started (held elsewhere, absent, terminal), or
    False when the cap holds it back (nothing was written)."""
    settings = batch.settings
    with batch.conn.transaction():
        running = batch.conn.execute(SQL["capped_in_flight"], {
            "id": run_id, "now": batch.now, "kinds": sorted(settings.capped_work_kinds)}).fetchone()["running"]
        if running >= settings.max_in_flight_per_workspace:
            obs.logger.info("run released: its workspace has its cap of capped runs in flight",
                            extra={"run_id": str(run_id), "running": running})
            return False
        return _start(batch, [run_id], first_only=False).get(run_id)


def _without_handler(batch: _Batch, run: StartedRun, kind: WorkKind | None) -> _Verdict | None:
    """The result of a run that needs no handler, or None when its handler must run."""
    if run.deleted_at is not None:
        return _Verdict("skipped", "schedule_deleted")
    if kind is None:
        return _Verdict("failed", "unknown_work_kind",
                        error=f"no work kind {run.work_kind!r} registered for owner {run.owner!r}")
    if batch.settings.attempts.exhausted(run.attempts - 1):  # this start counted itself
        return _Verdict("failed", "attempts_exhausted", error=(
            f"{run.attempts - 1} attempts ended without an outcome (the consumer was killed or timed out)"))
    return None


class _RunConnection:
    """The connection a handler sees: the consumer's connection, entered into the run's
    workspace (and, in a batch, the run's savepoint) just before the handler's first use of
    it. A handler that never touches the database costs no round trip; one that does sees
    every statement scoped to its run. Once the handler returned, it is a plain delegate
    (after-commit callbacks use it outside the transaction)."""

    def __init__(self, conn: psycopg.Connection, enter: Callable[[], None]):
        self._conn = conn
        self._enter: Callable[[], None] | None = enter
        self.entered = False

    def _use(self) -> psycopg.Connection:
        if self._enter is not None:
            enter, self._enter = self._enter, None
            enter()
            self.entered = True
        return self._conn

    def detach(self) -> None:
        """The handler returned: later uses go straight to the connection."""
        self._enter = None

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        return self._use().execute(*args, **kwargs)

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        return self._use().cursor(*args, **kwargs)

    def transaction(self, *args: Any, **kwargs: Any) -> Any:
        return self._use().transaction(*args, **kwargs)

    def pipeline(self) -> Any:
        return self._use().pipeline()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _context(batch: _Batch, run: StartedRun, conn: _RunConnection) -> RunContext:
    return RunContext(
        run_id=run.id, schedule_id=run.schedule_id, workspace_id=run.workspace_id, owner=run.owner,
        work_kind=run.work_kind, subject_id=run.subject_id, occurrence_at=run.occurrence_at,
        occurrence_local=run.occurrence_local, trigger=run.trigger, requested_by=run.requested_by,
        attempt=run.attempts, now=batch.now, conn=conn, services=batch.services)  # type: ignore[arg-type]


def _call(kind: WorkKind, ctx: RunContext) -> Outcome | BaseException:
    """Call the handler; return its outcome, or the exception it raised (its own fault)."""
    token = obs.push_log_keys(run_id=ctx.run_id, schedule_id=ctx.schedule_id, workspace_id=ctx.workspace_id)
    try:
        crash_point("consumer.handler_started", ctx)
        outcome = kind.handler(ctx)
        crash_point("consumer.after_handler_writes", ctx)
    except Exception as error:  # noqa: BLE001 - the handler's fault, not the consumer's
        return error
    finally:
        obs.pop_log_keys(token)
    if isinstance(outcome, Succeeded | Skipped | Refused):
        return outcome
    return TypeError(f"work kind {ctx.work_kind} returned {outcome!r}, not an Outcome")


def _judge(batch: _Batch, run: StartedRun, outcome: Outcome | BaseException) -> _Verdict | _Retry:
    """Map a handler's outcome (or fault) to what is recorded for the run."""
    if isinstance(outcome, Succeeded):
        return _Verdict("succeeded", outcome.outcome_code, detail=dict(outcome.detail))
    if isinstance(outcome, Skipped):
        return _Verdict("skipped", outcome.reason, detail=dict(outcome.detail))
    if isinstance(outcome, Refused):
        return _Verdict("failed", outcome.code, detail=dict(outcome.detail) or None, error=outcome.message,
                        pause_reason=outcome.pause_reason)
    text = "".join(traceback.format_exception_only(type(outcome), outcome)).strip()[:RUN_LIFECYCLE.error_message_limit]
    if batch.final(run):
        code = outcome.code if isinstance(outcome, RetryableFault) else "unexpected_error"
        obs.logger.error("work kind raised on the final receive; settling failed",
                         extra={"error": text, "run_id": str(run.id), "outcome_code": code})
        return _Verdict("failed", code, error=text)
    obs.logger.warning("work kind raised; the message will be redelivered",
                       extra={"error": text, "run_id": str(run.id)})
    return _Retry(outcome, text)


def _savepoint(conn: psycopg.Connection, run: StartedRun, *, release_previous: bool) -> None:
    """One round trip: release the previous run's savepoint, open this run's, enter its workspace."""
    conn.execute(sql.SQL("{release}SAVEPOINT tk_run; SELECT set_config('app.workspace_id', {ws}, true)").format(
        release=sql.SQL("RELEASE SAVEPOINT tk_run; " if release_previous else ""),
        ws=sql.Literal(str(run.workspace_id))))


def _run_together(batch: _Batch, runs: list[tuple[StartedRun, WorkKind | None]]
                  ) -> tuple[dict[UUID, ProcessResult | RetryLater], list[Callable[[], None]]]:
    """Run transactional work kinds in ONE transaction (a savepoint each) and settle them.

    The transaction begins when it is first needed: at the first handler's first use of
    the database, or for a settlement of more than one statement (a failure, a retry).
    A batch whose handlers never touched the database and whose runs all succeeded or were
    skipped settles in one statement that commits on its own (one round trip, no BEGIN
    and COMMIT around it).

    If a settlement is fenced (another attempt took the run over, which only a stall past
    the lease can cause) inside the transaction, the whole transaction rolls back: the
    fenced runs are acknowledged (their new holder settles them) and the others
    redelivered. Without a transaction there are no effects to roll back: the others'
    settlements stand and only the fenced runs are left to their holder.
    """
    conn = batch.conn
    verdicts: dict[UUID, _Verdict | _Retry] = {}
    callbacks: dict[UUID, list[Callable[[], None]]] = {}
    with contextlib.ExitStack() as transaction:
        opened: list[bool] = []

        def begin() -> None:
            if not opened:
                transaction.enter_context(conn.transaction())
                opened.append(True)

        savepoint = False  # whether a run's savepoint is open (released by the next one's)
        for run, kind in runs:
            verdict = _without_handler(batch, run, kind)
            if verdict is None:
                def enter(run: StartedRun = run, release: bool = savepoint) -> None:
                    begin()
                    _savepoint(conn, run, release_previous=release)
                run_conn = _RunConnection(conn, enter)
                ctx = _context(batch, run, run_conn)
                outcome = _call(kind, ctx)
                run_conn.detach()
                savepoint = savepoint or run_conn.entered
                verdict = _judge(batch, run, outcome)
                if isinstance(outcome, BaseException):
                    if run_conn.entered:
                        conn.execute("ROLLBACK TO SAVEPOINT tk_run")
                else:
                    callbacks[run.id] = ctx.pending_after_commit()
            verdicts[run.id] = verdict
        settling = [(run, verdicts[run.id]) for run, _ in runs]
        if not all(isinstance(v, _Verdict) and v.state != "failed" for _, v in settling):
            begin()  # failures and retries take several statements
        results, fenced = _settle(batch, settling)
        if fenced and opened:
            raise psycopg.Rollback()
    if fenced and opened:
        obs.logger.warning("a run of the batch was taken over by another attempt; the batch is redelivered")
        return {run.id: ProcessResult("fenced") if run.id in fenced else
                RetryLater(f"batch rolled back: run(s) {sorted(map(str, fenced))} were taken over")
                for run, _ in runs}, []
    if fenced:
        obs.logger.warning("a run of the batch was taken over by another attempt; its holder settles it")
        results.update({run_id: ProcessResult("fenced") for run_id in fenced})
    return results, [callback for run, _ in runs if run.id not in fenced for callback in callbacks.get(run.id, ())]


def _run_alone(batch: _Batch, run: StartedRun, kind: WorkKind | None
               ) -> tuple[ProcessResult | RetryLater, list[Callable[[], None]]]:
    """Run one run's handler in a transaction of its own and settle it there."""
    conn = batch.conn
    verdict = _without_handler(batch, run, kind)
    if verdict is not None:
        with conn.transaction():
            results, fenced = _settle(batch, [(run, verdict)])
        return (ProcessResult("fenced") if fenced else results[run.id]), []
    run_conn = _RunConnection(conn, lambda: set_tenant(conn, run.workspace_id))
    ctx = _context(batch, run, run_conn)
    with conn.transaction():
        outcome = _call(kind, ctx)
        run_conn.detach()
        verdict = _judge(batch, run, outcome)
        if isinstance(outcome, BaseException):
            raise psycopg.Rollback()  # the handler's writes roll back; its fault is recorded below
        results, fenced = _settle(batch, [(run, verdict)])
        if fenced:
            raise psycopg.Rollback()  # another attempt holds the run: our effects roll back
    if isinstance(outcome, BaseException):
        with conn.transaction():
            results, fenced = _settle(batch, [(run, verdict)])
    if fenced:
        obs.logger.warning("run lost its lease before settling; its effects were rolled back",
                           extra={"run_id": str(run.id)})
        return ProcessResult("fenced"), []
    return results[run.id], ctx.pending_after_commit() if not isinstance(outcome, BaseException) else []


def _settle(batch: _Batch, verdicts: list[tuple[StartedRun, _Verdict | _Retry]]
            ) -> tuple[dict[UUID, ProcessResult | RetryLater], set[UUID]]:
    """Record the verdicts in the caller's transaction: successes and skips in one
    statement, failures one by one, retries by giving the lease back. Returns the result
    per run and the ids fenced (held by another attempt: the caller rolls back)."""
    crash_point("consumer.before_settle")
    conn, now, settings = batch.conn, batch.now, batch.settings
    results: dict[UUID, ProcessResult | RetryLater] = {}
    failures = [(run, v) for run, v in verdicts if isinstance(v, _Verdict) and v.state == "failed"]
    completions = [Completion(run.id, run.attempts, v.state, v.code, v.detail)
                   for run, v in verdicts if isinstance(v, _Verdict) and v.state != "failed"]
    if failures and len(verdicts) > 1:
        lock_schedules(conn, {run.schedule_id for run, _ in verdicts})
    settled = settle_completed(conn, completions, now=now)
    fenced = {c.run_id for c in completions if c.run_id not in settled}
    by_id = {run.id: run for run, _ in verdicts}
    for completion in completions:
        run = by_id[completion.run_id]
        results[run.id] = ProcessResult("settled", Settlement(
            run_id=run.id, schedule_id=run.schedule_id, workspace_id=run.workspace_id, work_kind=run.work_kind,
            state=completion.state, outcome_code=completion.outcome_code, consecutive_failures=0,
            paused_reason=None))
    for run, verdict in sorted(failures, key=lambda item: (str(item[0].schedule_id), str(item[0].id))):
        settlement = settle_run(conn, run_id=run.id, state="failed", outcome_code=verdict.code, now=now,
                                detail=verdict.detail, error=verdict.error, attempt=run.attempts,
                                pause_reason=verdict.pause_reason, failure_threshold=settings.failure_threshold)
        if settlement is None:
            fenced.add(run.id)
        else:
            results[run.id] = ProcessResult("settled", settlement)
    for run, verdict in verdicts:
        if isinstance(verdict, _Retry):
            released = conn.execute(SQL["release_lease"], {"run_id": run.id, "attempt": run.attempts, "now": now,
                                                           "receive_count": batch.receive_counts.get(run.id, 1),
                                                           "error": verdict.text}).rowcount
            if not released:
                fenced.add(run.id)
            retry = RetryLater(verdict.text,
                               delay_s=settings.retry_delay_s(batch.receive_counts.get(run.id, 1)))
            retry.__cause__ = verdict.error
            results[run.id] = retry
    return results, fenced


def _after_commit(callbacks: list[Callable[[], None]]) -> None:
    for callback in callbacks:
        try:
            callback()
        except Exception:  # noqa: BLE001 - the outcome is recorded; the owner's status shows the rest
            obs.logger.exception("after-commit action failed")


def _count(results: Any, metrics: Any) -> None:
    """Emit the outcome counts of committed ``results``, one metric per (outcome, work kind)
    rather than one per run (a batch of 10 successes is one data point of value 10)."""
    if metrics is None:
        return
    counts: collections.Counter[tuple[str, str]] = collections.Counter()
    for result in results:
        if not isinstance(result, ProcessResult) or result.settlement is None:
            continue
        settlement = result.settlement
        counts[(_OUTCOME_METRIC[settlement.state], settlement.work_kind)] += 1
        if settlement.paused_reason:
            counts[(obs.SCHEDULE_AUTO_PAUSED, settlement.work_kind)] += 1
    for (name, work_kind), value in counts.items():
        metrics.add_metric(name=name, unit="Count", value=value, **{obs.WORK_KIND_DIMENSION: work_kind})


_OUTCOME_METRIC = {"succeeded": obs.RUN_SUCCEEDED, "skipped": obs.RUN_SKIPPED, "failed": obs.RUN_FAILED}
