"""The local stack's concurrent consumers run each invocation in an execution environment of
its own (a thread with its own connections): copies of one run's message (SQS delivers at
least once) consumed at once settle it once, and a crash in one environment leaves
another's connections alone. The real dispatcher and consumer handlers, the real database
and moto."""

from __future__ import annotations

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import pytest

from tests.integration.test_lambda_handlers import aws, hourly, receive_all  # noqa: F401 - the fixture
from tests.support import scheduled_event, sqs_event
from timekeeper import clock, faults
from timekeeper.edge import adapters
from timekeeper.local.lambdas import invoke
from timekeeper.local.stack import FunctionCrashed, invoke_quietly

#: Copies of the one message, each invoked in its own execution environment at once.
COPIES = 8


def test_copies_of_a_runs_message_consumed_at_once_settle_it_once_with_one_attempt(aws, conn, utc):  # noqa: F811
    # Given a due schedule whose run the real dispatcher published
    now = utc(2027, 1, 4, 10, 0)
    hourly(conn, now)
    clock.install(lambda: now)
    assert invoke("accounting_dispatcher", scheduled_event(now))["published"] == 1
    (message,) = receive_all(aws["sqs"], aws["queue"].url)
    events = [sqs_event(json.loads(message["Body"])) for _ in range(COPIES)]
    start = Barrier(COPIES)
    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # threads switch often: the copies overlap everywhere

    def environment(event: dict) -> dict:
        start.wait(60)
        return invoke("accounting_consumer", event)

    # When every copy is consumed at once, each in an execution environment of its own
    try:
        with ThreadPoolExecutor(max_workers=COPIES) as pool:
            answers = list(pool.map(environment, events))
    finally:
        sys.setswitchinterval(switch)
    # Then no invocation failed as a whole, and the run was started and settled exactly once
    assert all(isinstance(answer, dict) for answer in answers)
    (run,) = conn.execute("SELECT state, attempts FROM schedule_runs").fetchall()
    assert run["state"] in ("succeeded", "skipped") and run["attempts"] == 1
    # (no attempt ended retried or taken over by a copy)
    assert conn.execute("SELECT count(*) AS n FROM schedule_run_attempts").fetchone()["n"] == 0


def test_a_crash_in_one_environment_leaves_another_environments_connection_open(aws, conn, utc):  # noqa: F811
    # Given a published run, and this thread's execution environment with its connection open
    now = utc(2027, 1, 4, 10, 0)
    hourly(conn, now)
    clock.install(lambda: now)
    assert invoke("accounting_dispatcher", scheduled_event(now))["published"] == 1
    (message,) = receive_all(aws["sqs"], aws["queue"].url)
    mine = adapters.database().get()
    assert mine.execute("SELECT 1 AS one").fetchone()

    def crash(point: str, context: object) -> None:
        if point == "consumer.after_start_commit":
            raise faults.InjectedCrash(point)

    # When the consumer's invocation in another environment (thread) dies at a crash point
    faults.install(crash)
    try:
        with ThreadPoolExecutor(max_workers=1) as pool:
            died = pool.submit(invoke_quietly, "accounting_consumer", sqs_event(json.loads(message["Body"])))
            with pytest.raises(FunctionCrashed):
                died.result()
    finally:
        faults.install(None)
    # Then this environment's connection is still open and still its own
    assert not mine.closed
    assert mine.execute("SELECT 1 AS one").fetchone()
    assert adapters.database().get() is mine
