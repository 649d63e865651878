"""The deployment's registries, assembled here at the edge from every owner module: the
work kinds (accounting, queries) and the snapshot types (platform).

The generic modules (:mod:`timekeeper.schedules`, :mod:`timekeeper.snapshots`) define the
registries and know no owner; only this module names the owners, so adding one means
registering it here.
"""

from __future__ import annotations

import os
from datetime import datetime, timedelta
from functools import cache
from typing import Any

import psycopg

from timekeeper.db.retention import erase_old_addresses, prune_exports, prune_owner_history
from timekeeper.schedules.work import MaintenanceTask, WorkKindRegistry
from timekeeper.settings import ENVIRONMENT_VARIABLE, SELFTEST_DRILLS_VARIABLE
from timekeeper.snapshots.registry import SnapshotRegistry
from timekeeper.topology import EXPORTS, HISTORY, PIPELINES, REPORT_RENDERER, HistoryRetention, Renderer, WorkQueue

#: The maintenance task that prunes an owner's history past retention.
HISTORY_RETENTION_TASK = "history.retention"

#: The maintenance task that offers again the exports whose publish was refused, and
#: settles or offers again the running exports nothing will finish.
EXPORTS_REOFFER_TASK = "exports.reoffer"


def exports_reoffer_task(queue: WorkQueue = EXPORTS) -> MaintenanceTask:
    """The exports' sweep as a maintenance task of ``queue.swept_by``'s owner: up to
    ``queue.reoffer_per_pass`` queued exports never published and older than
    ``queue.reoffer_after`` are published again through the exports queue's publisher
    (:func:`timekeeper.reporting.exports.reoffer_exports`), so an export whose publish was
    refused runs within a minute or so of the refusal even if nobody reads it; and up to as
    many running exports nothing will finish (their message dead-lettered or lost) are
    settled failed once their attempts and last lease ran out, or published again once
    idle for the lease plus the queue's visibility timeout
    (:func:`timekeeper.reporting.exports.sweep_running_exports`). Returns ``{"reoffered":
    n, "settled": n, "running_reoffered": n}``, or None when nothing waited. Raises what
    the publisher's configuration raises (``KeyError``: the exports queue's URL variable
    is unset)."""
    from timekeeper.edge import adapters
    from timekeeper.reporting.exports import reoffer_exports, sweep_running_exports

    def task(conn: psycopg.Connection, now: datetime) -> dict[str, Any] | None:
        publisher = adapters.export_publisher()
        offered = reoffer_exports(conn, publisher, now=now, older_than=queue.reoffer_after,
                                  limit=queue.reoffer_per_pass)
        consumer = queue.consumer
        swept = sweep_running_exports(conn, publisher, now=now, lease=consumer.lease,
                                      idle_after=consumer.lease + timedelta(seconds=consumer.visibility_timeout_s),
                                      max_attempts=consumer.max_receive_count, limit=queue.reoffer_per_pass)
        if not (offered or swept.settled or swept.reoffered):
            return None
        return {"reoffered": offered, "settled": swept.settled, "running_reoffered": swept.reoffered}

    return task


#: The maintenance task that settles or asks again for the renders nothing will finish.
RENDERS_SWEEP_TASK = "renders.sweep"


def renders_sweep_task(renderer: Renderer = REPORT_RENDERER) -> MaintenanceTask:
    """The renders' sweep as a maintenance task of ``renderer.swept_by``'s owner
    (:func:`timekeeper.reporting.rendering.sweep_renders` with the renderer's lease,
    re-offer period, attempts and ``sweep_per_pass``): a render whose attempts ran out
    without a record (a lost connection, a timeout) is settled failed, one nothing ran is
    asked for again through the edge's renderer client. Returns ``{"settled": n,
    "reoffered": n, "refused": n}``, or None when nothing was stale. The renderer client
    is looked up only for a re-offer (an unset ``REPORT_RENDERER_FUNCTION`` is then a
    refused ask, logged and counted)."""
    from timekeeper.edge import adapters
    from timekeeper.reporting.rendering import sweep_renders

    class _Renderer:
        """The edge's renderer client, looked up only when a render is asked for again."""

        def request(self, *, workspace_id: Any, render_id: Any) -> None:
            adapters.renderer_client().request(workspace_id=workspace_id, render_id=render_id)

    def task(conn: psycopg.Connection, now: datetime) -> dict[str, Any] | None:
        done = sweep_renders(conn, _Renderer(), now=now, lease=renderer.lease,
                             reoffer_after=renderer.reoffer_after, max_attempts=renderer.max_attempts,
                             limit=renderer.sweep_per_pass)
        if not (done.settled or done.reoffered):
            return None
        return {"settled": done.settled, "reoffered": done.reoffered, "refused": done.refused}

    return task


