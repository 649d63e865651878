"""The queue consumer's per-run processing (DESIGN section 2 "Consumer"; seed 000 hops
4-7, seed 001 hops 3-7).

For one run message: start the run under a lease in its own short transaction; then, in
ONE transaction with the tenant set, call the work kind's handler and settle the run,
fenced by the attempt number (so a handler's database effects commit exactly once, and a
holder whose lease was taken over cannot settle); then run the after-commit callbacks.

Outcomes for the caller (the Lambda record handler):
- returns a :class:`ProcessResult` -> acknowledge the message;
- raises :class:`RetryLater` -> report a batch-item failure so SQS redelivers it.
"""

from __future__ import annotations

import collections
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import psycopg

from timekeeper import observability as obs
from timekeeper.db import load_queries, set_tenant
from timekeeper.schedules.messages import RunMessage
from timekeeper.schedules.settlement import Settlement, settle_run
from timekeeper.schedules.work import Refused, RunContext, Skipped, Succeeded, UnknownWorkKind, WorkKindRegistry

SQL = load_queries("timekeeper.schedules", "consumer.sql")
_ERROR_LIMIT = 2000


class RetryLater(Exception):  # noqa: N818 - a signal, not an error condition of ours
    """The message must be redelivered later (live lease elsewhere, or a retryable fault)."""


@dataclass(frozen=True)
class ConsumerSettings:
    """Per-pipeline consumer settings from the topology: owner, lease (seconds) and the
    queue's maxReceiveCount (the final receive), and the auto-pause threshold."""

    owner: str
    lease: timedelta
    max_receive_count: int
    failure_threshold: int = 5

    @classmethod
    def from_pipeline(cls, pipeline: Any) -> ConsumerSettings:
        return cls(owner=pipeline.owner, lease=pipeline.lease, max_receive_count=pipeline.max_receive_count,
                   failure_threshold=pipeline.failure_pause_threshold)


@dataclass(frozen=True)
class ProcessResult:
    """``action``: ``settled`` | ``ignored`` (absent or terminal run) | ``fenced`` (lost the
    lease before settling; nothing committed); ``settlement`` when settled."""

    action: str
    settlement: Settlement | None = None


def _error_text(error: BaseException) -> str:
    text = "".join(traceback.format_exception_only(type(error), error)).strip()
    return text[:_ERROR_LIMIT]


@dataclass(frozen=True)
class Delivery:
    """One received message of a batch: its ``key`` (the SQS message id), the parsed
    ``message`` and ``receive_count`` (ApproximateReceiveCount as an int)."""

    key: str
    message: RunMessage
    receive_count: int


class MisroutedMessage(ValueError):
    """A run message of another owner reached this consumer (a wiring fault: the message
    fails, and after maxReceiveCount it rests in the dead-letter queue)."""


Result = ProcessResult | RetryLater | MisroutedMessage


