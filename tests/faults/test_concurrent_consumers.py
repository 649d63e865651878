"""Concurrent consumers over duplicated deliveries: no run ever executes concurrently.

Three consumer threads, each with its own database connection, take SQS-like batches from
one shared queue that holds every run's message three times (adjacent, so duplicates reach
different consumers at the same moment). A redelivered item (a run held by another
consumer) goes back to the queue. The handler's executions are recorded as intervals by
:class:`~tests.faults.executions.ExecutionLog`, which reports any run whose executions
intersect. The last test bypasses the lease (a consumer whose clock is past the holder's
lease takes the run over while the holder still runs) and sees the detector fire.
"""

from __future__ import annotations

import collections
import threading
import time
import uuid
from datetime import timedelta

import pytest

from tests.faults.executions import ExecutionLog
from tests.support import due_messages
from timekeeper.db.connection import connect
from timekeeper.schedules.consumer import ConsumerSettings, Delivery, process_batch
from timekeeper.schedules.messages import RunMessage
from timekeeper.schedules.work import Succeeded, WorkKindRegistry

OWNER = "accounting"
SETTINGS = ConsumerSettings(owner=OWNER, lease=timedelta(minutes=2), max_receive_count=5, failure_threshold=5)
KIND = "fault.overlap"
#: How long each execution stays inside the handler (seconds): wide enough for a
#: concurrent duplicate to land inside it, short enough for a loaded machine.
HOLD_S = 0.02


class Handler:
    """Writes the run's effect (committed with its settlement), records its execution, and
    holds the first execution of ``wait_for_retry`` until a consumer was told to retry it."""

    def __init__(self, log: ExecutionLog):
        self.log = log
        self.retried: set[uuid.UUID] = set()
        self.wait_for_retry: uuid.UUID | None = None

    def __call__(self, ctx):
        """Idempotency: the effect row commits with the settlement, so exactly once per run."""
        with self.log.executing(ctx.run_id):
            ctx.conn.execute("INSERT INTO fault_effects (run_id) VALUES (%s)", (ctx.run_id,))
            deadline = time.monotonic() + 30
            while ctx.run_id == self.wait_for_retry and ctx.run_id not in self.retried \
                    and time.monotonic() < deadline:
                time.sleep(0.005)
            time.sleep(HOLD_S)
        return Succeeded({"attempt": ctx.attempt})



def due_runs(conn, now, count) -> list[RunMessage]:
    """``count`` schedules due at ``now``, claimed and published by the real dispatcher."""
    sent = due_messages(conn, owner=OWNER, kind=KIND, now=now, count=count)
    assert len(sent) == count
    return sent


def registry_for(handler, *, leased):
    registry = WorkKindRegistry()
    registry.register(OWNER, KIND, handler, leased=leased)
    return registry


