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

import traceback
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


def process_run(conn: psycopg.Connection, message: RunMessage, *, receive_count: int, now: datetime,
                registry: WorkKindRegistry, settings: ConsumerSettings, services: dict[str, Any] | None = None,
                metrics: Any = None) -> ProcessResult:
    """Process one run message at instant ``now`` (aware UTC); see the module docstring.

    ``receive_count`` is SQS's ApproximateReceiveCount (an int). The receive is final when
    it or the run's attempt count reaches ``settings.max_receive_count``: an unexpected
    fault is then settled failed and the message acknowledged. Raises :class:`RetryLater`
    or ``psycopg.Error`` (both mean: redeliver).
    """
    if message.owner != settings.owner:
        raise ValueError(f"message for owner {message.owner!r} reached the {settings.owner!r} consumer")
    with conn.transaction():
        run = conn.execute(SQL["start_run"], {"run_id": message.run_id, "now": now,
                                              "lease_until": now + settings.lease}).fetchone()
        if run is None:
            current = conn.execute(SQL["run_state"], {"run_id": message.run_id}).fetchone()
    if run is None:
        if current is not None and current["state"] == "running":
            raise RetryLater(f"run {message.run_id} is running under a live lease until {current['lease_until']}")
        return ProcessResult("ignored")

    attempt = run["attempts"]
    final = receive_count >= settings.max_receive_count or attempt >= settings.max_receive_count
    obs.logger.append_keys(run_id=str(run["id"]), schedule_id=str(run["schedule_id"]),
                           workspace_id=str(run["workspace_id"]))

    def settle(state: str, code: str, *, detail=None, error=None, pause_reason=None) -> Settlement | None:
        return settle_run(conn, run_id=run["id"], state=state, outcome_code=code, now=now, detail=detail,
                          error=error, attempt=attempt, pause_reason=pause_reason,
                          failure_threshold=settings.failure_threshold)

    if run["deleted_at"] is not None:
        with conn.transaction():
            return _done(settle("skipped", "schedule_deleted"), metrics)
    try:
        kind = registry.get(run["owner"], run["work_kind"])
    except UnknownWorkKind as error:
        with conn.transaction():
            return _done(settle("failed", "unknown_work_kind", error=str(error)), metrics)

    ctx = RunContext(
        run_id=run["id"], schedule_id=run["schedule_id"], workspace_id=run["workspace_id"], owner=run["owner"],
        work_kind=run["work_kind"], subject_id=run["subject_id"], occurrence_at=run["occurrence_at"],
        occurrence_local=run["occurrence_local"], trigger=run["trigger"], requested_by=run["requested_by"],
        attempt=attempt, now=now, conn=conn, services=services or {})
    try:
        with conn.transaction():
            set_tenant(conn, run["workspace_id"])
            outcome = kind.handler(ctx)
            if isinstance(outcome, Succeeded):
                settlement = settle("succeeded", outcome.outcome_code, detail=dict(outcome.detail))
            elif isinstance(outcome, Skipped):
                settlement = settle("skipped", outcome.reason, detail=dict(outcome.detail))
            elif isinstance(outcome, Refused):
                settlement = settle("failed", outcome.code, detail=dict(outcome.detail) or None,
                                    error=outcome.message, pause_reason=outcome.pause_reason)
            else:
                raise TypeError(f"work kind {run['work_kind']} returned {outcome!r}, not an Outcome")
            if settlement is None:
                raise _Fenced()
    except _Fenced:
        obs.logger.warning("run lost its lease before settling; its effects were rolled back")
        return ProcessResult("fenced")
    except Exception as error:  # noqa: BLE001 - an unexpected fault of the handler
        text = _error_text(error)
        if not final:
            obs.logger.warning("work kind raised; the message will be redelivered", extra={"error": text})
            with conn.transaction():
                conn.execute(SQL["release_lease"], {"run_id": run["id"], "attempt": attempt, "now": now,
                                                    "error": text})
            raise RetryLater(text) from error
        obs.logger.error("work kind raised on the final receive; settling failed", extra={"error": text})
        with conn.transaction():
            return _done(settle("failed", "unexpected_error", error=text), metrics)
    for callback in ctx._after_commit:
        try:
            callback()
        except Exception:  # noqa: BLE001 - the outcome is recorded; the owner's status shows the rest
            obs.logger.exception("after-commit action failed")
    return _done(settlement, metrics)


class _Fenced(Exception):
    """Internal: settlement found the run no longer held by this attempt."""


def _done(settlement: Settlement | None, metrics: Any) -> ProcessResult:
    if settlement is None:
        return ProcessResult("fenced")
    if metrics is not None:
        name = {"succeeded": obs.RUN_SUCCEEDED, "skipped": obs.RUN_SKIPPED, "failed": obs.RUN_FAILED}[settlement.state]
        metrics.add_metric(name=name, unit="Count", value=1)
        if settlement.paused_reason:
            metrics.add_metric(name=obs.SCHEDULE_AUTO_PAUSED, unit="Count", value=1)
    return ProcessResult("settled", settlement)
