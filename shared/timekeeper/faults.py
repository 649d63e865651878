"""Named crash points: the seam through which a fault campaign kills the product at its
step boundaries.

Every pipeline calls :func:`crash_point` at the boundaries where a process may die in
production (a Lambda timeout, an out-of-memory kill, a lost connection): after a commit
and before what depends on it, between the sends of a batch, inside a publish. With no
injector installed (always, in AWS and in ``simulate``) a call is one global read and a
comparison: free on the benchmarks.

A campaign (``python -m timekeeper chaos``, ``tests/faults``) installs an injector with
:func:`install`; it is called with the point's name and, where the point has one, its
context (the run a consumer is about to hand to its handler). It may raise
:class:`InjectedCrash`, which behaves as the process dying there: it derives from
``BaseException``, so no ``except Exception`` of the product catches it, the transaction
in flight rolls back as the dropped connection's would, and the invocation ends without
acknowledging its SQS messages (they come back after their visibility timeout). It may
also break the database connections instead (a failover) and return.

:data:`CRASH_POINTS` names every point and where it sits; a test hits each one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: Every crash point, by name, with where it sits in the product.
CRASH_POINTS: dict[str, str] = {
    "dispatcher.after_claim_commit": "a claim transaction committed (runs offered), before their messages are sent",
    "publish.between_batches": "one SendMessageBatch call of a publish answered while others are still to answer",
    "dispatcher.after_publish": "the queue accepted the messages, before they are recorded as published",
    "dispatcher.before_release": "the queue refused messages, before their runs are released",
    "consumer.after_start_commit": "the runs' attempts are committed (leased), before any handler runs",
    "consumer.handler_started": "a run is handed to its work kind's handler (context: the RunContext)",
    "consumer.after_handler_writes": "a handler returned after its writes, before its outcome is judged",
    "consumer.before_settle": "the outcomes are about to be recorded, in the run's transaction",
    "consumer.after_settle_commit": "the settlement committed, before the after-commit actions run",
    "consumer.before_acknowledge": "the batch is done, before the invocation returns its item failures",
    "delivery.between_recipients": "a delivery run moves on to its next recipient",
    "delivery.after_send": "the mail provider accepted a message, before its outbox row records the id",
    "snapshots.after_admit_commit": "snapshot runs were admitted (committed), before their jobs are sent",
    "snapshots.between_chunks": "a snapshot chunk and its cursor committed, before the next chunk",
    "snapshots.inside_publish": "inside the publish transaction: the previous version retired, the new not yet current",
}


class InjectedCrash(BaseException):  # noqa: N818 - named for what it models: the process died
    """The process died at crash point ``point`` (raised only by an installed injector)."""

    def __init__(self, point: str) -> None:
        super().__init__(point)
        self.point = point


Injector = Callable[[str, Any], None]
_injector: Injector | None = None


def crash_point(name: str, context: Any = None) -> None:
    """Step boundary ``name`` (a key of :data:`CRASH_POINTS`) was reached. Does nothing
    unless an injector is installed; then the injector may raise :class:`InjectedCrash`."""
    if _injector is not None:
        _injector(name, context)


def install(injector: Injector | None) -> None:
    """Install ``injector(name, context)`` to be called at every crash point (``None``:
    remove it). Raises ``ValueError`` when one is installed already (campaigns don't nest)."""
    global _injector
    if injector is not None and _injector is not None:
        raise ValueError("a fault injector is installed already")
    _injector = injector