def process_batch(conn: psycopg.Connection, deliveries: list[Delivery], *, now: datetime,
                  registry: WorkKindRegistry, settings: ConsumerSettings, services: dict[str, Any] | None = None,
                  metrics: Any = None) -> list[Result]:
    """Process the run messages of one SQS batch at instant ``now`` (aware UTC).

    Returns one result per delivery, in order: a :class:`ProcessResult` (acknowledge), or
    a :class:`RetryLater` / :class:`MisroutedMessage` (report the item failed so SQS
    redelivers it). Raises ``psycopg.Error`` when the batch transaction fails (nothing of
    it committed; every message is redelivered).

    Transactional work kinds (the default: short handlers whose effects are all in the
    database) share ONE transaction: their runs are started with ``FOR UPDATE SKIP
    LOCKED`` in one statement (the row lock is the lease while the batch runs; a run
    another consumer holds is skipped and its message redelivered later), each handler and
    its settlement run in a savepoint with the run's tenant set, and one commit records
    them all. A process crash rolls the whole batch back. Work kinds registered with
    ``leased=True`` (long or external work) go through :func:`process_run` one by one.
    """
    results: dict[int, Result] = {}
    batched: list[int] = []
    leased: list[int] = []
    for index, delivery in enumerate(deliveries):
        message = delivery.message
        if message.owner != settings.owner:
            results[index] = MisroutedMessage(
                f"message for owner {message.owner!r} reached the {settings.owner!r} consumer")
            continue
        kind = registry.find(message.owner, message.work_kind)
        (leased if kind is not None and kind.leased else batched).append(index)

    if batched:
        callbacks: list[Callable[[], None]] = []
        ids = list(dict.fromkeys(deliveries[i].message.run_id for i in batched))
        with conn.transaction():
            started = {row["id"]: row for row in conn.execute(SQL["start_runs"], {
                "ids": ids, "now": now, "lease_until": now + settings.lease}).fetchall()}
            missing = [run_id for run_id in ids if run_id not in started]
            states = {row["id"]: row for row in conn.execute(SQL["run_states"], {"ids": missing}).fetchall()
                      } if missing else {}
            seen: set = set()
            # Settling locks each run's schedule row until the batch commits: take them in one
            # global order (schedule id, run id) so two concurrent batches cannot deadlock.
            batched.sort(key=lambda i: (str(deliveries[i].message.schedule_id), str(deliveries[i].message.run_id)))
            for index in batched:
                run_id = deliveries[index].message.run_id
                run = started.get(run_id)
                if run is None or run_id in seen:
                    current = states.get(run_id)
                    if run is None and current is not None and current["state"] in ("queued", "running"):
                        results[index] = RetryLater(f"run {run_id} is held by another consumer")
                    else:
                        results[index] = ProcessResult("ignored")  # absent, terminal, or a duplicate in this batch
                    continue
                seen.add(run_id)
                results[index], after = _execute(conn, run, receive_count=deliveries[index].receive_count,
                                                 now=now, registry=registry, settings=settings, services=services)
                callbacks.extend(after)
        _after_commit(callbacks)
        _count([results[index] for index in batched], metrics)

    for index in leased:
        delivery = deliveries[index]
        try:
            results[index] = process_run(conn, delivery.message, receive_count=delivery.receive_count, now=now,
                                         registry=registry, settings=settings, services=services, metrics=metrics)
        except RetryLater as retry:
            results[index] = retry
    return [results[index] for index in range(len(deliveries))]


def process_run(conn: psycopg.Connection, message: RunMessage, *, receive_count: int, now: datetime,
                registry: WorkKindRegistry, settings: ConsumerSettings, services: dict[str, Any] | None = None,
                metrics: Any = None) -> ProcessResult:
    """Process one run message at instant ``now`` (aware UTC) with a committed lease.

    The start (queued -> running, ``lease_until`` = now + lease, attempts + 1) commits
    first, so a crash leaves a visible running run whose lease expires and is taken over;
    a run under another live lease raises :class:`RetryLater`. Then the handler and the
    settlement commit in one transaction fenced by the attempt number (a holder whose
    lease was taken over is ``fenced``: its effects roll back). ``receive_count`` is SQS's
    ApproximateReceiveCount; the receive is final when it or the run's attempt count
    reaches ``settings.max_receive_count``: an unexpected fault is then settled failed.
    Raises :class:`RetryLater`, :class:`MisroutedMessage` or ``psycopg.Error`` (all mean:
    redeliver).
    """
    if message.owner != settings.owner:
        raise MisroutedMessage(f"message for owner {message.owner!r} reached the {settings.owner!r} consumer")
    with conn.transaction():
        run = conn.execute(SQL["start_run"], {"run_id": message.run_id, "now": now,
                                              "lease_until": now + settings.lease}).fetchone()
        if run is None:
            current = conn.execute(SQL["run_state"], {"run_id": message.run_id}).fetchone()
    if run is None:
        if current is not None and current["state"] == "running":
            raise RetryLater(f"run {message.run_id} is running under a live lease until {current['lease_until']}")
        return ProcessResult("ignored")
    result, callbacks = _execute(conn, run, receive_count=receive_count, now=now, registry=registry,
                                 settings=settings, services=services)
    _after_commit(callbacks)
    _count([result], metrics)
    if isinstance(result, RetryLater):
        raise result
    return result


