"""The peer harness's Timekeeper adapter, on the product's current connection API.

The harness (``../shared/bench``, see its README) times the product through
``peers/timekeeper_adapter.py``, which calls the real ``dispatch`` and ``process_batch``.
That adapter opens its connections with ``connect(uri, statement_timeout_ms=...)``; the
product no longer sends session options on connect (RDS Proxy refuses startup options, so
statement timeouts belong to the database logins). It also reads the accounting
consumer's numbers (``batch_size``) off the pipeline, where the topology kept them before
each pipeline composed a ``QueueConsumer``. This module is the same adapter with only its
connection opener replaced and the pipeline shown to it with its consumer's numbers
flat, and ``dispatch`` given its second claim worker's connection as the dispatcher
function gives it and the harness's keyword numbers (owner, claim limit, re-offer delay,
time budget) as the pipeline's ``DispatchSettings``; everything timed is the harness's code
and the product's. Run it with::

    TK_REPO=. TIMEKEEPER_BENCH_ADAPTER=peer_adapter bash ../shared/bench/run_peers.sh --with-timekeeper

(``benchmarks/`` is on the harness's ``PYTHONPATH``; the harness's ``peers/`` too.)
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from timekeeper import topology
from timekeeper.db.connection import connect


class _FlatPipeline:
    """A pipeline as the harness's adapter reads it: its own attributes, and its queue
    consumer's (``batch_size``, ``max_receive_count``, ...) as if they were its own."""

    def __init__(self, pipeline: Any) -> None:
        self._pipeline = pipeline

    def __getattr__(self, name: str) -> Any:
        try:
            return getattr(self._pipeline, name)
        except AttributeError:
            return getattr(self._pipeline.consumer, name)


_accounting = topology.ACCOUNTING
topology.ACCOUNTING = _FlatPipeline(_accounting)  # (only while the harness's adapter is imported)
try:
    import timekeeper_adapter as _harness
finally:
    topology.ACCOUNTING = _accounting

# After the harness's adapter: it puts the product's pinned runtime site (Powertools, ...)
# first on sys.path, which the dispatcher's imports need.
from timekeeper.schedules.dispatcher import DispatchSettings  # noqa: E402


def _connect(uri: str, role: str):
    """A dict-row autocommit connection named for its role (the benchmark's superuser login
    has no statement timeout; the product's logins carry theirs)."""
    return connect(uri, application_name=f"timekeeper-bench-{role}")


# The harness's functions look the opener up in their module at call time (the consumer
# processes are forked after this import), so replacing it there is enough.
_harness._connect = _connect

_product_dispatch = _harness.dispatch
_second: dict[str, Any] = {}


def _settings(*, owner: str, claim_limit: int, reoffer_after: timedelta, time_budget_s: float) -> DispatchSettings:
    """The accounting pipeline's :class:`DispatchSettings` with the numbers the harness
    passes each pass (its owner, claim limit, re-offer delay and remaining time budget)."""
    settings = DispatchSettings.of(_accounting)
    return dataclasses.replace(settings, owner=owner, claim_limit=claim_limit, time_budget_s=time_budget_s,
                               limits=dataclasses.replace(settings.limits, reoffer_after=reoffer_after))


def _dispatch(conn: Any, *, owner: str, claim_limit: int, reoffer_after: timedelta, time_budget_s: float,
              **kwargs: Any) -> Any:
    """The product's ``dispatch`` as its dispatcher function calls it: the harness's
    keyword numbers carried as the pipeline's :class:`DispatchSettings`, and the pipeline's
    second claim worker on a second connection of the process, opened when a pass's first
    batch comes back full and kept (``timekeeper.edge.runs.run_dispatcher``)."""
    settings = _settings(owner=owner, claim_limit=claim_limit, reoffer_after=reoffer_after,
                         time_budget_s=time_budget_s)
    if _accounting.claim_workers < 2:
        return _product_dispatch(conn, settings, **kwargs)
    dsn = conn.info.dsn

    def second() -> Any:
        if dsn not in _second or _second[dsn].closed:
            _second[dsn] = connect(dsn, application_name="timekeeper-bench-dispatcher-2")
        return _second[dsn]

    return _product_dispatch(conn, settings, second=second, **kwargs)


_harness.dispatch = _dispatch

load_schedules = _harness.load_schedules
run_until_done = _harness.run_until_done
verify_schedules = _harness.verify_schedules
enqueue_jobs = _harness.enqueue_jobs
drain = _harness.drain
verify_jobs = _harness.verify_jobs