def run_consumers(db_url, messages, registry, handler, now, *, consumers=3, batch_size=2, copies=3):
    """Deliver every message ``copies`` times to ``consumers`` threads; return the actions of
    the acknowledged items and the run ids of the redelivered ones (items a consumer
    reported failed go back to the queue)."""
    queue = collections.deque(message for message in messages for _ in range(copies))
    actions: list[str] = []
    redelivered = []
    errors = []
    lock = threading.Lock()
    inflight = [0]
    start = threading.Barrier(consumers)

    def take():
        with lock:
            taken = [queue.popleft() for _ in range(min(batch_size, len(queue)))]
            inflight[0] += bool(taken)
            return taken, bool(taken) or inflight[0] > 0

    def consume():
        try:
            with connect(db_url) as conn:
                start.wait()
                deadline = time.monotonic() + 60
                while time.monotonic() < deadline:
                    taken, more = take()
                    if not taken:
                        if not more:
                            return
                        time.sleep(0.005)
                        continue
                    deliveries = [Delivery(f"{threading.current_thread().name}-{index}", message, 1)
                                  for index, message in enumerate(taken)]
                    results = process_batch(conn, deliveries, now=now, registry=registry, settings=SETTINGS)
                    with lock:
                        for message, result in zip(taken, results, strict=True):
                            if isinstance(result, Exception):
                                handler.retried.add(message.run_id)
                                redelivered.append(message.run_id)
                                queue.append(message)  # visible again after the visibility timeout
                            else:
                                actions.append(result.action)
                        inflight[0] -= 1
        except BaseException as error:  # noqa: BLE001 - surfaced by the test
            errors.append(error)

    threads = [threading.Thread(target=consume, name=f"consumer-{n}") for n in range(consumers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=90)
    assert errors == [] and not any(thread.is_alive() for thread in threads)
    return actions, redelivered


@pytest.mark.parametrize("leased", [False, True], ids=["batch-transaction", "leased"])
def test_concurrent_consumers_over_duplicates_never_execute_a_run_concurrently(fault_db, db_url, utc, leased):
    # Given 12 due runs, each delivered three times to three consumer threads at once
    conn = fault_db
    now = utc(2027, 3, 1, 10, 0)
    messages = due_runs(conn, now, 12)
    log = ExecutionLog()
    handler = Handler(log)
    handler.wait_for_retry = messages[0].run_id  # its first execution lasts until a duplicate was refused

    # When the consumers drain the queue
    actions, redelivered = run_consumers(db_url, messages, registry_for(handler, leased=leased), handler, now)

    # Then no run executed concurrently
    assert log.overlapping() == {}
    # And duplicates really met a live execution (they were refused and redelivered)
    assert messages[0].run_id in redelivered
    # And each run settled once and its effect committed once
    assert actions.count("settled") == 12 and len(actions) == 36
    states = conn.execute("SELECT state, count(*) AS n FROM schedule_runs GROUP BY state").fetchall()
    assert [(r["state"], r["n"]) for r in states] == [("succeeded", 12)]
    effects = conn.execute("SELECT run_id, count(*) AS n FROM fault_effects GROUP BY run_id").fetchall()
    assert sorted(r["run_id"] for r in effects) == sorted(m.run_id for m in messages)
    assert {r["n"] for r in effects} == {1}


def test_the_detector_fires_when_a_consumer_bypasses_the_lease(fault_db, db_url, utc):
    # Given a leased run, and a second consumer whose clock is already past the first one's
    # lease (it takes the run over while the first still executes it)
    conn = fault_db
    now = utc(2027, 3, 1, 10, 0)
    (message,) = due_runs(conn, now, 1)
    log = ExecutionLog()
    first_entered, second_entered = threading.Event(), threading.Event()

    def handler(ctx):
        """Idempotency: the effect row commits with the settlement, fenced by the attempt."""
        with log.executing(ctx.run_id):
            ctx.conn.execute("INSERT INTO fault_effects (run_id) VALUES (%s)", (ctx.run_id,))
            if ctx.attempt == 1:
                first_entered.set()
                second_entered.wait(timeout=60)  # the first holder still runs when the takeover starts
            else:
                second_entered.set()
        return Succeeded({"attempt": ctx.attempt})

    registry = registry_for(handler, leased=True)
    results = {}

    def consumer(name, at):
        with connect(db_url) as own:
            results[name] = process_batch(own, [Delivery(name, message, 1)], now=at, registry=registry,
                                          settings=SETTINGS)

    first = threading.Thread(target=consumer, args=("first", now))
    first.start()
    assert first_entered.wait(timeout=30)
    consumer("second", now + SETTINGS.lease + timedelta(seconds=1))
    first.join(timeout=30)

    # Then the two executions overlapped and the detector reports the run
    overlaps = log.overlapping()
    assert list(overlaps) == [message.run_id]
    assert sorted(e.thread for e in overlaps[message.run_id]) == ["MainThread", first.name]
    # And fencing still kept the effect single: the first holder's settlement was refused
    assert [r.action for r in results["first"]] == ["fenced"]
    assert [r.action for r in results["second"]] == ["settled"]
    assert conn.execute("SELECT count(*) AS n FROM fault_effects").fetchone()["n"] == 1