def _execute(conn: psycopg.Connection, run: dict[str, Any], *, receive_count: int, now: datetime,
             registry: WorkKindRegistry, settings: ConsumerSettings,
             services: dict[str, Any] | None) -> tuple[ProcessResult | RetryLater, list[Callable[[], None]]]:
    """Run a started run's handler and settle it; each step is a transaction of its own
    (or a savepoint, inside a batch transaction). Returns the result and the run's
    after-commit callbacks (the caller runs them once everything committed)."""
    attempt = run["attempts"]
    final = receive_count >= settings.max_receive_count or attempt >= settings.max_receive_count
    obs.logger.append_keys(run_id=str(run["id"]), schedule_id=str(run["schedule_id"]),
                           workspace_id=str(run["workspace_id"]))

    def settle(state: str, code: str, *, detail=None, error=None, pause_reason=None) -> ProcessResult:
        settlement = settle_run(conn, run_id=run["id"], state=state, outcome_code=code, now=now, detail=detail,
                                error=error, attempt=attempt, pause_reason=pause_reason,
                                failure_threshold=settings.failure_threshold)
        if settlement is None:
            raise _Fenced()
        return ProcessResult("settled", settlement)

    try:
        if run["deleted_at"] is not None:
            with conn.transaction():
                return settle("skipped", "schedule_deleted"), []
        try:
            kind = registry.get(run["owner"], run["work_kind"])
        except UnknownWorkKind as error:
            with conn.transaction():
                return settle("failed", "unknown_work_kind", error=str(error)), []
        ctx = RunContext(
            run_id=run["id"], schedule_id=run["schedule_id"], workspace_id=run["workspace_id"], owner=run["owner"],
            work_kind=run["work_kind"], subject_id=run["subject_id"], occurrence_at=run["occurrence_at"],
            occurrence_local=run["occurrence_local"], trigger=run["trigger"], requested_by=run["requested_by"],
            attempt=attempt, now=now, conn=conn, services=services or {})
        try:
            with conn.transaction():
                set_tenant(conn, run["workspace_id"])
                try:
                    outcome = kind.handler(ctx)
                except Exception as error:  # noqa: BLE001 - the handler's fault, not the settlement's
                    raise _HandlerFault() from error
                if isinstance(outcome, Succeeded):
                    result = settle("succeeded", outcome.outcome_code, detail=dict(outcome.detail))
                elif isinstance(outcome, Skipped):
                    result = settle("skipped", outcome.reason, detail=dict(outcome.detail))
                elif isinstance(outcome, Refused):
                    result = settle("failed", outcome.code, detail=dict(outcome.detail) or None,
                                    error=outcome.message, pause_reason=outcome.pause_reason)
                else:
                    raise _HandlerFault() from TypeError(
                        f"work kind {run['work_kind']} returned {outcome!r}, not an Outcome")
            return result, ctx._after_commit
        except _HandlerFault as fault:
            error = fault.__cause__
            text = _error_text(error)
            if not final:
                obs.logger.warning("work kind raised; the message will be redelivered", extra={"error": text})
                with conn.transaction():
                    conn.execute(SQL["release_lease"], {"run_id": run["id"], "attempt": attempt, "now": now,
                                                        "error": text})
                retry = RetryLater(text)
                retry.__cause__ = error
                return retry, []
            obs.logger.error("work kind raised on the final receive; settling failed", extra={"error": text})
            with conn.transaction():
                return settle("failed", "unexpected_error", error=text), []
    except _Fenced:
        obs.logger.warning("run lost its lease before settling; its effects were rolled back")
        return ProcessResult("fenced"), []
    finally:
        obs.logger.remove_keys(["run_id", "schedule_id", "workspace_id"])


def _after_commit(callbacks: list[Callable[[], None]]) -> None:
    for callback in callbacks:
        try:
            callback()
        except Exception:  # noqa: BLE001 - the outcome is recorded; the owner's status shows the rest
            obs.logger.exception("after-commit action failed")


def _count(results: list[Result], metrics: Any) -> None:
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


class _HandlerFault(Exception):
    """Internal: the work kind's handler raised (its cause); database errors of the
    settlement itself are not handler faults and propagate (the message is redelivered)."""


class _Fenced(Exception):
    """Internal: settlement found the run no longer held by this attempt."""