def history_retention_task(owner: str, retention: HistoryRetention, *, exports: bool = False) -> MaintenanceTask:
    """``owner``'s history retention as a maintenance task: its runs and events past
    ``retention`` (:func:`timekeeper.db.retention.prune_owner_history`), and with
    ``exports`` the finished exports and the delivery rows' addresses past the personal-data
    retention too (the queries owner's delivery history), within the retention's per-pass bounds. The task
    returns the pass's summary (``{"pruned": n, <kind>: n, "batches": n, "more": bool}``)
    or None when nothing was pruned."""

    def task(conn: psycopg.Connection, now: datetime) -> dict[str, Any] | None:
        pruned = prune_owner_history(conn, owner=owner, now=now, runs_retention=timedelta(days=retention.runs_days),
                                     events_retention=timedelta(days=retention.events_days),
                                     batch_rows=retention.batch_rows,
                                     max_batches=retention.max_batches_per_pass,
                                     time_budget_s=retention.time_budget_s)
        if exports:
            for more in (prune_exports(conn, now=now, exports_days=retention.exports_days,
                                       batch_rows=retention.batch_rows, max_batches=retention.max_batches_per_pass,
                                       time_budget_s=retention.time_budget_s),
                         erase_old_addresses(conn, now=now, personal_data_days=retention.personal_data_days,
                                             batch_rows=retention.batch_rows,
                                             max_batches=retention.max_batches_per_pass,
                                             time_budget_s=retention.time_budget_s)):
                for kind, n in more.rows.items():
                    pruned.add(kind, n)
                pruned.batches += more.batches
                pruned.more = pruned.more or more.more
        return pruned.summary()

    return task


def assemble_work_kinds(retention: HistoryRetention = HISTORY) -> WorkKindRegistry:
    """A new registry of every owner's work kinds, with each pipeline owner's history
    retention (``retention``, default the topology's) as its ``history.retention``
    maintenance task (a pipeline's with ``prunes_delivery_history`` also prunes exports and
    erases old addresses),
    the sweep of unpublished exports (``exports.reoffer``) as one of the owner whose
    dispatcher sweeps the exports queue, and the renders' sweep (``renders.sweep``) as one
    of the owner whose dispatcher sweeps the renders."""
    from timekeeper.accounting.work_kinds import register as register_accounting
    from timekeeper.reporting.work_kinds import register as register_queries

    kinds = WorkKindRegistry()
    register_accounting(kinds)
    register_queries(kinds)
    for pipeline in PIPELINES.values():
        kinds.register_maintenance(pipeline.owner, HISTORY_RETENTION_TASK,
                                   history_retention_task(pipeline.owner, retention,
                                                          exports=pipeline.prunes_delivery_history))
    if EXPORTS.swept_by is not None:
        kinds.register_maintenance(PIPELINES[EXPORTS.swept_by].owner, EXPORTS_REOFFER_TASK, exports_reoffer_task())
    if REPORT_RENDERER.swept_by is not None:
        kinds.register_maintenance(PIPELINES[REPORT_RENDERER.swept_by].owner, RENDERS_SWEEP_TASK,
                                   renders_sweep_task())
    return kinds


def assemble_snapshot_types(environment: str, *,
                            selftest_drills: frozenset[tuple[str, str]] = frozenset()) -> SnapshotRegistry:
    """A new registry of every owner's snapshot types, enabled as configured for
    ``environment`` (``development`` | ``production``); raises ``ValueError`` for another
    environment.

    ``selftest_drills``: ``(workspace id, "YYYY-MM")`` periods whose version 1 of the
    Platform self-test type fails validation (a drill of the final-failure path and of the
    staff re-run that follows it; the local simulation uses one)."""
    from timekeeper.platform.snapshots import SelfTest
    from timekeeper.platform.snapshots import register as register_platform

    registry = SnapshotRegistry(environment=environment)
    register_platform(registry, selftest=SelfTest(fail_validation=lambda run: run.version == 1 and (
        str(run.workspace_id), f"{run.period:%Y-%m}") in selftest_drills))
    return registry


@cache
def work_kinds() -> WorkKindRegistry:
    """The execution environment's work-kind registry (:func:`assemble_work_kinds`, once)."""
    return assemble_work_kinds()


@cache
def snapshot_types() -> SnapshotRegistry:
    """The execution environment's snapshot types, enabled per ``TIMEKEEPER_ENVIRONMENT``
    (default ``development``; the deployed stacks set ``production``), with the drills of
    ``TIMEKEEPER_SELFTEST_DRILLS`` (``<workspace id>/<YYYY-MM>``, comma-separated)."""
    drills = frozenset(tuple(item.strip().split("/", 1)) for item in
                       os.environ.get(SELFTEST_DRILLS_VARIABLE, "").split(",") if "/" in item)
    return assemble_snapshot_types(os.environ.get(ENVIRONMENT_VARIABLE, "development"),
                                   selftest_drills=drills)  # type: ignore[arg-type]


def reset() -> None:
    """Forget the cached registries (the snapshot types follow the environment)."""
    work_kinds.cache_clear()
    snapshot_types.cache_clear()
